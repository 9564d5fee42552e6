"""What every ``engine`` command shares when it prints a report or reads a time.

* ``--json`` (:func:`add_json_option`): a command that prints a report prints one
  JSON document instead (:func:`print_json`), on one line; a command that lists
  records (dump, between, scan, replay) prints one JSON document per record
  (JSON Lines), so ``jq`` and line tools both work.  The keys are stable
  (documented in ``docs/guide/conventions.md``): snake_case, numbers raw, times
  as integers whose unit is in the key's name (``time_ns``, ``add_time_ms``),
  byte strings as text when they are UTF-8 and always as hex beside it
  (:func:`bytes_fields`).
* Text output shows times as UTC dates (:func:`human_time_ns`), durations and
  sizes with their units (:func:`human_duration_ns`, :func:`human_bytes`).
* Time arguments (:func:`parse_instant_ns`, :func:`parse_duration_ns`) take what
  a user types: ``2026-11-24T01:00``, ``1764000000.5`` (seconds since the epoch),
  ``1764000000000000000ns``; ``90s``, ``15m``, ``1h``, ``500ms``.

No I/O beyond ``print``; no store imports (every store's CLI imports this).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
from typing import Any

NS_PER_S = 1_000_000_000

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "min": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
}
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` (stable keys, raw numbers; see the module docstring)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text (one document; one per line for record listings); "
        "keys are stable, numbers raw, times in the unit their key names",
    )


def print_json(obj: object) -> None:
    """Print ``obj`` as one line of JSON (sorted keys; bytes as hex, datetimes as ISO 8601)."""
    print(json.dumps(obj, sort_keys=True, default=_json_default, ensure_ascii=False))


def _json_default(value: object) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def parse_port(text: str) -> int:
    """A TCP port argument: a whole number in 0..65535 (0: any free port).
    Raises ``argparse.ArgumentTypeError`` saying what was typed (argparse names the option)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0..65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 0..65535, got {port}")
    return port


def show_bytes(data: bytes) -> str:
    """``data`` as text when it is UTF-8, else ``0x`` and its hex."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "0x" + data.hex()


def bytes_fields(name: str, data: bytes) -> dict[str, str | None]:
    """``{name: text or None, name_hex: hex}`` for a JSON report: the text when
    ``data`` is UTF-8 (None when it is not), and the exact bytes always."""
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    return {name: text, f"{name}_hex": data.hex()}


def human_time_ns(ns: int | None) -> str:
    """An instant in nanoseconds since the epoch as a UTC date, to the microsecond
    (``2026-11-24 06:40:22.123456 UTC``); ``-`` for None."""
    if ns is None:
        return "-"
    try:
        stamp = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(microseconds=ns // 1000)
    except OverflowError:  # a damaged or hostile value: show it as it is
        return f"{ns} ns since the epoch"
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def human_time_ms(ms: int | None) -> str:
    """:func:`human_time_ns` for milliseconds since the epoch (to the millisecond)."""
    if ms is None:
        return "-"
    return human_time_ns(ms * 1_000_000)[:-7] + " UTC"


def human_duration_ns(ns: int | None) -> str:
    """A duration with its unit: ``850 ns``, ``12.5 ms``, ``3.2 s``, ``4 min 10 s``,
    ``2 h 5 min``, ``3 d 4 h``; ``-`` for None."""
    if ns is None:
        return "-"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000:
        text = f"{ns} ns"
    elif ns < 1_000_000:
        text = f"{ns / 1e3:.3g} us"
    elif ns < NS_PER_S:
        text = f"{ns / 1e6:.3g} ms"
    elif ns < 60 * NS_PER_S:
        text = f"{ns / 1e9:.3g} s"
    else:
        seconds = ns // NS_PER_S
        days, rest = divmod(seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
        first = next(i for i, (n, _) in enumerate(parts) if n)
        text = " ".join(f"{n} {unit}" for n, unit in parts[first : first + 2] if n)
    return sign + text


def human_bytes(n: int | None) -> str:
    """A size with its unit: ``512 B``, ``1.5 KiB``, ``64 MiB``; ``-`` for None."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_size(n: int) -> str:
    """:func:`human_bytes`, with the exact count beside it from 1 KiB up:
    ``512 B``, ``1.5 KiB (1536 bytes)``."""
    return human_bytes(n) if n < 1024 else f"{human_bytes(n)} ({n} bytes)"


