"""Byte-level parity of the JVM queue file decoder (engine.spark.QueueCodec /
QueueFiles) and the Python one.

Both read the same golden, damaged and hostile queue journal (writer) files and
reader checkpoint files and must agree item for item and error for error (type,
file, offset and words).  The JVM side runs ``engine.spark.QueueDump`` (several
dumps per JVM); the Python side is the queue's own column cursor
(``engine.queue.cursor.ColumnCursor``) over the same files as finished journal
files, and ``engine.queue.checkpoint.load_reader_file``.  Skipped where the
connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import pytest
from dump_parity import DumpParity, run_dump

from engine.errors import EngineError
from engine.fs import FileHandle, resolve
from engine.queue import checkpoint, codec, naming
from engine.queue.cursor import ColumnCursor, WakeUps
from engine.queue.segments import Segment
from engine.spark import jvmbuild
from engine.spark.queuesource import QueueReader
from engine.spark.schemas import QUEUE_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))

#: One dump: ("journal" | "reader", path) in order (journal files read as one journal).
Case = list[tuple[str, str]]


class FinishedFiles(WakeUps):
    """A journal source over given writer files, every one finished (none is being
    written, no writer holds the queue): what the Python cursor reads them as."""

    def __init__(self, paths: list[str]) -> None:
        self.fs = resolve(None)
        self.poll_period = None
        self._segments = [Segment(k + 1, p, None) for k, p in enumerate(paths)]
        self._init_wakeups()

    def segment_list(self, *, fresh: bool = False) -> list[Segment]:
        return list(self._segments)

    def readable_end(self, segment: Segment, handle: FileHandle) -> tuple[int, bool]:
        return handle.size(), False

    def writer_alive(self) -> bool:
        return False


def python_dump(case: Case) -> list[str]:
    """What the Python decoders give, in QueueDump's format."""
    out: list[str] = []
    journals = [p for kind, p in case if kind == "journal"]
    try:
        if journals:
            cursor = ColumnCursor(FinishedFiles(journals), 0)
            try:
                while (got := cursor.next_columns()) is not None:
                    c, first = got
                    ids = memoryview(c.ids).cast("q")
                    adds, exps = memoryview(c.add_times).cast("q"), memoryview(c.expire_times).cast("q")
                    errs, offs = memoryview(c.error_counts).cast("i"), memoryview(c.offsets).cast("q")
                    for k in range(first, c.items):
                        exp = str(exps[k]) if c.has_expiry[k] else "None"
                        out.append(f"{ids[k]}\t{adds[k]}\t{exp}\t{errs[k]}\t{c.data[offs[k]:offs[k + 1]].hex()}")
            finally:
                cursor.close()
        for kind, path in case:
            if kind == "reader":
                head, done = checkpoint.load_reader_file(resolve(None), path)
                out.append(f"head\t{head}")
                out.append("done\t" + ",".join(map(str, done)))
    except EngineError as exc:
        out.append(f"ERROR {type(exc).__name__}: {exc}")
    return out


def jvm_dumps(cases: list[Case]) -> list[list[str]]:
    """What QueueDump gives for each case (one JVM for all)."""
    args: list[str] = []
    for k, case in enumerate(cases):
        if k:
            args.append("--")
        # The journal files first, as one journal, then the reader files (python_dump's order).
        args += [f"{kind}={path}" for kind, path in case if kind == "journal"]
        args += [f"{kind}={path}" for kind, path in case if kind == "reader"]
    return run_dump("engine.spark.QueueDump", args)


def assert_parity(cases: list[Case]) -> list[list[str]]:
    jvm = jvm_dumps(cases)
    assert len(jvm) == len(cases)
    for case, got in zip(cases, jvm):
        assert got == python_dump(case), case
    return jvm


@pytest.fixture()
def queue_dir(tmp_path: Any) -> str:
    """Queue ``jobs`` over several journal files: items with and without expiry,
    moved ones with error counts, an empty one; reader ``a`` with out-of-order confirms."""
    from engine.queue import Item, Queue

    d = str(tmp_path / "q")
    os.makedirs(d)
    q = Queue.open(d, "jobs", sync="never", journal_size=1024)
    a = q.reader("a")
    q.put_many([b"job-%d" % i * (1 + i % 5) for i in range(60)])
    q.put_many([(b"exp-%d" % i, 4_000_000_000.0 + i) for i in range(20)])
    for k in range(20):
        q.put_moved(Item(0, b"moved-%d" % k, 1_700_000_000_000 + k, None if k % 3 else 4_100_000_000_000 + k,
                         k % 5 + 1))
    q.put(b"")
    got = [a.get(timeout=0) for _ in range(30)]
    a.confirm([item.id for item in got[::3] if item is not None])
    q.checkpoint()
    q.close()
    return d


def journal_files(d: str, queue: str = "jobs") -> list[str]:
    names = sorted((n for n in os.listdir(d) if naming.parse_writer(queue, n) is not None),
                   key=lambda n: naming.parse_writer(queue, n) or 0)
    return [os.path.join(d, n) for n in names]


