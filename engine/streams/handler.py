"""``engine inspect`` / ``engine verify`` support for journald files.

Every callback reads through the file system it is given (the tests pass the
crash simulator).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.errors import CorruptFileError
from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.streams import codec
from engine.streams.reader import JournalScan


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    return not is_dir and head[: len(codec.MAGIC)] == codec.MAGIC


def _scan(fs: FileSystem, path: str) -> tuple[JournalScan, dict[str, int]]:
    scan = JournalScan(path, fs)
    counts = {"complete": 0, "aborted": 0, "open": 0}
    for stream in scan.streams():
        counts[stream.status] += 1
    return scan, counts


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    scan, counts = _scan(fs, path)
    assert scan.header is not None and scan.end is not None
    end = scan.end
    page = scan.header.page_size
    return {
        "version": scan.header.version,
        "page size": page,
        "file size": f"{scan.file_size} bytes ({scan.file_size // page} pages)",
        "first global record": scan.header.first_global,
        "records": end.records,
        "next global record": end.next_global,
        "streams complete / aborted / open": f"{counts['complete']} / {counts['aborted']} / {counts['open']}",
        "end": f"offset {end.position}: " + ("clean" if end.clean else f"TORN: {end.reason}"),
        "anomalies": len(scan.anomalies),
    }


def _verify(fs: FileSystem, path: str) -> list[str]:
    scan, counts = _scan(fs, path)
    assert scan.end is not None
    if scan.anomalies:
        raise CorruptFileError(path, 0, "records consistent with their streams", found="; ".join(scan.anomalies))
    notes = []
    if not scan.end.clean:
        notes.append(
            f"journal ends at offset {scan.end.position} in a torn transaction ({scan.end.reason}); "
            "it is cut there when a writer opens it"
        )
    if counts["open"]:
        notes.append(f"{counts['open']} stream(s) left open (not complete)")
    return notes


HANDLER = FormatHandler(
    name="streams",
    description="journald v2 multiplexed stream journal",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
)
