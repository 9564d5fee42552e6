"""The JVM ``engine-streams`` source (engine.spark.StreamSource) against the Python reader.

Byte-level parity of the decoder (engine.spark.StreamScanner): both read the same
golden, damaged (truncated, flipped bytes, torn transaction) and hostile journals
and must agree stream for stream and error for error (type, file, offset and
words), and on where and why the scan stopped.  The JVM side runs
``engine.spark.StreamDump`` (one JVM per case, each case read through several
windows, down to 64 bytes: records larger than a window); the Python side is
:meth:`engine.streams.StreamJournal.open_reader`'s scan.  The Spark source is
compared with the reference reader (``engine.spark.streamsource.StreamsReader``)
in every mode, pruned reads included.  Skipped where the connector cannot be
built (no JDK).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from typing import Any

import pyarrow as pa
import pytest
from dump_parity import poke, run_java

from engine.errors import CorruptFileError, EngineError
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild
from engine.spark.batches import arrow_schema
from engine.spark.options import lower, read_schema
from engine.spark.schemas import STREAMS_SCHEMA
from engine.spark.streamsource import StreamsReader
from engine.streams import codec
from engine.streams.journal import StreamJournal
from engine.streams.reader import read_streams

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
PAGE = 512
#: The read windows every parity case goes through: the smallest, one smaller than a page, the default.
WINDOWS = (64, 100, 4 << 20)


def python_dump(path: str) -> list[str]:
    """What the Python reader gives, in StreamDump's format."""
    out: list[str] = []
    try:
        with StreamJournal.open_reader(path) as reader:
            scan = reader.events()
            for s in scan.streams():
                out.append(f"STREAM {s.number} {s.ident.hex()} {s.start_offset} {s.status} {s.position} {s.data.hex()}")
            out.extend(f"ANOMALY {a}" for a in scan.anomalies)
            end = scan.end
            assert end is not None
            out.append(f"END {end.position} {end.clean} {end.reason}|{end.next_global}|{end.records}")
    except EngineError as exc:
        out.append(f"ERROR {type(exc).__name__}: {exc}")
    return out


def jvm_dumps(path: str, windows: tuple[int, ...] = WINDOWS) -> dict[int, list[str]]:
    """What the JVM decoder gives through each read window (engine.spark.StreamDump)."""
    out: dict[int, list[str]] = {}
    for line in run_java("engine.spark.StreamDump", [path, *map(str, windows)], timeout=120).splitlines():
        if line.startswith("WINDOW "):
            window = int(line.split()[1])
            out[window] = []
        else:
            out[window].append(line)
    assert sorted(out) == sorted(windows)
    return out


def agree(path: str) -> list[str]:
    py = python_dump(path)
    for window, jvm in jvm_dumps(path).items():
        assert jvm == py, f"window {window}"
    return py


def journal(path: str, *, pages: int = 64, streams: int = 3, open_last: bool = True) -> None:
    """Complete streams, an aborted one and (optionally) one left open."""
    j = StreamJournal.open(path, size=pages * PAGE, page_size=PAGE, sync_delay=0)
    for i in range(streams):
        s = j.open_stream(f"s{i}")
        s.write(bytes([65 + i]) * (100 + 300 * i))
        s.close()
    s = j.open_stream("gone")
    s.write(b"x" * 50)
    s.abort()
    if open_last:
        s = j.open_stream("open")
        s.write(b"partial" * 1300)  # more than one 8 KiB buffer: a DATA record goes out
        j.sync()
        shutil.copyfile(path, path + ".live")  # as it is on disk with the stream still open
    j.close()
    if open_last:
        os.replace(path + ".live", path)


def test_golden(tmp_path: object) -> None:
    p = f"{tmp_path}/j"
    journal(p)
    rows = agree(p)
    assert any(r.startswith("STREAM 0 7330 0 complete") for r in rows)
    assert rows[-1].split(" ")[2] == "True"
    assert [r.split(" ")[4] for r in rows[:-1]] == ["complete"] * 3 + ["open"]


def test_wrapped(tmp_path: object) -> None:
    p = f"{tmp_path}/j"
    j = StreamJournal.open(p, size=8 * PAGE, page_size=PAGE, sync_delay=0)
    for i in range(30):
        s = j.open_stream(f"w{i}")
        s.write(bytes([i]) * 200)
        s.close()
    assert j.wraps > 0
    j.close()
    agree(p)


@pytest.mark.parametrize("cut", [0, 5, 31, 40, PAGE, PAGE + 30, 3 * PAGE - 1])
def test_truncated(tmp_path: object, cut: int) -> None:
    p = f"{tmp_path}/j"
    journal(p)
    with resolve(None).open(p, OpenMode.WRITE) as h:
        h.truncate(cut)
    agree(p)


