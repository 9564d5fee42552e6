"""Byte-level tests of the JRNL and store codecs against hex written by hand."""

from __future__ import annotations

import zlib

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.pages import codec, store_codec
from engine.pages.codec import Alloc, Marker, Modify, Remove
from engine.pages.journal import scan
from tests.pages.pages_helpers import use_pure_crc32c


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def test_file_header_bytes() -> None:
    assert codec.encode_file_header(0x14, 0x30) == h("4a524e4c 1400000000000000 3000000000000000")
    assert codec.decode_file_header(h("4a524e4c 1400000000000000 3000000000000000")) == codec.FileHeader(0x14, 0x30)
    assert codec.encode_file_header(0, 0) == h("4a524e4c" + "00" * 16)


def test_file_header_rejects_foreign_and_short() -> None:
    with pytest.raises(ValueError, match="magic"):
        codec.decode_file_header(b"XXXX" + bytes(16))
    with pytest.raises(ValueError, match="20-byte"):
        codec.decode_file_header(b"JRNL" + bytes(10))


def test_transaction_header_bytes() -> None:
    # prev 0x14, next 0, created 1600000000 (0x5F5E1000), flags JRNL_COMPLETE
    assert codec.encode_tx_header(0x14, 0, 1_600_000_000, 1) == h(
        "1400000000000000 0000000000000000 00105e5f00000000 01"
    )


def test_alloc_op_bytes() -> None:
    # type 01, size 24, page 0x1000, head before 0x3000, head after 0
    assert codec.encode_alloc(0x1000, 0x3000, 0) == h("01 18000000 0010000000000000 0030000000000000 0000000000000000")


def test_modify_op_bytes() -> None:
    # type 02, size 12 + 2*2 = 16, page 0x2000, offset 5, size 2, before "ab", after "xy"
    assert codec.encode_modify(0x2000, 5, b"ab", b"xy") == [h("02 10000000 0020000000000000 0500 0200 6162 7879")]


def test_modify_is_split_above_65535_bytes() -> None:
    before, after = bytes(70000), b"\x01" * 70000
    ops = codec.encode_modify(0x10000, 0, before, after)
    assert len(ops) == 2
    # first: size field 12 + 2*65535 = 131082 = 0x0002000A; offset 0, size 0xFFFF
    assert ops[0][: 5 + 12] == h("02 0a000200 0000010000000000 0000 ffff")
    # second: offset 65535 (0xFFFF), 70000 - 65535 = 4465 (0x1171) bytes
    assert ops[1][: 5 + 12] == h("02") + (12 + 2 * 4465).to_bytes(4, "little") + h("0000010000000000 ffff 7111")
    assert len(ops[0]) == 5 + 131082 and 131082 <= 131084  # the seed's bound


def test_remove_and_marker_bytes() -> None:
    assert codec.encode_remove(0x2000, 0x1000) == h("03 10000000 0020000000000000 0010000000000000")
    assert codec.encode_op(codec.OP_ROLLBACK) == h("fe 00000000")
    assert codec.encode_op(codec.OP_COMPLETE) == h("ff 00000000")


def test_whole_transaction_bytes_and_crc() -> None:
    alloc = h("01 18000000 0010000000000000 0000000000000000 0000000000000000")
    body = alloc
    crc = zlib.crc32(h("1400000000000000") + h("00105e5f00000000") + body)
    expected = (
        h("1400000000000000 0000000000000000 00105e5f00000000 00") + body + h("ff 04000000") + crc.to_bytes(4, "little")
    )
    assert codec.encode_transaction(0x14, 1_600_000_000, [alloc]) == expected
    journal = codec.encode_file_header(20, 20) + expected
    tx = codec.parse_transaction(journal, 20)
    assert tx.problem is None and tx.crc_checked
    assert tx.ops == [Alloc(0x1000, 0, 0), Marker(0xFF, crc.to_bytes(4, "little"))]
    assert tx.op_offsets == [45, 74]
    assert tx.end == len(journal)


def test_parse_original_style_transaction_without_crc() -> None:
    raw = (
        h("0000000000000000 0000000000000000 00105e5f00000000 00")
        + h("03 10000000 0020000000000000 0010000000000000")
        + h("02 0e000000 0020000000000000 0000 0100 41 42")
        + h("77 03000000 010203")  # unknown op: skipped by its size
        + h("ff 00000000")
    )
    tx = codec.parse_transaction(h("4a524e4c") + bytes(16) + raw, 20)
    assert tx.problem is None and not tx.crc_checked
    assert tx.ops[:3] == [Remove(0x2000, 0x1000), Modify(0x2000, 0, b"A", b"B"), Marker(0x77, h("010203"))]
    assert not tx.rolled_back and not tx.applied


