"""The batch readers' columnar decoder, :func:`engine.queue.codec.decode_columns`,
against the readers' own decoder :func:`engine.queue.codec.decode_batch` (the same
PUTs vouched for, the same errors at the same offsets), and
:class:`engine.queue.cursor.ColumnCursor` against
:class:`engine.queue.cursor.JournalCursor` on real queue directories, whole and
damaged (with whichever decoder the cursor chose).  Its compiled twin is compared
with it in ``test_queue_native.py`` (run under the sanitizers too).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journal_helpers import journal_body as _body

from engine.errors import EngineError
from engine.fs import resolve
from engine.queue import codec, cursor


def _puts(c: codec.PutColumns) -> list[codec.Put]:
    """The columns as Put tuples (what the item readers deliver)."""
    ids, adds = memoryview(c.ids).cast("q"), memoryview(c.add_times).cast("q")
    expires, errors = memoryview(c.expire_times).cast("q"), memoryview(c.error_counts).cast("i")
    offsets = memoryview(c.offsets).cast("q")
    assert len(ids) == c.items == len(c.has_expiry) == len(offsets) - 1 and offsets[0] == 0
    assert offsets[-1] == len(c.data)
    return [
        codec.Put(ids[k], c.data[offsets[k] : offsets[k + 1]], adds[k], expires[k] if c.has_expiry[k] else None,
                  errors[k])
        for k in range(c.items)
    ]


batches_st = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=4)


# -- the reference against the readers' decoder -------------------------------------------------


def _scan_batches(buf: bytes, checked: bool) -> tuple[list[codec.Put], Any]:
    """What the readers' decoder vouches for, read from 0 as RecordScanner does:
    the PUTs, and (stop, offset, unverified bytes) or the error raised."""
    out: list[codec.Put] = []
    got: list[codec.Put] = []
    pos, crc, covered = 0, 0 if checked else None, 0
    try:
        while True:
            pos, stop, verified, new_crc, covered = codec.decode_batch(buf, pos, out, crc, covered, max_records=3)
            crc = new_crc if checked else None
            got += out[:verified]
            del out[:verified]
            if stop != "more":
                return got, (stop, pos, covered)
    except codec.BadRecord as exc:
        return got, (type(exc), str(exc), exc.offset)


def _scan_columns(buf: bytes, checked: bool, max_items: int) -> tuple[list[codec.Put], Any]:
    """The same with decode_columns, each call from the previous one's ``end``."""
    got: list[codec.Put] = []
    pos = 0
    try:
        while True:
            c = codec.decode_columns(buf, pos, checked, max_items)
            run = _puts(c)
            assert c.ascending == all(a.xid < b.xid for a, b in pairwise(run))
            got += run
            pos = c.end
            if c.stop != "more":
                return got, (c.stop, c.scanned, c.scanned - c.end)
    except codec.BadRecord as exc:
        return got, (type(exc), str(exc), exc.offset)


def _same_as_the_readers(buf: bytes, checked: bool, max_items: int) -> None:
    want, want_end = _scan_batches(buf, checked)
    got, got_end = _scan_columns(buf, checked, max_items)
    assert got_end == want_end, buf.hex()
    if isinstance(want_end[0], type):
        # On damage the readers' decoder may drop the PUTs its last call decoded; the
        # columns give every PUT vouched for before the damage, then the same error.
        assert got[: len(want)] == want, buf.hex()
    else:
        assert got == want, buf.hex()


@settings(max_examples=150, deadline=None)
@given(batches_st, st.booleans(), st.booleans(), st.integers(1, 9), st.data())
def test_the_same_puts_and_ends_as_the_readers_decoder(
    batches: list[list[bytes]], expiry: bool, others: bool, max_items: int, data: st.DataObject
) -> None:
    body = _body(batches, expiry, others)
    cut = data.draw(st.integers(0, len(body)))
    _same_as_the_readers(body[:cut], True, max_items)
    _same_as_the_readers(body[:cut], False, max_items)


