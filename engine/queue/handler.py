"""``engine inspect`` / ``engine verify`` support for queue journals (libkestrel journal).

Every callback reads through the file system it is given (the tests pass the
crash simulator), never the real one behind its back."""

from __future__ import annotations

from collections.abc import Mapping

from engine.clireport import human_bytes
from engine.errors import CorruptFileError, EngineError, FormatError
from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.queue import checkpoint, codec, naming
from engine.queue.diagnose import queue_names, queue_stats, verify_queue
from engine.queue.segments import open_segment_handle, scan_file


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    if not is_dir:
        return codec.check_magic(head, codec.WRITER_MAGIC) or codec.check_magic(head, codec.READER_MAGIC)
    for name in queue_names(fs, path):
        for filename in fs.listdir(path):
            if filename.startswith(name + "."):
                full = naming.join(path, filename)
                try:
                    if fs.isdir(full):
                        continue
                    with fs.open(full) as handle:
                        magic = handle.read_at(0, codec.MAGIC_SIZE)
                except OSError:
                    continue  # unreadable (a link loop, say): summarize/verify say so
                if magic in (codec.WRITER_MAGIC, codec.READER_MAGIC):
                    return True
    return False


def _file_kind(fs: FileSystem, path: str) -> str:
    with fs.open(path) as handle:
        head = handle.read_at(0, codec.MAGIC_SIZE)
    if head == codec.WRITER_MAGIC:
        return "writer"
    if head == codec.READER_MAGIC:
        return "reader"
    raise FormatError(path, 0, "a libkestrel journal magic", head.hex(" ") or "an empty file")


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    return _summary(fs, path)


def _summary(fs: FileSystem, path: str) -> Mapping[str, object]:
    """Human-readable fields for ``engine inspect`` (``engine queue stats --json``
    gives a queue's figures as numbers)."""
    if fs.isdir(path):
        out: dict[str, object] = {"kind": "queue directory"}
        for name in queue_names(fs, path):
            stats = queue_stats(fs, path, name)
            readers = stats["readers"]
            assert isinstance(readers, list)
            files = f"{stats['journal_files']} writer file(s), {human_bytes(stats['journal_bytes'])}"  # type: ignore[arg-type]
            backlogs = "".join(
                f", reader {r['reader']!r}: {r['items']} items ({human_bytes(r['backlog_bytes'])})" for r in readers
            )
            out[f"queue {name}"] = f"tail id {stats['tail_id']}, {files}{backlogs}"
        return out
    kind = _file_kind(fs, path)
    if kind == "reader":
        head, done = checkpoint.load_reader_file(fs, path)
        nbytes = fs.file_size(path)
        return {"kind": "reader checkpoint", "head": head, "done out of order": len(done), "size": _size(nbytes)}
    with open_segment_handle(fs, path) as handle:
        scan = scan_file(handle, path)
    summary: dict[str, object] = {
        "kind": "writer journal",
        "size": _size(scan.size),
        "items": scan.count,
        "last id": scan.last_id,
    }
    if scan.valid_after is not None:
        summary["damage"] = (
            f"at offset {scan.damage_offset}: {scan.problem}; checksummed data follows at offset "
            f"{scan.valid_after} (not a torn tail: `engine queue repair` cuts it, reporting what it drops)"
        )
    elif scan.problem:
        summary["torn tail"] = f"{scan.size - scan.good_end} bytes at offset {scan.good_end}: {scan.problem}"
    return summary


def _size(nbytes: int) -> str:
    text = human_bytes(nbytes)
    return text if text.endswith(" B") else f"{text} ({nbytes} bytes)"


def _verify(fs: FileSystem, path: str) -> list[str]:
    return _verify_path(fs, path)


def _verify_path(fs: FileSystem, path: str) -> list[str]:
    if fs.isdir(path):
        notes: list[str] = []
        names = queue_names(fs, path)
        if not names:
            raise EngineError(f"{path}: no queue files")
        for name in names:
            notes.extend(verify_queue(fs, path, name))
        return notes
    kind = _file_kind(fs, path)
    if kind == "reader":
        checkpoint.load_reader_file(fs, path)
        return []
    with open_segment_handle(fs, path) as handle:
        scan = scan_file(handle, path)
    if scan.valid_after is not None:
        raise scan.mid_file_error(path)
    if scan.problem:
        # A lone file: we cannot know whether it is the newest; report the offset.
        raise CorruptFileError(path, scan.good_end, "a valid record", scan.problem)
    return []


HANDLER = FormatHandler(
    name="queue",
    description="libkestrel queue journal (writer files, reader checkpoints)",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
)
