"""Exhaustive: every single-bit flip in every record of a small journal is detected."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import CorruptFileError
from engine.fs import make_dirs
from engine.streams import JournalScan, StreamJournal, codec
from stress.simfs import SimFS


def _small_journal() -> bytes:
    sim = SimFS()
    make_dirs(sim, "/db")
    journal = StreamJournal.open("/db/j", size=8 * 128, page_size=128, record_size=16, sync_delay=0, fs=sim)
    a = journal.open_stream("a")
    a.write(b"0123456789abcdefXYZ")  # one 16-byte DATA record out, 3 bytes buffered
    with journal.open_stream("b") as b:
        b.write(b"hi")
    c = journal.open_stream("c")
    c.write(bytes(20))
    c.abort()
    with journal.open_stream(""):
        pass  # INFO + EOS only
    a.close()
    journal.close()
    return sim.snapshot()["/db/j"]


def _scan(data: bytes) -> JournalScan:
    sim = SimFS.from_image({"/j": data}, {"/"})
    scan = JournalScan("/j", sim)
    scan.events = [e for e in scan]  # type: ignore[attr-defined]
    return scan


def test_every_bit_flip_in_every_record_is_detected(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="engine.streams")
    data = _small_journal()
    base = _scan(data)
    assert base.end is not None and base.end.clean
    events = [e for e in base.events if e.kind != "unfinished"]  # type: ignore[attr-defined]
    positions = sorted({e.position for e in events})
    assert len(positions) == 10  # a: INFO DATA ... every record of the journal
    flips = 0
    for pos in positions:
        length = codec.RECORD_OVERHEAD + codec.decode_record_header(data, pos).length
        before = [e for e in events if e.position < pos]
        for byte in range(pos, pos + length):
            for bit in range(8):
                damaged = bytearray(data)
                damaged[byte] ^= 1 << bit
                scan = _scan(bytes(damaged))
                assert scan.end is not None
                where = f"record at {pos}, byte {byte}, bit {bit}"
                assert not scan.end.clean, where
                assert scan.end.position == pos, where
                got = [e for e in scan.events if e.kind != "unfinished"]  # type: ignore[attr-defined]
                assert got == before, where
                flips += 1
    assert flips > 1500


def test_every_bit_flip_in_the_header_is_an_error() -> None:
    data = _small_journal()
    for byte in range(codec.FILE_HEADER_SIZE):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[byte] ^= 1 << bit
            with pytest.raises(CorruptFileError):
                _scan(bytes(damaged))


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=600), st.integers(0, 900))
def test_garbage_anywhere_after_the_header_never_crashes(garbage: bytes, at: int) -> None:
    """Arbitrary bytes over a valid journal: the scan ends (cleanly or at the damage),
    never with an untyped exception, and every event before the stop is unchanged."""
    data = bytearray(_small_journal())
    start = 128 + at
    data[start : start + len(garbage)] = garbage[: max(0, len(data) - start)]
    scan = _scan(bytes(data[: len(_small_journal())]))
    assert scan.end is not None
    original = _small_journal()
    base = _scan(original)

    def record_end(pos: int) -> int:
        return pos + codec.RECORD_OVERHEAD + codec.decode_record_header(original, pos).length

    events = [e for e in base.events if e.kind != "unfinished"]  # type: ignore[attr-defined]
    good = [e for e in events if record_end(e.position) <= start]
    got = [e for e in scan.events if e.kind != "unfinished"]  # type: ignore[attr-defined]
    assert got[: len(good)] == good
