"""Where a journal ends: zeroed damage that looks like the end marker is an error.

A zero page at a transaction start is the format's end of journal; zeroed damage
in the middle of a closed journal looks the same.  The reader probes the later
page starts for an intact record numbered at or ahead of the next expected one
(evidence that the journal goes on) and raises CorruptFileError at the zeroed
region; records of an older lap (lower numbers) are not evidence.  The writer's
recovery cuts such records (a crash may leave them when a torn transaction's
first page is lost but a later one lands) so its own journals never hold them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engine.errors import CorruptFileError
from engine.fs import make_dirs
from engine.streams import StreamJournal, codec, read_streams
from engine.streams import reader as reader_mod
from stress.simfs import SimFS

PAGE = 512
PATH = "/db/j"


def _journal(sim: SimFS, pages: int = 64, record_size: int = 8192) -> StreamJournal:
    make_dirs(sim, "/db")
    return StreamJournal.open(PATH, size=pages * PAGE, page_size=PAGE, record_size=record_size, sync_delay=0, fs=sim)


def _stream(journal: StreamJournal, name: str, n: int) -> int:
    """Write and close one stream; returns the offset its transaction starts at."""
    start = journal.position
    with journal.open_stream(name) as st:
        st.write(bytes((i * 7 + len(name)) % 251 for i in range(n)))
    assert start % PAGE == 0
    return start


def _zero(sim: SimFS, offset: int, length: int) -> None:
    with sim.open(PATH, "w") as handle:
        handle.write_at(offset, bytes(length))


def _names(sim: SimFS) -> list[bytes]:
    return [s.ident for s in read_streams(PATH, sim) if s.complete]


def _build(sim: SimFS, sizes: list[int]) -> tuple[list[int], StreamJournal]:
    journal = _journal(sim)
    starts = [_stream(journal, f"s{i}", n) for i, n in enumerate(sizes)]
    return starts, journal


def test_clean_journal_reads_without_error() -> None:
    sim = SimFS()
    starts, journal = _build(sim, [100, 900, 50, 1300, 10])
    journal.close()
    assert _names(sim) == [f"s{i}".encode() for i in range(5)]
    assert len(starts) == 5


def test_zeroed_single_page_in_the_middle_is_an_error() -> None:
    sim = SimFS()
    starts, journal = _build(sim, [100, 100, 100, 100])
    journal.close()
    _zero(sim, starts[1], PAGE)  # exactly one whole transaction: a perfect end marker
    with pytest.raises(CorruptFileError) as info:
        _names(sim)
    assert info.value.offset == starts[1]
    assert str(starts[2]) in str(info.value)  # names where the journal goes on


def test_streams_ended_before_a_zeroed_region_are_read_before_the_error() -> None:
    """Every stream read whole before the damage is given, the last one included
    (its end record is the last before the zeroed page), then the error."""
    sim = SimFS()
    starts, journal = _build(sim, [100, 100, 100, 100])
    journal.close()
    _zero(sim, starts[2], PAGE)
    got: list[bytes] = []
    with pytest.raises(CorruptFileError) as info:
        got.extend(s.ident for s in read_streams(PATH, sim))
    assert info.value.offset == starts[2]
    assert got == [b"s0", b"s1"]


def test_zeroed_range_spanning_pages_is_an_error() -> None:
    sim = SimFS()
    starts, journal = _build(sim, [100, 1200, 300, 100, 100])
    journal.close()
    # From the start of s1 through the start of s3: s1, s2 and the page s3 starts on.
    _zero(sim, starts[1], starts[3] + PAGE - starts[1])
    with pytest.raises(CorruptFileError) as info:
        _names(sim)
    assert info.value.offset == starts[1]


def test_engine_verify_reports_a_zeroed_transaction_on_disk(tmp_path: Path) -> None:
    from engine.fs import default_fs
    from engine.streams.handler import HANDLER

    path = str(tmp_path / "j")
    journal = StreamJournal.open(path, size=32 * PAGE, page_size=PAGE, sync_delay=0)
    starts = [_stream(journal, f"d{i}", 200) for i in range(3)]
    journal.close()
    HANDLER.verify(default_fs(), path)
    with open(path, "r+b") as f:  # test code damaging a file on purpose
        f.seek(starts[1])
        f.write(bytes(PAGE))
    with pytest.raises(CorruptFileError) as info:
        HANDLER.verify(default_fs(), path)
    assert info.value.offset == starts[1]


def test_zeroed_first_page_of_a_long_transaction_is_an_error() -> None:
    """Zeros over the first page of a multi-page transaction: the next one still starts at a page."""
    sim = SimFS()
    starts, journal = _build(sim, [100, 2000, 100])
    journal.close()
    _zero(sim, starts[1], PAGE)
    with pytest.raises(CorruptFileError) as info:
        _names(sim)
    assert info.value.offset == starts[1]


def test_zeroing_part_of_the_last_transaction_is_a_reported_torn_tail(caplog: pytest.LogCaptureFixture) -> None:
    sim = SimFS()
    starts, journal = _build(sim, [100, 100, 700])
    journal.close()
    _zero(sim, starts[2], 64)  # the first record's header and more, not the whole page
    before = reader_mod.torn_scans
    with caplog.at_level(logging.WARNING, logger="engine.streams"):
        names = _names(sim)
    assert names == [b"s0", b"s1"]
    assert reader_mod.torn_scans == before + 1
    assert any("stopped at offset" in r.getMessage() for r in caplog.records)


def test_zeroing_the_whole_last_transaction_is_an_error() -> None:
    """The writer keeps a copy of one record of the last transaction in the
    file's last page: zeroing that transaction leaves the copy numbered ahead."""
    sim = SimFS()
    starts, journal = _build(sim, [100, 100, 100])
    end = journal.position
    journal.close()
    _zero(sim, starts[2], end + PAGE - starts[2])  # the transaction and its zero page
    with pytest.raises(CorruptFileError) as info:
        _names(sim)
    assert info.value.offset == starts[2]


