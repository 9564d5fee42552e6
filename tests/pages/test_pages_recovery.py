"""Recovery from journals written by hand: redo, undo, cut-off, and bad input."""

from __future__ import annotations

import logging
import os
import zlib

import google_crc32c
import pytest

from engine.errors import CorruptFileError, FormatError
from engine.pages import PageStore, RecoveryNeededError, codec, journal_path, store_codec
from engine.pages.journal import scan

PS = 512


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    """A clean store with pages 1 and 2 holding b"one" and b"two"."""
    p = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(p, page_size=PS) as store, store.transaction() as tx:
        a, b = tx.allocate(), tx.allocate()
        tx.write(a, 0, b"one")
        tx.write(b, 0, b"two")
    return p


def write_journal(path: str, txs: list[bytes], *, link: bool = True) -> list[int]:
    """Write a journal holding ``txs`` (each from encode_transaction with prev=0)."""
    offsets, out, prev = [], bytearray(codec.encode_file_header(0, 0)), 0
    for raw in txs:
        off = len(out)
        tx = bytearray(raw)
        tx[0:8] = prev.to_bytes(8, "little")
        if len(raw) >= 25 and raw[-9] == codec.OP_COMPLETE and raw[-8:-4] == (4).to_bytes(4, "little"):
            # re-seal the CRC for the new prev pointer
            body = bytes(tx[25:-9])
            tx[-4:] = codec.transaction_crc(prev, int.from_bytes(tx[16:24], "little"), body).to_bytes(4, "little")
        if prev and link:
            out[prev + 8 : prev + 16] = off.to_bytes(8, "little")
        out += tx
        offsets.append(off)
        prev = off
    if offsets:
        out[0:20] = codec.encode_file_header(offsets[0], offsets[-1])
    with open(journal_path(path), "wb") as f:
        f.write(out)
    return offsets


def modify(page: int, offset: int, before: bytes, after: bytes) -> bytes:
    return b"".join(codec.encode_modify(page * PS, offset, before, after))


def poke(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_complete_unflagged_transaction_is_redone(path: str, caplog: pytest.LogCaptureFixture) -> None:
    ops = [codec.encode_alloc(3 * PS, 0, 0), modify(3, 10, b"\0\0\0", b"new"), modify(1, 0, b"one", b"ONE")]
    write_journal(path, [codec.encode_transaction(0, 1, ops)])
    with caplog.at_level(logging.WARNING, "engine.pages"), PageStore.open(path) as store:
        assert store.recovery.total("redone") == 1
        assert store.page_count == 3
        assert store.read(3, 10, 3) == b"new" and store.read(1, 0, 3) == b"ONE"
        store.verify()
    assert "redone 1 transactions" in caplog.text
    with open(journal_path(path), "rb") as f:
        assert f.read(20) == codec.encode_file_header(0, 0)  # reset (the space is reused)
    with PageStore.open(path) as store:  # idempotent: nothing left to do
        assert store.recovery.total("redone") == 0 and store.read(3, 10, 3) == b"new"


def test_original_transaction_without_crc_is_redone(path: str) -> None:
    raw = codec.encode_transaction(0, 1, [modify(2, 0, b"two", b"TWO")], with_crc=False)
    write_journal(path, [raw])
    with PageStore.open(path) as store:
        assert store.read(2, 0, 3) == b"TWO"


def test_flagged_transaction_is_not_redone(path: str) -> None:
    raw = bytearray(codec.encode_transaction(0, 1, [modify(2, 0, b"two", b"XXX")]))
    raw[codec.TX_FLAGS_OFFSET] = codec.JRNL_COMPLETE
    write_journal(path, [bytes(raw)])
    with PageStore.open(path) as store:
        assert not store.recovery.repaired  # flagged: nothing to redo
        assert store.read(2, 0, 3) == b"two"


def test_incomplete_only_transaction_truncates_to_20_bytes(path: str) -> None:
    raw = codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"BAD")])[:-9]  # no COMPLETE
    write_journal(path, [raw])
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"one"
        assert store.recovery.total("cut", "bytes") > 0 and len(store.recovery.of("cut")) == 1
    with open(journal_path(path), "rb") as f:
        assert f.read() == codec.encode_file_header(0, 0)


