"""Instructions per request of ``engine queue serve`` (callgrind), this tree against
another revision: what the server's code costs, whatever else the machine runs.

    python3 -m benchmarks.kestrel_instructions --against main
    python3 -m benchmarks.kestrel_instructions --against main --requests 500   # shorter

Each server runs under ``valgrind --tool=callgrind`` with instrumentation off;
one client connection fills the queue, warms up, then instrumentation is turned
on (``callgrind_control -i on``) for ``--requests`` pipelined requests of one kind
and off again.  Counted per request: the event loop's thread (thread 1, where
every request is served) and all threads (the queue's background thread, the
pool).  The kinds: plain ``get`` of ready items (``--sync never``), ``set``
(``--sync never``: staged) and ``set`` (``--sync always``: group commit, so a
batch's size, and with it the count, depends on timing a little).  Wall time
swings with the machine's load (a shared 2-core machine: 0.3x to 2x between
paired rounds); instruction counts do not.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import socket
import subprocess
import tempfile

from benchmarks.common import bench_dir
from benchmarks.kestrel import HERE, ITEM, start_engine
from benchmarks.versions import build_extensions, git, worktree_at

KINDS = (("get", "never"), ("set", "never"), ("set", "always"))
SET = b"set q 0 0 %d\r\n%s\r\n" % (len(ITEM), ITEM)
GET = b"get q\r\n"


def pipeline(sock: socket.socket, request: bytes, reply_end: bytes, count: int) -> None:
    """Send ``count`` requests, at most 200 ahead of the replies, and read them all."""
    sent = answered = 0
    pending = b""
    while answered < count:
        if sent < count and sent - answered < 200:
            batch = min(50, count - sent)
            sock.sendall(request * batch)
            sent += batch
        pending += sock.recv(1 << 20)
        ends = pending.count(reply_end)
        if ends:
            answered += ends
            pending = pending[pending.rfind(reply_end) + len(reply_end) :]


def measure(tree: str, kind: str, sync: str, count: int) -> tuple[int, int]:
    """(instructions on the loop's thread, on all threads) for ``count`` requests."""
    with bench_dir("kestrel-instr-") as directory, tempfile.TemporaryDirectory() as out_dir:
        out = os.path.join(out_dir, "callgrind.out")
        wrapper = ("valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                   f"--callgrind-out-file={out}", "--log-file=/dev/null")
        proc, port = start_engine(directory, sync, tree, wrapper=wrapper, start_s=600)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=600) as sock:
                pipeline(sock, GET, b"END\r\n", 1)  # the default reader: made now
                pipeline(sock, SET, b"STORED\r\n", 200 + (count if kind == "get" else 0))
                pipeline(sock, GET, b"END\r\n", 100)  # warm: every path of a get ran
                _toggle(proc.pid, "on")
                if kind == "get":
                    pipeline(sock, GET, b"END\r\n", count)
                else:
                    pipeline(sock, SET, b"STORED\r\n", count)
                _toggle(proc.pid, "off")
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(600)
            if proc.stdout is not None:
                proc.stdout.close()
        per_thread = {}
        for path in glob.glob(out + "-*"):
            with open(path, encoding="utf-8") as f:
                found = re.search(r"^totals: (\d+)", f.read(), re.M)
            per_thread[path.rsplit("-", 1)[1]] = int(found.group(1)) if found else 0
    return per_thread.get("01", 0), sum(per_thread.values())


def _toggle(pid: int, state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(pid)], check=True, capture_output=True, timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, metavar="REV", help="the git revision to compare with")
    parser.add_argument("--requests", type=int, default=2000, metavar="COUNT", help="requests counted per kind")
    args = parser.parse_args()
    commit = git(HERE, "rev-parse", "--verify", f"{args.against}^{{commit}}")
    with worktree_at(HERE, commit) as tree:
        print(f"{args.against} ({commit[:9]}): C extensions {build_extensions(tree)}", flush=True)
        for kind, sync in KINDS:
            got = {name: measure(root, kind, sync, args.requests) for name, root in (("rev", tree), ("this", HERE))}
            (rev_loop, rev_all), (this_loop, this_all) = got["rev"], got["this"]
            n = args.requests
            print(f"{kind} (--sync {sync}): instructions per request, loop thread: {args.against} "
                  f"{rev_loop / n:,.0f}, this {this_loop / n:,.0f} ({this_loop / rev_loop:.3f}x); all threads: "
                  f"{rev_all / n:,.0f}, {this_all / n:,.0f} ({this_all / rev_all:.3f}x)", flush=True)


if __name__ == "__main__":
    main()
