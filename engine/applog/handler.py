"""``engine inspect`` / ``engine verify`` support for append logs.

Recognises a log directory (it holds ``<20 digits>.log`` segment files) and single
``.log`` / ``.idx`` / ``.crc`` files (by their ``LOG``/``IDX``/``CRC`` signature and
version 1; ``.crc`` is the checksum side file this engine adds to the format).

Every callback takes the file system first (:class:`engine.formats.FormatHandler`)
and reads only through it.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.applog.codec import (
    CRC_MAGIC,
    HEADER_SIZE,
    IDX_MAGIC,
    LOG_MAGIC,
    VERSION,
    check_header,
    crc_count,
    entry_count,
    parse_segment_name,
)
from engine.applog.log import AppendLog
from engine.applog.recovery import Mismatch, scan_segment
from engine.clireport import human_bytes, human_duration_ns, human_time_ns
from engine.errors import CorruptFileError, FormatError
from engine.formats import FormatHandler
from engine.fs import FileSystem


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    if is_dir:
        try:
            names = fs.listdir(path)
        except OSError:
            return False
        return any((p := parse_segment_name(n)) is not None and p[1] == ".log" for n in names)
    return len(head) >= 4 and head[:3] in (LOG_MAGIC, IDX_MAGIC, CRC_MAGIC) and head[3] == VERSION


def _read(fs: FileSystem, path: str) -> bytes:
    with fs.open(path) as handle:
        return handle.read_all()


def _pair(path: str) -> tuple[str, str, str, int]:
    """The segment's ``.log``, ``.idx`` and ``.crc`` paths and first index."""
    directory, _, name = path.rpartition("/")
    parsed = parse_segment_name(name)
    if parsed is None:
        raise FormatError(path, 0, "a segment file named <20 digits>.log, .idx or .crc", repr(name))
    stem = f"{directory}/{name[: -len(parsed[1])]}" if directory else name[: -len(parsed[1])]
    return stem + ".log", stem + ".idx", stem + ".crc", parsed[0]


def _crc_of(fs: FileSystem, crc_path: str) -> bytes | None:
    """The whole ``.crc`` file (header checked), or None if the segment has none."""
    if not fs.exists(crc_path):
        return None
    data = _read(fs, crc_path)
    check_header(data, CRC_MAGIC, crc_path)
    return data


def _file_stats(fs: FileSystem, path: str) -> dict[str, object]:
    """One ``.log``/``.idx``/``.crc`` file: its header and, beside its pair, the
    records they hold (raw figures; :func:`_file_summary` words them)."""
    data = _read(fs, path)
    magic = next((m for m in (LOG_MAGIC, CRC_MAGIC) if data[:3] == m), IDX_MAGIC)
    header = check_header(data, magic, path)
    kinds = {LOG_MAGIC: "log_segment", IDX_MAGIC: "index_segment", CRC_MAGIC: "checksum_file"}
    out: dict[str, object] = {"kind": kinds[magic], "version": header.version, "header_flags": header.flags,
                              "bytes": len(data)}
    if magic == CRC_MAGIC:
        out["checksums"] = crc_count(len(data))
        out["partial_entry_bytes"] = (len(data) - HEADER_SIZE) % 4 if len(data) > HEADER_SIZE else 0
    else:
        out["ttl_ns"] = header.ttl_ns
    if magic == IDX_MAGIC:
        out["entries"] = entry_count(len(data))
        out["partial_entry_bytes"] = (len(data) - HEADER_SIZE) % 24 if len(data) > HEADER_SIZE else 0
    log_path, idx_path, crc_path, base = _pair(path)
    if fs.exists(log_path) and fs.exists(idx_path):
        crc = _crc_of(fs, crc_path)
        out["has_crc_file"] = crc is not None
        try:
            scan = scan_segment(_read(fs, log_path), _read(fs, idx_path), base, None, crc)
        except Mismatch as exc:
            raise CorruptFileError(log_path if exc.where == "log" else idx_path, exc.offset, exc.expected,
                                   exc.found) from None
        out.update({"records": scan.count, "first_index": base, "next_index": base + scan.count,
                    "first_time_ns": scan.first_time, "last_time_ns": scan.last_time, "clean": scan.clean})
        if not scan.clean:
            out.update({"torn_log_bytes": scan.log_cut, "unindexed_records": len(scan.rebuilt),
                        "dangling_entries": scan.idx_dropped, "records_failing_checksum": scan.torn_records})
    return out


