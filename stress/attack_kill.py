"""Attack 2: real process death (RocksDB's black-box crash test).

A child process (:mod:`stress.child`) runs a workload against the real file system
and reports each acknowledged operation over a pipe.  The parent kills it with
SIGKILL, reopens the store itself, checks it with the oracle, and starts the next
child on the same directory, continuing from the model it found: crash, recover,
continue, many times over one store.  Two ways to pick the moment:

* at random: after a random number of acknowledgements, plus a random delay of up
  to a few milliseconds, so that the kill lands inside an operation;
* at every named crash point: the workload runs once with ``ENGINE_CRASH_LOG`` set
  to learn which points it passes and how often; then, on a fresh directory each
  time, the child is made to SIGKILL itself at the first, a middle and the last hit
  of each point (``ENGINE_CRASH_AT``/``ENGINE_CRASH_SKIP``).

After every kill and check, the store's life goes on: on a copy (so that the loop
keeps its model), :func:`stress.drain.drain_cycle` drains everything, lets the
store retire what that frees, closes and reopens it (a queue killed right after a
rotation was openable and readable, and became unopenable only once its older files
were retired).  At a crash point the drain runs on the crashed store itself.

Where the store allows it, reader processes run beside the writer the whole time
and check that they never see anything inconsistent (a half-written record, a
payload that is not whole); after each round one of them may be SIGKILLed in the
middle of its reads and replaced by a fresh one, which must open and read on.

A killed process loses nothing the kernel already has, so this attack finds bugs
of process death (in-memory state believed durable, locks, half-done renames,
recovery code), not of power loss; attack 1 covers that.
"""

from __future__ import annotations

import ast
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError
from engine.fs import OsFileSystem
from stress.core import Op, Step, StoreAdapter, Violation, capture_warnings
from stress.drain import drain_cycle
from stress.results import Failure, Tally

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class ChildRun:
    """What one child acknowledged before it died (or finished)."""

    acked: list[Step] = field(default_factory=list)
    inflight: Op | None = None
    returncode: int = 0
    finished: bool = False
    opened: bool = False
    stderr: str = ""


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("ENGINE_CRASH_AT", "ENGINE_CRASH_SKIP", "ENGINE_CRASH_LOG"):
        env.pop(key, None)
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_child(
    store: str,
    root: str,
    ops: list[Op],
    workdir: str,
    env: dict[str, str] | None = None,
    kill_after_acks: int | None = None,
    kill_delay: float = 0.0,
    timeout: float = 60.0,
) -> ChildRun:
    """Run one writer child; kill it after ``kill_after_acks`` acknowledgements."""
    ops_file = os.path.join(workdir, "ops.pickle")
    with open(ops_file, "wb") as f:
        pickle.dump(ops, f)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stress.child", "write", store, root, ops_file],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(env or {}),
        cwd=_REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    run = ChildRun()
    err_chunks: list[bytes] = []
    err_thread = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    err_thread.start()
    killer: threading.Timer | None = None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for raw in proc.stdout:
            line = raw.decode().rstrip("\n")
            if line.startswith("B "):
                run.inflight = ops[int(line[2:])]
            elif line.startswith("A "):
                _, index_s, result_s = line.split(" ", 2)
                index = int(index_s)
                run.acked.append(Step(ops[index], ast.literal_eval(result_s)))
                run.inflight = None
                if kill_after_acks is not None and len(run.acked) >= kill_after_acks and killer is None:
                    killer = threading.Timer(kill_delay, _sigkill, (proc,))
                    killer.start()
            elif line == "OPENING":
                if kill_after_acks == 0 and killer is None:
                    # Zero acknowledgements: kill during open, i.e. in the middle of
                    # recovering from the previous kill.
                    killer = threading.Timer(kill_delay, _sigkill, (proc,))
                    killer.start()
            elif line == "OPENED":
                run.opened = True
            elif line == "DONE":
                run.finished = True
        run.returncode = proc.wait()
    finally:
        watchdog.cancel()
        if killer is not None:
            killer.cancel()
        err_thread.join(timeout=5)
    run.stderr = b"".join(err_chunks).decode(errors="replace")[-2000:]
    return run


