"""Byte-level parity of the JVM engine-log reader (engine.spark.LogSource) and the Python one.

Both read the same golden, damaged and hostile logs and must agree record for
record and error for error (type, file, offset and words).  The JVM side runs
``engine.spark.LogDump`` (the connector's planner and reader without a Spark
session, one JVM per case); the Python side is ``engine.spark.logsource.LogReader``
without a session.  Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from dump_parity import DumpParity, poke

from engine.applog import AppendLog
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild, logfiles
from engine.spark.logsource import LogReader
from engine.spark.schemas import LOG_SCHEMA
from engine.spark.sink import ShardWriter, commit_job

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
T0 = 1_700_000_000_000_000_000
_PARITY = DumpParity("engine.spark.LogDump", LogReader, LOG_SCHEMA)
agree = _PARITY.agree


def write(path: str, n: int, *, segment_bytes: int = 1 << 20, sizes: Callable[[int], int] = lambda i: 10 + i % 7
          ) -> None:
    log = AppendLog.open(path, segment_bytes=segment_bytes)
    for i in range(n):
        log.append(bytes([65 + i % 26]) * sizes(i), flags=i % 5, time_ns=T0 + i * 1000)
    log.close()


def segs(path: str) -> list[logfiles.Segment]:
    return logfiles.list_segments(path)


def test_golden_worked_example(tmp_path: object) -> None:
    """The two records of docs/formats/applog.md's worked example."""
    d = f"{tmp_path}/golden"
    log = AppendLog.open(d, ttl=3600)
    log.append(b"hello", flags=0, time_ns=1_700_000_000_000_000_000)
    log.append(b"log!", flags=1, time_ns=1_700_000_000_000_001_000)
    log.close()
    rows = agree({"path": d})
    assert rows == ["golden\t0\t0\t1700000000000000\t1700000000000000000\t0\t68656c6c6f",
                    "golden\t0\t1\t1700000000000001\t1700000000000001000\t1\t6c6f6721"]


