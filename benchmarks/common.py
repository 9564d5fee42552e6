"""Shared pieces of the benchmark runners (``python -m benchmarks.NAME``).

Every runner measures this project and its peers *in one run, side by side*, so
the ratios mean something on whatever machine runs them; absolute numbers vary.
The disk's own limits are measured here with the simplest possible loops, which
the stores are compared against.
"""

from __future__ import annotations

import json
import os
import platform
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table


@dataclass
class Row:
    """One measured figure: ``value`` in ``unit`` (higher is better unless noted)."""

    name: str
    value: float
    unit: str = "ops/s"
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class Target:
    """A target of issue 19's table: ``measure`` / ``against`` >= ``bound`` (or <=
    with ``at_most``).  ``ratio``: when given, the figure checked (a median of
    per-round ratios of paired rounds, say) instead of the rows' values; ``how``
    says how it was measured."""

    measure: str
    against: str
    bound: float
    ratio: float | None = None
    at_most: bool = False
    how: str = ""


def timed_rate(fn: Callable[[], int], *, min_seconds: float = 0.0) -> tuple[float, int, float]:
    """Run ``fn`` (returns how many operations it did); (ops/s, ops, seconds)."""
    start = time.perf_counter()
    ops = fn()
    elapsed = time.perf_counter() - start
    while elapsed < min_seconds:  # pragma: no cover - only for very fast fns
        ops += fn()
        elapsed = time.perf_counter() - start
    return (ops / elapsed if elapsed > 0 else float("inf")), ops, elapsed


def raw_append_fsync_rate(directory: str, record_size: int = 100, seconds: float = 2.0) -> float:
    """Appends per second of a bare ``write`` + ``fdatasync`` loop: the disk's limit
    for durable single-record writes (what "sync every write" can at best reach)."""
    path = os.path.join(directory, "raw-append.bin")
    payload = struct.pack("<II", record_size, 0) + os.urandom(record_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    count = 0
    try:
        deadline = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < deadline:
            os.write(fd, payload)
            os.fdatasync(fd)
            count += 1
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return count / elapsed


def raw_framed_append_rate(directory: str, record_size: int = 100, count: int = 200_000) -> float:
    """Records per second of framing (8-byte header) and appending through a
    buffered file with no fsync: the ceiling for non-durable appends in Python."""
    path = os.path.join(directory, "raw-framed.bin")
    payload = os.urandom(record_size)
    header = struct.Struct("<II")
    start = time.perf_counter()
    with open(path, "ab") as out:
        write = out.write
        pack = header.pack
        for i in range(count):
            write(pack(record_size, i))
            write(payload)
    elapsed = time.perf_counter() - start
    os.unlink(path)
    return count / elapsed


def raw_sequential_write_mb_s(directory: str, megabytes: int = 256, block: int = 1 << 20) -> float:
    """MB/s of writing ``megabytes`` in ``block``-sized writes then one fsync."""
    path = os.path.join(directory, "raw-seq.bin")
    buf = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(megabytes * (1 << 20) // block):
            os.write(fd, buf)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return megabytes / elapsed


def raw_sequential_read_mb_s(directory: str, megabytes: int = 256, block: int = 1 << 20) -> float:
    """MB/s of reading a ``megabytes`` file once in ``block``-sized reads with a
    cold page cache (the file is written and synced, then dropped from the cache
    with ``posix_fadvise(DONTNEED)``): the disk's sequential read rate."""
    path = os.path.join(directory, "raw-seq-read.bin")
    buf = os.urandom(block)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(megabytes * (1 << 20) // block):
            os.write(fd, buf)
        os.fsync(fd)
        drop_cache(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        start = time.perf_counter()
        while os.read(fd, block):
            pass
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return megabytes / elapsed


def drop_cache(fd: int) -> None:
    """Drop a synced file's pages from the page cache (cold reads follow)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def drop_files(paths: Sequence[str]) -> None:
    """Sync each file and drop it from the page cache (the next reads are cold)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            drop_cache(fd)
        finally:
            os.close(fd)


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def paired_ratios(ours: Sequence[float], theirs: Sequence[float]) -> list[float]:
    """Per-round ratios of two paired series of rates (round i against round i)."""
    return [a / b for a, b in zip(ours, theirs, strict=True) if b]


def bench_dir(prefix: str = "engine-bench-") -> tempfile.TemporaryDirectory[str]:
    """A scratch directory on the same disk as the project (not tmpfs)."""
    base = os.environ.get("ENGINE_BENCH_DIR") or os.path.join(os.getcwd(), ".bench")
    os.makedirs(base, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def report(
    title: str,
    rows: Sequence[Row],
    *,
    baseline: str | None = None,
    targets: Sequence[tuple[str, str, float] | Target] = (),
    json_path: str | None = None,
) -> dict[str, object]:
    """Print ``rows`` as a table with a ratio column against ``baseline``, check
    ``targets`` and write JSON results.

    A target is ``(name, against, minimum ratio)`` (the ratio of the two rows'
    values) or a :class:`Target`, which may carry a ratio measured otherwise (the
    median of paired rounds) and may be a maximum (``at_most``, for times)."""
    by_name = {row.name: row for row in rows}
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    if baseline:
        table.add_column(f"ratio to {baseline}", justify="right")
    table.add_column("note")
    base = by_name.get(baseline) if baseline else None
    for row in rows:
        cells = [row.name, f"{row.value:,.1f}" if abs(row.value) >= 10 else f"{row.value:.3g}", row.unit]
        if baseline:
            cells.append(f"{row.value / base.value:.2f}x" if base and base.value else "-")
        cells.append(row.note)
        table.add_row(*cells)
    console = Console() if sys.stdout.isatty() else Console(width=140)
    console.print(table)
    checked = []
    for spec in targets:
        t = spec if isinstance(spec, Target) else Target(*spec)
        ratio = t.ratio
        if ratio is None:
            if t.measure not in by_name or t.against not in by_name or not by_name[t.against].value:
                continue
            ratio = by_name[t.measure].value / by_name[t.against].value
        ok = ratio <= t.bound if t.at_most else ratio >= t.bound
        sign = "<=" if t.at_most else ">="
        entry: dict[str, object] = {"measure": t.measure, "against": t.against, "ratio": ratio, "target": t.bound}
        entry.update({"op": sign, "met": ok, "how": t.how})
        checked.append(entry)
        mark = "[green]met[/green]" if ok else "[red]MISSED[/red]"
        how = f" ({t.how})" if t.how else ""
        console.print(f"target: {t.measure} / {t.against} = {ratio:.2f}x ({sign} {t.bound}x){how} {mark}")
    result: dict[str, object] = {
        "title": title,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "system": platform.platform()},
        "rows": [asdict(r) for r in rows],
        "targets": checked,
    }
    if json_path:
        os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return result
