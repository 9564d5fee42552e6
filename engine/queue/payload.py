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
    batch: list[tuple[bytes, int | None]] = []
    for item in items:
        if dumps is not None:
            batch.append((dumps(item), default_ms))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            batch.append((bytes(item), default_ms))
        elif isinstance(item, tuple) and len(item) == 2:
            data, expiry = item
            require_bytes(data, "put_many item data")
            expiry_ms = default_ms if expiry is None else instant_ms(expiry, "put_many item expire_at")
            batch.append((bytes(data), expiry_ms))
        else:
            require_bytes(item, "put_many item")
    return batch
