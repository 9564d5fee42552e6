"""Fault injection: after an injected I/O failure the journal refuses writes
(PoisonedError) until reopened, and the reopened journal is clean."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from engine.errors import PoisonedError
from engine.fs import make_dirs
from engine.streams import StreamJournal, codec, read_streams
from stress.faults import FaultyFS
from stress.simfs import SimFS

PAGE = 512


def _base_image() -> Any:
    sim = SimFS()
    make_dirs(sim, "/db")
    StreamJournal.open("/db/j", size=32 * PAGE, page_size=PAGE, record_size=64, fs=sim).close()
    return sim.durable_image()


def _lap(fs: Any) -> int:
    with fs.open("/db/j") as handle:
        return codec.decode_file_header(handle.read_at(0, 32)).first_global


def _workload(journal: StreamJournal, acked: dict[bytes, bytes], laps: dict[bytes, int], inner: Any) -> None:
    for i in range(6):
        ident = f"s{i}".encode()
        payload = bytes([i]) * (90 * i + 10)
        with journal.open_stream(ident) as s:
            s.write(payload)
        acked[ident] = payload
        laps[ident] = _lap(inner)
    # Force a wrap or two with bigger streams in a small journal.
    for i in range(4):
        ident = f"big{i}".encode()
        payload = bytes([100 + i]) * 3000
        with journal.open_stream(ident) as s:
            for k in range(0, len(payload), 500):
                s.write(payload[k : k + 500])
        acked[ident] = payload
        laps[ident] = _lap(inner)


@pytest.mark.parametrize("persistent", [False, True])
def test_fault_sweep(persistent: bool) -> None:
    image = _base_image()
    failures = 0
    n = 1
    while True:
        inner = image.fs()
        ffs = FaultyFS(inner, fail_at=n, errno=errno.EIO, persistent=persistent)
        acked: dict[bytes, bytes] = {}
        laps: dict[bytes, int] = {}
        journal = None
        failed = False
        try:
            journal = StreamJournal.open("/db/j", record_size=64, sync_delay=0, fs=ffs)
            _workload(journal, acked, laps, inner)
        except (OSError, PoisonedError):
            failed = True
        if not failed:
            assert journal is not None
            journal.close()
            break
        failures += 1
        if journal is not None:
            # Poisoned: every further write is refused, whatever the stream.
            with pytest.raises(PoisonedError):
                s = journal.open_stream("after")
                s.write(b"x" * 200)
                s.close()
            with pytest.raises(PoisonedError):
                journal.sync()
            journal.close()  # closing a poisoned journal does not raise
        # Reopen on the same (fault-free) disk: clean, and every acknowledged stream is there.
        reopened = StreamJournal.open("/db/j", record_size=64, sync_delay=0, fs=inner)
        reopened.verify()
        got = {s.ident: s for s in read_streams("/db/j", inner)}
        lap = _lap(inner)
        for ident, payload in acked.items():
            if laps[ident] != lap:
                continue  # a later wrap overwrote that lap (the journal is a ring)
            assert ident in got and got[ident].status == "complete", (n, ident)
            assert got[ident].data == payload[got[ident].start_offset :]
        assert not acked or laps[list(acked)[-1]] != lap or list(acked)[-1] in got
        with reopened.open_stream("again") as s:
            s.write(b"ok")
        reopened.verify()
        reopened.close()
        assert {s.ident: s.data for s in read_streams("/db/j", inner)}[b"again"] == b"ok"
        n += 1
        assert n < 500
    assert failures >= 10
