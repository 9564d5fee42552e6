"""A journal at rest is exactly what the JRNL format describes.

After close, an explicit checkpoint or a recovery, a JRNL reader that knows
only the format (``docs/formats/jrnl.md``: header first/last, prev/next links,
the JRNL_COMPLETE flag) must see the journal right.  ``_foreign_view`` is such a
reader, written from the format alone; the tests compare bytes on disk (the
durable image of the crash simulator), not what the writer believes.
"""

from __future__ import annotations

import struct

from engine.fs import make_dirs
from engine.pages import PageReader, PageStore, TransactionDelta, codec
from engine.pages.transaction import Transaction
from stress.simfs import SimFS

_HEADER = struct.Struct("<4sQQ")
_TX = struct.Struct("<QQqB")


def _foreign_view(raw: bytes) -> list[tuple[int, int, int, int]]:
    """(offset, prev, next, flags) of each transaction, as a JRNL reader that
    follows the header and the links sees them; asserts the links agree."""
    magic, first, last = _HEADER.unpack_from(raw, 0)
    assert magic == b"JRNL"
    if first == 0:
        assert last == 0, "an empty journal has both offsets 0"
        return []
    out: list[tuple[int, int, int, int]] = []
    off, prev = first, 0
    while off:
        tx_prev, tx_next, _created, flags = _TX.unpack_from(raw, off)
        assert tx_prev == prev, f"prev of {off}"
        out.append((off, tx_prev, tx_next, flags))
        prev, off = off, tx_next
        assert len(out) < 10_000
    assert out[-1][0] == last, "header last names the last transaction"
    return out


def _durable_journal(sim: SimFS, path: str) -> bytes:
    return bytes(sim.durable_image().files[path + "-journal"])


def _fill(store: PageStore, n: int) -> None:
    for i in range(n):
        with store.transaction() as tx:
            page = tx.allocate() if i % 3 == 0 or not store.live_pages else store.live_pages[0]
            tx.write(page, 0, bytes([i % 251 + 1]) * 100)


def test_journal_at_rest_after_close_and_checkpoint() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/p", page_size=512, checkpoint_bytes=3000, fs=sim)
    _fill(store, 20)  # automatic checkpoints on the way (their resets left unsynced)
    store.checkpoint()
    raw = _durable_journal(sim, "/db/p")
    assert raw[:20] == b"JRNL" + bytes(16) and _foreign_view(raw) == []
    # The space is kept for reuse, but the old first transaction is wiped: no reader
    # that ignores the header could take leftovers for a chain.
    assert raw[20:50] == bytes(30)
    _fill(store, 5)
    store.close()
    raw = _durable_journal(sim, "/db/p")
    assert raw[:20] == b"JRNL" + bytes(16) and _foreign_view(raw) == []


def test_journal_at_rest_after_recovery() -> None:
    """A crash with committed transactions in the journal: after the reopen, the
    journal on disk is the empty JRNL journal; a crash during recovery, right after
    the repair, leaves the JRNL picture of the chain (header first/last, last next 0)."""
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/p", page_size=512, fs=sim)
    _fill(store, 6)
    crashed = sim.durable_image()
    raw = bytes(crashed.files["/db/p-journal"])
    # The writer's header lags (it names the first transaction only) ...
    assert _HEADER.unpack_from(raw, 0)[1:] == (20, 20)
    store.close()

    fs2 = crashed.fs()
    reopened = PageStore.open("/db/p", fs=fs2)
    assert reopened.recovery.total("redone") == 6
    reopened.close()
    raw = bytes(fs2.durable_image().files["/db/p-journal"])
    assert raw[:20] == b"JRNL" + bytes(16) and _foreign_view(raw) == []


def test_repaired_chain_is_the_jrnl_picture() -> None:
    """What recovery writes before replaying (header first/last on the chain's ends,
    the last next cleared) is the JRNL picture of the transactions."""
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/p", page_size=512, fs=sim)
    _fill(store, 4)
    journal = store._journal  # the writer's journal, to run its repair on a scan
    from engine.pages.journal import scan

    state = scan("/db/p-journal", journal.handle.read_all())
    assert state.linked == 3 and state.needs_repair
    journal.repair(state)
    view = _foreign_view(journal.handle.read_all())
    assert [v[0] for v in view] == [tx.offset for tx in state.txs]
    assert view[-1][2] == 0 and all(flags == 0 for *_, flags in view)
    assert all(nxt == view[i + 1][0] for i, (_, _, nxt, _) in enumerate(view[:-1]))
    store.close()


def test_open_reader_gives_a_page_reader() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with PageStore.open("/db/p", page_size=512, apply="commit", fs=sim) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"abc")
        reader = PageStore.open_reader("/db/p", fs=sim)
        assert isinstance(reader, PageReader) and reader.readonly and not reader.recovery.repaired
        assert reader.read(1, 0, 3) == b"abc" and reader.page_count == 1 and reader.free_pages == []
        other = PageStore.open_reader("/db/p", fs=sim)
        assert other.live_pages == [1]
        other.close()
        reader.close()


def test_a_transaction_hands_the_store_a_delta() -> None:
    sim = SimFS()
    make_dirs(sim, "/db")
    with PageStore.open("/db/p", page_size=512, fs=sim) as store:
        with store.transaction() as tx:
            a, b = tx.allocate(), tx.allocate()
            tx.write(a, 0, b"x" * 512)
        seen: list[TransactionDelta] = []
        apply = store.apply_delta

        class Spy:
            path = store.path
            begin_transaction = store.begin_transaction
            end_transaction = store.end_transaction
            committed_page = store.committed_page

            def apply_delta(self, delta: TransactionDelta) -> None:
                seen.append(delta)
                apply(delta)

        with Transaction(Spy()) as tx:
            tx.write(a, 10, b"yy")
            tx.free(b)
            assert tx.read(a, 10, 2) == b"yy"
        (delta,) = seen
        assert set(delta.images) == {a, b} and delta.whole == []
        assert sorted(delta.ranges) == [(a * 512 + 10, a * 512 + 12), (b * 512, b * 512 + 8)]
        assert delta.freed == [b] and delta.allocated == set() and delta.free_head == b * 512
        assert delta.page_count == 2 and delta.ops[-1] == codec.encode_remove(b * 512, 0)
        assert store.free_pages == [b] and store.read(a, 10, 2) == b"yy"
