"""Helpers shared by the streams tests (not a test module itself)."""

from __future__ import annotations

import struct
import threading

from engine.fs import FileHandle, FileSystem, OpenMode
from stress.faults import FaultyFS


def crc64_reference(data: bytes) -> int:
    """CRC-64/GO-ISO bit by bit (independent of crcmod): reflected poly 0xD8.., init ~0, final ~."""
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xD800000000000000 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFFFFFFFFFF


class GatedFS(FaultyFS):
    """Real files, but the first fdatasync waits until ``gate`` is set.

    A FaultyFS that never fails: it already delegates every operation to
    ``inner``; this only wraps the handles' fdatasync."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner, fail_at=None)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.armed = False

    def open(self, path: str, mode: OpenMode | str = OpenMode.READ) -> FileHandle:
        handle = self.inner.open(path, mode)
        outer = self
        original = handle.fdatasync

        def gated() -> None:
            if outer.armed:
                outer.armed = False
                outer.entered.set()
                outer.gate.wait()
            original()

        handle.fdatasync = gated  # type: ignore[method-assign]
        return handle


class OriginalWriter:
    """The original server's writer (writer.c + socketio.c buffering), version 2
    layout (MSB-first words), re-expressed for compatibility tests: records go
    through a one-page buffer written out page by page; a sync pads the page,
    writes one zero page after it and steps back onto that zero page."""

    CBUFSIZE = 8192

    def __init__(self, page: int, size: int) -> None:
        self.page = page
        self.file = bytearray(size)
        self.pos = 0
        self.buf = bytearray(page)
        self.off = 0
        self.g = 0
        head = struct.pack(">8sIIII", b"journald", 2, page, 0, 0)
        self.buf[: len(head)] = head
        self.buf[len(head) : len(head) + 8] = struct.pack("<Q", crc64_reference(head))
        self.off = 32
        self.sync()
        self.conns: dict[int, dict[str, object]] = {}

    def _writepage(self) -> None:
        self.file[self.pos : self.pos + self.page] = self.buf
        self.pos += self.page

    def _write(self, data: bytes) -> None:
        while data:
            room = self.page - self.off
            if len(data) >= room:
                self.buf[self.off :] = data[:room]
                self.off = 0
                self._writepage()
                data = data[room:]
            else:
                self.buf[self.off : self.off + len(data)] = data
                self.off += len(data)
                break

    def _record(self, rtype: int, stream: int, record: int, data: bytes) -> None:
        head = struct.pack(">IIIII", rtype, self.g, stream, record, len(data))
        self._write(head)
        self._write(data)
        self._write(struct.pack("<Q", crc64_reference(head + data)))
        self.g += 1

    def sync(self) -> None:
        if self.off:
            self.buf[self.off :] = bytes(self.page - self.off)
            self._writepage()
        self.off = 0
        prev = self.pos
        self.buf = bytearray(self.page)
        self._writepage()
        self.pos = prev

    def connect(self, number: int, ident: bytes) -> None:
        self.conns[number] = {"ident": ident, "total": 0, "records": 0, "wrote": False, "buf": b""}

    def _write_record(self, number: int, final: bool, abort: bool) -> None:
        con = self.conns[number]
        buf = con["buf"]
        assert isinstance(buf, bytes)
        if abort:
            con["buf"] = b""
            if not con["total"]:
                return
            rtype = 8
        else:
            rtype = (2 if buf else 0) | (4 if final else 0)
        if not con["wrote"]:
            info = struct.pack(">I", con["total"]) + con["ident"]  # type: ignore[operator]
            self._record(1, number, con["records"], info)  # type: ignore[arg-type]
            con["wrote"] = True
        self._record(rtype, number, con["records"], b"" if abort else buf)  # type: ignore[arg-type]
        con["total"] = con["total"] + (0 if abort else len(buf))  # type: ignore[operator]
        con["records"] = con["records"] + 1  # type: ignore[operator]
        con["buf"] = b""

    def data(self, number: int, data: bytes) -> None:
        con = self.conns[number]
        for byte in range(len(data)):
            if len(con["buf"]) == self.CBUFSIZE:  # type: ignore[arg-type]
                self._write_record(number, False, False)
            con["buf"] = con["buf"] + data[byte : byte + 1]  # type: ignore[operator]

    def end(self, number: int) -> None:
        self._write_record(number, True, False)

    def abort(self, number: int) -> None:
        self._write_record(number, False, True)