def test_every_byte_flipped_in_the_first_pages(tmp_path: object) -> None:
    """A flip anywhere in page 0 and the first transaction: same streams, same end or error."""
    p = f"{tmp_path}/j"
    journal(p, pages=8, streams=2, open_last=False)
    raw = open(p, "rb").read()  # noqa: SIM115
    for offset in list(range(0, 48)) + list(range(PAGE, PAGE + 200, 7)) + [2 * PAGE, 3 * PAGE + 3]:
        poke(p, offset, bytes([raw[offset] ^ 0x10]))
        agree(p)
        poke(p, offset, raw[offset : offset + 1])


def test_torn_transaction(tmp_path: object) -> None:
    """A transaction whose last page never reached the disk: the scan stops before it, cleanly reported."""
    p = f"{tmp_path}/j"
    journal(p)
    poke(p, 2 * PAGE + 10, b"\xff" * 20)
    rows = agree(p)
    assert rows[-1].split(" ")[2] == "False"


def test_zeroed_middle_is_damage(tmp_path: object) -> None:
    p = f"{tmp_path}/j"
    journal(p)
    poke(p, PAGE, bytes(PAGE))
    rows = agree(p)
    assert rows[-1].startswith("ERROR CorruptFileError")


@pytest.mark.parametrize("head", [
    b"", b"jour", b"jo\x00", b"notajournalfile!" * 4, b"jo'\\\t\xff\n\"" + bytes(60),
    struct.pack(">8sIIII", b"journald", 3, PAGE, 0, 0) + bytes(PAGE * 4),
    codec.encode_file_header(0, 0) + bytes(PAGE * 4),
    codec.encode_file_header(32, 0) + bytes(PAGE * 4),
    codec.encode_header_page(PAGE, 0),  # one page only
    codec.encode_header_page(PAGE, 7) + bytes(PAGE * 3),  # empty journal, first global 7
])
def test_hostile_headers(tmp_path: object, head: bytes) -> None:
    p = f"{tmp_path}/j"
    with open(p, "wb") as f:
        f.write(head)
    agree(p)


def test_hostile_records(tmp_path: object) -> None:
    """Records that pass their checks but make no sense for their stream, and a huge length."""
    p = f"{tmp_path}/j"
    body = bytearray()
    codec.append_record(body, codec.DATA, 0, 5, 0, b"orphan")
    codec.append_record(body, codec.INFO, 1, 1, 0, b"ab")
    codec.append_record(body, codec.INFO, 2, 2, 0, codec.encode_info(9, b"id"))
    codec.append_record(body, codec.INFO, 3, 2, 0, codec.encode_info(9, b"again"))
    codec.append_record(body, codec.DATA, 4, 2, 3, b"bad number")
    codec.append_record(body, 0x30, 5, 7, 0, b"")
    codec.append_record(body, codec.ABORT, 6, 8, 0, b"")
    body += codec.padding(len(body), PAGE)
    huge = struct.pack(">IIIII", codec.DATA, 7, 1, 0, 0xFFFFFFF0)
    with open(p, "wb") as f:
        f.write(codec.encode_header_page(PAGE, 0) + bytes(body) + huge + bytes(4 * PAGE))
    rows = agree(p)
    assert sum(r.startswith("ANOMALY") for r in rows) >= 5


def reference_rows(path: str, options: dict[str, str], columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """The reference reader's rows (every partition; an error raised as it raises it)."""
    opts = {"path": path, **options}
    schema = read_schema(STREAMS_SCHEMA, lower(opts))
    reader = StreamsReader(dict(opts), schema)
    table = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)], arrow_schema(schema))
    names = columns or schema.fieldNames()
    return sorted(zip(*(table.column(n).to_pylist() for n in names), strict=True), key=repr)


