"""Conventions every store's public API shares: time values, payload serializers,
and closing what the user forgot to close.

No I/O here, and no store imports: every store (queue, append log, event journal,
page store, key-value store, stream journal) calls these so that one spelling works
everywhere and every message names the argument the user typed.

**Time.**  A *duration* (a TTL, a max age, a timeout, a sync period) is a
:class:`datetime.timedelta` or a number of seconds.  An *instant* is a
:class:`datetime.datetime` (naive ones are local time, as ``datetime.timestamp``
reads them) or a number of seconds since the Unix epoch.  Values that must be
nanosecond- or millisecond-exact keep an explicit unit suffix in their name
(``time_ns``, ``ttl_ns``, ``add_time_ms``) and are plain integers.

**Payloads.**  Stores take and return ``bytes``.  ``serializer=`` (``"pickle"``,
``"json"``, a :class:`Serializer` or a ``(dumps, loads)`` pair) converts objects
on the way in and out; :func:`require_bytes` turns the confusing errors Python
gives for a ``str`` in a ``bytes`` slot into one that says what to do.

**Unclosed objects.**  :func:`warn_unclosed` registers a :mod:`weakref.finalize`
that closes a store left open when it is garbage-collected or at interpreter
exit, and emits a :class:`ResourceWarning`, as Python's files do.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import json
import math
import operator
import os
import pickle
import socket
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.errors import ConfigError

_NS = 1_000_000_000
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)

# -- durations -----------------------------------------------------------------------


def _number(value: object, what: str, kinds: str) -> float:
    """``value`` as a finite float, or TypeError / ConfigError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be {kinds}, not {type(value).__name__} {value!r}")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise ConfigError(f"{what} must be finite, got {value!r}")
    return number


