"""What the Kestrel server's tests share (imported by bare name, as pytest puts
this directory on the path): memcache clients and raw sockets with timeouts, the
server as a real process (``engine queue serve``, loopback, stopped by its PID),
and libmemcached's command-line tools.

Every wait is bounded: sockets time out, a process that does not start within
:data:`TIMEOUT` fails the test, and every process started is killed by its PID
at the end."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

TIMEOUT = 10.0


def client(host: str, port: int, **options: Any) -> Any:
    """A pymemcache client that waits for every reply (``default_noreply=False``)."""
    from pymemcache.client.base import Client

    options.setdefault("default_noreply", False)
    return Client((host, port), timeout=TIMEOUT, connect_timeout=TIMEOUT, **options)


def raw(host: str, port: int) -> socket.socket:
    return socket.create_connection((host, port), timeout=TIMEOUT)


def ask(sock: socket.socket, data: bytes, until: bytes = b"\r\n") -> bytes:
    """Send ``data``, read until the reply ends with ``until`` (or the server closes)."""
    sock.sendall(data)
    reply = b""
    while not reply.endswith(until):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


def drain(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


@contextmanager
def serving(directory: Path, *options: str) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """``engine queue serve DIR --port 0 --json [options]``: the process and the
    JSON document it prints once it listens (``port``, ``metrics_port``...)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "queue", "serve", str(directory), "--port", "0", "--json", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 2 * TIMEOUT)
        assert ready, "the server did not start"
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else b""
        yield proc, json.loads(line)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(2 * TIMEOUT)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def tool(name: str) -> str:
    """The path of libmemcached's ``name`` (``memcstat``...; Debian's package
    libmemcached-tools, whose binaries some releases call ``libmemcached-memcstat``).
    Missing: the test is skipped with the reason, or fails when
    ``ENGINE_REQUIRE_TOOLS=1`` (CI installs the package and sets it)."""
    for candidate in (name, f"libmemcached-{name}"):
        found = shutil.which(candidate)
        if found is not None:
            return found
    why = f"{name} (libmemcached-tools) is not installed: apt-get install libmemcached-tools"
    if os.environ.get("ENGINE_REQUIRE_TOOLS", "") not in ("", "0"):
        pytest.fail(f"ENGINE_REQUIRE_TOOLS=1 but {why}")
    pytest.skip(why)