def parse_instant_ns(text: str, option: str = "TIME") -> int:
    """A time argument as nanoseconds since the epoch.

    Accepts an ISO 8601 date or date and time (``2026-11-24``,
    ``2026-11-24T01:00``, ``2026-11-24 01:00:05.25+02:00``; without an offset it
    is UTC), seconds since the epoch (``1764000000`` or ``1764000000.25``), or an
    exact count with its unit (``1764000000123456789ns``, ``1764000000123ms``).
    Raises ``argparse.ArgumentTypeError`` naming ``option`` otherwise.
    """
    raw = text.strip()
    match = _AMOUNT.match(raw)
    if match:
        number, unit = match.groups()
        unit = unit or "s"
        if unit not in ("ns", "us", "ms", "s"):
            raise argparse.ArgumentTypeError(
                f"{option}: {text!r} is not a time (a date like 2026-11-24T01:00, seconds since the epoch, "
                "or a count with ns/us/ms/s)"
            )
        return _in_range(_scaled(number, _UNITS_NS[unit]), text, option)
    try:
        stamp = _dt.datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{option}: {text!r} is not a time (a date like 2026-11-24T01:00, seconds since the epoch like "
            "1764000000, or an exact count like 1764000000000000000ns)"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.UTC)
    delta = stamp - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return _in_range((delta.days * 86400 + delta.seconds) * NS_PER_S + delta.microseconds * 1000, text, option)


def _in_range(ns: int, text: str, option: str) -> int:
    """``ns`` if a store can keep it: instants are 64-bit nanoseconds (1677 to
    2262); further out is a typo, not a time (it ended in an OverflowError
    traceback)."""
    if not -(1 << 63) <= ns < 1 << 63:
        raise argparse.ArgumentTypeError(f"{option}: {text!r} is out of range (a time from 1677 to 2262)")
    return ns


def parse_duration_ns(text: str, option: str = "DURATION") -> int:
    """A duration argument as nanoseconds: a number with a unit (``500ms``,
    ``90s``, ``15m``/``15min``, ``1h``, ``7d``, ``250ns``) or a plain number of
    seconds (``2.5``).  Raises ``argparse.ArgumentTypeError`` naming ``option``."""
    match = _AMOUNT.match(text.lower())
    if not match or (match.group(2) or "s") not in _UNITS_NS:
        raise argparse.ArgumentTypeError(
            f"{option}: {text!r} is not a duration (a number of seconds, or one with a unit: "
            "500ms, 90s, 15m, 1h, 7d)"
        )
    number, unit = match.groups()
    ns = _scaled(number, _UNITS_NS[unit or "s"])
    if ns >= 1 << 63:  # (as for instants: 64-bit nanoseconds, about 292 years)
        raise argparse.ArgumentTypeError(f"{option}: {text!r} is out of range (at most about 292 years)")
    return ns


def _scaled(number: str, factor: int) -> int:
    """``number`` (decimal text) times ``factor``, exactly (no float rounding)."""
    whole, _, frac = number.partition(".")
    value = int(whole or "0") * factor
    if frac:
        value += int(frac) * factor // 10 ** len(frac)
    return value


def in_words(stats: dict[str, Any]) -> dict[str, object]:
    """Raw figures (snake_case keys, numbers) as name/value pairs for people:
    ``data_committed_bytes`` becomes "data committed" with a size, ``*_time_ns`` a
    UTC date, other ``*_ns`` a duration, ``*_fraction`` a percentage, booleans
    yes/no, None a dash."""
    out: dict[str, object] = {}
    for key, value in stats.items():
        label = key
        if isinstance(value, bool):
            text: object = "yes" if value else "no"
        elif value is None:
            text = "-"
        elif key.endswith("_bytes") and isinstance(value, int):
            label, text = key[: -len("_bytes")], human_size(value)
        elif key.endswith("_time_ns") and isinstance(value, int):
            label, text = key[: -len("_ns")], human_time_ns(value)
        elif key.endswith("_ns") and isinstance(value, int):
            label, text = key[: -len("_ns")], human_duration_ns(value)
        elif key.endswith("_fraction") and isinstance(value, (int, float)):
            label, text = key[: -len("_fraction")], f"{value * 100:.4g} %"
        elif isinstance(value, int):
            text = f"{value:,}"
        else:
            text = value
        out[label.replace("_", " ")] = text
    return out