def _file_summary(fs: FileSystem, path: str) -> dict[str, object]:
    raw = _file_stats(fs, path)
    out: dict[str, object] = {
        "kind": str(raw["kind"]).replace("_", " ").replace("checksum file", "checksum file (.crc)"),
        "version": raw["version"],
        "header flags": f"0x{raw['header_flags']:08x}",
        "size": human_bytes(raw["bytes"]),  # type: ignore[arg-type]
    }
    for key in ("checksums", "entries"):
        if key in raw:
            out[key] = raw[key]
    if raw.get("partial_entry_bytes"):
        out["partial entry bytes"] = raw["partial_entry_bytes"]
    if "ttl_ns" in raw:
        ttl = raw["ttl_ns"]
        assert isinstance(ttl, int)
        out["ttl"] = human_duration_ns(ttl) if ttl > 0 else f"none ({ttl}: never expires)"
    if "has_crc_file" in raw:
        out["checksums (.crc)"] = (
            "yes" if raw["has_crc_file"] else "no (the original LOG/IDX writer's format: weaker checks)"
        )
        out["records"] = raw["records"]
        out["index range"] = f"[{raw['first_index']}, {raw['next_index']})"
        out["time range"] = f"{human_time_ns(raw['first_time_ns'])} .. {human_time_ns(raw['last_time_ns'])}"  # type: ignore[arg-type]
        if not raw["clean"]:
            out["torn tail"] = (
                f"{raw['torn_log_bytes']} log bytes, {raw['unindexed_records']} unindexed, "
                f"{raw['dangling_entries']} dangling, {raw['records_failing_checksum']} failing its checksum"
            )
    return out


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    if not fs.isdir(path):
        return _file_summary(fs, path)
    raw = stats(fs, path)
    ttl = raw["ttl_ns"]
    assert isinstance(ttl, int)
    return {
        "segments": raw["segment_count"],
        "records": raw["records"],
        "index range": f"[{raw['first_index']}, {raw['next_index']})",
        "time range": f"{human_time_ns(raw['first_time_ns'])} .. {human_time_ns(raw['last_time_ns'])}",  # type: ignore[arg-type]
        "ttl (newest segment)": human_duration_ns(ttl) if ttl > 0 else "none (never expires)",
        "log size": human_bytes(raw["log_bytes"]),  # type: ignore[arg-type]
    }


def stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """A log directory's reader's ``stats()``, or one file's raw figures."""
    if not fs.isdir(path):
        return _file_stats(fs, path)
    with AppendLog.open_reader(path, fs=fs) as reader:
        return reader.stats()


def summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    """Segments, index and time range of a log directory, or one file's header."""
    return _summarize(fs, path)


def verify(fs: FileSystem, path: str) -> list[str]:
    """Full self-check: every entry against its record, contiguity, times."""
    return _verify(fs, path)


def _verify(fs: FileSystem, path: str) -> list[str]:
    if fs.isdir(path):
        with AppendLog.open_reader(path, fs=fs) as reader:
            return reader.verify()
    log_path, idx_path, crc_path, base = _pair(path)
    log, idx = _read(fs, log_path), (_read(fs, idx_path) if fs.exists(idx_path) else b"")
    crc = _crc_of(fs, crc_path)
    for data, magic, p in ((log, LOG_MAGIC, log_path), (idx, IDX_MAGIC, idx_path)):
        check_header(data, magic, p)
    try:
        scan = scan_segment(log, idx, base, None, crc)
    except Mismatch as exc:
        raise CorruptFileError(log_path if exc.where == "log" else idx_path, exc.offset, exc.expected,
                               exc.found) from None
    notes = [f"{scan.count} records" + (", checksums verified" if crc is not None else ", no .crc file")]
    if not scan.clean:
        notes.append(
            f"torn tail that the writer's next open repairs: {scan.log_cut} log bytes, "
            f"{len(scan.rebuilt)} unindexed records, {scan.idx_dropped} dangling entries, "
            f"{scan.torn_records} record(s) failing their checksum"
        )
    return notes


HANDLER = FormatHandler(
    name="applog",
    description="TTL'd append log (LOG/IDX segments)",
    sniff=_sniff,
    summarize=summarize,
    verify=verify,
    stats=stats,
)
