"""Reconciling a segment's index with its log, in memory (no I/O, no clock).

The log is the truth (the issue's rule), the index is derived data, and the format
has no checksum, so the two files cross-check each other:

* an index entry "agrees" with the log when the log holds a whole record at the
  entry's offset with the entry's time, the entry names record ``base + position``,
  the offsets chain (each record ends where the next entry begins) and times never
  go down;
* the agreeing prefix is kept;
* past it, a disagreement is a *torn tail* (a crash cut the unsynced end of either
  file) **unless a later entry still agrees with the log**: then the damage is in
  the middle, which no crash under our write order can produce, and it is reported
  as corruption instead of being "repaired" by cutting committed records;
* records past the last good entry are re-indexed from the log, stopping at the
  first record that is incomplete, has size zero (the zero-filled tail the original LOG/IDX writer leaves,
  FORMATS.md) or goes back in time (torn garbage).

Why a later agreeing entry proves mid-file damage: the writer appends the record,
then its entry, and syncs the log before the index.  A crash therefore leaves every
*durable* entry agreeing, and only the unsynced end of each file damaged (lost,
zeroed or garbage).  Torn entries name index 0 (zeros) or a random index, so they
never agree by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.applog.codec import (
    CRC_SIZE,
    ENTRY_SIZE,
    HEADER_SIZE,
    RecordHeader,
    crc_matches,
    decode_entry,
    encode_entry,
    entry_count,
    entry_offset,
    parse_record,
)


@dataclass
class SegmentScan:
    """What :func:`scan_segment` found: the valid extent and the repairs needed."""

    count: int  # records in the segment after recovery
    log_end: int  # byte length of the log holding exactly those records
    idx_keep: int  # leading index entries that were already right
    rebuilt: list[bytes] = field(default_factory=list)  # entries to write after them
    first_time: int | None = None
    last_time: int | None = None
    log_cut: int = 0  # bytes of log past log_end (a torn or zero tail)
    idx_dropped: int = 0  # whole entries of the index file that were wrong or dangling
    idx_partial: int = 0  # bytes of a partial entry at the index's end
    torn_records: int = 0  # 1 if the walk stopped at a record whose checksum failed
    crc_dropped: int = 0  # bytes of the .crc file past the kept records' entries


    @property
    def crc_end(self) -> int:
        """Byte length of the repaired ``.crc`` file."""
        return HEADER_SIZE + CRC_SIZE * self.count

    @property
    def clean(self) -> bool:
        return not (self.rebuilt or self.log_cut or self.idx_dropped or self.idx_partial or self.crc_dropped)


class Mismatch(Exception):
    """The index and the log disagree in the middle: ``where`` is "idx", "log" or
    "crc", ``offset`` the byte offset in that file."""

    def __init__(self, where: str, offset: int, expected: str, found: str) -> None:
        super().__init__(f"{where} at {offset}: expected {expected}, found {found}")
        self.where = where
        self.offset = offset
        self.expected = expected
        self.found = found


def _is_zero(rec: RecordHeader) -> bool:
    return rec.size == 0 and rec.flags == 0 and rec.time_ns == 0


def _agrees(log: bytes, idx: bytes, base: int, position: int, crc: bytes | None = None) -> bool:
    """Whether entry ``position`` names a whole record of the log with its time
    (and, given the ``.crc`` file, whose checksum verifies).

    An all-zero record header (size, flags and time 0) never counts: it cannot be
    told apart from the zero fill a crash leaves.
    """
    time_ns, index, offset = decode_entry(idx, position)
    if index != base + position or offset < HEADER_SIZE:
        return False
    rec = parse_record(log, offset)
    if rec is None or _is_zero(rec):
        return False
    if crc is not None and not crc_matches(log, rec, crc, position):
        return False
    return rec.time_ns == time_ns


def _valid_follows(log: bytes, idx: bytes, crc: bytes, base: int, k: int, rec: RecordHeader | None) -> bool:
    """Whether a record after the torn record ``k`` still verifies: the next one
    by the torn record's size field, or one that a later index entry names.  A
    crash tears only the unsynced end of a file (a prefix survives), so a valid
    record after an invalid one is damage in the middle."""
    if rec is not None:
        nxt = parse_record(log, rec.end)
        if nxt is not None and not _is_zero(nxt) and crc_matches(log, nxt, crc, k + 1):
            return True
    n_idx = entry_count(len(idx))
    return any(_agrees(log, idx, base, j, crc) for j in {k + 1, n_idx - 1} if k < j < n_idx)


def scan_segment(
    log: bytes, idx: bytes, base: int, min_time: int | None = None, crc: bytes | None = None
) -> SegmentScan:
    """Check ``idx`` (the whole index file, header included) against ``log`` (the
    whole log file) for a segment whose first record has index ``base``.

    ``min_time`` is the last time of the previous segment (times never go down
    across segments either).  ``crc`` is the whole ``.crc`` file (the format extension) or None for
    a segment without one (the original LOG/IDX writer's or an older engine's: the
    weaker rule).  With
    it, every record must match its checksum: the walk stops at the first that
    does not (or has none), which is a torn tail unless a valid record follows it
    (then :class:`Mismatch`); no index entry is kept or rebuilt past it.

    Returns the plan; raises :class:`Mismatch` for damage that is not a torn tail.
    The caller has checked the headers.
    """
    n_idx = entry_count(len(idx))
    idx_partial = (len(idx) - HEADER_SIZE) % ENTRY_SIZE if len(idx) > HEADER_SIZE else 0
    pos = HEADER_SIZE
    k = 0
    last = min_time
    first: int | None = None
    keep: int | None = None  # set once the index stops agreeing
    rebuilt: list[bytes] = []
    prev: RecordHeader | None = None  # the last record that agreed with its entry
    torn = 0
    while True:
        rec = parse_record(log, pos)
        if crc is not None and (rec is None or _is_zero(rec) or not crc_matches(log, rec, crc, k)):
            # No record here, or one whose checksum is missing or wrong: the end of
            # the verified log.  Nothing valid may follow it.
            if rec is not None and _valid_follows(log, idx, crc, base, k, rec):
                raise Mismatch(
                    "log", pos, f"record {base + k} matching its checksum (.crc entry {k})",
                    f"a record of {rec.size} bytes at time {rec.time_ns} that does not, followed by valid records",
                )
            if rec is None and _valid_follows(log, idx, crc, base, k, None):
                raise Mismatch("log", pos, f"record {base + k}", "the log is torn here but later records verify")
            torn = 1 if pos < len(log) and any(log[pos:]) else 0
            break
        if keep is None and k < n_idx:
            t, i, off = decode_entry(idx, k)
            ok = (
                rec is not None
                and i == base + k
                and off == pos
                and t == rec.time_ns
                and (last is None or t >= last)
            )
            if ok:
                assert rec is not None
                prev = rec
                if first is None:
                    first = t
                last = t
                pos = rec.end
                k += 1
                continue
            # Disagreement: a torn tail, unless a later entry still matches the log.
            later = [j for j in (k + 1, n_idx - 1) if k < j < n_idx]
            if any(_agrees(log, idx, base, j, crc) for j in later):
                at_off = parse_record(log, off) if off != pos and prev is not None and off > prev.offset else None
                if at_off is not None and prev is not None and at_off.time_ns == t:
                    # The chain broke at the previous record: its size field is wrong.
                    raise Mismatch(
                        "log",
                        prev.offset,
                        f"record {base + k - 1} of {off - prev.offset - 16} bytes (the next is indexed at {off})",
                        f"size {prev.size}",
                    )
                if rec is None:
                    raise Mismatch(
                        "log", pos, f"record {base + k} (indexed at offset {off})", "the log ends or is torn here"
                    )
                raise Mismatch(
                    "idx",
                    entry_offset(k),
                    f"entry for record {base + k} agreeing with the log record at offset {pos} "
                    f"(time {rec.time_ns}, {rec.size} bytes)",
                    f"time {t}, index {i}, offset {off}",
                )
            keep = k
            continue
        # No (trusted) entry: rebuild it from the log, stopping at the end marker.
        # With a .crc file the record's checksum verified above, so only the time
        # order can stop us (an empty record is then real, not the zero fill).
        if rec is None or (rec.size == 0 and crc is None) or (last is not None and rec.time_ns < last):
            break
        rebuilt.append(encode_entry(rec.time_ns, base + k, pos))
        if first is None:
            first = rec.time_ns
        last = rec.time_ns
        pos = rec.end
        k += 1
    if keep is None:
        keep = min(k, n_idx)
    return SegmentScan(
        count=k,
        log_end=pos,
        idx_keep=keep,
        rebuilt=rebuilt,
        first_time=first,
        last_time=last if k else None,
        log_cut=len(log) - pos,
        idx_dropped=n_idx - keep,
        idx_partial=idx_partial,
        torn_records=torn,
        crc_dropped=max(0, len(crc) - (HEADER_SIZE + CRC_SIZE * k)) if crc is not None else 0,
    )


def _record_offset(log: bytes, position: int) -> int:
    """Byte offset of record ``position`` following the size fields from the
    first record (the log's end if the chain ends first)."""
    pos = HEADER_SIZE
    for _ in range(position):
        rec = parse_record(log, pos)
        if rec is None:
            return len(log)
        pos = rec.end
    return pos


def scan_sealed(
    log: bytes, idx: bytes, base: int, expected: int, min_time: int | None = None, crc: bytes | None = None
) -> SegmentScan:
    """:func:`scan_segment` for a *sealed* segment, one with a newer segment after
    it, which must hold exactly ``expected`` records (the next segment's first
    index minus ``base``).

    A sealed segment was synced before the next one was created, so no crash
    can leave it torn: unlike the newest segment's tail, nothing in its log may
    be cut.  Raises :class:`Mismatch` naming the file and offset where the log
    (or its ``.crc`` file) stops verifying before ``expected`` records, or where
    bytes follow them.  Only index repairs may remain in the returned plan (the
    index is derived data: its entries are rebuilt from records that verify).

    A self-consistent segment of fewer records (its three files end together)
    is returned as it is: the gap to the next segment is the caller's error.
    """
    scan = scan_segment(log, idx, base, min_time, crc)
    if scan.count < expected and not scan.clean:
        offset = scan.log_end
        if crc is not None and offset < len(log):
            found = f"a record failing its checksum (.crc entry at offset {HEADER_SIZE + CRC_SIZE * scan.count})"
        elif offset < len(log):
            found = "a record that does not continue the log"
        else:
            found = "the end of the log"
        raise Mismatch(
            "log", offset,
            f"record {base + scan.count} of a sealed segment of {expected} records "
            f"(the next segment starts at index {base + expected})",
            found,
        )
    if scan.count > expected:
        raise Mismatch(
            "log", _record_offset(log, expected),
            f"the end of a sealed segment of {expected} records (the next segment starts at index {base + expected})",
            f"{scan.count - expected} more records",
        )
    if scan.log_cut:
        raise Mismatch("log", scan.log_end, f"the end of a sealed segment's {scan.count} records",
                       f"{scan.log_cut} more bytes")
    if scan.crc_dropped:
        raise Mismatch("crc", scan.crc_end, f"the end of a sealed segment's {scan.count} checksums",
                       f"{scan.crc_dropped} more bytes")
    return scan
