"""Stream journal benchmark: ``python3 -m benchmarks.streams [--quick] [--server-cmd CMD]``.

Measures, side by side in one run:

* the disk's limits: a raw ``write`` + ``fdatasync`` loop of 8 KiB records and a
  raw sequential write (the target's baseline);
* the in-process writer: N threads each writing 1 MB streams in 8 KiB writes to a
  :class:`~engine.streams.StreamJournal` (committed MB/s, streams/s, fsyncs per
  stream) for 1 and 16 concurrent writers;
* our server (in this process) under the same load from clients speaking the
  journald protocol (a separate process, so the clients do not share our GIL);
* with ``--server-cmd``, any other server that speaks the protocol under the
  very same client load, e.g. ``--server-cmd "journald {socket} {file}"``
  (``{socket}`` and ``{file}`` are filled in; the file is preallocated first).

Target (issue 5): with 16 clients, committed MB/s >= 0.5x the raw sequential rate.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from benchmarks import floor
from benchmarks.common import (
    Row,
    Target,
    bench_dir,
    median,
    paired_ratios,
    raw_append_fsync_rate,
    raw_sequential_write_mb_s,
    report,
)
from benchmarks.floor.stores import streams_args

MB = 1_000_000
RESULTS = os.path.join(os.path.dirname(__file__), "results", "streams.json")


def _client_load(sock: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int) -> dict[str, float]:
    """Run the client side (in its own process): ``clients`` threads each send
    ``streams_each`` streams; returns seconds and what was acknowledged."""
    from engine.streams import Client

    chunk = os.urandom(write_bytes)
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def run(k: int) -> None:
        barrier.wait()
        try:
            for i in range(streams_each):
                with Client(sock, f"bench-{k}-{i}") as c:
                    sent = 0
                    while sent < stream_bytes:
                        n = min(write_bytes, stream_bytes - sent)
                        c.write(chunk[:n])
                        sent += n
                with lock:
                    done[0] += 1
        except Exception as exc:  # reported to the parent
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "streams": done[0], "bytes": done[0] * stream_bytes, "errors": len(errors)}


def _run_clients(sock: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.streams", "--client-load", sock, str(clients), str(streams_each)]
    cmd += [str(stream_bytes), str(write_bytes)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise RuntimeError(f"client load failed: {out.stdout} {out.stderr}")
    return result


def _in_process(directory: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int, size: int) -> Row:
    from engine.streams import StreamJournal

    path = os.path.join(directory, f"inproc-{clients}.jd")
    journal = StreamJournal.open(path, size=size)
    chunk = os.urandom(write_bytes)
    barrier = threading.Barrier(clients + 1)

    def run(k: int) -> None:
        barrier.wait()
        for i in range(streams_each):
            with journal.open_stream(f"w-{k}-{i}") as s:
                sent = 0
                while sent < stream_bytes:
                    n = min(write_bytes, stream_bytes - sent)
                    s.write(chunk[:n])
                    sent += n

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    fsyncs0 = journal.fsyncs
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    fsyncs = journal.fsyncs - fsyncs0
    journal.close()
    os.unlink(path)
    n = clients * streams_each
    return Row(
        f"writer, {clients} thread(s)",
        n * stream_bytes / MB / seconds,
        "MB/s",
        note=f"{n / seconds:.1f} streams/s, {fsyncs / n:.2f} fsyncs/stream",
        extra={"streams_per_s": n / seconds, "fsyncs_per_stream": fsyncs / n},
    )


def _floor(directory: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int, size: int) -> Row:
    """The streams_write floor (C) for the same load: the same records (sizes from
    the codec; the INFO record sized for the clients' identifiers), the same
    transactions, zero pages, record copies and group-committed fdatasyncs."""
    path = os.path.join(directory, f"floor-{clients}.jd")
    res = floor.run("streams_write", streams_args(path, clients, streams_each, stream_bytes, write_bytes, size))
    os.unlink(path)
    n = clients * streams_each
    return Row(
        f"floor: streams_write (C), {clients} client(s)",
        n * stream_bytes / MB / res.seconds,
        "MB/s",
        note=f"{n / res.seconds:.1f} streams/s, {res.syncs / n:.2f} fsyncs/stream",
        extra={"streams_per_s": n / res.seconds, "fsyncs_per_stream": res.syncs / n, "bytes": res.wchar},
    )


def _our_server(directory: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int, size: int) -> Row:
    from engine.streams import StreamJournal
    from engine.streams.server import JournalServer

    path = os.path.join(directory, f"server-{clients}.jd")
    sock = os.path.join(directory, f"s{clients}.sock")
    journal = StreamJournal.open(path, size=size)
    server = JournalServer(sock, journal)
    server.start()
    try:
        fsyncs0 = journal.fsyncs
        result = _run_clients(sock, clients, streams_each, stream_bytes, write_bytes)
        fsyncs = journal.fsyncs - fsyncs0
    finally:
        server.stop()
        journal.close()
        os.unlink(path)
    n = result["streams"]
    seconds = result["seconds"]
    return Row(
        f"engine server, {clients} client(s)",
        result["bytes"] / MB / seconds,
        "MB/s",
        note=f"{n / seconds:.1f} streams/s, {fsyncs / n:.2f} fsyncs/stream",
        extra={"streams_per_s": n / seconds, "fsyncs_per_stream": fsyncs / n},
    )


def _other_server(
    directory: str, template: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int, size: int
) -> Row:
    path = os.path.join(directory, f"other-{clients}.jd")
    sock = os.path.join(directory, f"o{clients}.sock")
    with open(path, "wb") as f:  # benchmark scaffolding: a preallocated journal for the other server
        f.truncate(size)
    argv = [part.format(socket=sock, file=path) for part in shlex.split(template)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server command did not create {sock}: {argv}")
            time.sleep(0.01)
        result = _run_clients(sock, clients, streams_each, stream_bytes, write_bytes)
    finally:
        proc.terminate()
        proc.wait(10)
        os.unlink(path)
    n = result["streams"]
    seconds = result["seconds"]
    label = " ".join(argv[:3]) if len(argv) > 2 and argv[1] == "-m" else os.path.basename(argv[0])
    return Row(
        f"{label}, {clients} client(s)",
        result["bytes"] / MB / seconds,
        "MB/s",
        note=f"{n / seconds:.1f} streams/s",
        extra={"streams_per_s": n / seconds},
    )


def _median_row(rows: list[Row], note: str) -> Row:
    """The row of the median value among ``rows`` (one per round), ``note`` added."""
    ordered = sorted(rows, key=lambda row: row.value)
    row = ordered[len(ordered) // 2]
    return Row(row.name, median([x.value for x in rows]), row.unit, note=row.note + note, extra=row.extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.streams", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer streams (a few seconds)")
    parser.add_argument("--server-cmd", action="append", default=[], help="another server: 'prog {socket} {file}'")
    parser.add_argument("--clients", default="1,16", help="concurrency levels (default 1,16)")
    parser.add_argument("--client-load", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client_load:
        sock, clients, streams_each, stream_bytes, write_bytes = args.client_load
        result = _client_load(sock, int(clients), int(streams_each), int(stream_bytes), int(write_bytes))
        print(json.dumps(result))
        return 0

    stream_bytes, write_bytes = MB, 8192
    levels = [int(x) for x in args.clients.split(",")]
    total_mb = 48 if args.quick else 160  # per concurrency level
    size = (64 if args.quick else 256) << 20
    rows: list[Row] = []
    with bench_dir("engine-bench-streams-") as d:
        rate = raw_append_fsync_rate(d, 8192, 1.0 if args.quick else 2.0)
        rows.append(Row("raw 8 KiB append+fdatasync", rate * 8192 / MB, "MB/s", note=f"{rate:.0f} fsyncs/s"))
        seq = raw_sequential_write_mb_s(d, 64 if args.quick else 256)
        rows.append(Row("raw sequential write", seq * (1 << 20) / MB, "MB/s", note="1 MiB writes, one fsync"))
        missing = floor.available("streams_write")
        targets: list[Target | tuple[str, str, float]] = []
        for clients in levels:
            streams_each = max(1, total_mb // clients)
            load = (clients, streams_each, stream_bytes, write_bytes, size)
            rows.append(_in_process(d, *load))
            rounds = 5 if clients >= 16 else 1
            server: list[Row] = []
            floors: list[Row] = []
            seqs: list[float] = []
            for r in range(rounds):
                sides: list[tuple[list[Row], Callable[..., Row]]] = [(server, _our_server)]
                if missing is None:
                    sides.append((floors, _floor))
                for out, fn in sides if r % 2 == 0 else sides[::-1]:
                    out.append(fn(d, *load))
                if rounds > 1:
                    seqs.append(raw_sequential_write_mb_s(d, 64 if args.quick else 256) * (1 << 20) / MB)
            note = f"; median of {rounds} alternating rounds" if rounds > 1 else ""
            ours = _median_row(server, note)
            rows.append(ours)
            if missing is not None:
                rows.append(Row(f"floor: streams_write (C), {clients} client(s)", 0.0, "MB/s", note=floor.NOT_BUILT))
            if floors:
                flo = _median_row(floors, note)
                ratio = median(paired_ratios([x.value for x in server], [x.value for x in floors]))
                flo.note += f"; engine / floor {ratio:.2f}x"
                rows.append(flo)
            if seqs:
                seq_row = Row(f"raw sequential write, {clients} client(s)' rounds", median(seqs), "MB/s",
                              note=f"1 MiB writes, one fsync{note}")
                rows.append(seq_row)
                ratios = paired_ratios([x.value for x in server], seqs)
                if floors:  # rows[-2] is the floor's row
                    floor_seq = median(paired_ratios([x.value for x in floors], seqs))
                    rows[-2].note += f"; floor / sequential {floor_seq:.2f}x"
                targets.append(Target(ours.name, seq_row.name, 0.7, median(ratios),
                                      how=f"median of {rounds} paired rounds"))
            for template in args.server_cmd:
                rows.append(_other_server(d, template, *load))
                targets.append((ours.name, rows[-1].name, 1.0))
    targets += [(f"writer, {c} thread(s)", "raw sequential write", 0.5) for c in levels if c >= 16]
    report(
        "streams: 1 MB streams in 8 KiB writes",
        rows,
        baseline="raw sequential write",
        targets=targets,
        json_path=RESULTS,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
