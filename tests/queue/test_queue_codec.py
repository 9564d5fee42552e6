"""Byte-level tests of the libkestrel record codec against hex written by hand."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.queue import codec


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def test_magics_in_file_order() -> None:
    assert h("27 64 26 03") == codec.WRITER_MAGIC
    assert h("26 3c 26 03") == codec.READER_MAGIC


def test_put_without_expiry_bytes() -> None:
    # 0x86 = PUT, 6 header words; size 2, errors 0, xid 1, add_time 1000 ms, "hi"
    expected = h("86 02000000 00000000 0100000000000000 e803000000000000 6869")
    assert codec.encode_put(1, 1000, b"hi") == expected
    record, end = codec.decode_record(expected, 0)
    assert record == codec.Put(1, b"hi", 1000, None, 0)
    assert end == len(expected) == 27


def test_put_with_expiry_and_errors_bytes() -> None:
    # 0x88 = PUT, 8 words; size 3, errors 2, xid 0x0102, add 1000, expire 2000, "abc"
    expected = h("88 03000000 02000000 0201000000000000 e803000000000000 d007000000000000 616263")
    assert codec.encode_put(0x0102, 1000, b"abc", expire_time=2000, error_count=2) == expected
    assert codec.decode_record(expected, 0) == (codec.Put(0x0102, b"abc", 1000, 2000, 2), 36)


def test_read_head_bytes() -> None:
    expected = h("02 0500000000000000")
    assert codec.encode_read_head(5) == expected
    assert codec.decode_record(expected, 0) == (codec.ReadHead(5), 9)


def test_read_done_length_is_bytes_not_count() -> None:
    # Two ids -> the i32 says 16 (bytes), as libkestrel writes it.
    expected = h("91 10000000 0700000000000000 0900000000000000")
    assert codec.encode_read_done([7, 9]) == expected
    assert codec.decode_record(expected, 0) == (codec.ReadDone((7, 9)), 21)


def test_read_done_length_not_multiple_of_8_is_rejected() -> None:
    with pytest.raises(codec.BadRecord) as info:
        codec.decode_record(h("91 02000000 0700"), 0)
    assert info.value.offset == 0


def test_reader_file_bytes() -> None:
    records = h("02 0400000000000000  91 08000000 0600000000000000")
    expected = h("26 3c 26 03  22 00000000 00000000") + records + h("22") + struct.pack("<II", zlib.crc32(records), 22)
    assert codec.encode_reader_file(4, [6]) == expected
    assert codec.decode_reader_file(expected) == (4, [6])
    # The previous version's layout (and libkestrel's): no CHECK records, still read.
    assert codec.decode_reader_file(h("26 3c 26 03") + records) == (4, [6])


def test_every_damage_to_a_checksummed_reader_file_is_detected() -> None:
    """Each single flipped bit, and every truncation, of a reader file with CHECKs
    raises (none decodes to other ids): the checksum covers what the id-window
    rules cannot (a done id turned into another plausible one)."""
    good = codec.encode_reader_file(7, [9, 12, 40])
    for byte in range(codec.MAGIC_SIZE, len(good)):
        for bit in range(8):
            bad = bytearray(good)
            bad[byte] ^= 1 << bit
            with pytest.raises((codec.BadRecord, codec.Incomplete)):
                codec.decode_reader_file(bytes(bad))
    for size in range(codec.MAGIC_SIZE, len(good)):
        with pytest.raises((codec.BadRecord, codec.Incomplete)):
            codec.decode_reader_file(good[:size])


def test_unknown_commands_are_skipped() -> None:
    # 0x31: command 3, one header word, no data.  0xa2: command 10 (bit 7 set), two
    # header words, the first one = 3 data bytes.  Then a PUT.
    put = codec.encode_put(9, 1, b"z")
    buf = h("31 deadbeef") + h("a2 03000000 00000000 414243") + put
    rec1, end1 = codec.decode_record(buf, 0)
    assert rec1 == codec.Unknown(3, h("deadbeef"), b"") and end1 == 5
    rec2, end2 = codec.decode_record(buf, end1)
    assert rec2 == codec.Unknown(10, h("03000000 00000000"), b"ABC") and end2 == 17
    assert codec.decode_record(buf, end2) == (codec.Put(9, b"z", 1, None, 0), len(buf))


def test_zero_byte_is_the_end_marker() -> None:
    buf = codec.encode_put(1, 1, b"a") + h("00 00 00 00")
    _, end = codec.decode_record(buf, 0)
    assert codec.decode_record(buf, end) == (None, end)
    reader = codec.READER_MAGIC + codec.encode_read_head(3) + h("00 00 00")
    assert codec.decode_reader_file(reader) == (3, [])


def test_garbage_after_end_marker_in_reader_file_is_bad() -> None:
    reader = codec.READER_MAGIC + codec.encode_read_head(3) + h("00 17")
    with pytest.raises(codec.BadRecord):
        codec.decode_reader_file(reader)


def test_incomplete_records() -> None:
    full = codec.encode_put(1, 1, b"hello", expire_time=5)
    for cut in range(1, len(full)):
        with pytest.raises(codec.Incomplete) as info:
            codec.decode_record(full[:cut], 0)
        assert info.value.offset == 0


@pytest.mark.parametrize(
    "blob,why",
    [
        (h("87") + bytes(28), "PUT with 7 words"),
        (h("86 ffffffff 00000000 0100000000000000 0000000000000000"), "negative size"),
        (h("86 00000000 00000000 0000000000000000 0000000000000000"), "id 0"),
        (h("86 00000000 ffffffff 0100000000000000 0000000000000000"), "negative error count"),
        (h("03 00000000 00000000 00000000"), "READ_HEAD with 3 words"),
        (h("02 ffffffffffffffff"), "negative head"),
    ],
)
def test_bad_records(blob: bytes, why: str) -> None:
    with pytest.raises(codec.BadRecord):
        codec.decode_record(blob, 0)


def test_a_data_length_is_bounded_by_the_bytes_there_not_by_a_configured_size() -> None:
    """Decoders know no max_item_size (a writer's limit): a length the buffer holds
    is read whatever its size; one past the buffer is Incomplete (nothing is
    allocated for it); a negative one is bad."""
    rec = codec.encode_put(1, 1, b"x" * (codec.DEFAULT_MAX_ITEM_SIZE + 1))
    put, end = codec.decode_record(rec, 0)
    assert isinstance(put, codec.Put) and len(put.data) == codec.DEFAULT_MAX_ITEM_SIZE + 1 and end == len(rec)
    huge = h("86 ffffff7f 00000000 0100000000000000 0000000000000000")  # 2**31 - 1 bytes announced
    with pytest.raises(codec.Incomplete):
        codec.decode_record(huge, 0)
    with pytest.raises(codec.BadRecord):
        codec.decode_record(h("86 ffffffff 00000000 0100000000000000 0000000000000000"), 0)


puts = st.builds(
    lambda xid, add, exp, err, data: codec.Put(xid, data, add, exp, err),
    st.integers(1, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.integers(0, codec.MAX_ERROR_COUNT),
    st.binary(max_size=300),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(puts, max_size=10))
def test_put_roundtrip_sequence(records: list[codec.Put]) -> None:
    blob = b"".join(
        codec.encode_put(r.xid, r.add_time, r.data, expire_time=r.expire_time, error_count=r.error_count)
        for r in records
    )
    pos, out = 0, []
    while True:
        rec, pos = codec.decode_record(blob, pos)
        if rec is None:
            break
        out.append(rec)
    assert out == records and pos == len(blob)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**63 - 1), st.sets(st.integers(1, 2**63 - 1), max_size=50))
def test_reader_file_roundtrip(head: int, done: set[int]) -> None:
    assert codec.decode_reader_file(codec.encode_reader_file(head, done)) == (head, sorted(done))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_decoder_never_crashes_on_garbage(blob: bytes) -> None:
    try:
        _rec, end = codec.decode_record(blob, 0)
    except (codec.Incomplete, codec.BadRecord):
        return
    assert 0 <= end <= len(blob)


def test_check_record_and_the_documented_example() -> None:
    # The worked example of docs/formats/queue.md, byte for byte.
    from engine.queue.segments import SEGMENT_HEADER

    records = codec.encode_put(1, 1700000000000, b"hi") + codec.encode_put(
        2, 1700000000001, b"abc", expire_time=1700000060000
    )
    blob = SEGMENT_HEADER + records + codec.encode_check(records)
    assert blob == h(
        "27 64 26 03 22 00 00 00 00 00 00 00 00 86 02 00"
        "00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 68"
        "e5 cf 8b 01 00 00 68 69 88 03 00 00 00 00 00 00"
        "00 02 00 00 00 00 00 00 00 01 68 e5 cf 8b 01 00"
        "00 60 52 e6 cf 8b 01 00 00 61 62 63 22 9b c4 c8"
        "e9 3f 00 00 00"
    )
    check, end = codec.decode_record(blob, 76)
    assert check == codec.Check(0xE9C8C49B, 63) and end == len(blob)
    assert codec.check_matches(check, blob[13:76])  # type: ignore[arg-type]
    assert not codec.check_matches(check, blob[13:75] + b"\x00")  # type: ignore[arg-type]
    reader = codec.encode_reader_file(1, [3])
    assert reader == h(
        "26 3c 26 03 22 00 00 00 00 00 00 00 00 02 01 00"
        "00 00 00 00 00 00 91 08 00 00 00 03 00 00 00 00"
        f"00 00 00 22 {struct.pack('<I', zlib.crc32(reader[13:35])).hex()} 16 00 00 00"
    )