@pytest.mark.parametrize("opts", [
    {},
    {"batchRecords": "17", "minPartitions": "3"},
    {"recordsPerPartition": "50", "startingOffsets": '{"many": 33}', "endingOffsets": '{"many": 301}'},
    {"startingTimestamp": str((T0 + 120_000) // 1_000_000)},
])
def test_clean_multi_segment_log(tmp_path: object, opts: dict[str, str]) -> None:
    d = f"{tmp_path}/many"
    write(d, 400, segment_bytes=2048)
    assert len(segs(d)) > 3
    assert agree({"path": d, **opts})
    agree({"path": d, **opts}, ["index", "time"])


def test_sink_dataset_and_start_index(tmp_path: object) -> None:
    ds = f"{tmp_path}/ds"
    w = ShardWriter(ds, "j", "s0", segment_bytes=600)
    w.write(pa.array([b"rec%d" % i for i in range(90)]), T0 + np.arange(90) * 10)
    commit_job(ds, [w.finish()], overwrite=False)
    assert len(agree({"path": ds})) == 90
    shard = ds + "/" + logfiles.read_manifest(resolve(None), ds)[0]  # type: ignore[index]
    with resolve(None).open(shard + "/" + logfiles.START_FILE, OpenMode.CREATE) as h:
        h.write_at(0, b"42\n")
    assert len(agree({"path": ds})) == 48


def test_torn_tail_is_hidden(tmp_path: object) -> None:
    d = f"{tmp_path}/torn"
    write(d, 60)
    seg = segs(d)[-1]
    with resolve(None).open(seg.log_path, OpenMode.WRITE) as h:
        h.truncate(seg.end_offset - 3)
    assert len(agree({"path": d})) == 59


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
@pytest.mark.parametrize("where", ["sealed", "newest"])
def test_checksum_failure_in_the_middle(tmp_path: object, mode: str, where: str) -> None:
    d = f"{tmp_path}/crc"
    write(d, 300, segment_bytes=2048)
    found = segs(d)
    seg = found[0] if where == "sealed" else found[-1]
    entries = logfiles.entry_offsets(resolve(None), seg, 0, seg.count)
    poke(seg.log_path, entries[len(entries) // 2] + 16 + 2, b"\x00")
    rows = agree({"path": d, "mode": mode, "batchRecords": "16"})
    if mode == "FAILFAST":
        assert rows[-1].startswith("ERROR CorruptFileError: ") and "matching its checksum" in rows[-1]


@pytest.mark.parametrize("field,offset,value", [
    ("index", 8, (999).to_bytes(8, "little")),
    ("offset", 16, (5).to_bytes(8, "little", signed=True)),
    ("huge offset", 16, (1 << 40).to_bytes(8, "little", signed=True)),
    ("time", 0, (5).to_bytes(8, "little", signed=True)),
])
@pytest.mark.parametrize("columns", [None, ["index", "time"]])
def test_hostile_index_entries(tmp_path: object, field: str, offset: int, value: bytes,
                               columns: list[str] | None) -> None:
    d = f"{tmp_path}/idx"
    write(d, 80)
    seg = segs(d)[-1]
    poke(seg.idx_path, 16 + 24 * 45 + offset, value)  # inside a partition (two of 40)
    rows = agree({"path": d, "batchRecords": "32"}, columns)
    assert rows and rows[-1].startswith("ERROR ")


def test_record_time_disagrees_with_its_entry(tmp_path: object) -> None:
    d = f"{tmp_path}/time"
    write(d, 50)
    seg = segs(d)[-1]
    entries = logfiles.entry_offsets(resolve(None), seg, 0, seg.count)
    poke(seg.log_path, entries[20] + 8, (7).to_bytes(8, "little", signed=True))
    rows = agree({"path": d, "mode": "PERMISSIVE"})
    assert any(r.split("\t")[-1].startswith("CorruptFileError: ") for r in rows)


@pytest.mark.parametrize("suffix,offset,raw", [
    (".log", 0, b"XYZ"), (".log", 3, b"\x07"), (".idx", 0, b"IDY"), (".idx", 3, b"\x02"), (".crc", 0, b"CRX"),
])
def test_foreign_headers(tmp_path: object, suffix: str, offset: int, raw: bytes) -> None:
    d = f"{tmp_path}/hdr"
    write(d, 30)
    seg = segs(d)[-1]
    poke(seg.log_path[:-4] + suffix, offset, raw)
    rows = agree({"path": d})
    assert rows[-1].startswith("ERROR FormatError: ")


def test_options_errors_agree(tmp_path: object) -> None:
    d = f"{tmp_path}/opts"
    write(d, 5)
    agree({"path": d, "recordPerPartition": "5"})
    agree({"path": d, "batchRecords": "x"})
    agree({"path": d, "mode": "lenient"})
    agree({"path": d + "/nothing"})
    agree({"path": d, "startingOffsets": '{"other": 3}'})


@pytest.mark.parametrize("damage", ["first record", "last record", "bytes after", "entry time", "no idx", "short crc",
                                    "middle size"])
def test_sealed_segment_damage_is_pinpointed(tmp_path: object, damage: str) -> None:
    """A sealed segment failing the cheap check: both readers walk it and name the
    same file, offset and words (the store reader's full check)."""
    d = f"{tmp_path}/sealed"
    write(d, 200, segment_bytes=1024)
    seg = segs(d)[1]
    offsets = logfiles.entry_offsets(resolve(None), seg, 0, seg.count)
    crc = seg.log_path[:-4] + ".crc"
    fs = resolve(None)
    if damage == "first record":
        poke(seg.log_path, offsets[0] + 16, b"\xee")
    elif damage == "last record":
        poke(seg.log_path, offsets[-1] + 17, b"\xee")
    elif damage == "bytes after":
        poke(seg.log_path, seg.end_offset, b"\x01\x02\x03")
    elif damage == "entry time":
        poke(seg.idx_path, 16, (5).to_bytes(8, "little", signed=True))
    elif damage == "no idx":
        os.remove(seg.idx_path)
    elif damage == "short crc":
        with fs.open(crc, OpenMode.WRITE) as h:
            h.truncate(h.size() - 4)
    else:  # a size field in the middle that breaks the chain, checksum and all
        poke(seg.log_path, offsets[len(offsets) // 2], (3).to_bytes(4, "little"))
        poke(seg.log_path, offsets[0] + 16, b"\xee")
    rows = agree({"path": d})
    assert len(rows) == 1 and rows[0].startswith("ERROR CorruptFileError: ")


@pytest.mark.parametrize("damage", ["cut to header", "cut mid-entry", "zeroed last entry", "zeroed entry",
                                    "flipped last entry", "flipped entry", "cut and a bad record in the middle"])
def test_damaged_newest_index_is_reconciled(tmp_path: object, damage: str) -> None:
    """A damaged newest index (the .log and .crc whole), no writer live: both readers
    show the segment as the writer's next open repairs it (recovery.scan_segment on
    the files in memory), record for record, or fail with the same error."""
    d = f"{tmp_path}/newest"
    write(d, 300, segment_bytes=2048)
    found = segs(d)
    seg = found[-1]
    assert len(found) > 2 and seg.count > 12
    total = found[-1].stop_index
    offsets = logfiles.entry_offsets(resolve(None), seg, 0, seg.count)
    last = 16 + 24 * (seg.count - 1)
    with resolve(None).open(seg.idx_path, OpenMode.WRITE) as h:
        if damage == "cut to header":
            h.truncate(16)
        elif damage == "cut mid-entry":
            h.truncate(16 + 24 * 7 + 11)
        elif damage == "zeroed last entry":
            h.write_at(last, bytes(24))
        elif damage == "zeroed entry":
            h.write_at(16 + 24 * 5, bytes(24))
        elif damage == "flipped last entry":
            h.write_at(last + 2, b"\x5a")
        elif damage == "flipped entry":
            h.write_at(16 + 24 * 5 + 17, b"\x01")
        else:
            h.truncate(16)
    if damage == "cut and a bad record in the middle":
        poke(seg.log_path, offsets[6] + 16 + 1, b"\xee")
    rows = agree({"path": d, "batchRecords": "8"})
    agree({"path": d, "startingTimestamp": str((T0 + 1000 * (total - 5)) // 1_000_000)}, ["index", "time"])
    if damage.startswith(("cut to", "cut mid", "zeroed last", "flipped last")):
        assert len(rows) == total  # every record the writer shows, not the agreeing entries only
    if damage == "cut and a bad record in the middle":
        assert len(rows) == 1 and rows[0].startswith("ERROR CorruptFileError: ")


def test_damaged_newest_index_with_a_live_writer(tmp_path: object) -> None:
    """With a writer holding the log's lock (AppendLog.open in this process) the
    index entries that agree are shown, nothing rebuilt: both readers alike (the JVM
    sees the writer's flock through /proc/locks)."""
    d = f"{tmp_path}/live"
    write(d, 60)
    seg = segs(d)[-1]
    with AppendLog.open(d) as writer:
        with resolve(None).open(seg.idx_path, OpenMode.WRITE) as h:
            h.truncate(16 + 24 * 5 + 9)
        rows = agree({"path": d})
        assert writer is not None and len(rows) == 5
    assert len(agree({"path": d})) == 60  # no writer live now: every record again
