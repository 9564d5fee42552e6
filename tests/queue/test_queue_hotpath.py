"""The get() fast path against the general one: peeks, out-of-order confirms,
aborts, holes in the ids and the pending-bytes estimate must all still work."""

from __future__ import annotations

from engine.fs import make_dirs
from engine.queue import Queue
from stress.simfs import SimFS


def open_queue(**opts: object) -> Queue:
    sim = SimFS()
    make_dirs(sim, "/db")
    return Queue.open("/db", "q", fs=sim, checkpoint_interval=3600.0, **opts)  # type: ignore[arg-type]


def test_fast_path_interleaved_with_peek_abort_and_out_of_order_confirms() -> None:
    q = open_queue(sync=3600.0)
    q.put_many([b"%d" % i for i in range(1, 8)])
    r = q.reader()
    peeked = r.peek()
    assert peeked is not None and peeked.id == 1
    one, two = r.get(0), r.get(0)
    assert one is not None and two is not None and (one.id, two.id) == (1, 2)
    assert r.confirm(2) == 1  # out of order: head stays 0, 2 is done
    three = r.get(0)
    assert three is not None and three.id == 3 and r.head == 0
    assert r.abort(1) == 1
    again = r.get(0)
    assert again is not None and (again.id, again.data, again.error_count) == (1, b"1", 1)
    assert r.confirm([1, 3]) == 2 and r.head == 3 and not r.done_ids
    rest = []
    while (item := r.get(0)) is not None:
        rest.append(item.id)
        r.confirm(item.id)
    assert rest == [4, 5, 6, 7] and len(r) == 0
    q.close()


def test_backlog_bytes_is_the_payload_not_yet_confirmed() -> None:
    q = open_queue(sync=3600.0)
    q.put_many([b"x" * 100 for _ in range(100)])
    r = q.reader()
    first = r.get(0)
    assert first is not None
    r.confirm(first.id)

    def pending() -> int:
        readers = q.stats()["readers"]
        assert isinstance(readers, list) and len(readers) == 1
        value = readers[0]["backlog_bytes"]
        assert isinstance(value, int)
        return value

    before = pending()
    assert before == 99 * 100
    for _ in range(50):
        item = r.get(0)
        assert item is not None
        r.confirm(item.id)
    assert pending() == 49 * 100
    q.close()


def test_fast_path_respects_expiry() -> None:
    q = open_queue(sync=3600.0)
    q.put(b"stale", expire_at=1.0)  # long expired
    q.put(b"fresh")
    r = q.reader()
    item = r.get(0)
    assert item is not None and item.data == b"fresh" and r.expired_count == 1
    q.close()


def _journal(q: Queue, sim: SimFS) -> list[bytes]:
    files = sim.snapshot()
    return [files[path] for path in q.journal_files]


def test_put_many_writes_what_puts_one_by_one_write() -> None:
    """put_many stages a batch in one step (when it fits in the newest file): the
    same records, ids and expiries as puts one at a time, byte for byte."""
    items: list[object] = [b"a", bytearray(b"bb"), memoryview(b"ccc"), (b"dd", 2_000_000_000.5), b"", b"e" * 300]
    journals = []
    for many in (True, False):
        sim = SimFS()
        make_dirs(sim, "/db")
        q = Queue.open("/db", "q", fs=sim, checkpoint_interval=3600.0, sync=3600.0, clock=lambda: 1_700_000_000.0)
        if many:
            ids = q.put_many(items, expire_at=1_900_000_000)
        else:
            ids = [
                q.put(item[0], expire_at=item[1]) if isinstance(item, tuple) else q.put(item, expire_at=1_900_000_000)
                for item in items
            ]
        assert ids == [1, 2, 3, 4, 5, 6]
        q.sync()
        journals.append(_journal(q, sim))
        q.close()
    assert journals[0] == journals[1]


def test_put_many_at_a_rotation_goes_item_by_item() -> None:
    q = open_queue(sync=3600.0, journal_size=400)
    first = q.put_many([b"a" * 50, b"b" * 50])  # fits: one step
    more = q.put_many([b"c" * 60 for _ in range(10)])  # does not: rotations on the way
    assert first == [1, 2] and more == list(range(3, 13)) and len(q.journal_files) > 2
    r = q.reader()
    assert [(i.id, i.data[:1]) for i in r] == [(1, b"a"), (2, b"b")] + [(n, b"c") for n in range(3, 13)]
    q.verify()
    q.close()


def test_put_many_refuses_an_oversized_item_before_staging_any() -> None:
    q = open_queue(sync=3600.0, max_item_size=100)
    try:
        q.put_many([b"ok", b"x" * 101, b"y" * 150])
    except Exception as exc:
        assert "item of 101 bytes exceeds max_item_size 100" in str(exc)
    else:
        raise AssertionError("no error")
    assert q.put_many([b"fine"]) == [1]
    q.close()