def reader_file(d: str) -> str:
    return os.path.join(d, naming.reader_name("jobs", "a"))


def write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_golden_queue(queue_dir: str) -> None:
    files = journal_files(queue_dir)
    assert len(files) > 3
    got = assert_parity([[("journal", p) for p in files] + [("reader", reader_file(queue_dir))],
                         *[[("journal", p)] for p in files]])
    assert len(got[0]) == 101 + 2 and not any(line.startswith("ERROR") for line in got[0])


def test_libkestrel_files_without_checks(tmp_path: Any) -> None:
    """Files without CHECK records (libkestrel's): every whole PUT counts; READ records skipped."""
    body = b"".join(codec.encode_put(i, 1_600_000_000_000 + i, b"x" * i, None if i % 2 else 7, i % 3)
                    for i in range(1, 30))
    journal = write(str(tmp_path / "jobs.1"), codec.WRITER_MAGIC + body + codec.encode_read_head(3) + body[:0])
    old_reader = write(str(tmp_path / "jobs.read.a"),
                       codec.READER_MAGIC + codec.encode_read_head(5) + codec.encode_read_done([9, 7]))
    assert_parity([[("journal", journal), ("reader", old_reader)]])


def _damaged(tmp_path: Any, source: str, name: str, mutate: Callable[[bytes], bytes]) -> str:
    with open(source, "rb") as f:
        data = f.read()
    return write(str(tmp_path / name), mutate(data))


def test_truncated_and_flipped_files(queue_dir: str, tmp_path: Any) -> None:
    """Every cut and a flipped bit at every byte of a journal file and the reader file."""
    journal = journal_files(queue_dir)[1]
    reader = reader_file(queue_dir)
    cases: list[Case] = []
    for kind, src in (("journal", journal), ("reader", reader)):
        size = os.path.getsize(src)
        for cut in range(size):
            path = _damaged(tmp_path, src, f"{kind}-cut-{cut}", lambda b, c=cut: b[:c])  # type: ignore[misc]
            cases.append([(kind, path)])
        rng = random.Random(size)
        for at in range(size):
            bit = 1 << rng.randrange(8)
            path = _damaged(tmp_path, src, f"{kind}-flip-{at}",
                            lambda b, a=at, m=bit: b[:a] + bytes([b[a] ^ m]) + b[a + 1:])  # type: ignore[misc]
            cases.append([(kind, path)])
    got = assert_parity(cases)
    silent = [c[0][1].rsplit("/", 1)[1] for g, c in zip(got, cases)
              if "-flip-" in c[0][1] and not any(line.startswith("ERROR") for line in g)]
    assert silent == [], silent  # checksums never skipped


def test_hostile_files(tmp_path: Any) -> None:
    """Foreign magic, impossible fields, data after an end marker, ids going back,
    unknown commands, huge lengths, READ records where they do not belong."""
    check = codec.EMPTY_CHECK
    header = codec.WRITER_MAGIC + check

    def batch(records: bytes) -> bytes:
        return records + codec.encode_check(records)

    p1, p2, p3 = (codec.encode_put(i, 1000 + i, b"d%d" % i) for i in (1, 2, 3))
    bodies = {
        "foreign": b"\x00\x01\x02\x03" + batch(p1),
        "short": codec.WRITER_MAGIC[:2],
        "empty": b"",
        "magic-only": codec.WRITER_MAGIC,
        "good": header + batch(p1 + p2) + batch(p3),
        "no-check-at-end": header + batch(p1) + p2,
        "marker-then-data": header + batch(p1) + b"\x00\x00\x05",
        "marker-then-zeros": header + batch(p1) + b"\x00" * 40,
        "ids-back": header + batch(p2 + p1),
        "ids-same-file-back": header + batch(p2) + batch(p1),
        "unknown-command": header + batch(p1 + b"\x31abcd" + b"\xa1" + (3).to_bytes(4, "little") + b"xyz" + p2),
        "unknown-no-length": header + batch(p1 + b"\xa0"),
        "negative-length": header + batch(b"\x86" + (-5).to_bytes(4, "little", signed=True) + bytes(20)),
        "huge-length": header + b"\x86" + (1 << 30).to_bytes(4, "little") + bytes(4)
        + (1).to_bytes(8, "little") + bytes(8),
        "zero-id": header + batch(codec.PUT_RECORD.pack(0x86, 0, 0, 0, 5)),
        "bad-errors": header + batch(codec.PUT_RECORD.pack(0x86, 0, 1 << 25, 1, 5)),
        "put-7-words": header + batch(b"\x87" + bytes(28)),
        "read-head-3-words": header + batch(p1 + b"\x03" + bytes(12)),
        "read-done-odd": header + batch(p1 + b"\x91" + (12).to_bytes(4, "little") + bytes(12)),
        "check-wrong-length": header + p1 + codec.CHECK_BYTE.to_bytes(1, "little") + codec.CHECK.pack(0, 99),
        "damaged-start": codec.WRITER_MAGIC + p1 + codec.encode_check(p1),
        "truncated-check": header + p1 + codec.encode_check(p1)[:5],
        "expiry": header + batch(codec.encode_put(4, 5, b"e", 6, 2) + codec.encode_burnt(5)),
    }
    readers = {
        "r-good": codec.encode_reader_file(7, [9, 12]),
        "r-empty": b"",
        "r-foreign": b"\x01\x02",
        "r-no-head": codec.READER_MAGIC + codec.encode_read_done([3]),
        "r-put": codec.READER_MAGIC + p1,
        "r-no-final-check": codec.READER_MAGIC + check + codec.encode_read_head(3),
        "r-data-after-marker": codec.READER_MAGIC + codec.encode_read_head(3) + b"\x00\x01",
        "r-negative-head": codec.READER_MAGIC + codec.encode_read_head(0)[:1] + (-4).to_bytes(8, "little", signed=True),
        "r-later-wins": codec.READER_MAGIC + codec.encode_read_head(3) + codec.encode_read_done([5])
        + codec.encode_read_head(4) + codec.encode_read_done([8, 9]),
        "r-incomplete": codec.READER_MAGIC + codec.encode_read_done([3, 4])[:9],
    }
    cases: list[Case] = [[("journal", write(str(tmp_path / f"jobs.{n}"), b))] for n, b in bodies.items()]
    cases += [[("reader", write(str(tmp_path / n), b))] for n, b in readers.items()]
    # Two files as one journal: ids must increase across them.
    first, second = (write(str(tmp_path / f"two.{k}"), header + batch(p)) for k, p in ((1, p2), (2, p1)))
    cases.append([("journal", first), ("journal", second)])
    assert_parity(cases)


