"""A Python client for the journald socket protocol (what the original journald C client's
``journald_open`` / ``journald_write`` / ``journald_close`` do).

Wire format, all numbers 4 bytes MSB first: identifier length, identifier, then
non-empty length-prefixed strings, then a zero length; the server answers one
byte (non-zero: the stream is durable) and closes the connection.

A connection error names the socket path (``[Errno 111] Connection refused:
'/run/app.sock'``), as a file error names its file.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import struct
import weakref
from types import TracebackType

from engine.conventions import require_bytes, timeout_seconds, warn_unclosed
from engine.errors import ClosedError, StreamRejected
from engine.fs import as_path
from engine.streams.stream import stream_ident

# Length prefix of every string on the wire: u32, MSB first.
LENGTH = struct.Struct(">I")
assert LENGTH.size == 4

#: Bytes gathered before a send (the C client's JOURNALD_BUFSIZE is 4096; larger
#: sends cost fewer system calls and change nothing on the wire).
SEND_BUFFER = 64 * 1024


def _naming(exc: OSError, path: str, doing: str) -> OSError:
    """``exc`` again, naming the socket ``path`` (``filename``), as file errors do."""
    if exc.errno is not None:
        named = type(exc)(exc.errno, exc.strerror or doing, path)
    else:  # a timeout: no errno
        named = type(exc)(f"{doing} the journald server on {path}: {exc or 'timed out'}")
    named.__cause__ = exc
    return named


class Client:
    """One stream sent to a journald server over its Unix socket.

    ``write(data)`` sends a string (empty data is skipped: a zero length would
    end the stream); ``close()`` ends the stream and returns once the server
    acknowledged it durable (raises :class:`StreamRejected` otherwise);
    ``abort()`` disconnects early, which makes the server abort the stream.

    ``socket_path`` is a str or :class:`os.PathLike`; ``ident`` bytes or a str
    (sent as UTF-8); ``timeout`` (a :class:`~datetime.timedelta` or seconds;
    None, the default, waits for ever) bounds the connect and every send and
    wait for the acknowledgement (:class:`TimeoutError` naming the socket).
    A client left open is aborted (its connection closed, so the server
    aborts the stream) when it is garbage-collected or at exit, with a
    :class:`ResourceWarning`.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        ident: bytes | str,
        *,
        timeout: float | dt.timedelta | None = None,
    ) -> None:
        path = as_path(socket_path, "socket_path")
        raw = stream_ident(ident)
        wait = timeout_seconds(timeout, "timeout")
        self.socket_path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if wait is not None:
                self._sock.settimeout(wait)
            self._sock.connect(path)
        except OSError as exc:
            self._sock.close()
            raise _naming(exc, path, "connecting to") from exc
        except BaseException:
            self._sock.close()
            raise
        self._out: list[bytes] = [LENGTH.pack(len(raw)), raw]
        self._queued = 4 + len(raw)
        self._done = False
        # The socket's close, not the client's: a forgotten client stays collectable.
        self._finalizer: weakref.finalize = warn_unclosed(
            self, self._sock.close, f"journald client stream {raw!r} on {path} (the server aborts it)"
        )

    def _flush(self) -> None:
        if self._out:
            try:
                self._sock.sendall(b"".join(self._out))
            except OSError as exc:
                raise _naming(exc, self.socket_path, "sending to") from exc
            self._out = []
            self._queued = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` as one string of the stream (bytes-like; a ``str`` is a
        TypeError that says so)."""
        if self._done:
            raise ClosedError("client stream is finished")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            require_bytes(data, "data", serializers=False)
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
        self._finalizer.detach()
        try:
            self._out.append(LENGTH.pack(0))
            self._flush()
            try:
                ack = self._sock.recv(1)
            except OSError as exc:
                raise _naming(exc, self.socket_path, "waiting for the acknowledgement of") from exc
        finally:
            self._sock.close()
        if ack != b"\x01" and not (len(ack) == 1 and ack != b"\x00"):
            raise StreamRejected(
                f"journald server on {self.socket_path} did not acknowledge the stream"
                + (" (answered 0)" if ack else " (it closed the connection)")
            )

    def abort(self) -> None:
        """Disconnect without ending the stream: the server aborts it."""
        if self._done:
            return
        self._done = True
        self._finalizer.detach()
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
    def send(
        cls,
        socket_path: str | os.PathLike[str],
        ident: bytes | str,
        data: bytes,
        *,
        timeout: float | dt.timedelta | None = None,
    ) -> None:
        """Send one whole stream and wait until it is durable (``timeout`` as for
        the constructor)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            require_bytes(data, "data", serializers=False)  # before connecting: nothing reaches the server
        with cls(socket_path, ident, timeout=timeout) as client:
            client.write(data)