def test_parse_reports_cut_and_bad_transactions() -> None:
    whole = codec.encode_file_header(20, 20) + codec.encode_transaction(0, 7, codec.encode_modify(4096, 0, b"a", b"b"))
    for cut in range(21, len(whole)):
        tx = codec.parse_transaction(whole[:cut], 20)
        assert tx.problem is not None, cut
    flipped = bytearray(whole)
    flipped[63] ^= 0xFF  # the after-image byte (op at 45, data at 50, images at 62)
    assert codec.parse_transaction(bytes(flipped), 20).problem == "transaction CRC mismatch"
    bad_alloc = codec.encode_file_header(20, 20) + codec.encode_tx_header(0, 0, 0) + h("01 04000000 00000000")
    assert "ALLOC data" in (codec.parse_transaction(bad_alloc, 20).problem or "")
    # next and flags are outside the CRC: setting them keeps the transaction whole
    patched = bytearray(whole)
    patched[20 + codec.TX_FLAGS_OFFSET] = codec.JRNL_COMPLETE
    parsed = codec.parse_transaction(bytes(patched), 20)
    assert parsed.problem is None and parsed.applied


def test_rollback_marker_is_detected() -> None:
    raw = codec.encode_file_header(20, 20) + codec.encode_transaction(0, 1, [codec.encode_op(codec.OP_ROLLBACK)])
    assert codec.parse_transaction(raw, 20).rolled_back


def test_store_header_bytes() -> None:
    header = store_codec.StoreHeader(page_size=4096, page_count=2, free_head=0x2000)
    body = h("454e475041474553 0100 0000 00100000 0200000000000000 0020000000000000 00000000")
    assert store_codec.encode_header(header) == body + zlib.crc32(body).to_bytes(4, "little")
    assert store_codec.decode_header(store_codec.encode_header(header)) == header


def test_store_header_rejects_damage() -> None:
    good = store_codec.encode_header(store_codec.StoreHeader(512, 3, 0))
    with pytest.raises(store_codec.ForeignMagic):
        store_codec.decode_header(b"TBL!" + good[4:])
    with pytest.raises(ValueError, match="CRC"):
        store_codec.decode_header(good[:20] + b"\x01" + good[21:])
    with pytest.raises(ValueError, match="40-byte"):
        store_codec.decode_header(good[:30])
    body = store_codec.HEADER.pack(store_codec.MAGIC, 1, 0, 512, 3, 512 * 9, 0)
    with pytest.raises(ValueError, match="free-list head"):
        store_codec.decode_header(body + zlib.crc32(body).to_bytes(4, "little"))
    assert store_codec.encode_link(0x1234) == h("3412000000000000")


@settings(max_examples=60, deadline=None)
@given(
    prev=st.integers(0, 2**63),
    created=st.integers(-(2**40), 2**40),
    writes=st.lists(st.tuples(st.integers(0, 4000), st.binary(min_size=1, max_size=96)), max_size=5),
    algorithm=st.sampled_from([codec.CRC_ZLIB, codec.CRC_32C]),
)
def test_transaction_roundtrip(prev: int, created: int, writes: list[tuple[int, bytes]], algorithm: str) -> None:
    ops: list[bytes] = [codec.encode_alloc(8192, 4096, 0)]
    for off, data in writes:
        ops += codec.encode_modify(4096, off, bytes(len(data)), data)
    ops.append(codec.encode_remove(4096, 8192))
    raw = codec.encode_file_header(20, 20) + codec.encode_transaction(prev, created, ops, algorithm=algorithm)
    tx = codec.parse_transaction(raw, 20)
    assert tx.problem is None and tx.crc_checked
    assert (tx.prev, tx.created, tx.next, tx.flags) == (prev, created, 0, 0)
    mods = [op for op in tx.ops if isinstance(op, Modify)]
    assert [(m.offset, m.after) for m in mods] == writes
    assert tx.end == len(raw)


# The same two transactions as written by the previous version (zlib CRC-32 in a
# 4-byte COMPLETE): still read and checked (test_previous_version_worked_example).
WORKED_EXAMPLE_ZLIB = """
4a 52 4e 4c 14 00 00 00 00 00 00 00 68 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 68 00 00 00
00 00 00 00 00 f1 53 65 00 00 00 00 00 01 18 00
00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 02 10 00 00 00 00
02 00 00 00 00 00 00 00 00 02 00 00 00 68 69 ff
04 00 00 00 dc a0 6f e8 14 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 f1 53 65 00 00 00 00
00 02 1c 00 00 00 00 02 00 00 00 00 00 00 00 00
08 00 68 69 00 00 00 00 00 00 00 00 00 00 00 00
00 00 03 10 00 00 00 00 02 00 00 00 00 00 00 00
00 00 00 00 00 00 00 ff 04 00 00 00 00 4c fc 93
"""

