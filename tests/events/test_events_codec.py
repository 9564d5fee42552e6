"""Byte-level tests of the file-journal codec against hex written by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import CorruptFileError, FormatError
from engine.events.codec import (
    BLOCK_HEADER_SIZE,
    MAX_ID_BYTES,
    BlockHeader,
    MetaBlock,
    decode_block_header,
    decode_data_header,
    decode_meta_blocks,
    decode_meta_header,
    encode_batch,
    encode_block,
    encode_data_header,
    encode_id,
    encode_meta,
    encode_meta_block,
    encode_meta_fields,
    sector_crossing,
)


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def test_meta_block_bytes_by_hand() -> None:
    # i16 size 27 | i64 first 0x21 | i64 last 0x55 | i64 highest 3 | "a"
    expected = hx("""
        001b
        0000000000000021
        0000000000000055
        0000000000000003
        61""")
    assert encode_meta_block(MetaBlock("a", 0x21, 0x55, 3)) == expected


def test_meta_file_bytes_by_hand_and_back() -> None:
    expected = hx("""
        4150464d 00000038
        001c 0000000000000008 0000000000000008 0000000000000001 7031
        001c 0000000000000000 000000000000002a 0000000000000002 7032""")
    blocks = [MetaBlock("p1", 8, 8, 1), MetaBlock("p2", 0, 42, 2)]
    assert encode_meta(blocks) == expected
    magic, size = decode_meta_header(expected[:8], "meta")
    assert (magic, size) == (b"APFM", 56)
    decoded = decode_meta_blocks(expected[8:], "meta")
    assert decoded == [MetaBlock("p1", 8, 8, 1, 8), MetaBlock("p2", 0, 42, 2, 36)]


def test_original_magic_akfm_is_read() -> None:
    assert decode_meta_header(hx("414b464d 0000001c"), "meta") == (b"AKFM", 28)


def test_meta_fields_are_the_24_bytes_after_the_size() -> None:
    block = encode_meta_block(MetaBlock("xyz", 1, 2, 3))
    assert block[2:26] == encode_meta_fields(1, 2, 3)


def test_data_block_bytes_by_hand() -> None:
    # i32 size 26 | i32 own 8 | i32 prev 0 | i32 next 0x22 | i64 seq 1 | "hi"
    expected = hx("0000001a 00000008 00000000 00000022 0000000000000001 6869")
    assert encode_block(8, 0, 0x22, 1, b"hi") == expected
    assert decode_block_header(expected, 0, 8, "data") == BlockHeader(26, 8, 0, 0x22, 1)


def test_batch_links_and_offsets() -> None:
    blob, offsets = encode_batch(100, 40, 5, [b"a", b"", b"ccc"])
    assert offsets == [100, 125, 149]
    expected = (hx("00000019 00000064 00000028 0000007d 0000000000000005") + b"a"
                + hx("00000018 0000007d 00000064 00000095 0000000000000006")
                + hx("0000001b 00000095 0000007d 00000000 0000000000000007") + b"ccc")
    assert blob == expected


def test_data_header_by_hand() -> None:
    assert encode_data_header(0x66) == hx("414b4644 00000066")
    assert decode_data_header(hx("414b4644 00000066"), "data") == 0x66


@pytest.mark.parametrize("head", [b"", b"AP", b"APFM\x00\x00"])
def test_truncated_meta_header_is_typed(head: bytes) -> None:
    with pytest.raises(CorruptFileError) as info:
        decode_meta_header(head, "/x/meta")
    assert info.value.path == "/x/meta"


def test_foreign_magic_is_format_error() -> None:
    with pytest.raises(FormatError) as info:
        decode_meta_header(b"SQLite format 3\x00", "/x/meta")
    assert info.value.offset == 0
    with pytest.raises(FormatError):
        decode_data_header(b"APFM\x00\x00\x00\x00", "/x/data")
    with pytest.raises(FormatError):
        decode_data_header(b"PK", "/x/data")


def test_block_with_wrong_own_offset_is_rejected() -> None:
    raw = encode_block(8, 0, 0, 1, b"x")
    with pytest.raises(CorruptFileError) as info:
        decode_block_header(raw, 0, 12, "/x/data")
    assert info.value.offset == 12 and info.value.found == "8"


def test_corrupt_meta_blocks() -> None:
    good = encode_meta_block(MetaBlock("ab", 8, 8, 1))
    with pytest.raises(CorruptFileError):
        decode_meta_blocks(good[:-1], "m")  # block runs past the blocks region
    with pytest.raises(CorruptFileError):
        decode_meta_blocks(good + good, "m")  # the same id twice
    with pytest.raises(CorruptFileError):
        decode_meta_blocks(hx("0005") + good[2:], "m")  # size below 26
    with pytest.raises(CorruptFileError):
        decode_meta_blocks(good[:26] + b"\xff\xfe", "m")  # not UTF-8


def test_id_limits() -> None:
    assert encode_id("é") == b"\xc3\xa9"
    with pytest.raises(ValueError):
        encode_id("")
    with pytest.raises(ValueError):
        encode_id("x" * (MAX_ID_BYTES + 1))
    assert len(encode_meta_block(MetaBlock("x" * MAX_ID_BYTES, 0, 0, 0))) == 0x7FFF


def test_sector_crossing() -> None:
    assert not sector_crossing(0, 24)
    assert not sector_crossing(488, 24)
    assert sector_crossing(489, 24)
    assert not sector_crossing(512, 24)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**40), st.integers(0, 2**40),
                       st.integers(0, 2**62)), unique_by=lambda t: t[0], max_size=8),
)
def test_meta_roundtrip(items: list[tuple[str, int, int, int]]) -> None:
    blocks = [MetaBlock(*i) for i in items]
    raw = encode_meta(blocks)
    _magic, size = decode_meta_header(raw[:8], "m")
    decoded = decode_meta_blocks(raw[8 : 8 + size], "m")
    assert [(b.persistence_id, b.first, b.last, b.highest) for b in decoded] == items


@settings(max_examples=60, deadline=None)
@given(st.integers(8, 2**30), st.integers(0, 2**30), st.integers(1, 2**40), st.lists(st.binary(max_size=40), min_size=1,
                                                                                    max_size=6))
def test_batch_roundtrip(start: int, prev: int, seq: int, payloads: list[bytes]) -> None:
    blob, offsets = encode_batch(start, prev, seq, payloads)
    expected_prev = prev
    for i, off in enumerate(offsets):
        header = decode_block_header(blob, off - start, off, "d")
        assert header.sequence_nr == seq + i and header.previous == expected_prev
        assert header.next == (offsets[i + 1] if i + 1 < len(offsets) else 0)
        assert blob[off - start + BLOCK_HEADER_SIZE : off - start + header.size] == payloads[i]
        expected_prev = off