def jvm_rows(spark: Any, path: str, options: dict[str, str], columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    df = spark.read.format("engine-streams").options(**options).load(path)
    if columns is not None:
        df = df.select(*columns)
    return sorted(map(tuple, df.collect()), key=repr)


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_jvm_source_gives_the_reference_readers_rows(tmp_path: object, spark: Any, mode: str) -> None:
    """engine-streams (the JVM) and the reference reader on the same journals, a torn one included:
    same rows in every mode, pruned reads included."""
    d = f"{tmp_path}/d"
    os.makedirs(d)
    journal(f"{d}/a")
    journal(f"{d}/b", streams=5)
    journal(f"{d}/c")
    poke(f"{d}/c", 2 * PAGE + 10, b"\xff" * 20)  # torn: the streams before it
    if mode != "FAILFAST":  # a zeroed region in the middle: damage (dropped, or one _corrupt_record row)
        journal(f"{d}/e", pages=256, streams=12)
        poke(f"{d}/e", 8 * PAGE, bytes(PAGE))  # after 4 streams: they are rows, then the damage
    for cols in (None, ["stream", "status"], ["journal", "bytes"], ["ident", "start_offset"]):
        py = reference_rows(d, {"mode": mode}, cols)
        assert jvm_rows(spark, d, {"mode": mode}, cols) == py and py
    if mode != "FAILFAST":
        assert len([r for r in reference_rows(f"{d}/e", {"mode": mode}) if r[1] is not None]) == 4
    if mode == "PERMISSIVE":
        bad = [r for r in jvm_rows(spark, d, {"mode": mode}) if r[-1] is not None]
        assert len(bad) == 1 and bad[0][0] == "e" and "the journal goes on past a damaged region" in bad[0][-1]


def test_jvm_source_fails_on_anomalies_as_the_reference_does(tmp_path: object, spark: Any) -> None:
    p = f"{tmp_path}/j"
    body = bytearray()
    codec.append_record(body, codec.DATA, 0, 5, 0, b"orphan")
    with open(p, "wb") as f:
        f.write(codec.encode_header_page(PAGE, 0) + bytes(body) + codec.padding(len(body), PAGE) + bytes(4 * PAGE))
    with pytest.raises(CorruptFileError) as py:
        reference_rows(p, {})
    with pytest.raises(Exception) as jvm:
        spark.read.format("engine-streams").load(p).collect()
    assert str(py.value) in str(jvm.value)
    assert "records consistent with their streams" in str(jvm.value) and "DATA for a stream not open" in str(jvm.value)


def big_journal(path: str) -> tuple[int, int]:
    """A journal larger than the default read window: small streams, one stream of one record larger
    than the window, more small streams.  Returns (streams, file size)."""
    body = bytearray()
    g = 0

    def stream(number: int, data: bytes, pieces: int) -> None:
        nonlocal g
        codec.append_record(body, codec.INFO, g, number, 0, codec.encode_info(number * 10, b"id%d" % number))
        g += 1
        step = -(-len(data) // pieces)
        for k in range(pieces):
            codec.append_record(body, codec.DATA, g, number, k, data[k * step : (k + 1) * step])
            g += 1
        codec.append_record(body, codec.EOS, g, number, pieces, b"")
        g += 1
        body.extend(codec.padding(len(body), PAGE))

    n = 0
    for _ in range(300):
        stream(n, bytes([n % 251]) * (5000 + 7 * n), 3)
        n += 1
    stream(n, os.urandom(5 << 20), 1)  # one record of 5 MiB: more than a window
    n += 1
    for _ in range(300):
        stream(n, bytes([n % 251]) * (9000 + n), 2)
        n += 1
    raw = codec.encode_header_page(PAGE, 0) + bytes(body) + bytes(2 * PAGE)
    with open(path, "wb") as f:
        f.write(raw)
    return n, len(raw)


def test_a_journal_larger_than_the_window(tmp_path: object, spark: Any) -> None:
    """Read in windows: records across window edges and one larger than a window, the same rows as the
    reference reader, the data whole (its hash), pruned or not; the decoder agrees through small windows."""
    p = f"{tmp_path}/big"
    streams, size = big_journal(p)
    assert size > 2 * (4 << 20)
    py = python_dump(p)
    assert jvm_dumps(p, (4 << 20, 1 << 20, 4096)) == {w: py for w in (4 << 20, 1 << 20, 4096)}
    df = spark.read.format("engine-streams").load(p)
    got = sorted(map(tuple, df.selectExpr("stream", "ident", "start_offset", "status", "bytes", "md5(data)").collect()))
    want = [(s.number, s.ident.decode(), s.start_offset, s.status, len(s.data), hashlib.md5(s.data).hexdigest())
            for s in read_streams(p)]
    assert got == sorted(want) and len(got) == streams
    assert sorted(jvm_rows(spark, p, {}, ["stream", "bytes"])) == sorted((w[0], w[4]) for w in want)
    assert df.count() == streams


def test_pruned_reads_check_every_record(tmp_path: object, spark: Any) -> None:
    """No column selected needs the data, yet every check code is verified: a flipped data byte ends the
    journal there (a torn transaction) for a count() as for a full read, and damage past a zeroed page
    still fails the query."""
    p = f"{tmp_path}/j"
    journal(p, pages=64, streams=8, open_last=False)
    whole = spark.read.format("engine-streams").load(p).count()
    raw = open(p, "rb").read()  # noqa: SIM115
    at = raw.index(bytes([65 + 4]) * 100) + 50  # inside the data of stream 4
    poke(p, at, bytes([raw[at] ^ 1]))
    want = reference_rows(p, {}, ["stream", "status"])
    assert len(want) < whole
    for cols in (["stream", "status"], ["stream"], ["journal"]):
        assert jvm_rows(spark, p, {}, cols) == reference_rows(p, {}, cols)
    assert spark.read.format("engine-streams").load(p).count() == len(want)
    poke(p, at, raw[at : at + 1])
    poke(p, 2 * PAGE, bytes(PAGE))
    for select in (["stream"], ["journal"], []):
        with pytest.raises(Exception, match="the journal goes on past a damaged region"):
            spark.read.format("engine-streams").load(p).select(*select).collect()
    with pytest.raises(Exception, match="the journal goes on past a damaged region"):
        spark.read.format("engine-streams").load(p).count()


def test_partitions_and_statistics(tmp_path: object, spark: Any) -> None:
    """Whole journals per partition, consecutive ones grouped up to 1 / minPartitions of the bytes
    (at most bytesPerPartition); the size statistic is the files' bytes."""
    d = f"{tmp_path}/d"
    os.makedirs(d)
    for name in "abcd":
        journal(f"{d}/{name}", pages=16, open_last=False)
    with open(f"{d}/notes.txt", "w") as f:
        f.write("not a journal")

    def parts(**options: str) -> int:
        return int(spark.read.format("engine-streams").options(**options).load(d).rdd.getNumPartitions())

    assert parts() == 2
    assert parts(minPartitions="4") == 4
    assert parts(minPartitions="1") == 1
    assert parts(bytesPerPartition=str(16 * PAGE)) == 4
    assert parts(bytesPerPartition=str(16 * PAGE + 1), minPartitions="1") == 2
    one = spark.read.format("engine-streams").options(minPartitions="4").load(f"{d}/a")
    assert int(one.rdd.getNumPartitions()) == 1  # a journal is never split
    rows = jvm_rows(spark, d, {"minPartitions": "1"}, ["journal", "stream"])
    assert rows == jvm_rows(spark, d, {"bytesPerPartition": "1"}, ["journal", "stream"]) and len(rows) == 4 * 3
    df = spark.read.format("engine-streams").load(d).select("stream")
    stats = df._jdf.queryExecution().optimizedPlan().collectLeaves().head().stats()
    assert int(str(stats.sizeInBytes())) == 4 * 16 * PAGE
    with pytest.raises(Exception, match=r"engine-streams: unknown option\(s\) bytesperpart"):
        spark.read.format("engine-streams").option("bytesPerPart", "1").load(d)
    with pytest.raises(Exception, match="option minPartitions must be at least 1"):
        spark.read.format("engine-streams").option("minPartitions", "0").load(d)


def test_a_journal_past_2_gib(tmp_path: object, spark: Any) -> None:
    """Offsets past 2**31: a sparse journal with pages of 1.1 GB, a stream whose records sit in the
    transactions at 1.1 GB and 2.2 GB, one wholly past 2**31 and one left open there; the padding and
    the zero page that ends it (3.3 GB of zeros) are read and checked in windows."""
    page = 1_100_000_000
    p = f"{tmp_path}/huge"
    header = codec.encode_file_header(page, 0)
    first, second = bytearray(), bytearray()
    codec.append_record(first, codec.INFO, 0, 0, 0, codec.encode_info(0, b"across"))
    codec.append_record(first, codec.DATA, 1, 0, 0, b"a" * 1000)
    codec.append_record(second, codec.DATA, 2, 0, 1, b"b" * 3000)
    codec.append_record(second, codec.EOS, 3, 0, 2, b"")
    codec.append_record(second, codec.INFO, 4, 1, 0, codec.encode_info(0, b"past"))
    codec.append_record(second, codec.DATA | codec.EOS, 5, 1, 0, b"c" * 70000)
    codec.append_record(second, codec.INFO, 6, 2, 0, codec.encode_info(0, b"open"))
    codec.append_record(second, codec.DATA, 7, 2, 0, b"d" * 10)
    with open(p, "wb") as f:
        f.write(header + codec.encode_mark(header))
        f.seek(page)
        f.write(first)
        f.seek(2 * page)
        f.write(second)
        f.truncate(4 * page)  # the zero page at 3 * page ends the journal
    df = spark.read.format("engine-streams").load(p)
    rows = sorted(map(tuple, df.selectExpr("stream", "ident", "status", "bytes", "md5(data)").collect()))
    assert rows == [(0, "across", "complete", 4000, hashlib.md5(b"a" * 1000 + b"b" * 3000).hexdigest()),
                    (1, "past", "complete", 70000, hashlib.md5(b"c" * 70000).hexdigest()),
                    (2, "open", "open", 10, hashlib.md5(b"d" * 10).hexdigest())]
    assert df.select("stream").count() == 3
    with open(p, "r+b") as f:  # a bad check code past 2**31: the journal ends before that transaction
        f.seek(2 * page + 30)
        f.write(b"!")
    assert sorted(map(tuple, df.select("stream", "status", "bytes").collect())) == [(0, "open", 1000)]
