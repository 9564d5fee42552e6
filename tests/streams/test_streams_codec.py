"""Byte-level tests of the journald v2 codec against hex written by hand."""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streams_helpers import crc64_reference

from engine.errors import CorruptFileError, FormatError
from engine.streams import codec


def test_crc64_check_value_and_c_extension() -> None:
    assert codec.crc64(b"123456789") == 0xB90956C775A41001
    assert crc64_reference(b"123456789") == 0xB90956C775A41001
    # The C extension, not crcmod's pure-Python fallback, computes it.
    crcmod_impl = sys.modules["crcmod.crcmod"]
    assert crcmod_impl._usingExtension is True
    assert crcmod_impl._crcfun.__name__ == "crcmod._crcfunext"
    # Stored least significant byte first.
    assert codec.check_code(b"123456789") == bytes.fromhex("0110a475c75609b9")


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_crc64_matches_bitwise_reference(data: bytes) -> None:
    assert codec.crc64(data) == crc64_reference(data)


def test_file_header_bytes() -> None:
    body = bytes.fromhex(
        "6a6f75726e616c64"  # "journald"
        "00000002"  # version 2, MSB first
        "00001000"  # page size 4096
        "00000000"  # first global record number 0
        "00000000"  # option length 0
    )
    expected = body + struct.pack("<Q", crc64_reference(body))
    assert expected.hex() == "6a6f75726e616c640000000200001000000000000000000066ea306c912765fa"
    assert codec.encode_file_header(4096, 0) == expected
    page = codec.encode_header_page(4096, 0)
    # engine's mark: tag "engine/j" + the check code over header + tag, then NULs.
    mark = b"engine/j" + struct.pack("<Q", crc64_reference(expected + b"engine/j"))
    assert len(page) == 4096 and page[:32] == expected and page[32:48] == mark and page[48:] == bytes(4048)
    assert codec.has_mark(page) and not codec.has_mark(expected + bytes(16))
    header = codec.decode_file_header(page, "j")
    assert (header.version, header.page_size, header.first_global, header.option_length) == (2, 4096, 0, 0)


def test_record_bytes() -> None:
    # INFO record: type 1, global 0, stream 0, record 0, length 6; data = offset 0 + "id".
    head = bytes.fromhex("00000001 00000000 00000000 00000000 00000006")
    data = bytes.fromhex("00000000 6964")
    expected = head + data + struct.pack("<Q", crc64_reference(head + data))
    assert codec.encode_record(codec.INFO, 0, 0, 0, codec.encode_info(0, b"id")) == expected
    assert expected.hex() == "000000010000000000000000000000000000000600000000696484fbffff208969e2"
    # DATA|EOS record: type 6, global 1, stream 0, record 0, length 2, "hi".
    head = bytes.fromhex("00000006 00000001 00000000 00000000 00000002")
    expected = head + b"hi" + struct.pack("<Q", crc64_reference(head + b"hi"))
    rec = codec.encode_record(codec.DATA | codec.EOS, 1, 0, 0, b"hi")
    assert rec == expected
    rh = codec.decode_record_header(rec)
    assert (rh.type, rh.global_record, rh.stream, rh.record, rh.length) == (6, 1, 0, 0, 2)
    assert codec.record_check_ok(rec, 0, 2)
    assert not codec.record_check_ok(rec[:-1] + bytes([rec[-1] ^ 1]), 0, 2)


def test_info_roundtrip_and_short() -> None:
    assert codec.decode_info(codec.encode_info(70000, b"name")) == (70000, b"name")
    assert codec.encode_info(0x1_0000_0005, b"") == bytes.fromhex("00000005")  # wraps modulo 2**32
    with pytest.raises(ValueError):
        codec.decode_info(b"\x00\x01")


@settings(max_examples=100)
@given(
    st.sampled_from([1, 2, 4, 6, 8]),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=200),
)
def test_record_roundtrip(rtype: int, g: int, stream: int, record: int, data: bytes) -> None:
    rec = codec.encode_record(rtype, g, stream, record, data)
    assert len(rec) == codec.RECORD_OVERHEAD + len(data)
    rh = codec.decode_record_header(rec)
    assert (rh.type, rh.global_record, rh.stream, rh.record, rh.length) == (rtype, g, stream, record, len(data))
    assert rec[20 : 20 + len(data)] == data
    assert codec.record_check_ok(rec, 0, len(data))


def _header(version: int = 2, page: int = 4096, first: int = 0, options: int = 0, magic: bytes = b"journald") -> bytes:
    body = struct.pack(">8sIIII", magic, version, page, first, options)
    return body + struct.pack("<Q", crc64_reference(body))


def test_header_errors_are_typed() -> None:
    with pytest.raises(FormatError) as info:
        codec.decode_file_header(_header(magic=b"notjrnld"), "f")
    assert info.value.offset == 0 and info.value.path == "f"
    with pytest.raises(FormatError) as info:
        codec.decode_file_header(_header(version=1), "f")
    assert info.value.offset == 8
    with pytest.raises(FormatError) as info:
        codec.decode_file_header(_header(page=0), "f")
    assert info.value.offset == 12
    with pytest.raises(FormatError) as info:
        codec.decode_file_header(_header(options=5), "f")
    assert info.value.offset == 20
    bad = bytearray(_header())
    bad[16] ^= 0x01  # first global record number changed: check code fails
    with pytest.raises(CorruptFileError) as corrupt:
        codec.decode_file_header(bytes(bad), "f")
    assert not isinstance(corrupt.value, FormatError) and corrupt.value.offset == 24
    with pytest.raises(CorruptFileError) as corrupt:
        codec.decode_file_header(_header()[:20], "f")
    assert corrupt.value.offset == 20
    with pytest.raises(FormatError):
        codec.decode_file_header(b"PK\x03\x04", "f")
    with pytest.raises(CorruptFileError) as corrupt:
        codec.decode_file_header(b"", "f")  # empty: a truncated header
    assert corrupt.value.offset == 0


def test_padding_and_page_ceil() -> None:
    assert codec.page_ceil(4096, 4096) == 4096
    assert codec.page_ceil(4097, 4096) == 8192
    assert codec.padding(4100, 4096) == bytes(4092)
    assert codec.padding(8192, 4096) == b""
    assert codec.describe_type(6) == "DATA|EOS"
    assert codec.describe_type(0x18) == "ABORT|flags 0x10"


@settings(max_examples=50)
@given(st.sampled_from([1, 2, 4, 6, 8]), st.integers(0, 2**32 - 1), st.binary(max_size=100))
def test_append_record_equals_encode_record(rtype: int, g: int, data: bytes) -> None:
    out = bytearray(b"prefix")
    codec.append_record(out, rtype, g, 7, 9, data)
    assert bytes(out) == b"prefix" + codec.encode_record(rtype, g, 7, 9, data)
