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
