"""Byte-level parity of the JVM stream journal decoder (engine.spark.StreamCodec) and the Python reader.

Both read the same golden, damaged (truncated, flipped bytes, torn transaction)
and hostile journals and must agree stream for stream and error for error (type,
file, offset and words), and on where and why the scan stopped.  The JVM side runs
``engine.spark.StreamDump`` (one JVM per case); the Python side is
:meth:`engine.streams.StreamJournal.open_reader`'s scan.  Skipped where the
connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from typing import Any

import pytest

from engine.errors import EngineError
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild
from engine.streams import codec
from engine.streams.journal import StreamJournal

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
PAGE = 512
JVM_SOURCE = "engine.spark.StreamSource"


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


def jvm_dump(path: str) -> list[str]:
    """What the JVM decoder gives (engine.spark.StreamDump)."""
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    java = jvmbuild._tool("java") or "java"
    done = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", cp, "engine.spark.StreamDump", path],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def agree(path: str) -> list[str]:
    py = python_dump(path)
    assert jvm_dump(path) == py
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


def poke(path: str, offset: int, raw: bytes) -> None:
    with resolve(None).open(path, OpenMode.WRITE) as h:
        h.write_at(offset, raw)


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


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED", "PERMISSIVE"])
def test_jvm_source_gives_the_python_sources_rows(tmp_path: object, spark: Any, mode: str) -> None:
    """The JVM source (not registered yet) and the Python engine-streams source on the same journals,
    a torn one included: same rows in every mode, pruned reads included."""
    d = f"{tmp_path}/d"
    os.makedirs(d)
    journal(f"{d}/a")
    journal(f"{d}/b", streams=5)
    journal(f"{d}/c")
    poke(f"{d}/c", 2 * PAGE + 10, b"\xff" * 20)  # torn: the streams before it
    if mode != "FAILFAST":  # a zeroed region in the middle: damage (dropped, or one _corrupt_record row)
        journal(f"{d}/e")
        poke(f"{d}/e", PAGE, bytes(PAGE))
    for cols in (None, ["stream", "status"], ["journal", "bytes"]):
        frames = [spark.read.format(f).option("mode", mode).load(d) for f in ("engine-streams", JVM_SOURCE)]
        if cols is not None:
            frames = [f.select(*cols) for f in frames]
        py, jvm = (sorted(map(tuple, f.collect()), key=repr) for f in frames)
        assert jvm == py and py


def test_jvm_source_fails_on_anomalies_as_python_does(tmp_path: object, spark: Any) -> None:
    p = f"{tmp_path}/j"
    body = bytearray()
    codec.append_record(body, codec.DATA, 0, 5, 0, b"orphan")
    with open(p, "wb") as f:
        f.write(codec.encode_header_page(PAGE, 0) + bytes(body) + codec.padding(len(body), PAGE) + bytes(4 * PAGE))
    errors = []
    for fmt in ("engine-streams", JVM_SOURCE):
        with pytest.raises(Exception) as info:
            spark.read.format(fmt).load(p).collect()
        errors.append(str(info.value))
    assert all("records consistent with their streams" in e and "DATA for a stream not open" in e for e in errors)
