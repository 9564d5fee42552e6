"""Recovery's redo writes runs of back-to-back ranges as one vectored write:
the same bytes at the same offsets in the same order as a write per op."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.fs import OpenMode, resolve
from engine.pages import codec
from engine.pages.recovery import StoreState, redo, write_runs

writes_st = st.lists(
    st.tuples(st.integers(0, 300), st.binary(min_size=0, max_size=40)),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(writes=writes_st, chain=st.booleans())
def test_write_runs_equals_one_write_per_range(tmp_path_factory: object, writes: list[tuple[int, bytes]],
                                               chain: bool) -> None:
    if chain:  # mostly back to back, as a transaction's pages are
        at, chained = writes[0][0] if writes else 0, []
        for i, (off, data) in enumerate(writes):
            chained.append((off if i % 4 == 3 else at, data))
            at = chained[-1][0] + len(data)
        writes = chained
    directory = tmp_path_factory.mktemp("runs")  # type: ignore[attr-defined]
    fs = resolve(None)
    one, runs = os.path.join(directory, "one"), os.path.join(directory, "runs")
    with fs.open(one, OpenMode.CREATE) as h:
        for off, data in writes:
            h.write_at(off, data)
    with fs.open(runs, OpenMode.CREATE) as h:
        write_runs(h, [(off, memoryview(data)) for off, data in writes])
    with open(one, "rb") as a, open(runs, "rb") as b:
        assert a.read() == b.read()


class _Recorder:
    """A store handle that records the writes it is asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bytes]] = []

    def write_at(self, offset: int, data: bytes) -> None:
        self.calls.append(("write_at", offset, bytes(data)))

    def write_parts_at(self, offset: int, parts: list[bytes]) -> None:
        self.calls.append(("write_parts_at", offset, b"".join(map(bytes, parts))))


def test_redo_writes_one_run_of_adjacent_pages_at_once() -> None:
    ps = 512
    images = {p: os.urandom(ps) for p in range(1, 11)}
    ops: list[bytes] = []
    for p in [1, 2, 3, 4, 5, 6, 8, 9, 10]:  # two runs: pages 1-6 and 8-10
        ops += map(bytes, codec.modify_parts(p * ps, 0, bytes(ps), images[p]))
    ops += map(bytes, codec.modify_parts(3 * ps, 10, b"ab", b"cd"))  # part of a page: a write of its own
    head, pieces, complete, _ = codec.encode_linked_transaction_parts(20, 0, 1, ops, 7)
    raw = bytes(20) + head + b"".join(pieces) + complete
    tx = codec.parse_transaction(raw, 20)
    assert tx.problem is None
    handle = _Recorder()
    redo(handle, "j", tx, StoreState(ps, 10, 0))  # type: ignore[arg-type]
    assert handle.calls == [
        ("write_parts_at", ps, b"".join(images[p] for p in range(1, 7))),
        ("write_parts_at", 8 * ps, b"".join(images[p] for p in range(8, 11))),
        ("write_at", 3 * ps + 10, b"cd"),
    ]
