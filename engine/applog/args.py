"""The append log's time and payload arguments, in the shared conventions
(:mod:`engine.conventions`, ``docs/guide/conventions.md``).

A TTL is a duration (``ttl=``: seconds or a :class:`datetime.timedelta`; exact:
``ttl_ns=``); an instant (``expire(now=)``, ``between(start, end)``,
``index_at_time(time)``) is a :class:`datetime.datetime` or seconds since the
epoch (exact: the same name with ``_ns``).  Giving both spellings of one
argument is a TypeError.

These arguments were nanoseconds before, so a number that can only be a
nanosecond value by mistake is refused with a message that names the ``_ns``
spelling instead of being read as seconds: a TTL of 10**9 seconds (31 years) or
more, an instant past the year 9999.  No I/O here.
"""

from __future__ import annotations

import datetime
from typing import Any

from engine.applog.codec import INT64_MAX, INT64_MIN
from engine.conventions import duration_ns, duration_seconds, instant_ns, require_bytes
from engine.errors import ConfigError

#: 10000-01-01T00:00:00Z in seconds since the epoch: a larger "seconds" value is a
#: nanosecond count given where seconds belong.
MAX_INSTANT_SECONDS = 253_402_300_800
#: A TTL given as a number of seconds must be below this (31.7 years): above it, it
#: is most likely a nanosecond TTL from before ``ttl=`` meant seconds.
MAX_TTL_SECONDS = 10**9


def _exact_int(value: object, what: str, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int of {unit}, not {type(value).__name__} {value!r}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(f"{what} must fit a signed 64-bit integer, got {value}")
    return value


def ttl_arg_ns(ttl: object, ttl_ns: object) -> int | None:
    """The TTL in nanoseconds from ``ttl=`` (seconds or a timedelta; 0: never
    expire) or ``ttl_ns=`` (an int; 0 or less: never); None when neither is given."""
    if ttl_ns is not None:
        if ttl is not None:
            raise TypeError("give ttl (seconds or a timedelta) or ttl_ns (nanoseconds), not both")
        return _exact_int(ttl_ns, "ttl_ns", "nanoseconds")
    if ttl is None:
        return None
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and abs(ttl) >= MAX_TTL_SECONDS:
        raise ConfigError(
            f"ttl={ttl!r} is {ttl / 31_557_600:,.0f} years in seconds: ttl is seconds (or a timedelta); "
            f"for a TTL in nanoseconds pass ttl_ns={ttl!r}"
        )
    ns = duration_ns(ttl, "ttl", allow_zero=True)
    if ns > INT64_MAX:
        raise ConfigError(f"ttl must be under {INT64_MAX // 10**9 // 31_557_600} years, got {ttl!r}")
    return ns


def instant_arg_ns(value: object, value_ns: object, what: str) -> int | None:
    """One instant in nanoseconds since the epoch, given as ``what`` (a datetime
    or seconds since the epoch) or ``what_ns`` (an int); None when neither is."""
    if value_ns is not None:
        if value is not None:
            raise TypeError(f"give {what} (a datetime or seconds since the epoch) or {what}_ns, not both")
        if isinstance(value_ns, bool) or not isinstance(value_ns, int):
            raise TypeError(
                f"{what}_ns must be an int of nanoseconds since the epoch, not {type(value_ns).__name__} {value_ns!r}"
            )
        return value_ns
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= MAX_INSTANT_SECONDS:
        raise ConfigError(
            f"{what}={value!r} is past the year 9999 in seconds since the epoch: {what} is seconds "
            f"(or a datetime); for nanoseconds pass {what}_ns={value!r}"
        )
    return instant_ns(value, what)


def period_arg(sync: object) -> object:
    """``sync=`` with a timedelta period turned into seconds (the rest is
    :meth:`engine.fs.SyncPolicy.parse`'s)."""
    if isinstance(sync, datetime.timedelta):
        return duration_seconds(sync, "sync")
    return sync


def as_bytes(data: Any, what: str) -> bytes:
    """``data`` (any bytes-like object) as ``bytes``; a TypeError that says what
    to do for a ``str`` or another object (:func:`engine.conventions.require_bytes`)."""
    try:
        return bytes(memoryview(data))
    except TypeError:
        require_bytes(data, what)
        raise
