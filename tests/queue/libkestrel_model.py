"""A model of libkestrel's journal, for the hand-off tests: what the original
(twitter/libkestrel, ``Journal.scala``, ``RecordReader.scala``,
``JournaledQueue.scala``) does with a queue's files, rule by rule, so that the
tests can hold this engine's files to it without a JVM.

Modelled: the record reader (``readNext``: 0x00 ends the records, unknown
commands are skipped by their header words and data, a PUT over 16 MiB is
"item too large"); the writer's open (every writer file scanned for its first
and last id, a corrupt one truncated at the bad record and scanned again, an
empty one erased; the newest one appended to at its end); its put (id = tail +
1, appended to the newest file, no CHECK); a reader (its head and done ids from
its file, clamped; ``next`` walks the file holding ``head + 1`` and moves to the
next file only through ``fileInfoForId(next)``, so a gap in the ids stops it);
and the queue's get, which first discards expired items at the head.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

LARGEST_DATA = 16 * 1024 * 1024
WRITER = b"\x27\x64\x26\x03"
READER = b"\x26\x3c\x26\x03"


class Corrupted(Exception):
    def __init__(self, position: int, message: str) -> None:
        super().__init__(f"{message} at {position}")
        self.position = position


@dataclass
class Put:
    xid: int
    data: bytes
    add_time: int
    expire_time: int | None
    error_count: int


def read_next(buf: bytes, pos: int) -> tuple[object | None, int]:
    """``RecordReader.readNext``: (record or None at the end, next position)."""
    if pos >= len(buf):
        return None, pos
    cmd = buf[pos]
    if cmd == 0:
        return None, pos
    command, words = cmd >> 4, cmd & 0xF
    at = pos + 1
    if len(buf) - at < words * 4:
        raise Corrupted(pos, "truncated header")
    size = 0
    if command >= 8:
        (size,) = struct.unpack_from("<i", buf, at)
        if size > LARGEST_DATA:
            raise Corrupted(pos, "item too large")
        if len(buf) - at - 4 < size + (words - 1) * 4:
            raise Corrupted(pos, "truncated entry")
    if command == 0:  # READ_HEAD
        (xid,) = struct.unpack_from("<q", buf, at)
        return ("head", xid), at + 8
    if command == 8:  # PUT
        errors, xid, add = struct.unpack_from("<iqq", buf, at + 4)
        expire = struct.unpack_from("<q", buf, at + 24)[0] if words > 6 else None
        start = at + words * 4
        return Put(xid, buf[start : start + size], add, expire, errors), start + size
    if command == 9:  # READ_DONE
        if size % 8:
            raise Corrupted(pos, "corrupted READ_DONE")
        ids = struct.unpack_from(f"<{size // 8}q", buf, at + 4)
        return ("done", list(ids)), at + 4 + size
    return ("unknown", command), pos + words * 4 + size + 1


@dataclass
class FileInfo:
    path: str
    head_id: int
    tail_id: int


@dataclass
class Journal:
    """libkestrel's ``Journal`` on ``directory`` / ``queue`` (opened as its writer)."""

    directory: str
    queue: str
    now_ms: int = 1_800_000_000_000
    id_map: dict[int, FileInfo] = field(default_factory=dict)
    tail: int = 0
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in os.listdir(self.directory):
            if "~~" in name:
                os.unlink(os.path.join(self.directory, name))
        for path in self.writer_files():
            info = self._scan(path)
            if info is not None:
                self.id_map[info.head_id] = info
        if self.id_map:
            newest = self.id_map[max(self.id_map)]
            self.tail = newest.tail_id
            self._newest = newest.path
        else:
            self._newest = self._create()

    def writer_files(self) -> list[str]:
        found = []
        for name in os.listdir(self.directory):
            if name.startswith(self.queue + ".") and "~" not in name:
                suffix = name.split(".")[1]
                if suffix.isdigit():
                    found.append(os.path.join(self.directory, name))
        return found

    def _scan(self, path: str) -> FileInfo | None:
        """``scanJournalFile``: truncate at corruption and scan again; erase an
        empty file."""
        with open(path, "rb") as f:
            buf = f.read()
        if buf[:4] != WRITER:
            raise AssertionError(f"{path}: not a journal file")
        first, last, pos = None, 0, 4
        try:
            while True:
                record, pos = read_next(buf, pos)
                if record is None:
                    break
                if isinstance(record, Put):
                    first = record.xid if first is None else first
                    last = record.xid
        except Corrupted as exc:
            self.log.append(f"corrupted journal {path} at {exc.position}; truncating")
            os.truncate(path, exc.position)
            return self._scan(path)
        if first is None:
            self.log.append(f"empty journal file {path} -- erasing")
            os.unlink(path)
            return None
        return FileInfo(path, first, last)

    def _create(self) -> str:
        number = self.now_ms
        while os.path.exists(os.path.join(self.directory, f"{self.queue}.{number}")):
            number += 1
        path = os.path.join(self.directory, f"{self.queue}.{number}")
        with open(path, "wb") as f:
            f.write(WRITER)
        self.id_map[self.tail + 1] = FileInfo(path, self.tail + 1, 0)
        return path

    def put(self, data: bytes, *, rotate: bool = False) -> int:
        """Append one PUT to the newest file (a new file first with ``rotate``),
        as ``Journal.put`` does: no CHECK, the file ends with the record (its
        clean close truncates the preallocation away)."""
        if rotate:
            self._newest = self._create()
        xid = self.tail + 1
        record = struct.pack("<Biiqq", 0x86, len(data), 0, xid, self.now_ms) + data
        with open(self._newest, "ab") as f:
            f.write(record)
        self.tail = xid
        return xid

    def file_for(self, xid: int) -> FileInfo | None:
        """``fileInfoForId``: the last file whose first id is <= ``xid``."""
        keys = [k for k in self.id_map if k <= xid]
        return self.id_map[max(keys)] if keys else None

    def read_state(self, reader: str) -> tuple[int, set[int]]:
        path = os.path.join(self.directory, f"{self.queue}.read.{reader}")
        with open(path, "rb") as f:
            buf = f.read()
        head, done, pos = 0, set(), 4
        while True:
            record, pos = read_next(buf, pos)
            if record is None:
                break
            if isinstance(record, tuple) and record[0] == "head":
                head = record[1]
            elif isinstance(record, tuple) and record[0] == "done":
                done |= set(record[1])
        earliest = min(self.id_map) if self.id_map else 0
        head = max(min(head, self.tail), earliest - 1)
        return head, {i for i in done if head < i <= self.tail}

    def deliver_all(self, reader: str) -> list[Put]:
        """What the queue's gets hand out to ``reader`` until it finds nothing:
        expired items at the head discarded first (``discardExpired``)."""
        head, done = self.read_state(reader)
        info = self.file_for(head) or self.id_map[min(self.id_map)]
        with open(info.path, "rb") as f:
            buf = f.read()
        pos, current, next_id = 4, info.path, head + 1
        if head >= min(self.id_map):  # skip what is at or below the head in this file
            while True:
                mark = pos
                record, pos = read_next(buf, pos)
                if record is None:
                    break
                if isinstance(record, Put) and record.xid > head:
                    pos = mark
                    break
        out: list[Put] = []
        while next_id <= self.tail:
            record, after = read_next(buf, pos)
            if record is None:
                candidate = self.file_for(next_id)
                if candidate is None or candidate.path == current:
                    break  # no next file for that id: the reader waits for ever
                with open(candidate.path, "rb") as f:
                    buf = f.read()
                pos, current = 4, candidate.path
                continue
            pos = after
            if not isinstance(record, Put):
                continue
            next_id = record.xid + 1
            if record.xid in done:
                continue
            if record.expire_time is not None and record.expire_time <= self.now_ms:
                continue  # expired at the head: discarded (and committed)
            out.append(record)
        return out
