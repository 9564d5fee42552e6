"""A tiny append-only log with switchable bugs: the harness's calibration target.

A stress suite that never fails proves nothing.  This store is small enough to be
obviously right in its honest form, and each flag removes one safety measure the
real stores rely on, so the tests (``tests/stress``) can show that each attack
catches the bug it is meant to catch, and that the shrinker reduces the failing
workload, before trusting the attacks' silence about the real stores:

* ``sync=False``: acknowledges appends without fsync (power loss loses them);
* ``checksum=False``: records carry no CRC, so a torn or damaged record reads back
  as data (like any format without check codes);
* ``dodge_poison=True``: after a failed fsync, reopens the file and carries on
  acknowledging writes (the fsyncgate mistake).

Format of ``<root>/log``: a sequence of records ``u32 length | u32 crc32(data) |
data`` (little-endian; the CRC is 0 when ``checksum=False``).  A record that is cut
short, or whose CRC does not match, ends the log: it is cut off and reported.
"""

from __future__ import annotations

import logging
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

from engine.errors import CorruptFileError, PoisonedError
from engine.fs import FileHandle, FileSystem, OpenMode, crashpoint, create_file, make_dirs
from stress.core import MIN_PAYLOAD, Op, Session, Step, StoreAdapter, Violation, payload

log = logging.getLogger("engine.toystore")

# Record header: u32 data length | u32 CRC-32 of the data (0 without checksums).
RECORD = struct.Struct("<II")
assert RECORD.size == 8


class ToyLog:
    """The log itself; see the module docstring."""

    def __init__(self, fs: FileSystem, root: str, *, sync: bool, checksum: bool, dodge_poison: bool) -> None:
        self.fs = fs
        self.path = root.rstrip("/") + "/log"
        self.sync, self.checksum, self.dodge = sync, checksum, dodge_poison
        if not fs.exists(self.path):
            create_file(fs, self.path).close()
        self.handle: FileHandle = fs.open(self.path, OpenMode.WRITE)
        self.records, end = self._scan(self.handle.read_all())
        if end < self.handle.size():
            log.warning("toy log %s: torn tail cut at %d", self.path, end)
            self.handle.truncate(end)
            self.handle.fsync()

    def _scan(self, data: bytes) -> tuple[list[bytes], int]:
        out, pos = [], 0
        while pos + RECORD.size <= len(data):
            length, crc = RECORD.unpack_from(data, pos)
            body = data[pos + RECORD.size : pos + RECORD.size + length]
            if length == 0 or len(body) < length:
                break
            if self.checksum and zlib.crc32(body) != crc:
                break
            out.append(body)
            pos += RECORD.size + length
        return out, pos

    def append(self, data: bytes) -> int:
        crc = zlib.crc32(data) if self.checksum else 0
        self.handle.append(RECORD.pack(len(data), crc) + data)
        if self.sync:
            crashpoint("toy.append.before-fsync")
            try:
                self.handle.fsync()
            except PoisonedError:
                if not self.dodge:
                    raise
                # The bug under test: a fresh handle is not poisoned, so writing goes on.
                self.handle.close()
                self.handle = self.fs.open(self.path, OpenMode.WRITE)
                raise
        self.records.append(data)
        return len(self.records) - 1

    def close(self) -> None:
        self.handle.close()


def read_toy(fs: FileSystem, root: str, checksum: bool) -> list[bytes]:
    """Every record, reading without repairing; a non-record start is a typed error."""
    path = root.rstrip("/") + "/log"
    with fs.open(path) as handle:
        data = handle.read_all()
    toy = ToyLog.__new__(ToyLog)
    toy.checksum = checksum
    records, end = toy._scan(data)
    if end < len(data):
        if end == 0 and len(data) >= RECORD.size:
            raise CorruptFileError(path, 0, "a toy log record")
        log.warning("toy log %s: stops at %d of %d bytes", path, end, len(data))
    return records


class ToySession(Session):
    def __init__(self, toy: ToyLog) -> None:
        self.toy = toy

    def run(self, op: Op) -> Any:
        return self.toy.append(payload(0, op[1], op[2]))

    def close(self) -> None:
        self.toy.close()


class ToyAdapter(StoreAdapter):
    """Oracle: the records are exactly the acknowledged appends, plus perhaps the one in flight."""

    module = "stress.toystore"
    concurrent_readers = False

    def __init__(self, name: str, *, sync: bool = True, checksum: bool = True, dodge_poison: bool = False) -> None:
        self.name = name
        self.sync, self.checksum_on, self.dodge = sync, checksum, dodge_poison
        # Claimed, not earned, for the no-checksum variant: the damage attack must
        # then report the silent corruption as a violation.
        self.checksummed = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        return [("append", rng.randrange(2**40), rng.randint(MIN_PAYLOAD, 900)) for _ in range(n)]

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def session(self, fs: FileSystem, root: str) -> Session:
        return ToySession(ToyLog(fs, root, sync=self.sync, checksum=self.checksum_on, dodge_poison=self.dodge))

    def empty_model(self) -> Any:
        return []

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        records: list[bytes] = []
        if fs.exists(root):  # the power may have gone before the directory was durable
            toy = ToyLog(fs, root, sync=True, checksum=self.checksum_on, dodge_poison=False)
            records = list(toy.records)
            toy.close()
        expected = list(base) + [payload(0, s.op[1], s.op[2]) for s in acked]
        allowed = [expected]
        if inflight is not None:
            allowed.append([*expected, payload(0, inflight[1], inflight[2])])
        if records not in allowed:
            raise Violation(f"log holds {len(records)} records; expected the {len(expected)} acknowledged "
                            f"(+1 in flight): {'prefix' if records == expected[: len(records)] else 'different data'}")
        return records

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_toy(fs, root, self.checksum_on)

    def damage_is_truncation(self, clean: Any, damaged: Any) -> bool:
        return bool(damaged == clean[: len(damaged)])

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        return None


#: The variants, by name (``stress.stores.get_adapter`` knows them as ``toy-*``).
ADAPTERS = {
    "toy-honest": ToyAdapter("toy-honest"),
    "toy-nosync": ToyAdapter("toy-nosync", sync=False),
    "toy-nocrc": ToyAdapter("toy-nocrc", checksum=False),
    "toy-dodge": ToyAdapter("toy-dodge", dodge_poison=True),
}