def test_incomplete_last_transaction_is_cut_and_earlier_kept(path: str) -> None:
    good = codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"uno")])
    torn = codec.encode_transaction(0, 2, [modify(2, 0, b"two", b"dos")])
    offsets = write_journal(path, [good, torn])
    size = os.path.getsize(journal_path(path))
    poke(journal_path(path), size - 4, b"\0\0\0\0")  # CRC does not match: a torn write
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"uno" and store.read(2, 0, 3) == b"two"
        assert f"at {offsets[1]} cut off" in store.recovery.summary()


def test_header_last_behind_a_linked_append(path: str) -> None:
    """The crash hit between linking prev.next and updating the header."""
    a = codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"uno")])
    b = codec.encode_transaction(0, 2, [modify(2, 0, b"two", b"dos")])
    offsets = write_journal(path, [a, b])
    poke(journal_path(path), 12, offsets[0].to_bytes(8, "little"))  # last = first tx
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"uno" and store.read(2, 0, 3) == b"two"
        assert store.recovery.total("cut", "bytes") == len(b)


def test_last_next_pointing_elsewhere_is_cleared(path: str) -> None:
    """A last transaction whose ``next`` points past a gap (an append a crash
    interrupted, not adjacent) gets it cleared, and the rest is cut."""
    a = codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"uno")])
    b = codec.encode_transaction(0, 2, [modify(2, 0, b"two", b"dos")])
    (off_a,) = write_journal(path, [a])
    off_b = off_a + len(a) + 16  # not adjacent
    with open(journal_path(path), "ab") as f:
        f.write(bytes(16) + b)
    poke(journal_path(path), off_a + codec.TX_NEXT_OFFSET, off_b.to_bytes(8, "little"))
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"uno" and store.read(2, 0, 3) == b"two"
        assert f"next pointer {off_b} cleared" in store.recovery.summary()
        assert store.recovery.total("cut", "bytes") == 16 + len(b)


def test_rolled_back_transaction_is_undone(path: str) -> None:
    """A transaction marked 0xFE whose after-image reached the store is undone."""
    ops = [modify(1, 0, b"one", b"AAA"), codec.encode_op(codec.OP_ROLLBACK)]
    later = codec.encode_transaction(0, 3, [modify(2, 0, b"two", b"TOO")])
    write_journal(path, [codec.encode_transaction(0, 2, ops), later])
    poke(path, 1 * PS, b"AAA")  # part of it reached the store
    with PageStore.open(path) as store:
        assert store.recovery.total("undone") == 1 and store.recovery.total("redone") == 1
        assert store.read(1, 0, 3) == b"one" and store.read(2, 0, 3) == b"TOO"
        store.verify()


def test_rolled_back_allocation_and_removal_are_undone(path: str) -> None:
    ops = [
        codec.encode_alloc(3 * PS, 0, 0),
        modify(2, 0, b"two\0\0\0\0\0", (0).to_bytes(8, "little")),
        codec.encode_remove(2 * PS, 0),
        codec.encode_op(codec.OP_ROLLBACK),
    ]
    write_journal(path, [codec.encode_transaction(0, 2, ops)])
    with PageStore.open(path) as store:
        assert store.page_count == 2 and store.free_pages == []
        assert store.read(2, 0, 3) == b"two"