# docs/formats/jrnl.md's worked example, default writer: one chain salt
# (0x0123456789abcdef here), COMPLETE carries "C32L", the salt and a CRC-32C, each
# transaction's next points at its own end and the header's last stays at the first.
WORKED_EXAMPLE = """
4a 52 4e 4c 14 00 00 00 00 00 00 00 14 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 74 00 00 00
00 00 00 00 00 f1 53 65 00 00 00 00 00 01 18 00
00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 02 10 00 00 00 00
02 00 00 00 00 00 00 00 00 02 00 00 00 68 69 ff
10 00 00 00 43 33 32 4c ef cd ab 89 67 45 23 01
3e a1 02 91 14 00 00 00 00 00 00 00 d8 00 00 00
00 00 00 00 00 f1 53 65 00 00 00 00 00 02 1c 00
00 00 00 02 00 00 00 00 00 00 00 00 08 00 68 69
00 00 00 00 00 00 00 00 00 00 00 00 00 00 03 10
00 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00
00 00 00 ff 10 00 00 00 43 33 32 4c ef cd ab 89
67 45 23 01 68 0b 1a 3b
"""

# The same as the previous version wrote it with exact_header=True (still read):
# COMPLETE carries "C32C" and a CRC-32C, the header's last and tx1's next were
# rewritten by the second commit.
WORKED_EXAMPLE_EXACT = """
4a 52 4e 4c 14 00 00 00 00 00 00 00 6c 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 6c 00 00 00
00 00 00 00 00 f1 53 65 00 00 00 00 00 01 18 00
00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 02 10 00 00 00 00
02 00 00 00 00 00 00 00 00 02 00 00 00 68 69 ff
08 00 00 00 43 33 32 43 75 58 21 4b 14 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 f1 53 65
00 00 00 00 00 02 1c 00 00 00 00 02 00 00 00 00
00 00 00 00 08 00 68 69 00 00 00 00 00 00 00 00
00 00 00 00 00 00 03 10 00 00 00 00 02 00 00 00
00 00 00 00 00 00 00 00 00 00 00 ff 08 00 00 00
43 33 32 43 5e f0 b1 6d
"""


def test_worked_example_crcs_by_hand() -> None:
    """The CRC-32C covers prev, created, the salt and the ops (not next, not
    flags); the chain is found past the header's last."""
    raw = h(WORKED_EXAMPLE)
    salt = h("efcdab8967452301")
    assert google_crc32c.value(h("0000000000000000 00f1536500000000") + salt + raw[45:0x5F]) == 0x9102A13E
    assert google_crc32c.value(h("1400000000000000 00f1536500000000") + salt + raw[0x74 + 25 : 0xC3]) == 0x3B1A0B68
    for off, nxt in ((20, 0x74), (0x74, 0xD8)):
        tx = codec.parse_transaction(raw, off)
        assert tx.problem is None and tx.crc_checked and tx.next == nxt == tx.end and tx.salt == 0x0123456789ABCDEF
    state = scan("/j", raw)
    assert [tx.offset for tx in state.txs] == [20, 0x74] and state.linked == 1
    assert (state.first, state.last, state.clear_next_at) == (20, 0x74, 0x74 + 8) and not state.cut


def test_exact_worked_example_crcs_by_hand() -> None:
    """The previous version's "C32C" form: the CRC-32C covers prev, created and
    the ops (not next, not flags); it still parses."""
    raw = h(WORKED_EXAMPLE_EXACT)
    assert google_crc32c.value(h("0000000000000000 00f1536500000000") + raw[45:0x5F]) == 0x4B215875
    assert google_crc32c.value(h("1400000000000000 00f1536500000000") + raw[0x6C + 25 : 0xBB]) == 0x6DB1F05E
    for off, nxt in ((20, 0x6C), (0x6C, 0)):
        tx = codec.parse_transaction(raw, off)
        assert tx.problem is None and tx.crc_checked and tx.next == nxt


def test_previous_version_worked_example() -> None:
    """Journals written before CRC-32C (4-byte zlib CRC) still parse and verify."""
    raw = h(WORKED_EXAMPLE_ZLIB)
    for off, end in ((20, 0x68), (0x68, len(raw))):
        tx = codec.parse_transaction(raw, off)
        assert tx.problem is None and tx.crc_checked and tx.end == end
    flipped = bytearray(raw)
    flipped[0x5E] ^= 1  # "hi" -> "hh"
    assert codec.parse_transaction(bytes(flipped), 20).problem == "transaction CRC mismatch"


