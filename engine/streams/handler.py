"""``engine inspect`` / ``engine verify`` support for journald files.

Every callback reads through the file system it is given (the tests pass the
crash simulator).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.clireport import human_bytes, human_size
from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.streams import codec
from engine.streams.reader import JournalScan, StreamReader


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    return not is_dir and head[: len(codec.MAGIC)] == codec.MAGIC


def _scan(fs: FileSystem, path: str) -> tuple[JournalScan, dict[str, object]]:
    with StreamReader.open(path, fs=fs) as reader:
        scan = reader.events()
        return scan, scan.stats()  # reads to the end, keeping no stream data


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    """Human-readable fields for ``engine inspect`` (``engine streams stats --json``
    gives the same figures as numbers)."""
    scan, stats = _scan(fs, path)
    assert scan.header is not None and scan.end is not None
    end = scan.end
    page = scan.header.page_size
    return {
        "version": scan.header.version,
        "page size": human_bytes(page),
        "file size": f"{human_bytes(scan.file_size)} ({scan.file_size} bytes, {scan.file_size // page} pages)",
        "first global record": scan.header.first_global,
        "records": end.records,
        "next global record": end.next_global,
        "streams complete / aborted / open": (
            f"{stats['streams_complete']} / {stats['streams_aborted']} / {stats['streams_open']}"
        ),
        "data": human_size(scan.data_bytes),
        "end": f"offset {end.position}: " + ("clean" if end.clean else f"TORN: {end.reason}"),
        "anomalies": len(scan.anomalies),
    }


def _stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """The figures of :func:`_summarize` as numbers: :meth:`StreamReader.stats`."""
    with StreamReader.open(path, fs=fs) as reader:
        return reader.stats()


def _verify(fs: FileSystem, path: str) -> list[str]:
    with StreamReader.open(path, fs=fs) as reader:
        return reader.verify()


HANDLER = FormatHandler(
    name="streams",
    description="journald v2 multiplexed stream journal",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
    stats=_stats,
)