def duration_seconds(
    value: object,
    what: str,
    *,
    allow_zero: bool = False,
    allow_none: bool = False,
) -> float | None:
    """A duration as float seconds: ``value`` is a :class:`datetime.timedelta` or a
    number of seconds.  ``None`` passes through when ``allow_none`` (meaning "no
    limit" / "wait for ever", as the caller documents); ``0`` only when
    ``allow_zero``; negative values never.

    Raises TypeError for any other type and ConfigError for a value out of range,
    both naming ``what`` (the argument as the user typed it, e.g. ``"max_age"``).
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{what} must be a number of seconds or a datetime.timedelta, not None")
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    else:
        seconds = _number(value, what, "a number of seconds or a datetime.timedelta")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{what} must be {bound} seconds, got {value!r}")
    return seconds


def duration_ns(value: object, what: str, *, allow_zero: bool = False) -> int:
    """A duration as integer nanoseconds (``timedelta`` exact to the microsecond;
    seconds rounded to the nearest nanosecond).  Same checks as
    :func:`duration_seconds`; ``None`` is refused."""
    if isinstance(value, _dt.timedelta):
        duration_seconds(value, what, allow_zero=allow_zero)  # range check only
        return (value.days * 86_400 + value.seconds) * _NS + value.microseconds * 1000
    seconds = duration_seconds(value, what, allow_zero=allow_zero)
    assert seconds is not None
    return round(seconds * _NS)


def timeout_seconds(value: object, what: str = "timeout") -> float | None:
    """A wait's timeout: ``None`` waits for ever, ``0`` does not wait, otherwise a
    positive duration (timedelta or seconds)."""
    return duration_seconds(value, what, allow_zero=True, allow_none=True)


# -- instants ------------------------------------------------------------------------


def instant_seconds(value: object, what: str) -> float:
    """An instant as float seconds since the epoch: ``value`` is a
    :class:`datetime.datetime` (naive = local time) or a number of seconds since
    the epoch.  TypeError names ``what`` otherwise (a ``timedelta`` gets a hint:
    "did you mean now + ...")."""
    if isinstance(value, _dt.datetime):
        return value.timestamp()
    if isinstance(value, _dt.timedelta):
        raise TypeError(
            f"{what} is an instant (a datetime or seconds since the epoch), not a timedelta: "
            f"use datetime.now(timezone.utc) + {value!r} or time.time() + seconds"
        )
    return _number(value, what, "a datetime or a number of seconds since the epoch")


def instant_ms(value: object, what: str) -> int:
    """An instant as integer milliseconds since the epoch (see :func:`instant_seconds`)."""
    if isinstance(value, _dt.datetime):
        return instant_ns(value, what) // 1_000_000
    return int(instant_seconds(value, what) * 1000)


def instant_ns(value: object, what: str) -> int:
    """An instant as integer nanoseconds since the epoch (see :func:`instant_seconds`);
    a ``datetime`` converts exactly (to the microsecond)."""
    if isinstance(value, _dt.datetime):
        aware = value if value.tzinfo is not None else value.astimezone()
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * _NS + delta.microseconds * 1000
    return round(instant_seconds(value, what) * _NS)


def datetime_from_ms(ms: int) -> _dt.datetime:
    """An aware UTC datetime from milliseconds since the epoch (exact)."""
    return _EPOCH + _dt.timedelta(milliseconds=ms)


def datetime_from_ns(ns: int) -> _dt.datetime:
    """An aware UTC datetime from nanoseconds since the epoch (to the microsecond)."""
    return _EPOCH + _dt.timedelta(microseconds=ns // 1000)


# -- sizes ---------------------------------------------------------------------------


def require_byte_counts(**values: object) -> None:
    """TypeError unless each value (a size in bytes, None allowed) is an int; the
    message names the argument and what was passed (``size="1M"`` is not a size
    here: a size is a number, ``1 << 20`` for 1 MiB)."""
    for what, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{what} must be a whole number of bytes (an int, e.g. 1 << 20 for 1 MiB), "
                            f"not {type(value).__name__} {value!r}")


# -- payloads ------------------------------------------------------------------------


def require_bytes(value: object, what: str = "data", *, serializers: bool = True) -> None:
    """TypeError unless ``value`` is bytes-like (bytes, bytearray, memoryview).
    Called where a store already failed on ``value`` (so the check costs nothing
    on the common path), to replace Python's "can't concat str to bytes".
    ``serializers``: whether the store takes ``serializer=`` (the message offers
    it only then; a stream of bytes or a page's bytes do not)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return
    if isinstance(value, str):
        hint = ' or open the store with serializer="json" or serializer="pickle"' if serializers else ""
        raise TypeError(f"{what} must be bytes, not str: encode it ({what}.encode()){hint}")
    hint = ": open the store with serializer= to store objects" if serializers else ""
    raise TypeError(f"{what} must be bytes, not {type(value).__name__}{hint}")


@dataclass(frozen=True)
class Serializer:
    """How a store turns user objects into payload bytes and back.

    ``dumps(obj) -> bytes`` runs on every write, ``loads(bytes) -> obj`` on every
    read; ``name`` is for messages and ``repr``.
    """

    dumps: Callable[[Any], bytes]
    loads: Callable[[bytes], Any]
    name: str = "custom"


def _json_dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _pickle_dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


#: The named serializers ``serializer=`` accepts.
SERIALIZERS: dict[str, Serializer] = {
    "pickle": Serializer(_pickle_dumps, pickle.loads, "pickle"),
    "json": Serializer(_json_dumps, json.loads, "json"),
}


def serializer(value: object, what: str = "serializer") -> Serializer | None:
    """Parse a ``serializer=`` argument: None (bytes in, bytes out), ``"pickle"``,
    ``"json"``, a :class:`Serializer`, or a ``(dumps, loads)`` pair of callables.
    ConfigError / TypeError name ``what`` otherwise.

    (``"pickle"`` loads run arbitrary code from the file: only for files you trust.)
    """
    if value is None or isinstance(value, Serializer):
        return value
    if isinstance(value, str):
        found = SERIALIZERS.get(value)
        if found is None:
            names = ", ".join(map(repr, SERIALIZERS))
            raise ConfigError(f"{what} must be one of {names} or a (dumps, loads) pair, not {value!r}")
        return found
    if isinstance(value, tuple) and len(value) == 2 and all(callable(f) for f in value):
        return Serializer(value[0], value[1], getattr(value[0], "__qualname__", "custom"))
    raise TypeError(f'{what} must be "pickle", "json" or a (dumps, loads) pair of functions, not {value!r}')


_Row = TypeVar("_Row")


def decoding_class(base: type[_Row], serializer: Serializer | None, field: str) -> type[_Row]:
    """``base`` (a NamedTuple or a dataclass holding stored bytes in ``field``), or, with a
    serializer, a subclass whose ``value`` is ``serializer.loads(<field>)``,
    decoded when asked for.  Chosen once per store or reader, so reads without a
    serializer cost nothing more; the subclass shows, compares and pickles as a
    plain ``base`` (it is local to the store that made it)."""
    if serializer is None:
        return base
    loads = serializer.loads
    get = operator.attrgetter(field)

    def value(self: _Row) -> Any:
        return loads(get(self))

    def reduce(self: _Row) -> tuple[type[_Row], tuple[Any, ...]]:
        if isinstance(self, tuple):
            return base, tuple(self)
        return base, tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    namespace = {"__slots__": (), "__qualname__": base.__qualname__, "__reduce__": reduce,
                 "value": property(value, doc=f"``serializer.loads(self.{field})`` (decoded on access)")}
    return type(base.__name__, (base,), namespace)


# -- unclosed objects ----------------------------------------------------------------


def warn_unclosed(owner: object, close: Callable[[], object], what: str) -> weakref.finalize:
    """Close ``owner`` with ``close()`` if it is garbage-collected or still open at
    interpreter exit, emitting a ResourceWarning ``"unclosed <what>"`` first.

    Call the returned finalizer's ``detach()`` from the owner's own ``close()``.
    ``close`` must not refer to ``owner`` if the owner is to be collectable (a
    bound method keeps it alive until exit, where it is still closed cleanly);
    errors from ``close`` at that point are a second ResourceWarning, never raised.
    A forked child that exits through ``atexit`` does not close its parent's
    objects (that would write the parent's files twice).
    """

    pid = os.getpid()
    opened_at = user_frame_site()

    def finish() -> None:
        if os.getpid() != pid:
            return  # a forked child exiting: the object is its parent's to close
        warn_resource(f"unclosed {what}: closing it now (use close() or a with block)", opened_at)
        try:
            close()
        except Exception as exc:
            # A ResourceWarning too (hidden by default, as the first one): a store
            # that failed (poisoned, say) and was never closed fails to close here.
            warn_resource(f"closing {what} on exit failed: {exc!r}", opened_at)

    return weakref.finalize(owner, finish)


#: Where engine's own modules live: frames there are never "the user's line".
_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: Standard modules between a collection or interpreter exit and a finalizer.
_MACHINERY = frozenset(os.path.abspath(m.__file__) for m in (weakref, threading) if m.__file__)

#: A source line: (file name, line number, module name).
Site = tuple[str, int, str]


def user_frame_site() -> Site | None:
    """The innermost calling line outside engine (and outside the finalizer
    machinery of :mod:`weakref` and :mod:`threading`): the user's line that
    opened, dropped or collected a store; None when there is none (interpreter exit)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_ENGINE_DIR) and os.path.abspath(name) not in _MACHINERY:
            return name, frame.f_lineno, str(frame.f_globals.get("__name__", "__main__"))
        frame = frame.f_back
    return None


def warn_resource(message: str, opened_at: Site | None) -> None:
    """A ResourceWarning at the user's line, as Python's own files give it: the
    line whose ``del`` or collection dropped the object, or, at interpreter exit
    (no user line on the stack), the line that opened it."""
    site = user_frame_site() or opened_at
    if site is None:
        warnings.warn(message, ResourceWarning, stacklevel=2)
        return
    filename, lineno, module = site
    warnings.warn_explicit(message, ResourceWarning, filename, lineno, module=module)


# -- listening sockets -----------------------------------------------------------------


@contextmanager
def naming_the_host(host: str, what: str = "host") -> Iterator[None]:
    """Bind a listening socket to ``host`` inside this block: a name that does not
    resolve, or an address that is not this machine's, is a ConfigError naming
    ``host`` (the OS says "name or service not known" or "cannot assign requested
    address", without saying which host); any other OSError as it is."""
    try:
        yield
    except socket.gaierror as exc:  # (an OSError: first)
        raise ConfigError(f"{what} {host!r}: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"{what} {host!r} is not an address of this machine") from None
        raise


__all__ = [
    "SERIALIZERS",
    "Serializer",
    "datetime_from_ms",
    "datetime_from_ns",
    "duration_ns",
    "duration_seconds",
    "instant_ms",
    "instant_ns",
    "instant_seconds",
    "naming_the_host",
    "require_byte_counts",
    "require_bytes",
    "serializer",
    "timeout_seconds",
    "user_frame_site",
    "warn_resource",
    "warn_unclosed",
]
