"""Readers of a live journal: a writer busy in it (wrapping too) is never damage.

The original journald reader reads what is committed; a transaction being
written, a lap being started, or the copy of a record at the file's end landing
while a reader probes past the end must never make a read fail or return data
that was not written.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from engine.streams import StreamJournal, read_streams

PAGE = 512


def _data(ident: bytes) -> bytes:
    """What stream ``ident`` holds: derived from its name, so a reader can check it."""
    n = int(ident.split(b"-")[1]) % 1500 + 1
    seed = hashlib.sha256(ident).digest()
    return (seed * (n // len(seed) + 1))[:n]


def _writer(journal: StreamJournal, stop: threading.Event, done: list[int]) -> None:
    i = 0
    while not stop.is_set():
        ident = f"s-{i}".encode()
        with journal.open_stream(ident) as st:
            st.write(_data(ident))
        i += 1
        done[0] = i


def _read_live(path: str, pages: int, reads: int, min_wraps: int = 0) -> tuple[int, int, list[str]]:
    journal = StreamJournal.open(path, size=pages * PAGE, page_size=PAGE, sync_delay=0)
    stop = threading.Event()
    done = [0]
    writer = threading.Thread(target=_writer, args=(journal, stop, done))
    writer.start()
    errors: list[str] = []
    complete = 0
    try:
        done_reads = 0
        # At least ``reads`` reads, and on until the writer has wrapped ``min_wraps``
        # times (counted, not timed; bounded in case the writer stalls).
        while done_reads < reads or (journal.wraps < min_wraps and done_reads < 100 * reads):
            done_reads += 1
            try:
                for st in read_streams(path):
                    if st.complete:
                        complete += 1
                        if st.data != _data(st.ident):
                            errors.append(f"stream {st.ident!r}: wrong data")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        stop.set()
        writer.join()
        wraps = journal.wraps
        journal.close()
    return wraps, complete, errors


def test_readers_of_a_busy_journal_never_fail(tmp_path: Path) -> None:
    _wraps, complete, errors = _read_live(str(tmp_path / "j"), pages=2048, reads=300)
    assert errors == []
    assert complete > 0


def test_readers_of_a_journal_that_wraps_never_fail(tmp_path: Path) -> None:
    wraps, _complete, errors = _read_live(str(tmp_path / "j"), pages=16, reads=600, min_wraps=20)
    assert errors == []
    assert wraps > 0
