"""Hand-offs with libkestrel, both ways, lose nothing (docs/formats/queue.md,
"Hand-offs with libkestrel").

Files libkestrel writes are built here byte by byte from the format (magic,
PUT records, no CHECK; its reader files: READ_HEAD, READ_DONE), and what
libkestrel does with ours is its rules as :mod:`tests.queue.libkestrel_model`
models them (append to the newest file; a reader moves to the next file only
through the id that file starts with; expired items at the head discarded).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ConfigError, CorruptFileError
from engine.queue import Queue, codec
from tests.queue.libkestrel_model import Journal

NOCKPT: dict[str, Any] = {"checkpoint_interval": 3600.0}


def lk_put(xid: int, data: bytes, add: int = 1_700_000_000_000) -> bytes:
    """A PUT as libkestrel's RecordWriter writes it (0x86, no expiry)."""
    return struct.pack("<Biiqq", 0x86, len(data), 0, xid, add) + data


def lk_writer_file(path: Path, first: int, items: list[bytes]) -> None:
    path.write_bytes(codec.WRITER_MAGIC + b"".join(lk_put(first + i, d) for i, d in enumerate(items)))


def lk_reader_file(path: Path, head: int, done: list[int]) -> None:
    body = codec.encode_read_head(head) + codec.encode_read_done(done)
    path.write_bytes(codec.READER_MAGIC + body)


def drain(reader: Any) -> list[tuple[int, bytes]]:
    got = []
    while (item := reader.get(timeout=0)) is not None:
        got.append((item.id, item.data))
        reader.confirm(item.id)
    return got


def test_we_continue_a_libkestrel_queue_and_read_it_at_once(tmp_path: Path) -> None:
    """Its newest file has no CHECK: this engine never appends to it (a new file
    of its own first), and reads it record by record, with ours after it."""
    lk_writer_file(tmp_path / "jobs.1700000000000", 1, [b"lk-1", b"lk-2", b"lk-3"])
    lk_reader_file(tmp_path / "jobs.read.", 1, [3])
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        assert q.put(b"ours-4") == 4
        assert drain(q.reader()) == [(2, b"lk-2"), (4, b"ours-4")]
        q.verify()
    # And libkestrel reads the result: the two files' ids follow on.
    journal = Journal(str(tmp_path), "jobs")
    assert journal.log == [] and journal.tail == 4
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:  # (nothing confirmed by that read)
        assert not q.recovery.repaired


def test_libkestrel_continues_ours_and_our_next_open_keeps_its_records(tmp_path: Path) -> None:
    """libkestrel appends its PUTs (no CHECK) to our newest file; our next open
    keeps them (under a CHECK of their own), reported, and every reader gets them."""
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        q.put_many([b"ours-1", b"ours-2"])
    journal = Journal(str(tmp_path), "jobs")
    assert journal.log == [] and journal.tail == 2  # it reads ours (CHECKs skipped as unknown)
    assert [journal.put(b"lk-%d" % i) for i in (3, 4)] == [3, 4]
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        (kept,) = q.recovery.actions
        assert (kept.kind, kept.count, kept.unit) == ("rebuilt", 2, "records")
        assert q.put(b"ours-5") == 5
        assert [d for _, d in drain(q.reader())] == [b"ours-1", b"ours-2", b"lk-3", b"lk-4", b"ours-5"]
        q.verify()


def test_libkestrel_crashed_after_continuing_ours_its_whole_records_are_kept(tmp_path: Path) -> None:
    """libkestrel maps its newest file preallocated to its journal size; killed, it
    leaves its records then zeros.  After our clean close, what follows is its:
    whole records up to the zeros kept, the zeros cut."""
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        q.put(b"ours-1")
    (path,) = [p for p in tmp_path.iterdir() if p.name[5:].isdigit()]
    with open(path, "ab") as f:
        f.write(lk_put(2, b"lk-2") + lk_put(3, b"lk-3") + bytes(4096))
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        assert sorted((a.kind, a.unit) for a in q.recovery.actions) == [("cut", "bytes"), ("rebuilt", "records")]
        assert [d for _, d in drain(q.reader())] == [b"ours-1", b"lk-2", b"lk-3"]


def test_libkestrel_rotated_after_continuing_ours_every_item_is_read(tmp_path: Path) -> None:
    """libkestrel appended to our newest file, then started files of its own: our
    readers read its records at the end of our (now finished) file, and its files."""
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        reader = q.reader("r")
        q.put(b"ours-1")
        reader.close()
    journal = Journal(str(tmp_path), "jobs")
    journal.put(b"lk-2")
    journal.put(b"lk-3", rotate=True)
    journal.put(b"lk-4")
    remote = Queue.open_reader(str(tmp_path), "jobs", "r", **NOCKPT)
    assert [d for _, d in drain(remote)] == [b"ours-1", b"lk-2", b"lk-3", b"lk-4"]
    remote.close()
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        assert q.put(b"ours-5") == 5
        q.verify()


