"""What ``Queue.put_many`` accepts, turned into the (payload bytes, expiry ms) pairs
the write path stages: the serializer applied, expiries parsed once per batch."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import Any

from engine.conventions import instant_ms, require_bytes


def put_many_batch(
    items: Iterable[Any],
    dumps: Callable[[Any], bytes] | None,
    expire_at: float | datetime.datetime | None,
) -> list[tuple[bytes, int | None]]:
    """``items`` as (payload, expire_ms) pairs.  ``expire_at`` (a datetime or seconds
    since the epoch) applies to every item.  Without a serializer (``dumps`` None)
    an element is bytes or a ``(bytes, expire_at)`` pair with its own expiry; with
    one, every element is a value (tuples included).  A str gets a TypeError that
    says to encode it or choose a serializer."""
    default_ms = None if expire_at is None else instant_ms(expire_at, "expire_at")
    if dumps is not None:
        return [(dumps(item), default_ms) for item in items]
    # bytes as given (the common case, one comprehension); anything else by _pair.
    return [(item, default_ms) if type(item) is bytes else _pair(item, default_ms) for item in items]


def _pair(item: Any, default_ms: int | None) -> tuple[bytes, int | None]:
    """One element of ``put_many`` that is not plain bytes, without a serializer."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item), default_ms
    if isinstance(item, tuple) and len(item) == 2:
        data, expiry = item
        require_bytes(data, "put_many item data")
        expiry_ms = default_ms if expiry is None else instant_ms(expiry, "put_many item expire_at")
        return bytes(data), expiry_ms
    require_bytes(item, "put_many item")
    raise AssertionError("require_bytes returns only for bytes-like values")  # pragma: no cover