def test_journal_pointing_outside_the_store(path: str) -> None:
    offsets = write_journal(path, [codec.encode_transaction(0, 1, [modify(9, 0, b"a", b"b")])])
    with pytest.raises(CorruptFileError) as info:
        PageStore.open(path)
    assert info.value.path == journal_path(path)
    assert info.value.offset == offsets[0] + 25  # the op's own offset
    assert "inside the store" in str(info.value)
    unaligned = codec.encode_transaction(0, 1, [b"".join(codec.encode_modify(PS + 3, 0, b"a", b"b"))])
    write_journal(path, [unaligned])
    with pytest.raises(CorruptFileError, match="multiple of 512"):
        PageStore.open(path)
    gap = codec.encode_transaction(0, 1, [codec.encode_alloc(7 * PS, 0, 0)])
    write_journal(path, [gap])
    with pytest.raises(CorruptFileError, match="inside the store"):
        PageStore.open(path)
    past_end = codec.encode_transaction(0, 1, [modify(1, 510, b"abc", b"xyz")])
    write_journal(path, [past_end])
    with pytest.raises(CorruptFileError, match="inside the 512-byte page"):
        PageStore.open(path)
    # nothing committed was lost: with the bad journal removed the store is intact
    os.unlink(journal_path(path))
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"one" and store.read(2, 0, 3) == b"two"


def test_broken_chain_in_the_middle_is_corruption(path: str) -> None:
    txs = [codec.encode_transaction(0, i, [modify(1, 0, b"one", b"on" + bytes([48 + i]))]) for i in range(3)]
    offsets = write_journal(path, txs)
    poke(journal_path(path), offsets[1], (12345).to_bytes(8, "little"))  # tx 1's prev
    with pytest.raises(CorruptFileError, match="prev pointer") as info:
        PageStore.open(path)
    assert info.value.offset == offsets[1]
    offsets = write_journal(path, txs)
    poke(journal_path(path), offsets[0] + 8, (99999).to_bytes(8, "little"))  # tx 0's next
    with pytest.raises(CorruptFileError, match="on the chain"):
        PageStore.open(path)
    offsets = write_journal(path, txs)
    poke(journal_path(path), offsets[1] + 40, b"\xee")  # damage inside a middle transaction
    with pytest.raises(CorruptFileError):
        PageStore.open(path)
    offsets = write_journal(path, txs)
    poke(journal_path(path), offsets[0] + 8, offsets[0].to_bytes(8, "little"))  # a cycle
    with pytest.raises(CorruptFileError, match="next pointer past"):
        PageStore.open(path)


def test_foreign_and_truncated_files(path: str, tmp_path: os.PathLike[str]) -> None:
    foreign = os.path.join(str(tmp_path), "foreign.db")
    with open(foreign, "wb") as f:
        f.write(b"TBL!" + bytes(600))
    with pytest.raises(FormatError) as info:
        PageStore.open(foreign)
    assert info.value.path == foreign and info.value.offset == 0
    with open(journal_path(path), "wb") as f:
        f.write(b"NOPE" + bytes(16))
    with pytest.raises(FormatError):
        PageStore.open(path)
    with open(journal_path(path), "wb") as f:
        f.write(b"JRN")
    with pytest.raises(CorruptFileError, match="20-byte JRNL header"):
        PageStore.open(path)
    os.unlink(journal_path(path))
    with open(path, "r+b") as f:
        f.truncate(PS + 100)  # page 2 is gone
    with pytest.raises(CorruptFileError) as info:
        PageStore.open(path)
    assert info.value.path == path and info.value.offset == PS + 100
    with open(path, "r+b") as f:
        f.truncate(30)
    with pytest.raises(CorruptFileError, match="40-byte header"):
        PageStore.open(path)


def test_free_list_cycle_is_detected(path: str) -> None:
    with PageStore.open(path) as store, store.transaction() as tx:
        tx.free(1)
        tx.free(2)
    poke(path, 1 * PS, (2 * PS).to_bytes(8, "little"))  # page 1 -> page 2 -> page 1
    with pytest.raises(CorruptFileError, match="cycle"):
        PageStore.open(path)