def test_after_ids_burnt_in_a_crash_libkestrels_reader_still_delivers_every_later_item(tmp_path: Path) -> None:
    """A reader checkpoint mentions ids a crash took out of the journal: the writer
    burns them with BURNT records, not a gap between two files, so libkestrel's
    reader (which finds the next file only by the id it starts with) goes on;
    the BURNT records are items that expired in 1970 to it, discarded."""
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        q.reader("lk")  # a reader libkestrel will read with, at the start
        q.put_many([b"a", b"b"])
    # A reader elsewhere had seen and confirmed ids 3..5, which the crash took back.
    lk_reader_file(tmp_path / "jobs.read.seen", 5, [])
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        (burnt,) = q.recovery.of("reset")
        assert (burnt.count, burnt.unit) == (3, "ids")
        assert q.put(b"after") == 6
        assert [d for _, d in drain(q.reader("seen"))] == [b"after"]
    journal = Journal(str(tmp_path), "jobs")
    assert [p.data for p in journal.deliver_all("lk")] == [b"a", b"b", b"after"]


def test_a_writer_refuses_items_libkestrel_cannot_read(tmp_path: Path) -> None:
    where = tmp_path / "never-created"
    with pytest.raises(ConfigError, match="libkestrel"):
        Queue.open(str(where), "q", max_item_size=16 * 1024 * 1024 + 1)
    assert not where.exists()


def test_the_biggest_item_libkestrel_reads_is_accepted_and_read_by_it(tmp_path: Path) -> None:
    big = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    with Queue.open(str(tmp_path), "jobs", journal_size=1 << 20, **NOCKPT) as q:
        q.put(b"small")
        q.put(big)
    journal = Journal(str(tmp_path), "jobs")
    assert journal.log == []  # nothing "too large", nothing erased
    assert [len(p.data) for p in journal.deliver_all("")] == [5, len(big)]


def test_libkestrels_records_ending_at_a_zero_tail_are_read(tmp_path: Path) -> None:
    """What libkestrel appended before a preallocated (zero) tail, at the end of a
    finished file, is read: the zero run starts where its last record ends."""
    with Queue.open(str(tmp_path), "jobs", **NOCKPT) as q:
        reader = q.reader("r")
        q.put(b"ours-1")
        reader.close()
    journal = Journal(str(tmp_path), "jobs")
    journal.put(b"lk-2")
    first = max(tmp_path.glob("jobs.[0-9]*"), key=lambda p: int(p.suffix[1:]))
    with open(first, "ab") as f:
        f.write(bytes(64))  # its preallocated tail
    journal.put(b"lk-3", rotate=True)
    remote = Queue.open_reader(str(tmp_path), "jobs", "r", **NOCKPT)
    assert [d for _, d in drain(remote)] == [b"ours-1", b"lk-2", b"lk-3"]
    remote.close()


def test_a_zeroed_check_at_the_end_of_a_finished_file_is_damage_not_data(tmp_path: Path) -> None:
    """The stress suite's finding: zeroing the end of a rotated writer file (its
    last CHECK and the end of the last payload) read the last item back with
    zeros and no error, as if libkestrel had appended it before a zero tail.
    Zeros that reach back into a record are damage: CorruptFileError naming the
    file and the batch."""
    sent = {}
    with Queue.open(str(tmp_path), "jobs", journal_size=1000, **NOCKPT) as q:
        q.reader("r").close()
        for i in range(12):
            data = bytes([65 + i % 26]) * 200
            sent[q.put(data)] = data
    files = sorted(tmp_path.glob("jobs.[0-9]*"), key=lambda p: int(p.suffix[1:]))
    second = files[1]
    size = second.stat().st_size
    with open(second, "r+b") as f:  # the CHECK and the last 98 bytes of the payload before it
        f.seek(size - 107)
        f.write(bytes(107))
    remote = Queue.open_reader(str(tmp_path), "jobs", "r", **NOCKPT)
    got: list[tuple[int, bytes]] = []
    with pytest.raises(CorruptFileError) as info:
        while (item := remote.get(timeout=0)) is not None:
            got.append((item.id, item.data))
            remote.confirm(item.id)
    remote.close()
    assert info.value.path == str(second) and "CHECK" in str(info.value)
    assert all(sent[xid] == data for xid, data in got)  # nothing delivered changed
