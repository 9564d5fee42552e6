"""A Python client for the journald socket protocol (what the original journald C client's
``journald_open`` / ``journald_write`` / ``journald_close`` do).

Wire format, all numbers 4 bytes MSB first: identifier length, identifier, then
non-empty length-prefixed strings, then a zero length; the server answers one
byte (non-zero: the stream is durable) and closes the connection.
"""

from __future__ import annotations

import socket
import struct
from types import TracebackType

from engine.errors import ClosedError, StreamRejected

# Length prefix of every string on the wire: u32, MSB first.
LENGTH = struct.Struct(">I")
assert LENGTH.size == 4

#: Bytes gathered before a send (the C client's JOURNALD_BUFSIZE is 4096; larger
#: sends cost fewer system calls and change nothing on the wire).
SEND_BUFFER = 64 * 1024


class Client:
    """One stream sent to a journald server over its Unix socket.

    ``write(data)`` sends a string (empty data is skipped: a zero length would
    end the stream); ``close()`` ends the stream and returns once the server
    acknowledged it durable (raises :class:`StreamRejected` otherwise);
    ``abort()`` disconnects early, which makes the server abort the stream.
    """

    def __init__(self, socket_path: str, ident: bytes | str, *, timeout: float | None = None) -> None:
        raw = ident.encode() if isinstance(ident, str) else bytes(ident)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if timeout is not None:
                self._sock.settimeout(timeout)
            self._sock.connect(socket_path)
        except BaseException:
            self._sock.close()
            raise
        self._out: list[bytes] = [LENGTH.pack(len(raw)), raw]
        self._queued = 4 + len(raw)
        self._done = False

    def _flush(self) -> None:
        if self._out:
            self._sock.sendall(b"".join(self._out))
            self._out = []
            self._queued = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as one string of the stream."""
        if self._done:
            raise ClosedError("client stream is finished")
        if not data:
            return
        self._out.append(LENGTH.pack(len(data)))
        self._out.append(bytes(data))
        self._queued += 4 + len(data)
        if self._queued >= SEND_BUFFER:
            self._flush()

    def close(self) -> None:
        """End the stream and wait for the server's acknowledgement."""
        if self._done:
            raise ClosedError("client stream is finished")
        self._done = True
        try:
            self._out.append(LENGTH.pack(0))
            self._flush()
            ack = self._sock.recv(1)
        finally:
            self._sock.close()
        if ack != b"\x01" and not (len(ack) == 1 and ack != b"\x00"):
            raise StreamRejected("journald server did not acknowledge the stream" + (" (answered 0)" if ack else ""))

    def abort(self) -> None:
        """Disconnect without ending the stream: the server aborts it."""
        if self._done:
            return
        self._done = True
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._done:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @classmethod
    def send(cls, socket_path: str, ident: bytes | str, data: bytes) -> None:
        """Send one whole stream and wait until it is durable."""
        with cls(socket_path, ident) as client:
            client.write(data)