def test_zeroing_the_last_transaction_and_the_copy_is_the_format_limit() -> None:
    """Zeros over both the last transaction and the last page: a shorter journal
    (nothing intact follows; documented)."""
    sim = SimFS()
    starts, journal = _build(sim, [100, 100, 100])
    end = journal.position
    journal.close()
    _zero(sim, starts[2], end - starts[2])
    _zero(sim, 63 * PAGE, PAGE)
    assert _names(sim) == [b"s0", b"s1"]


def test_wrapped_journal_with_old_lap_after_the_end_reads_cleanly() -> None:
    sim = SimFS()
    journal = _journal(sim, pages=16)
    names = []
    for i in range(19):  # 2 pages + the zero page each: wraps twice, ends early in a lap
        _stream(journal, f"w{i}", 600)
        names.append(f"w{i}".encode())
    assert journal.wraps >= 2
    end = journal.position
    next_global = journal.next_global
    journal.verify()
    journal.close()
    # Old-lap records (and the copy of the last transaction's smallest record)
    # sit at page starts after the end, numbered behind the next one: not damage.
    with sim.open(PATH) as handle:
        first = codec.decode_file_header(handle.read_at(0, 32)).first_global
        later = []
        for off in range(end + PAGE, 15 * PAGE, PAGE):
            rh = codec.decode_record_header(handle.read_at(off, 20))
            raw = handle.read_at(off, 28 + rh.length) if rh.type and off + 28 + rh.length <= 16 * PAGE else b""
            if raw and codec.record_check_ok(raw, 0, rh.length):
                later.append(rh.global_record)
    assert any(g < first for g in later) and all(g < next_global for g in later)
    got = _names(sim)
    assert got and got == names[-len(got) :]


def test_recovery_cuts_records_a_lost_first_page_leaves_behind(caplog: pytest.LogCaptureFixture) -> None:
    """A crash where a torn transaction's first page is lost but a later page lands
    (a disk that reorders writes) looks like damage to a reader; the writer's
    recovery cuts it as a torn tail, reports it, and the journal verifies."""
    sim = SimFS()
    _, journal = _build(sim, [100, 100])
    end = journal.position
    # The would-be next transaction: a long one whose second page starts with a record.
    torn = bytearray()
    g = journal.next_global
    journal.close()
    for i in range(3):
        codec.append_record(torn, codec.INFO, g + 2 * i, 9 + i, 0, codec.encode_info(0, b"t"))
        codec.append_record(torn, codec.DATA | codec.EOS, g + 2 * i + 1, 9 + i, 0, b"d" * 300)
        torn += codec.padding(len(torn), PAGE)
    with sim.open(PATH, "w") as handle:
        handle.write_at(end + PAGE, bytes(torn[PAGE:]))  # first page never landed
    with pytest.raises(CorruptFileError):
        _names(sim)
    with caplog.at_level(logging.WARNING, logger="engine.streams"):
        reopened = StreamJournal.open(PATH, fs=sim, sync_delay=0)
    assert any("zeroed 2 page(s)" in a.detail for a in reopened.recovery.of("cut"))
    reopened.verify()
    _stream(reopened, "after", 50)
    reopened.verify()
    reopened.close()
    assert _names(sim) == [b"s0", b"s1", b"after"]


