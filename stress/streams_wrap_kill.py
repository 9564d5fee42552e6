"""``python -m stress.streams_wrap_kill``: issue 28's "#2004 absent, #2003 whole", on a real server.

Runs ``engine streams serve`` on a 4 MiB journal, lets client threads send
streams until it has wrapped many times, kills the server with SIGKILL, and
checks every acknowledged stream against the lap the journal file is in:

* a stream whose end was sent while the file's header already named the final
  lap (no wrap between its end and the kill) must read back complete, with
  every byte: any miss is a loss;
* a stream acknowledged in an earlier lap is gone by design (a wrap evicts
  every stream that ended before it); the reader reports the stream numbers
  that leave a gap among the ones it read (``JournalScan.absent_streams``).

Load-dependent by nature (how many wraps, where the kill lands), so not a test;
the deterministic versions are ``tests/streams/test_streams_wrap.py``.
Exit status 1 on a loss.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from engine.streams import codec, read_events

LENGTH = struct.Struct(">I")


def _lap(path: str) -> int:
    with open(path, "rb") as f:
        return codec.decode_file_header(f.read(codec.FILE_HEADER_SIZE)).first_global


def trial(seconds: float, clients: int, seed: int) -> tuple[int, int, int, int]:
    """One server run; (acknowledged, lost, evicted, absent numbers inside the lap)."""
    directory = tempfile.mkdtemp(prefix="wrapkill-")
    path, sock = os.path.join(directory, "j"), os.path.join(directory, "s")
    server = subprocess.Popen([sys.executable, "-m", "engine", "streams", "serve", sock, path, "--size", "4M"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(sock):
        time.sleep(0.05)
    acked: list[tuple[bytes, int, int]] = []  # (ident, bytes, lap when its end was sent)
    guard = threading.Lock()
    stop = threading.Event()

    def client(number: int) -> None:
        rng = random.Random(seed * 1000 + number)
        k = 0
        while not stop.is_set():
            ident = f"c{number}-{k}".encode()
            k += 1
            size = rng.randint(1, 40000)
            try:
                with socket.socket(socket.AF_UNIX) as conn:
                    conn.connect(sock)
                    conn.sendall(LENGTH.pack(len(ident)) + ident + LENGTH.pack(size) + bytes([number]) * size)
                    lap = _lap(path)
                    conn.sendall(LENGTH.pack(0))
                    if conn.recv(1) == b"\x01":
                        with guard:
                            acked.append((ident, size, lap))
            except OSError:
                return  # the server is gone

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    server.send_signal(signal.SIGKILL)
    server.wait()
    stop.set()
    for thread in threads:
        thread.join()
    final = _lap(path)
    scan = read_events(path)
    got = {s.ident: s for s in scan.streams()}
    lost = [a for a in acked if a[2] == final and not (a[0] in got and got[a[0]].complete
                                                      and len(got[a[0]].data) == a[1])]
    evicted = [a for a in acked if a[2] != final and a[0] not in got]
    for ident, size, lap in lost:
        print(f"LOSS: {ident!r} ({size} bytes) acknowledged in lap {lap} (the final one) is not complete")
    return len(acked), len(lost), len(evicted), len(scan.absent_streams())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress.streams_wrap_kill", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args(argv)
    losses = 0
    for i in range(args.trials):
        acked, lost, evicted, absent = trial(args.seconds, args.clients, args.seed + i)
        losses += lost
        print(f"trial {i}: {acked} acknowledged, {lost} lost, {evicted} evicted by a wrap (acknowledged in an "
              f"earlier lap), {absent} stream number(s) absent between the lap's lowest and highest")
    return 1 if losses else 0


if __name__ == "__main__":
    sys.exit(main())