def test_crc32c_complete_rejects_damage() -> None:
    whole = codec.encode_file_header(20, 20) + codec.encode_transaction(
        0, 7, codec.encode_modify(4096, 0, b"a", b"b"), algorithm=codec.CRC_32C
    )
    assert whole[-13:-8] == h("ff 08000000") and whole[-8:-4] == b"C32C"
    assert codec.parse_transaction(whole, 20).problem is None
    for cut in range(21, len(whole)):
        assert codec.parse_transaction(whole[:cut], 20).problem is not None, cut
    for at in range(20 + codec.TX_HEADER_SIZE, len(whole)):
        flipped = bytearray(whole)
        flipped[at] ^= 0x10
        assert codec.parse_transaction(bytes(flipped), 20).problem is not None, at
    # prev and created are covered, next and flags are not (rewritten in place)
    for at, expect_ok in ((20, False), (20 + 16, False), (20 + 8, True), (20 + 24, True)):
        patched = bytearray(whole)
        patched[at] ^= 0x01
        assert (codec.parse_transaction(bytes(patched), 20).problem is None) == expect_ok, at


def test_worked_example_of_the_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/formats/jrnl.md's example: allocate page 1 and write "hi", then free it."""
    from engine.fs import make_dirs
    from engine.pages import PageStore
    from engine.pages import journal as journal_module
    from engine.pages import store as store_module
    from stress.simfs import SimFS

    monkeypatch.setattr(store_module.time, "time", lambda: 1_700_000_000.0)
    monkeypatch.setattr(journal_module, "_new_salt", lambda: 0x0123456789ABCDEF)
    for expected in (WORKED_EXAMPLE,):
        sim = SimFS()
        make_dirs(sim, "/d")
        store = PageStore.open("/d/ex.db", page_size=512, fs=sim)
        with store.transaction() as tx:
            page = tx.allocate()
            tx.write(page, 0, b"hi")
        with store.transaction() as tx:
            tx.free(page)
        # The example's bytes, then the zeros of the file's extension ahead of the commits.
        image = sim.snapshot()["/d/ex.db-journal"]
        assert image[: len(h(expected))] == h(expected)
        assert len(image) == journal_module.GROW_BYTES and not any(image[len(h(expected)) :])
        store.close()  # the checkpoint writes the pages and header to the store file
        header = sim.snapshot()["/d/ex.db"][:40]
        assert header == h("454e475041474553 0100 0000 00020000 0100000000000000 0002000000000000 00000000 9f564285")
        # The reset: header zeroed, the first transaction's header and first op header wiped.
        assert sim.snapshot()["/d/ex.db-journal"][:50] == h("4a524e4c") + bytes(46)


def test_pure_python_crc32c_matches_google_crc32c() -> None:
    """The table-driven fallback gives the values google-crc32c gives (the format
    fixes the algorithm, not the library)."""
    import random

    from engine.pages import crc32c

    rng = random.Random(5)
    assert crc32c.extend_pure(0, b"123456789") == 0xE3069283  # the CRC-32C check value
    for size in (0, 1, 7, 64, 513, 4096):
        data = rng.randbytes(size)
        assert crc32c.extend_pure(0, data) == google_crc32c.value(data) == crc32c.value(data)
        start = rng.randrange(2**32)
        assert crc32c.extend_pure(start, data) == google_crc32c.extend(start, data) == crc32c.extend(start, data)
        assert crc32c.value_bytes(data) == crc32c.value(data)  # (the bytes-only entry points)
        assert crc32c.extend_bytes(start, data) == crc32c.extend(start, data)
    pieces = [rng.randbytes(rng.randrange(100)) for _ in range(20)]
    joined = b"".join(pieces)
    assert crc32c.extend_all(0, pieces) == crc32c.extend_pure(0, joined) == google_crc32c.value(joined)


def test_linked_transactions_check_with_the_pure_crc32c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without google-crc32c the writer writes the same "C32L" bytes and the reader
    checks them the same way."""

    ops = [codec.encode_alloc(512, 0, 0), *codec.encode_modify(512, 0, b"\0\0", b"hi")]
    fast = codec.encode_linked_transaction_parts(20, 0, 7, ops, 99)
    use_pure_crc32c(monkeypatch)
    slow = codec.encode_linked_transaction_parts(20, 0, 7, ops, 99)
    assert slow == fast
    raw = codec.encode_file_header(20, 20) + fast[0] + b"".join(fast[1]) + fast[2]
    tx = codec.parse_transaction(raw, 20)
    assert tx.problem is None and tx.crc_checked and tx.salt == 99