def _sigkill(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.send_signal(signal.SIGKILL)
    except ProcessLookupError:
        pass


def discover_crashpoints(store: str, ops: list[Op], workdir: str) -> Counter[str]:
    """Crash point names the workload passes, with how often (ENGINE_CRASH_LOG)."""
    root = os.path.join(workdir, "discover")
    log = os.path.join(workdir, "crash.log")
    run = run_child(store, root, ops, workdir, env={"ENGINE_CRASH_LOG": log})
    shutil.rmtree(root, ignore_errors=True)
    if not run.finished:
        raise RuntimeError(f"discovery run of {store} failed (rc {run.returncode}): {run.stderr}")
    names: Counter[str] = Counter()
    if os.path.exists(log):
        with open(log, encoding="utf-8") as f:
            names.update(line.strip() for line in f if line.strip())
        os.unlink(log)
    return names


class _Readers:
    """Reader processes beside the writer; each checks what it sees."""

    def __init__(self, store: str, root: str, workdir: str, count: int) -> None:
        self.stop_file = os.path.join(workdir, "readers.stop")
        self.store, self.root = store, root
        self.procs = [self._spawn() for _ in range(count)]
        self.killed = 0

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "stress.child", "read", self.store, self.root, self.stop_file],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env({}),
            cwd=_REPO,
        )

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL one reader in the middle of whatever it is reading; start another.

        What the killed reader saw up to then is lost with it (its pipe is dropped);
        its replacement must open the store (a lock the dead reader held is free
        again) and read consistently from wherever the dead one's state says.
        """
        index = rng.randrange(len(self.procs))
        proc = self.procs[index]
        _sigkill(proc)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        self.procs[index] = self._spawn()
        self.killed += 1

    def finish(self, timeout: float = 20.0) -> tuple[list[str], int]:
        """Stop the readers; returns their complaints and their consistent passes."""
        with open(self.stop_file, "w") as f:
            f.write("stop")
        problems = []
        passes = 0
        for proc in self.procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                problems.append(f"reader did not stop within {timeout} s")
                continue
            text = out.decode(errors="replace").strip()
            last = text.rsplit("\n", 1)[-1]
            if proc.returncode != 0 or not last.startswith("OK "):
                problems.append(f"reader rc {proc.returncode}: {text[-500:]} {err.decode(errors='replace')[-800:]}")
            else:
                passes += int(last[3:])
        return problems, passes


def _check(
    adapter: StoreAdapter, root: str, base: Any, run: ChildRun, tally: Tally, existed: bool
) -> tuple[Any, str | None]:
    """Reopen after the kill and check; returns (model found, violation or None).

    Only when the store did not exist before this child (``existed`` false) and the
    child died before its open returned may reopening fail with a typed error: the
    debris of a half-created store, which is then deleted as a user would have to.
    """
    try:
        with capture_warnings():
            model = adapter.check(OsFileSystem(), root, base, run.acked, run.inflight)
        return model, None
    except Violation as exc:
        return base, exc.detail
    except EngineError as exc:
        if not run.opened and not existed:
            tally.create_crash_errors += 1
            tally.note_once(f"killed while creating the store, reopen raises {type(exc).__name__}: {exc}")
            shutil.rmtree(root, ignore_errors=True)
            return adapter.empty_model(), None
        return base, f"reopen after SIGKILL failed with {type(exc).__name__}: {exc}"
    except Exception as exc:
        return base, f"reopen after SIGKILL raised untyped {type(exc).__name__}: {exc!r}"


def _drain(adapter: StoreAdapter, root: str, tally: Tally) -> str | None:
    """Drain, retire and reopen the store at ``root``; returns a violation or None."""
    tally.drain_cycles += 1
    try:
        with capture_warnings():
            drain_cycle(adapter, OsFileSystem(), root)
    except Violation as exc:
        return f"drain, retire and reopen after the kill: {exc.detail}"
    except EngineError as exc:
        return f"drain, retire and reopen after the kill failed with {type(exc).__name__}: {exc}"
    except Exception as exc:
        return f"drain, retire and reopen after the kill raised untyped {type(exc).__name__}: {exc!r}"
    return None


def _copy_dir(src: str, dst: str) -> None:
    """Copy a store directory while reader processes may be writing their own files.

    A reader replaces its checkpoint file atomically (a temporary file renamed over
    it), so a name listed a moment ago may be gone: it is skipped (the store removes
    stray temporaries on open, and the renamed file is there under its own name).
    """
    os.makedirs(dst)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                _copy_dir(path, os.path.join(dst, name))
            else:
                shutil.copy2(path, os.path.join(dst, name), follow_symlinks=False)
        except FileNotFoundError:
            continue


def _drain_copy(adapter: StoreAdapter, root: str, workdir: str, tally: Tally) -> str | None:
    """:func:`_drain` on a copy of ``root`` (lock files included), which is then removed."""
    copy = os.path.join(workdir, "drained")
    shutil.rmtree(copy, ignore_errors=True)
    _copy_dir(root, copy)
    try:
        return _drain(adapter, copy, tally)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def attack(
    adapter: StoreAdapter,
    tally: Tally,
    seed: int,
    rounds: int,
    n_ops: int,
    readers: int = 2,
    crashpoint_hits: int = 3,
    deadline: float | None = None,
    crashpoint_names: int | None = None,
) -> None:
    """The random-kill loop over one directory, then every named crash point."""
    rng = random.Random(seed)
    # Half the time for the random-kill loop, the rest for the crash-point sweep.
    loop_deadline = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / 2
    workdir = tempfile.mkdtemp(prefix=f"stress-kill-{adapter.name}-")
    try:
        root = os.path.join(workdir, "db")
        base = adapter.empty_model()
        pool = None
        if adapter.concurrent_readers and readers > 0:
            # The store must exist before a reader can open it.
            first = run_child(adapter.name, root, [], workdir)
            if not first.finished:
                tally.fail(Failure(adapter.name, "kill", seed, [], f"empty run failed: {first.stderr}"))
                return
            adapter.prepare_readers(OsFileSystem(), root, readers)
            pool = _Readers(adapter.name, root, workdir, readers)
            tally.reader_procs += readers
        history: list[Op] = []
        for round_no in range(rounds):
            if loop_deadline is not None and time.monotonic() > loop_deadline:
                break
            ops = adapter.workload(rng, n_ops)
            history.extend(ops)
            existed = adapter.store_exists(OsFileSystem(), root)
            run = run_child(
                adapter.name,
                root,
                ops,
                workdir,
                kill_after_acks=rng.randint(0, len(ops)),
                kill_delay=rng.choice((0.0, 0.0005, 0.002, 0.01)),
            )
            if not run.finished and run.returncode != -signal.SIGKILL:
                why = f"child failed (rc {run.returncode}): {run.stderr}"
                tally.fail(Failure(adapter.name, "kill", seed, ops, why))
                break
            tally.kills += 0 if run.finished else 1
            base, problem = _check(adapter, root, base, run, tally, existed)
            if problem is None and adapter.store_exists(OsFileSystem(), root):
                problem = _drain_copy(adapter, root, workdir, tally)
            if pool is not None and round_no % 2 == 0:
                pool.kill_one(rng)
                tally.reader_kills += 1
            if problem is not None:
                tally.fail(
                    Failure(
                        adapter.name,
                        "kill (random moment)",
                        seed,
                        ops,
                        problem,
                        {"round": round_no, "acked in round": len(run.acked), "inflight": repr(run.inflight)},
                    )
                )
                break
        if pool is not None:
            problems, passes = pool.finish()
            tally.reader_passes += passes
            for problem in problems:
                tally.fail(Failure(adapter.name, "concurrent reader", seed, history[-60:], problem))
        shutil.rmtree(root, ignore_errors=True)
        _crashpoint_sweep(adapter, tally, rng, workdir, n_ops, crashpoint_hits, deadline, crashpoint_names)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _pick(names: Counter[str], store: str, rng: random.Random, limit: int | None) -> list[tuple[str, int]]:
    """The crash points to attack: all, or ``limit`` of them, the store's own first.

    The shared ones (``atomic_write.*``, ``create_file.*``) are the same code in
    every store; the store's own (``queue.rotate.after-create``, ...) come first
    when a bounded run cannot afford every point.
    """
    items = sorted(names.items())
    if limit is None or len(items) <= limit:
        return items
    own = [item for item in items if item[0].startswith(store + ".")]
    shared = [item for item in items if not item[0].startswith(store + ".")]
    rng.shuffle(own)
    rng.shuffle(shared)
    return sorted((own + shared)[:limit])


def _crashpoint_sweep(
    adapter: StoreAdapter,
    tally: Tally,
    rng: random.Random,
    workdir: str,
    n_ops: int,
    hits: int,
    deadline: float | None,
    max_names: int | None = None,
) -> None:
    wseed = rng.randrange(2**32)
    # Twice the loop's workload: long enough that files rotate and are retired
    # (the queue's rotate and retire crash points, the append log's segment roll).
    ops = adapter.workload(random.Random(wseed), 2 * n_ops)
    try:
        names = discover_crashpoints(adapter.name, ops, workdir)
    except RuntimeError as exc:
        tally.fail(Failure(adapter.name, "kill (crash point discovery)", wseed, ops, str(exc)))
        return
    tally.notes.append(f"crash points passed: {', '.join(f'{n} x{c}' for n, c in sorted(names.items()))}")
    picked = _pick(names, adapter.name, rng, max_names)
    if len(picked) < len(names):
        tally.notes.append(f"crash points attacked (bounded): {', '.join(n for n, _ in picked)}")
    for name, count in picked:
        skips = sorted({0, count // 2, count - 1})[:hits]
        for skip in skips:
            if deadline is not None and time.monotonic() > deadline:
                return
            root = os.path.join(workdir, "cp")
            shutil.rmtree(root, ignore_errors=True)
            run = run_child(
                adapter.name, root, ops, workdir, env={"ENGINE_CRASH_AT": name, "ENGINE_CRASH_SKIP": str(skip)}
            )
            if run.finished:
                continue  # the point was not reached this time (timing-dependent paths)
            if run.returncode != -signal.SIGKILL:
                why = f"child failed (rc {run.returncode}): {run.stderr}"
                tally.fail(Failure(adapter.name, "kill", wseed, ops, why))
                return
            tally.kills += 1
            tally.crashpoints += 1
            _model, problem = _check(adapter, root, adapter.empty_model(), run, tally, existed=False)
            if problem is None and adapter.store_exists(OsFileSystem(), root):
                problem = _drain(adapter, root, tally)
            if problem is not None:
                tally.fail(
                    Failure(
                        adapter.name,
                        "kill (crash point)",
                        wseed,
                        ops[: len(run.acked) + 1],
                        problem,
                        {"crash point": f"{name}, hit {skip + 1} of {count}",
                         "reproduce": f"ENGINE_CRASH_AT={name} ENGINE_CRASH_SKIP={skip}"},
                    )
                )
                return
