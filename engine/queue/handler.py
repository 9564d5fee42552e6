"""``engine inspect`` / ``engine verify`` support for queue journals (libkestrel journal).

Every callback reads through the file system it is given (the tests pass the
crash simulator), never the real one behind its back."""

from __future__ import annotations

from collections.abc import Mapping

from engine.clireport import human_bytes, human_size
from engine.errors import CorruptFileError, EngineError, FormatError
from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.queue import census, checkpoint, codec, naming
from engine.queue.diagnose import queue_names, queue_stats, verify_queue
from engine.queue.segments import open_segment_handle, scan_file


def _side(path: str) -> str | None:
    """The kind of queue side file ``path`` is (see :func:`census.side_file`), or None."""
    found = census.side_file(path.rsplit("/", 1)[-1])
    return None if found is None else found[0]


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    if not is_dir:
        if codec.check_magic(head, codec.WRITER_MAGIC) or codec.check_magic(head, codec.READER_MAGIC):
            return True
        side = _side(path)
        if side is None:
            return False
        try:  # named like one, and reads as one
            census.describe_side_file(fs, path, side)
        except (CorruptFileError, OSError):
            return False
        return True
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
    side = _side(path)
    if side is not None:
        with fs.open(path) as handle:
            head = handle.read_at(0, codec.MAGIC_SIZE)
        if head not in (codec.WRITER_MAGIC, codec.READER_MAGIC):
            return "side"
    with fs.open(path) as handle:
        head = handle.read_at(0, codec.MAGIC_SIZE)
    if head == codec.WRITER_MAGIC:
        return "writer"
    if head == codec.READER_MAGIC:
        return "reader"
    raise FormatError(path, 0, "a libkestrel journal magic", head.hex(" ") or "an empty file")


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    """:func:`_stats` in words, for ``engine inspect``."""
    raw = _stats(fs, path)
    kind = raw["kind"]
    if kind == "queue_directory":
        out: dict[str, object] = {"kind": "queue directory"}
        queues = raw["queues"]
        assert isinstance(queues, dict)
        for name, stats in queues.items():
            files = f"{stats['journal_files']} writer file(s), {human_bytes(stats['journal_bytes'])}"
            backlogs = "".join(
                f", reader {r['reader']!r}: {r['items']} items ({human_bytes(r['backlog_bytes'])})"
                for r in stats["readers"]
            )
            out[f"queue {name}"] = f"tail id {stats['tail_id']}, {files}{backlogs}"
        return out
    if kind == "reader_checkpoint":
        return {"kind": "reader checkpoint", "head": raw["head"], "done out of order": raw["done_out_of_order"],
                "size": human_size(raw["bytes"])}  # type: ignore[arg-type]
    if kind == "side_file":
        described = {key.replace("_", " "): value for key, value in raw.items() if key not in ("kind", "what")}
        return {"kind": raw["what"], **described}
    summary: dict[str, object] = {
        "kind": "writer journal",
        "size": human_size(raw["bytes"]),  # type: ignore[arg-type]
        "items": raw["items"],
        "last id": raw["last_id"],
    }
    if raw["checksummed_data_after"] is not None:
        summary["damage"] = (
            f"at offset {raw['damage_offset']}: {raw['problem']}; checksummed data follows at offset "
            f"{raw['checksummed_data_after']} (not a torn tail: `engine queue repair` cuts it, reporting what it drops)"
        )
    elif raw["problem"]:
        summary["torn tail"] = f"{raw['torn_tail_bytes']} bytes at offset {raw['good_end']}: {raw['problem']}"
    return summary


def _stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """A queue directory's queues (:func:`queue_stats` each), a reader checkpoint's
    head, or a writer file's items and end; snake_case keys, numbers."""
    if fs.isdir(path):
        queues = {name: queue_stats(fs, path, name) for name in queue_names(fs, path)}
        return {"kind": "queue_directory", "queues": queues}
    kind = _file_kind(fs, path)
    if kind == "side":
        described = dict(census.describe_side_file(fs, path, _side(path) or ""))
        return {**described, "kind": "side_file", "what": described["kind"]}
    if kind == "reader":
        head, done = checkpoint.load_reader_file(fs, path)
        return {"kind": "reader_checkpoint", "head": head, "done_out_of_order": len(done), "bytes": fs.file_size(path)}
    with open_segment_handle(fs, path) as handle:
        scan = scan_file(handle, path)
    return {
        "kind": "writer_journal",
        "bytes": scan.size,
        "items": scan.count,
        "last_id": scan.last_id,
        "good_end": scan.good_end,
        "problem": scan.problem or None,
        "torn_tail_bytes": scan.size - scan.good_end,
        "damage_offset": scan.damage_offset if scan.valid_after is not None else None,
        "checksummed_data_after": scan.valid_after,
    }


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
    if kind == "side":
        census.describe_side_file(fs, path, _side(path) or "")
        return []
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
    description="libkestrel queue journal (writer files, reader checkpoints, the queue's lock and state files)",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
    stats=_stats,
)
