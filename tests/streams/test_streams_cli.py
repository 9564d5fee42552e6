"""CLI tools (dump / extract / inspect / verify) and compatibility with files
written the way the original journald writes them."""

from __future__ import annotations

import os
import sys

import pytest
from streams_helpers import OriginalWriter

from engine.cli import main
from engine.fs import make_dirs
from engine.streams import StreamJournal, codec, read_events, read_streams
from stress.simfs import SimFS


def _make(path: str) -> None:
    with StreamJournal.open(path, size=256 * 1024, page_size=4096) as journal:
        with journal.open_stream("first") as s:
            s.write(b"a" * 10_000)
        aborted = journal.open_stream("second")
        aborted.write(b"b" * 9000)
        aborted.abort()
        with journal.open_stream("third") as s:
            s.write(b"c")
        left = journal.open_stream("left")
        left.write(b"d" * 9000)
        journal.sync()
        # Leave "left" open in the file: copy it before close() aborts it.
        with open(path, "rb") as f:
            snapshot = f.read()
    with open(path, "wb") as f:
        f.write(snapshot)


def test_dump_lines(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "j")
    _make(path)
    assert main(["streams", "dump", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "stream          0 record          0 offset          0 init ident(5)='first'",
        "stream          0 record          0 offset          0 append bytes 8192",
        "stream          0 record          1 offset       8192 append bytes 1808",
        "stream          0 record          2 offset      10000 end",
        "stream          1 record          0 offset          0 init ident(6)='second'",
        "stream          1 record          0 offset          0 append bytes 8192",
        "stream          1 record          1 offset       8192 abort",
        "stream          2 record          0 offset          0 init ident(5)='third'",
        "stream          2 record          0 offset          0 append bytes 1",
        "stream          2 record          1 offset          1 end",
        "stream          3 record          0 offset          0 init ident(4)='left'",
        "stream          3 record          0 offset          0 append bytes 8192",
        "stream          3 record          1 offset       8192 open (no end before the end of the journal)",
    ]


def test_extract_to_directory_and_program(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(tmp_path)
    path = os.path.join(base, "j")
    _make(path)
    out = os.path.join(base, "out")
    assert main(["streams", "extract", path, "--out", out]) == 0
    assert sorted(os.listdir(out)) == ["0000000000-0-first", "0000000002-0-third"]
    with open(os.path.join(out, "0000000000-0-first"), "rb") as f:
        assert f.read() == b"a" * 10_000
    log = os.path.join(base, "log")
    script = (
        f"import sys; n = len(sys.stdin.buffer.read()); "
        f"open({log!r}, 'a').write(sys.argv[1] + ' ' + sys.argv[2] + ' ' + str(n) + '\\n')"
    )
    assert main(["streams", "extract", path, "--", sys.executable, "-c", script]) == 0
    with open(log) as f:
        assert f.read().splitlines() == ["first 0 10000", "third 0 1"]
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert main(["streams", "extract", path, "--", *failing]) == 1


def test_inspect_and_verify(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(tmp_path)
    path = os.path.join(base, "j")
    _make(path)
    assert main(["inspect", path]) == 0
    text = capsys.readouterr().out
    assert "journald" in text and "2 / 1 / 1" in text and "clean" in text
    assert main(["verify", path]) == 0
    assert "1 stream(s) left open" in " ".join(capsys.readouterr().out.split())
    # A torn transaction: verify notes it (a writer cuts it on open).
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        end = [e.position for e in read_events(path) if e.kind == "append"][-1]
        data[end + 25] ^= 0xFF
        f.seek(0)
        f.write(data)
    assert main(["verify", path]) == 0
    assert "torn transaction" in " ".join(capsys.readouterr().out.split())
    foreign = os.path.join(base, "foreign")
    with open(foreign, "wb") as f:
        f.write(b"journalX" + bytes(100))
    assert main(["inspect", foreign]) == 1
    truncated = os.path.join(base, "short")
    with open(path, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read(20))
    assert main(["inspect", truncated]) == 2
    assert "expected a 32-byte journald header" in " ".join(capsys.readouterr().err.split())


def _replay(writer: OriginalWriter, journal: StreamJournal) -> None:
    """The same connections through the original's writer and ours."""
    streams = {}
    script = [
        ("open", 0, b"alpha"),
        ("data", 0, b"A" * 20_000),
        ("open", 1, b"beta"),
        ("data", 1, b"B" * 5000),
        ("end", 1, b""),
        ("data", 0, b"a" * 3000),
        ("end", 0, b""),
        ("open", 2, b"gamma"),
        ("data", 2, b"G" * 9000),
        ("abort", 2, b""),
        ("open", 3, b""),
        ("end", 3, b""),
        ("open", 4, b"delta"),
        ("data", 4, b"D" * 8192),
        ("end", 4, b""),
    ]
    for op, number, arg in script:
        if op == "open":
            writer.connect(number, arg)
            streams[number] = journal.open_stream(arg)
        elif op == "data":
            writer.data(number, arg)
            streams[number].write(arg)
        elif op == "end":
            writer.end(number)
            writer.sync()
            streams[number].close()
        elif op == "abort":
            writer.abort(number)
            streams[number].abort()


def test_byte_identical_to_the_original_writer() -> None:
    page, size = 4096, 64 * 4096
    writer = OriginalWriter(page, size)
    sim = SimFS()
    make_dirs(sim, "/db")
    journal = StreamJournal.open("/db/j", size=size, page_size=page, sync_delay=0, fs=sim)
    _replay(writer, journal)
    ours = sim.snapshot()["/db/j"]
    # Identical but for the last page(s): ours holds a copy of one record of the
    # last transaction there, past the end, for the damage check (the original
    # leaves them alone; its reader never looks past the zero page).  Copies from
    # earlier commits may remain further on: all numbered behind the end.
    theirs = bytes(writer.file)
    # And for engine's 16-byte mark after the header in page 0 (the original
    # writes NULs there; its reader never looks).
    assert theirs[32:48] == bytes(16)
    assert ours[32:48] == codec.encode_mark(ours[:32]) == codec.encode_mark(theirs[:32])
    ours = ours[:32] + bytes(16) + ours[48:]
    first_diff = next(i for i in range(size) if ours[i] != theirs[i])
    at = first_diff // page * page
    assert at >= size - 4 * page and theirs[at:] == bytes(size - at)
    echo = codec.decode_record_header(ours, at)
    assert codec.record_check_ok(ours, at, echo.length)
    assert ours.count(ours[at : at + 28 + echo.length]) >= 2  # it is in the journal too
    journal.close()


def test_reads_original_file_with_short_tail_transaction() -> None:
    """A transaction ending 1..19 bytes before a page end (the original reader
    then skips a page too far; we do not): the next transaction is read."""
    page = 512
    writer = OriginalWriter(page, 16 * page)
    writer.connect(0, b"x")
    # INFO (28 + 5) + DATA|EOS (28 + n) should end 10 bytes before the page end.
    n = page - 10 - 33 - 28
    writer.data(0, b"q" * n)
    writer.end(0)
    writer.sync()
    assert (writer.pos - page) == page  # the next transaction starts on page 2
    writer.connect(1, b"y")
    writer.data(1, b"next")
    writer.end(1)
    writer.sync()
    sim = SimFS.from_image({"/j": bytes(writer.file)}, {"/"})
    got = {s.ident: (s.status, s.data) for s in read_streams("/j", sim)}
    assert got == {b"x": ("complete", b"q" * n), b"y": ("complete", b"next")}
    # And our writer continues such a file correctly.
    journal = StreamJournal.open("/j", fs=sim)
    assert not journal.recovery.repaired
    with journal.open_stream("z") as s:
        s.write(b"ours")
    journal.verify()
    journal.close()
    assert {s.ident for s in read_streams("/j", sim)} == {b"x", b"y", b"z"}


def test_inconsistent_records_fail_verify(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    """Valid check codes but nonsense for the streams: reported, and verify fails."""
    from engine.streams import codec

    page = 512
    data = bytearray(codec.encode_header_page(page, 0))
    txn = codec.encode_record(codec.DATA, 0, 5, 0, b"orphan")  # DATA for a stream never opened
    txn += codec.encode_record(codec.INFO, 1, 6, 0, codec.encode_info(0, b"s"))
    txn += codec.encode_record(codec.DATA, 2, 6, 3, b"bad")  # record number 3, expected 0
    data += txn + codec.padding(len(txn), page) + bytes(page) * 3
    path = os.path.join(str(tmp_path), "j")
    with open(path, "wb") as f:
        f.write(data)
    scan = read_events(path)
    kinds = [(e.kind, e.stream) for e in scan]
    assert kinds == [("init", 6), ("abort", 6)]
    assert len(scan.anomalies) == 2 and scan.end is not None and scan.end.clean
    assert main(["verify", path]) == 2
    assert "FAILED" in capsys.readouterr().err


def test_dump_and_extract_refuse_a_directory(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "journal")
    os.mkdir(path)
    assert main(["streams", "dump", path]) == 1  # an OSError: one line, exit 1, as everywhere
    assert main(["streams", "extract", path, "--out", os.path.join(str(tmp_path), "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("is a directory") == 2 and "Traceback" not in err
    assert not os.path.exists(os.path.join(str(tmp_path), "out"))
