"""Byte-level tests of the LOG/IDX codec and of the pure recovery scan, against hex
written by hand from seed 004 and FORMATS.md."""

from __future__ import annotations

import pytest

from engine.applog import codec
from engine.applog.recovery import Mismatch, scan_segment

# LOG header, TTL 1000 ns: "LOG", version 1, flags 0, i64 1000 little-endian.
LOG_HEADER_HEX = "4c4f4701" "00000000" "e803000000000000"
IDX_HEADER_HEX = "49445801" "00000000" "e803000000000000"
# Record b"hi", flags 7, time 0x0102030405060708: u32 size, u32 flags, i64 time, data.
RECORD_HEX = "02000000" "07000000" "0807060504030201" "6869"
# Its index entry as record 0 at offset 16: i64 time, u64 index, i64 offset.
ENTRY_HEX = "0807060504030201" "0000000000000000" "1000000000000000"
T = 0x0102030405060708


def test_headers_match_hand_written_hex() -> None:
    assert codec.encode_header(codec.LOG_MAGIC, 1000).hex() == LOG_HEADER_HEX
    assert codec.encode_header(codec.IDX_MAGIC, 1000).hex() == IDX_HEADER_HEX
    head = codec.decode_header(bytes.fromhex(LOG_HEADER_HEX), codec.LOG_MAGIC)
    assert (head.magic, head.version, head.flags, head.ttl_ns) == (b"LOG", 1, 0, 1000)
    # a negative TTL (never expires) is a signed i64
    assert codec.encode_header(codec.LOG_MAGIC, -1).hex().endswith("ff" * 8)


def test_record_and_entry_match_hand_written_hex() -> None:
    assert codec.encode_record(b"hi", 7, T).hex() == RECORD_HEX
    assert codec.encode_entry(T, 0, 16).hex() == ENTRY_HEX
    rec = codec.parse_record(bytes.fromhex(LOG_HEADER_HEX + RECORD_HEX), 16)
    assert rec is not None and (rec.size, rec.flags, rec.time_ns, rec.end) == (2, 7, T, 34)
    idx = bytes.fromhex(IDX_HEADER_HEX + ENTRY_HEX)
    assert codec.decode_entry(idx, 0) == (T, 0, 16)
    assert codec.entry_count(len(idx)) == 1 and codec.entry_offset(3) == 16 + 72


@pytest.mark.parametrize(
    ("hex_bytes", "magic", "fragment"),
    [
        ("4c4f47", codec.LOG_MAGIC, "16-byte"),  # short
        ("49445801" + "00" * 12, codec.LOG_MAGIC, "signature LOG"),  # IDX where LOG expected
        ("4c4f4702" + "00" * 12, codec.LOG_MAGIC, "version 1"),  # unknown version
        ("27642603" + "00" * 12, codec.IDX_MAGIC, "signature IDX"),  # a kestrel journal
    ],
)
def test_bad_headers_are_refused(hex_bytes: str, magic: bytes, fragment: str) -> None:
    with pytest.raises(codec.HeaderError, match=fragment):
        codec.decode_header(bytes.fromhex(hex_bytes), magic)


def test_parse_record_reports_incomplete_tails() -> None:
    whole = bytes.fromhex(LOG_HEADER_HEX + RECORD_HEX)
    for cut in range(16, len(whole)):
        assert codec.parse_record(whole[:cut], 16) is None


def test_segment_names_are_kafka_style() -> None:
    assert codec.segment_name(42, ".log") == "00000000000000000042.log"
    assert codec.parse_segment_name("00000000000000000042.idx") == (42, ".idx")
    for bad in ("42.log", "0000000000000000004x.log", "00000000000000000042.index", "lock"):
        assert codec.parse_segment_name(bad) is None


def test_bisect_time_finds_first_at_or_after() -> None:
    times = [5, 5, 7, 9, 9, 9, 12]
    idx = codec.encode_header(codec.IDX_MAGIC, 0) + b"".join(
        codec.encode_entry(t, i, 16 + 16 * i) for i, t in enumerate(times)
    )
    for t0, want in [(0, 0), (5, 0), (6, 2), (9, 3), (10, 6), (12, 6), (13, 7)]:
        assert codec.bisect_time(idx, len(times), t0) == want


# -- the recovery scan ---------------------------------------------------------------


def _segment(records: list[tuple[bytes, int]], base: int = 0) -> tuple[bytes, bytes]:
    log = bytearray(codec.encode_header(codec.LOG_MAGIC, 0))
    idx = bytearray(codec.encode_header(codec.IDX_MAGIC, 0))
    for k, (data, t) in enumerate(records):
        idx += codec.encode_entry(t, base + k, len(log))
        log += codec.encode_record(data, 0, t)
    return bytes(log), bytes(idx)