# -- the source: the JVM QueueSource's plan and reads against queuesource.QueueReader's -------


_SOURCE = DumpParity("engine.spark.QueueDump", QueueReader, QUEUE_SCHEMA, before=("read",))
assert_source_parity = _SOURCE.agree_all


def test_source_rows_and_partitions(queue_dir: str, tmp_path: Any) -> None:
    """Same rows, in the same order, whatever the options; burnt ids and out-of-order confirms masked."""
    other = str(tmp_path / "other")
    os.makedirs(other)
    from engine.queue import Queue

    q = Queue.open(other, "mail", sync="never")
    q.put_many([b"m%d" % i for i in range(5)])
    q.close()
    big = Queue.open(other, "big", sync="never", journal_size=1024)  # first writes longer than a first read
    big.put(b"x" * 200_000)
    big.put_many([b"y" * 150_000, b"z"])
    big.put(b"w" * 100_000)
    big.close()
    with open(journal_files(other, "mail")[-1], "ab") as f:  # a burnt id, in a checked batch
        burnt = codec.encode_burnt(6)
        f.write(burnt + codec.encode_check(burnt))
    base = {"path": queue_dir}
    cases: list[tuple[dict[str, str], list[str] | None]] = [
        (base, None),
        ({**base, "reader": "a"}, None),
        ({**base, "queue": "jobs", "reader": "a,b,nobody"}, ["id", "data"]),
        ({**base, "bytesPerPartition": "700"}, None),
        ({**base, "bytesPerPartition": "3000", "minPartitions": "5"}, ["reader", "id", "expire_time"]),
        ({**base, "minPartitions": "1"}, ["error_count", "add_time"]),
        ({"paths": f'["{queue_dir}", "{other}"]'}, None),
        ({"path": other, "queue": "nothing"}, None),
        ({**base, "bogus": "1"}, None),
        ({**base, "minPartitions": "0"}, None),
        ({**base, "mode": "sometimes"}, None),
    ]
    got = assert_source_parity(cases)
    assert len(got[0]) == 91 and len(got[3]) == len(got[0])  # 101 items, 10 confirmed out of order


def test_source_damage_modes(queue_dir: str, tmp_path: Any) -> None:
    """Damage in a finished file, a torn tail and mid-file damage in the newest: same rows, same error, per mode."""
    import shutil

    cases: list[tuple[dict[str, str], list[str] | None]] = []
    for name, damage in (("flip", "middle"), ("torn", "tail"), ("mid", "newest-middle"), ("reader", "reader")):
        d = str(tmp_path / name)
        shutil.copytree(queue_dir, d)
        files = journal_files(d)
        if damage == "middle":
            path, at = files[len(files) // 2], 40
        elif damage == "newest-middle":
            path, at = files[-1], 20
        elif damage == "reader":
            path, at = reader_file(d), 10
        else:
            path, at = files[-1], -1
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            if at < 0:
                data += codec.encode_put(10_000, 5, b"torn")[:-2]
            else:
                data[min(at, len(data) - 1)] ^= 0x10
            f.seek(0)
            f.write(data)
        for mode in ("FAILFAST", "DROPMALFORMED", "PERMISSIVE"):
            cases.append(({"path": d, "mode": mode}, None))
            cases.append(({"path": d, "mode": mode, "bytesPerPartition": "900"}, ["id"]))
    assert_source_parity(cases)
