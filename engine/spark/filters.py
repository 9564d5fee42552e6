"""Filter pushdown plumbing shared by the sources (no Spark session needed).

Spark hands a reader's ``pushFilters`` a list of simple comparisons
(``pyspark.sql.datasource.EqualTo`` and friends, each with a column path and a
Python value).  The sources can answer a few of them from their files cheaply:
index and time ranges on logs (binary search over the IDX file), persistence id
and sequence ranges on event journals, reader names on queues.  This module turns
those comparisons into half-open integer ranges and name sets; anything it does
not understand is handed back to Spark, which then filters the rows itself.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


@dataclass
class IntRange:
    """A half-open range ``[lo, hi)`` of integers; ``None`` means unbounded."""

    lo: int | None = None
    hi: int | None = None

    def restrict(self, lo: int | None, hi: int | None) -> None:
        """Intersect with ``[lo, hi)``."""
        if lo is not None:
            self.lo = lo if self.lo is None else max(self.lo, lo)
        if hi is not None:
            self.hi = hi if self.hi is None else min(self.hi, hi)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi

    def clip(self, lo: int, hi: int) -> tuple[int, int]:
        """The part of ``[lo, hi)`` inside this range (may be empty: lo >= hi)."""
        a = lo if self.lo is None else max(lo, self.lo)
        b = hi if self.hi is None else min(hi, self.hi)
        return a, max(a, b)

    def contains(self, value: int) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value < self.hi)


@dataclass
class NameSet:
    """An optional set of allowed names (``None`` = all)."""

    names: set[str] | None = None

    def restrict(self, names: Iterable[str]) -> None:
        new = set(names)
        self.names = new if self.names is None else self.names & new

    def allows(self, name: str) -> bool:
        return self.names is None or name in self.names


def timestamp_to_us(value: object) -> int | None:
    """Microseconds since the epoch of a filter's timestamp value (naive = UTC)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, _dt.date):
        return timestamp_to_us(_dt.datetime(value.year, value.month, value.day))
    return None


def _as_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _column(f: Any) -> str | None:
    attr = getattr(f, "attribute", None)
    if isinstance(attr, tuple) and len(attr) == 1 and isinstance(attr[0], str):
        return attr[0].lower()
    return None


def int_bounds(f: Any, convert: Callable[[object], int | None] = _as_int,
               scale: int = 1) -> tuple[int | None, int | None] | None:
    """The ``[lo, hi)`` range a comparison filter keeps, or None if it is not one.

    ``convert`` turns the filter's value into an integer in units where adjacent
    column values differ by one; ``scale`` multiplies the result (for timestamps in
    microseconds compared against nanoseconds on disk: ``t_us >= v`` holds exactly
    when ``t_ns >= v * 1000``, because ``t_us = floor(t_ns / 1000)``).
    """
    from pyspark.sql import datasource as ds

    value = getattr(f, "value", None)
    v = convert(value)
    if v is None:
        return None
    if isinstance(f, ds.EqualTo):
        return v * scale, (v + 1) * scale
    if isinstance(f, ds.GreaterThan):
        return (v + 1) * scale, None
    if isinstance(f, ds.GreaterThanOrEqual):
        return v * scale, None
    if isinstance(f, ds.LessThan):
        return None, v * scale
    if isinstance(f, ds.LessThanOrEqual):
        return None, (v + 1) * scale
    return None


@dataclass
class Pushdown:
    """What a reader took from Spark's filters: ranges per integer column, name sets.

    ``exact`` columns are answered exactly (the reader returns only matching rows,
    so Spark need not re-check); the others are only used to skip data, and the
    filters are handed back to Spark.
    """

    ranges: dict[str, IntRange] = field(default_factory=dict)
    names: dict[str, NameSet] = field(default_factory=dict)

    def range(self, column: str) -> IntRange:
        return self.ranges.setdefault(column, IntRange())

    def nameset(self, column: str) -> NameSet:
        return self.names.setdefault(column, NameSet())

    @property
    def empty(self) -> bool:
        return any(r.empty for r in self.ranges.values()) or any(
            n.names is not None and not n.names for n in self.names.values())


def push(
    filters: Iterable[Any],
    pushdown: Pushdown,
    int_columns: dict[str, str],
    ts_columns: dict[str, str],
    name_columns: dict[str, str],
    exact: bool = True,
) -> Iterator[Any]:
    """Record what ``filters`` say about the given columns; yield the ones not taken.

    ``int_columns`` maps a column name to the range it restricts (for example both
    ``time_ns`` and ``index``); ``ts_columns`` maps timestamp columns to a range in
    nanoseconds; ``name_columns`` maps string columns to a name set.  With
    ``exact`` the taken filters are not yielded (the reader applies them exactly).
    """
    from pyspark.sql import datasource as ds

    for f in filters:
        col = _column(f)
        taken = False
        if col in int_columns:
            b = int_bounds(f)
            if b is not None:
                pushdown.range(int_columns[col]).restrict(*b)
                taken = True
        elif col in ts_columns:
            b = int_bounds(f, timestamp_to_us, 1000)
            if b is not None:
                pushdown.range(ts_columns[col]).restrict(*b)
                taken = True
        elif col in name_columns:
            if isinstance(f, ds.EqualTo) and isinstance(f.value, str):
                pushdown.nameset(name_columns[col]).restrict([f.value])
                taken = True
            elif isinstance(f, ds.In) and all(isinstance(v, str) for v in f.value):
                pushdown.nameset(name_columns[col]).restrict(f.value)
                taken = True
        if not taken or not exact:
            yield f