RECS = [(b"r%d" % k * (k + 1), 100 + k) for k in range(6)]


def test_clean_segment_scans_clean() -> None:
    log, idx = _segment(RECS, base=10)
    scan = scan_segment(log, idx, 10)
    assert scan.clean and scan.count == 6 and scan.log_end == len(log)
    assert (scan.first_time, scan.last_time) == (100, 105)


def test_missing_entries_are_rebuilt_from_the_log() -> None:
    log, idx = _segment(RECS)
    short_idx = idx[: codec.entry_offset(2) + 5]  # two entries and a partial one
    scan = scan_segment(log, short_idx, 0)
    assert scan.count == 6 and scan.idx_keep == 2 and scan.idx_partial == 5
    assert b"".join(scan.rebuilt) == idx[codec.entry_offset(2) :]


def test_torn_log_tail_drops_dangling_entries() -> None:
    log, idx = _segment(RECS)
    off4 = codec.decode_entry(idx, 4)[2]
    for torn in (log[: off4 + 3], log[:off4] + b"\x00" * 40, log[:off4] + b"\xff" * 40):
        scan = scan_segment(torn, idx, 0)
        assert (scan.count, scan.log_end, scan.idx_keep, scan.idx_dropped) == (4, off4, 4, 2)
        assert scan.log_cut == len(torn) - off4


def test_zero_size_past_the_index_is_the_end() -> None:
    log, idx = _segment(RECS)
    scan = scan_segment(log + b"\x00" * 64, idx, 0)
    assert scan.count == 6 and scan.log_cut == 64


def test_zero_size_record_that_is_indexed_is_kept() -> None:
    log, idx = _segment([(b"", 1), (b"x", 2)])
    scan = scan_segment(log, idx, 0)
    assert scan.clean and scan.count == 2


def test_mid_index_disagreement_is_corruption_not_a_tail() -> None:
    log, idx = _segment(RECS)
    bad = bytearray(idx)
    bad[codec.entry_offset(2)] ^= 0x01  # entry 2's time
    with pytest.raises(Mismatch) as err:
        scan_segment(log, bytes(bad), 0)
    assert err.value.where == "idx" and err.value.offset == codec.entry_offset(2)


def test_mid_log_damage_is_corruption() -> None:
    log, idx = _segment(RECS)
    off2 = codec.decode_entry(idx, 2)[2]
    bad = bytearray(log)
    bad[off2] ^= 0x40  # record 2's size
    with pytest.raises(Mismatch) as err:
        scan_segment(bytes(bad), idx, 0)
    assert (err.value.where, err.value.offset) == ("log", off2)
    assert "size 70" in str(err.value)


def test_last_entry_damage_is_a_tail_and_rebuilt_from_the_log() -> None:
    log, idx = _segment(RECS)
    bad = bytearray(idx)
    bad[codec.entry_offset(5) + 8] ^= 0x01  # last entry's index field
    scan = scan_segment(log, bytes(bad), 0)
    assert scan.count == 6 and scan.idx_keep == 5 and len(scan.rebuilt) == 1 and scan.idx_dropped == 1


def test_time_going_back_past_the_index_ends_the_log() -> None:
    log, idx = _segment(RECS)
    log2 = log + codec.encode_record(b"old", 0, 50)
    scan = scan_segment(log2, idx, 0)
    assert scan.count == 6 and scan.log_cut == 19


def test_zero_tail_of_an_empty_segment_is_not_a_record() -> None:
    log, idx = _segment([])
    scan = scan_segment(log + b"\x00" * 48, idx, 7)
    assert scan.count == 0 and scan.log_end == 16 and scan.log_cut == 48


def test_check_header_names_file_and_offset() -> None:
    import pytest

    from engine.applog.codec import IDX_MAGIC, LOG_MAGIC, check_header, encode_header
    from engine.errors import CorruptFileError, FormatError

    good = encode_header(LOG_MAGIC, 7)
    assert check_header(good, LOG_MAGIC, "/x.log").ttl_ns == 7
    with pytest.raises(FormatError) as info:
        check_header(good, IDX_MAGIC, "/x.idx")
    assert (info.value.path, info.value.offset) == ("/x.idx", 0)
    with pytest.raises(FormatError) as info:
        check_header(good[:3] + b"\x02" + good[4:], LOG_MAGIC, "/x.log")
    assert info.value.offset == 3, "a wrong version is reported at the version byte"
    with pytest.raises(CorruptFileError) as short:
        check_header(good[:5], LOG_MAGIC, "/x.log")
    assert short.value.offset == 5, "a short header is reported where the file ends"
