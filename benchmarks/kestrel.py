"""The Kestrel-compatible server (``engine queue serve``) against Redis, side by side.

    python3 -m benchmarks.kestrel               # 5 rounds of 16 x 2,000 items per system
    python3 -m benchmarks.kestrel --quick       # 3 rounds of 16 x 300 items
    python3 -m benchmarks.kestrel --against main  # also the server of git revision main

16 clients (4 processes x 4 threads; pymemcache for engine, redis-py for Redis),
100-byte items: every client sets its share, then (all sets done) every client
gets its share back (plain ``get``: removed at once; Redis ``BRPOP``).  Figures
are items/s over the whole phase, the median of the rounds; the systems run
alternately, round by round, each server in its own process on loopback,
stopped by its PID.

Pairs: engine ``--sync always`` with Redis ``appendonly yes`` + ``appendfsync
always``; engine ``--sync 1`` (fsync every second) with ``appendfsync everysec``.
Redis is skipped if ``redis-server`` or redis-py is missing.  Note what each
side makes durable: Redis also fsyncs its pops (under ``always``); engine's
gets are confirmed in memory and checkpointed every second (at-least-once).

``--against REV`` adds, for each pairing, the server of git revision ``REV``
(checked out with ``git worktree`` and its C extensions built, as
``benchmarks.versions`` does) to the rotation, and reports this tree's rate over
``REV``'s as the median of the per-round ratios.  Each engine server runs with
``python -P`` and only its own tree on ``PYTHONPATH``.  Which system goes first
rotates round by round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks.common import Row, Target, bench_dir, report

ITEM = b"x" * 100
PROCESSES, THREADS = 4, 4
RESULTS = os.path.join(os.path.dirname(__file__), "results", "kestrel.json")


# -- servers ---------------------------------------------------------------------------


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_engine(
    directory: str, sync: str, tree: str = HERE, *, wrapper: tuple[str, ...] = (), start_s: float = 30
) -> tuple[subprocess.Popen[bytes], int]:
    """``engine queue serve`` of the source tree ``tree`` (this one by default),
    run under ``wrapper`` (valgrind, say) if given."""
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-P", "-m", "engine", "queue", "serve", directory, "--port", "0", "--json",
         "--sync", sync],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": tree},
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], start_s)
    if not ready:
        stop(proc)
        raise RuntimeError("engine queue serve did not start")
    return proc, int(json.loads(proc.stdout.readline())["port"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(directory: str, fsync: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--appendonly", "yes",
         "--appendfsync", fsync, "--save", "", "--daemonize", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    stop(proc)
    raise RuntimeError("redis-server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, SIGKILL if it does not exit within 30 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


# -- clients ---------------------------------------------------------------------------


def _connect(kind: str, port: int) -> Any:
    if kind == "engine":
        from pymemcache.client.base import Client

        return Client(("127.0.0.1", port), default_noreply=False, timeout=60, connect_timeout=30)
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)


def _client_process(kind: str, port: int, count: int, go: Any, go_get: Any, done: Any) -> None:
    """THREADS clients: wait for ``go``, set ``count`` items each, report; wait for
    ``go_get``, get ``count`` items each, report."""
    clients = [_connect(kind, port) for _ in range(THREADS)]

    def sets(c: Any) -> None:
        for _ in range(count):
            if kind == "engine":
                assert c.set("bench", ITEM)
            else:
                c.lpush("bench", ITEM)

    def gets(c: Any) -> None:
        got = 0
        while got < count:
            if kind == "engine":
                got += c.get("bench/t=5000") is not None
            else:
                got += c.brpop("bench", timeout=5) is not None

    for phase, event in ((sets, go), (gets, go_get)):
        event.wait()
        threads = [threading.Thread(target=phase, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.put(phase.__name__)


def run_round(kind: str, port: int, per_client: int) -> tuple[float, float]:
    """(sets/s, gets/s) of PROCESSES x THREADS clients against the server at ``port``."""
    ctx = mp.get_context("fork")
    go, go_get, done = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client_process, args=(kind, port, per_client, go, go_get, done))
             for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # clients connected
    total = PROCESSES * THREADS * per_client
    rates = []
    for event in (go, go_get):
        start = time.perf_counter()
        event.set()
        for _ in procs:
            done.get(timeout=600)
        rates.append(total / (time.perf_counter() - start))
    for proc in procs:
        proc.join(60)
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run (3 rounds, 300 items per client)")
    parser.add_argument("--rounds", type=int, default=None, metavar="COUNT", help="rounds per system")
    parser.add_argument("--items", type=int, default=None, metavar="COUNT", help="items per client per round")
    parser.add_argument("--against", default=None, metavar="REV",
                        help="also run the server of this git revision, paired round by round")
    args = parser.parse_args()
    if args.against is None:
        run(args, None, None)
        return
    from benchmarks.versions import build_extensions, git, worktree_at

    commit = git(HERE, "rev-parse", "--verify", f"{args.against}^{{commit}}")
    with worktree_at(HERE, commit) as tree:
        print(f"{args.against} ({commit[:9]}) in {tree}: C extensions {build_extensions(tree)}", flush=True)
        run(args, args.against, tree)


def run(args: argparse.Namespace, rev: str | None, rev_tree: str | None) -> None:
    rounds = args.rounds or (3 if args.quick else 5)
    per_client = args.items or (300 if args.quick else 2000)
    have_redis = shutil.which("redis-server") is not None
    try:
        import redis  # noqa: F401
    except ImportError:
        have_redis = False
    pairs = [("always", "always"), ("1", "everysec")]
    results: dict[str, list[tuple[float, float]]] = {}
    load_before = os.getloadavg()
    for round_no in range(rounds):
        for engine_sync, redis_fsync in pairs:
            systems = [(f"engine --sync {engine_sync}", "engine", engine_sync, HERE)]
            if rev is not None and rev_tree is not None:
                systems.append((f"engine@{rev} --sync {engine_sync}", "engine", engine_sync, rev_tree))
            if have_redis:
                systems.append((f"redis appendfsync {redis_fsync}", "redis", redis_fsync, ""))
            turn = round_no % len(systems)
            for name, kind, mode, tree in systems[turn:] + systems[:turn]:  # who goes first rotates
                with bench_dir("kestrel-bench-") as directory:
                    if kind == "engine":
                        proc, port = start_engine(directory, mode, tree)
                    else:
                        proc, port = start_redis(directory, mode)
                    try:
                        results.setdefault(name, []).append(run_round(kind, port, per_client))
                    finally:
                        stop(proc)
                print(f"round {round_no + 1}: {name}: set {results[name][-1][0]:,.0f}/s, "
                      f"get {results[name][-1][1]:,.0f}/s", flush=True)
    load_after = os.getloadavg()
    rows = []
    for name, figures in results.items():
        sets = statistics.median(f[0] for f in figures)
        gets = statistics.median(f[1] for f in figures)
        note = f"median of {len(figures)}, {PROCESSES * THREADS} clients"
        rows += [Row(f"{name}: set", sets, "items/s", note), Row(f"{name}: get", gets, "items/s", note)]
    targets: list[Target] = []
    paired: dict[str, list[float]] = {}
    comparisons = []
    if have_redis:
        comparisons += [("engine --sync always", "redis appendfsync always", 1.0),
                        ("engine --sync 1", "redis appendfsync everysec", 0.5)]
    if rev is not None:
        comparisons += [(f"engine --sync {s}", f"engine@{rev} --sync {s}", 0.95) for s, _ in pairs]
    for engine_name, other_name, bound in comparisons:
        for phase, index in (("set", 0), ("get", 1)):
            if phase == "get" and other_name.startswith("redis"):
                continue  # the targets against Redis are on sets
            ratios = [e[index] / o[index] for e, o in zip(results[engine_name], results[other_name], strict=True)]
            paired[f"{engine_name}: {phase} / {other_name}: {phase}"] = ratios
            targets.append(Target(f"{engine_name}: {phase}", f"{other_name}: {phase}", bound,
                                  statistics.median(ratios), how=f"median of {rounds} paired rounds"))
    result = report("engine queue serve vs Redis (loopback, 100-byte items)", rows, targets=targets)
    result["rounds"] = {name: [list(f) for f in figures] for name, figures in results.items()}
    result["paired_ratios"] = paired
    result["load_average"] = {"before": list(load_before), "after": list(load_after)}
    for name, ratios in paired.items():
        print(f"per round: {name}: " + ", ".join(f"{r:.2f}" for r in ratios))
    print(f"load average (1, 5, 15 min): before {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}, "
          f"after {load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f}")
    if not args.quick:
        suffix = "" if rev is None else "-against"
        with open(RESULTS.replace(".json", f"{suffix}.json"), "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
