"""A queue item as a reader delivers it (:class:`Item`), and the class a reader
builds its items with (:func:`item_class`: with the queue's serializer, a subclass
that decodes ``value``)."""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass
from typing import Any

from engine.conventions import Serializer, datetime_from_ms, decoding_class


@dataclass(slots=True)
class Item:
    """One queue item as delivered to a reader.

    ``data`` is the payload as stored (bytes); ``value`` is what was put (the
    serializer's ``loads(data)`` when the queue has one, else ``data``).  Times:
    ``add_time_ms`` / ``expire_time_ms`` are exact milliseconds since the epoch
    (the libkestrel journal's unit); ``added_at`` / ``expires_at`` are aware UTC
    datetimes and ``add_timestamp`` / ``expire_timestamp`` seconds since the
    epoch (the unit ``put(expire_at=)`` takes).

    Treat it as read-only.  (Not ``frozen``: a frozen dataclass costs twice as
    much to build, and one is built per item delivered.)
    """

    id: int
    data: bytes
    add_time_ms: int
    expire_time_ms: int | None = None
    error_count: int = 0

    @property
    def value(self) -> Any:
        """The item as put: ``data`` itself when the queue has no serializer."""
        return self.data

    @property
    def added_at(self) -> datetime.datetime:
        return datetime_from_ms(self.add_time_ms)

    @property
    def expires_at(self) -> datetime.datetime | None:
        return None if self.expire_time_ms is None else datetime_from_ms(self.expire_time_ms)

    @property
    def add_time(self) -> int:
        """Deprecated: milliseconds since the epoch; use ``add_time_ms`` (or ``added_at``)."""
        warnings.warn("Item.add_time is deprecated: use add_time_ms or added_at", DeprecationWarning, stacklevel=2)
        return self.add_time_ms

    @property
    def expire_time(self) -> int | None:
        """Deprecated: milliseconds since the epoch; use ``expire_time_ms`` (or ``expires_at``)."""
        message = "Item.expire_time is deprecated: use expire_time_ms or expires_at"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return self.expire_time_ms

    @property
    def add_timestamp(self) -> float:
        return self.add_time_ms / 1000

    @property
    def expire_timestamp(self) -> float | None:
        return None if self.expire_time_ms is None else self.expire_time_ms / 1000


def item_class(serializer: Serializer | None) -> type[Item]:
    """The class a reader builds its items with: :class:`Item`, or a subclass whose
    ``value`` is ``serializer.loads(data)`` (:func:`engine.conventions.decoding_class`,
    chosen once per reader, so a get without a serializer costs nothing more)."""
    return decoding_class(Item, serializer, "data")