def test_reader_refuses_an_unrecovered_journal(path: str) -> None:
    write_journal(path, [codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"uno")])])
    with pytest.raises(RecoveryNeededError):
        PageStore.open_reader(path)
    PageStore.open(path).close()
    with PageStore.open_reader(path) as reader:
        assert reader.read(1, 0, 3) == b"uno"


def test_interrupted_flush_mark(path: str) -> None:
    """A writer that died while writing pages leaves FLUSHING in the header: readers
    refuse (even one opened before), a writer replays the journal and clears it."""
    from engine.pages import store_codec

    reader = PageStore.open_reader(path)
    assert reader.read(1, 0, 3) == b"one"
    write_journal(path, [codec.encode_transaction(0, 1, [modify(1, 0, b"one", b"uno")])])
    with open(path, "rb") as f:
        header = store_codec.decode_header(f.read(40))
    marked = store_codec.StoreHeader(header.page_size, header.page_count, header.free_head, flags=store_codec.FLUSHING)
    poke(path, 0, store_codec.encode_header(marked))
    poke(path, PS, b"u")  # half of the flush reached the file: "une"
    with pytest.raises(RecoveryNeededError):
        reader.read(1)
    reader.close()
    with pytest.raises(RecoveryNeededError):
        PageStore.open_reader(path)
    with PageStore.open(path) as store:
        assert store.recovery.total("redone") == 1 and store.read(1, 0, 3) == b"uno"
    with open(path, "rb") as f:
        assert store_codec.decode_header(f.read(40)).flags == 0
    with PageStore.open_reader(path) as reader:
        assert reader.read(1, 0, 3) == b"uno"


def test_interrupted_creation_is_redone(tmp_path: os.PathLike[str]) -> None:
    """A crash during create can leave empty files: a new store is created again, but an
    empty journal next to a store with pages is damage, not a fresh start."""
    p = os.path.join(str(tmp_path), "new.db")
    open(p, "wb").close()
    with PageStore.open(p, page_size=1024) as store:
        assert store.page_size == 1024 and store.page_count == 0
    open(journal_path(p), "wb").close()
    with PageStore.open(p) as store, store.transaction() as tx:
        tx.allocate()
    open(journal_path(p), "wb").close()
    with pytest.raises(CorruptFileError, match="20-byte JRNL header"):
        PageStore.open(p)