def test_the_same_errors_at_the_same_offsets_as_the_readers_decoder_on_every_damaged_byte() -> None:
    body = _body([[b"alpha", b"beta"], [b""], [b"gamma" * 9, b"d"]], True, True, errors=5)
    body += codec.encode_read_head(3) + bytes(5)
    for offset in range(len(body)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(body)
            damaged[offset] ^= mask
            _same_as_the_readers(bytes(damaged), True, 2)
            _same_as_the_readers(bytes(damaged), False, 65536)


def test_a_run_ends_at_a_check_and_later_records_wait_for_theirs() -> None:
    body = _body([[b"a", b"b"], [b"c"]], False)
    first_end = 9 + 2 * 26 + 9  # the empty CHECK, two PUTs of 1 byte, their CHECK
    assert len(body) == first_end + 26 + 9
    c = codec.decode_columns(body[:-9], 0, True)  # the last CHECK not written yet
    assert (c.items, c.stop, c.end, c.scanned) == (2, "end", first_end, len(body) - 9)
    assert [p.xid for p in _puts(c)] == [1, 2]
    whole = codec.decode_columns(body, 0, True, max_items=1)  # batches are never split
    assert (whole.items, whole.stop, whole.end, whole.scanned) == (2, "more", first_end, first_end)
    rest = codec.decode_columns(body, whole.end, True)
    assert (rest.items, rest.stop, rest.end) == (1, "end", len(body))
    assert codec.decode_columns(body, 0, False, max_items=1).items == 1  # without CHECKs: any PUT


# -- the column cursor against the item cursor, on queue directories -----------------------------


def _queue(tmp_path: Any, journal_size: int = 2048) -> str:
    from engine.queue import Item, Queue

    d = str(tmp_path / "q")
    os.makedirs(d, exist_ok=True)
    # One write per put call and a fixed clock: the same files, byte for byte,
    # every time.
    q = Queue.open(d, "jobs", sync="always", journal_size=journal_size, clock=lambda: 1_700_000_000.0)
    q.put_many([b"item-%d" % i * (i % 5) for i in range(120)])
    q.put_many([(b"exp-%d" % i, 4_000_000_000.0 + i) for i in range(30)])
    for k in range(20):
        q.put_moved(Item(0, b"moved-%d" % k, 1_700_000_000_000 + k, None if k % 2 else 4_100_000_000_000, k % 4 + 1))
    q.put(b"big" * 3000)
    q.close()
    return d


def _items(make: Callable[[], Any], read: Callable[[Any], Any]) -> tuple[list[codec.Put], Any]:
    got: list[codec.Put] = []
    cur = make()
    try:
        while (batch := read(cur)) is not None:
            got += batch
        return got, None
    except EngineError as exc:
        return got, (type(exc), str(exc))
    finally:
        cur.close()


def _both_cursors(d: str, after_id: int) -> tuple[tuple[list[codec.Put], Any], tuple[list[codec.Put], Any]]:
    def source() -> cursor.PollingSource:
        return cursor.PollingSource(resolve(None), d, "jobs", 0.001)

    def one_by_one(cur: cursor.JournalCursor) -> list[codec.Put] | None:
        put = cur.next()
        return None if put is None else [put]

    def runs(cur: cursor.ColumnCursor) -> list[codec.Put] | None:
        got = cur.next_columns()
        return None if got is None else _puts(got[0])[got[1] :]

    items = _items(lambda: cursor.JournalCursor(source(), after_id), one_by_one)
    columns = _items(lambda: cursor.ColumnCursor(source(), after_id), runs)
    return items, columns


@pytest.mark.parametrize("after_id", [0, 1, 57, 150, 170, 171, 500])
def test_the_column_cursor_reads_what_the_item_cursor_reads(tmp_path: Any, after_id: int) -> None:
    d = _queue(tmp_path)
    assert len([f for f in os.listdir(d) if f.startswith("jobs.")]) > 5  # several journal files
    items, columns = _both_cursors(d, after_id)
    assert items[1] is None and columns == items
    assert [p.xid for p in items[0]] == list(range(after_id + 1, 172))
    if after_id < 150:  # the moved items, with their error counts and expiries
        assert {p.error_count for p in items[0]} == {0, 1, 2, 3, 4}
        assert len({p.expire_time for p in items[0]}) > 10


def test_the_column_cursor_reads_big_items_across_its_chunks(tmp_path: Any, monkeypatch: Any) -> None:
    d = _queue(tmp_path, journal_size=1 << 20)
    monkeypatch.setattr(cursor.ColumnCursor, "chunk", 100)  # every run spans many reads
    monkeypatch.setattr(cursor.ColumnCursor, "max_items", 7)
    items, columns = _both_cursors(d, 0)
    assert items[1] is None and columns == items and len(items[0]) == 171


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(0, 2**32), st.sampled_from([0x01, 0x40, 0xFF]))
def test_the_column_cursor_raises_what_the_item_cursor_raises_on_damage(
    tmp_path_factory: Any, which: int, where: int, flip: int
) -> None:
    """The damage is drawn before the queue is made and mapped onto its files
    (file ``which`` modulo their number, byte ``where`` modulo its size): what
    Hypothesis draws never depends on the files, so a run that wrote them
    differently cannot make it report a flaky strategy."""
    d = _queue(tmp_path_factory.mktemp("damage"))
    files = sorted(f for f in os.listdir(d) if f.startswith("jobs.") and f.split(".")[1].isdigit())
    name = files[which % len(files)]
    path = os.path.join(d, name)
    offset = where % os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ flip]))
    items, columns = _both_cursors(d, 0)
    assert columns[1] == items[1], (name, offset)
    # The item cursor's decoder may drop the PUTs its last call decoded before the
    # damage; the column cursor gives all of them, and never any other.
    assert columns[0][: len(items[0])] == items[0]
    if items[1] is not None:
        assert len(columns[0]) <= 171