def test_reset_scrubs_the_old_records() -> None:
    sim = SimFS()
    starts, journal = _build(sim, [100, 900, 100, 100])
    journal.close()
    reset = StreamJournal.open(PATH, reset=True, page_size=PAGE, fs=sim, sync_delay=0)
    _stream(reset, "new", 10)
    reset.verify()
    reset.close()
    assert _names(sim) == [b"new"]
    assert len(starts) == 4


def _raw_record(rtype: int, g: int, stream: int, record: int, data: bytes) -> bytes:
    """One record, byte by byte: five MSB-first words, data, CRC-64 (LSB first)."""
    import struct

    from streams_helpers import crc64_reference

    head = struct.pack(">IIIII", rtype, g, stream, record, len(data))
    return head + data + struct.pack("<Q", crc64_reference(head + data))


def _restarted_image() -> bytes:
    """A journal as the original server leaves it after a restart, built by hand:
    page 0 = its header (first global 0, NULs after it: no engine mark); the new
    run's one transaction at page 1 (stream "new": INFO, DATA|EOS, numbers 0-1),
    the zero page at page 2; then the old run's transactions at pages 3..6,
    numbered 5.. (ahead of the new run's next number, 2) -- stale, never erased."""
    import struct

    from streams_helpers import crc64_reference

    body = struct.pack(">8sIIII", b"journald", 2, PAGE, 0, 0)
    image = bytearray(16 * PAGE)
    image[:32] = body + struct.pack("<Q", crc64_reference(body))
    txn = _raw_record(1, 0, 0, 0, b"\0\0\0\0new") + _raw_record(6, 1, 0, 0, b"n" * 20)
    image[PAGE : PAGE + len(txn)] = txn
    g = 5
    for n in range(4):
        old = _raw_record(1, g, n, 0, b"\0\0\0\0" + f"old{n}".encode()) + _raw_record(6, g + 1, n, 0, b"o" * 300)
        at = (3 + n) * PAGE
        image[at : at + len(old)] = old
        g += 2
    return bytes(image)


def test_file_restarted_by_the_original_server() -> None:
    """The original numbers records from 0 again at each start and leaves the
    older ones past the end: read it as journal-dump does (to the zero page),
    and our writer's recovery scrubs them and marks page 0."""
    image = _restarted_image()
    sim = SimFS.from_image({"/j": image}, {"/"})
    assert [(s.ident, s.status, s.data) for s in read_streams("/j", sim)] == [(b"new", "complete", b"n" * 20)]
    # Asked to, a strict read reports the stale records as the journal going on.
    with pytest.raises(CorruptFileError):
        list(read_streams("/j", sim, strict_end=True))
    journal = StreamJournal.open("/j", fs=sim, sync_delay=0)
    assert any("zeroed" in a.detail for a in journal.recovery.of("cut"))
    journal.verify()
    journal.close()
    opened = sim.snapshot()["/j"]
    assert codec.has_mark(opened) and opened[:32] == image[:32]
    assert [(s.ident, s.status) for s in read_streams("/j", sim)] == [(b"new", "complete")]


def test_cli_reads_a_file_restarted_by_the_original_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    path = str(tmp_path / "j")
    Path(path).write_bytes(_restarted_image())
    assert main(["streams", "dump", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "stream          0 record          0 offset          0 init ident(3)='new'",
        "stream          0 record          0 offset          0 append bytes 20",
        "stream          0 record          1 offset         20 end",
    ]
    assert main(["verify", path]) == 0
    outdir = str(tmp_path / "out")
    assert main(["streams", "extract", path, "--out", outdir]) == 0
    assert [p.read_bytes() for p in Path(outdir).iterdir()] == [b"n" * 20]


def test_a_hole_in_a_marked_journal_is_still_reported() -> None:
    """The mark keeps the probe on for files engine wrote: zeroing a transaction
    start in the middle is an error, not an end."""
    sim = SimFS()
    starts, journal = _build(sim, [100, 900, 100, 100])
    journal.close()
    assert codec.has_mark(sim.snapshot()[PATH])
    _zero(sim, starts[1], PAGE)
    with pytest.raises(CorruptFileError):
        list(read_streams(PATH, sim))