def test_damaged_page_bytes_are_detected(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """Page checksums (``<path>-sums``): a flipped byte at rest is a typed error."""
    poke(path, 2 * PS + 100, b"\xff")
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"one"  # other pages still read fine
        with pytest.raises(CorruptFileError, match="checksum") as info:
            store.read(2)
        assert info.value.path == path and info.value.offset == 2 * PS
        with pytest.raises(CorruptFileError, match="checksum"):
            store.verify()
    with PageStore.open_reader(path) as reader:
        with pytest.raises(CorruptFileError, match="checksum"):
            reader.read(2)
    poke(path, 2 * PS + 100, b"\x00")  # repaired by hand: fine again
    os.unlink(path + "-sums")
    with caplog.at_level(logging.WARNING, "engine.pages"), PageStore.open(path) as store:
        assert store.read(2, 0, 3) == b"two"
        store.verify()
    assert "rebuilt" in caplog.text and "checksums" in caplog.text


def test_damaged_checksum_file(path: str) -> None:
    poke(path + "-sums", 16 + 4, b"\x00\x00\x00\x00")  # page 2's entry
    with PageStore.open(path) as store, pytest.raises(CorruptFileError, match="checksum"):
        store.read(2)
    poke(path + "-sums", 0, b"XXXX")  # unusable header: rebuilt from the store
    with PageStore.open(path) as store:
        assert store.read(2, 0, 3) == b"two"


def _sums_file(path: str) -> bytes:
    with open(path + "-sums", "rb") as f:
        return f.read()


def _page_bytes(path: str, page: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(page * PS)
        return f.read(PS)


def test_new_checksum_files_hold_crc32c(path: str) -> None:
    raw = _sums_file(path)
    assert raw[:8] == store_codec.SUMS_MAGIC_32C == b"ENGSUMS2"
    for page in (1, 2):
        entry = int.from_bytes(raw[16 + 4 * (page - 1) : 20 + 4 * (page - 1)], "little")
        assert entry == google_crc32c.value(_page_bytes(path, page)) != zlib.crc32(_page_bytes(path, page))


def test_checksum_file_of_an_earlier_version_is_still_used(path: str) -> None:
    """An ENGSUMS1 file (zlib CRC-32 entries, as earlier versions wrote) keeps
    checking pages, stays ENGSUMS1 across commits, and catches damage."""
    old = store_codec.encode_sums_header(PS, crc32c=False) + b"".join(
        zlib.crc32(_page_bytes(path, page)).to_bytes(4, "little") for page in (1, 2)
    )
    assert old[:8] == b"ENGSUMS1"
    with open(path + "-sums", "wb") as f:
        f.write(old)
    with PageStore.open(path) as store:
        assert store.read(2, 0, 3) == b"two"
        store.verify()
        with store.transaction() as tx:
            tx.write(1, 0, b"UNO")
            tx.write(tx.allocate(), 0, b"three")
    raw = _sums_file(path)
    assert raw[:8] == b"ENGSUMS1"
    for page in (1, 2, 3):
        entry = int.from_bytes(raw[16 + 4 * (page - 1) : 20 + 4 * (page - 1)], "little")
        assert entry == zlib.crc32(_page_bytes(path, page))
    poke(path, 2 * PS + 7, b"\xee")
    with PageStore.open(path) as store, pytest.raises(CorruptFileError, match="checksum"):
        store.read(2)
    with PageStore.open_reader(path) as reader, pytest.raises(CorruptFileError, match="checksum"):
        reader.read(2)


# -- linked chains: the default writer leaves the header's last behind -----------------

SALT = 0x5EED_0000_0000_0001


def write_linked_journal(path: str, ops_per_tx: list[list[bytes]], *, salt: int = SALT, created: int = 1) -> list[int]:
    """A journal as the default writer leaves it between checkpoints: header
    (first = last = 20), pre-linked transactions sealed with ``salt``."""
    out, offsets, prev = bytearray(codec.encode_file_header(20, 20)), [], 0
    for ops in ops_per_tx:
        off = len(out)
        head, pieces, complete, _ = codec.encode_linked_transaction_parts(off, prev, created, ops, salt)
        out += head + b"".join(pieces) + complete
        offsets.append(off)
        prev = off
    with open(journal_path(path), "wb") as f:
        f.write(out)
    return offsets


def test_linked_chain_past_the_header_is_redone(path: str) -> None:
    offsets = write_linked_journal(
        path, [[modify(1, 0, b"one", b"uno")], [modify(2, 0, b"two", b"dos")], [modify(1, 0, b"uno\0", b"eins")]]
    )
    with open(journal_path(path), "rb") as f:
        raw = f.read()
    state = scan(journal_path(path), raw)
    assert [tx.offset for tx in state.txs] == offsets and state.linked == 2 and not state.cut and state.needs_repair
    with PageStore.open(path) as store:
        assert store.recovery.total("redone") == 3 and not store.recovery.of("cut")
        assert store.read(1, 0, 4) == b"eins" and store.read(2, 0, 3) == b"dos"
        store.verify()


def test_linked_chain_with_a_torn_last_transaction_is_cut(path: str, caplog: pytest.LogCaptureFixture) -> None:
    offsets = write_linked_journal(path, [[modify(1, 0, b"one", b"uno")], [modify(2, 0, b"two", b"dos")]])
    with open(journal_path(path), "r+b") as f:
        f.truncate(os.path.getsize(journal_path(path)) - 3)  # the second one's CRC is cut short
    with caplog.at_level(logging.WARNING, "engine.pages"), PageStore.open(path) as store:
        assert store.recovery.total("redone") == 1 and store.recovery.total("cut", "bytes") > 0
        assert store.read(1, 0, 3) == b"uno" and store.read(2, 0, 3) == b"two"
    assert f"unfinished transaction at {offsets[1]} cut off" in caplog.text


def test_linked_chain_ignores_leftovers_of_an_earlier_chain(path: str) -> None:
    """Transactions after the chain's end that belong to the chain before the last
    reset (another salt) are slack, even at the right offset with the right prev."""
    old = write_linked_journal(
        path, [[modify(1, 0, b"one", b"uno")], [modify(2, 0, b"two", b"dos")]], salt=SALT + 1
    )
    with open(journal_path(path), "rb") as f:
        stale = f.read()
    write_linked_journal(path, [[modify(1, 0, b"one", b"UNO")]])  # same size: tx 2 of the old chain fits after it
    with open(journal_path(path), "r+b") as f:
        f.seek(old[1])
        f.write(stale[old[1] :])
    with open(journal_path(path), "rb") as f:
        state = scan(journal_path(path), f.read())
    assert [tx.offset for tx in state.txs] == [20] and not state.cut
    with PageStore.open(path) as store:
        assert store.read(1, 0, 3) == b"UNO" and store.read(2, 0, 3) == b"two"


def test_damage_inside_a_linked_chain_is_corruption(path: str) -> None:
    """A bad transaction with a whole one of the same chain after it is damage, not a
    torn append: committed data is not dropped silently."""
    txs = [[modify(1, 0, b"one", b"on" + bytes([48 + i]))] for i in range(3)]
    offsets = write_linked_journal(path, txs)
    poke(journal_path(path), offsets[1] + 40, b"\xee")
    with pytest.raises(CorruptFileError, match="whole transaction") as info:
        PageStore.open(path)
    assert info.value.path == journal_path(path)
    write_linked_journal(path, txs)
    poke(journal_path(path), offsets[1] + 8, (77777).to_bytes(8, "little"))  # a damaged next
    with pytest.raises(CorruptFileError, match="next pointer") as info:
        PageStore.open(path)
    assert info.value.offset == offsets[1] + 8


def test_previous_versions_c32c_three_place_journal_is_recovered(path: str) -> None:
    """A journal the previous version wrote with ``exact_header=True`` ("C32C"
    COMPLETE, header and links rewritten per commit) and then crashed: redone, and
    the journal left at rest."""
    ops = [[modify(1, 0, b"one", b"uno")], [modify(2, 0, b"two", b"dos")]]
    out = bytearray(codec.encode_file_header(0, 0))
    offsets: list[int] = []
    for i, tx_ops in enumerate(ops):
        prev = offsets[-1] if offsets else 0
        raw = codec.encode_transaction(prev, 100 + i, tx_ops, algorithm=codec.CRC_32C)
        off = len(out)
        if prev:
            out[prev + 8 : prev + 16] = off.to_bytes(8, "little")
        out += raw
        offsets.append(off)
    out[0:20] = codec.encode_file_header(offsets[0], offsets[-1])
    with open(journal_path(path), "wb") as f:
        f.write(out)
    state = scan(journal_path(path), bytes(out))
    assert [tx.offset for tx in state.txs] == offsets and all(tx.crc_checked for tx in state.txs)
    assert not state.needs_repair
    with PageStore.open(path) as store:
        assert store.recovery.total("redone") == 2 and not store.recovery.of("cut")
        assert store.read(1, 0, 3) == b"uno" and store.read(2, 0, 3) == b"dos"
    with open(journal_path(path), "rb") as f:
        assert f.read(20) == codec.encode_file_header(0, 0)
