"""Attack 5: a full disk, for every store.

Two ways to fill it, both run when they can:

* ``tmpfs``: a small tmpfs is mounted (``mount -t tmpfs -o size=1m``; this needs
  root, and is skipped with a note saying so where ``mount`` is refused), a filler
  file leaves the store ``adapter.enospc_room`` bytes, and the workload runs on the
  real file system until the kernel itself says ENOSPC;
* ``injected``: the workload runs on the real file system through
  :class:`stress.faults.FaultyFS` with ``errno=ENOSPC, persistent=True``: from a
  random write, fsync or truncate on, every one fails (a disk that stays full).

Checked, both ways:

* the operation that met the full disk raises :class:`engine.errors.DiskFullError`
  (a typed error; a raw ``OSError`` or any other exception is a violation), and
  nothing is acknowledged that was not written;
* reopening on the still-full disk either works (and the oracle holds) or raises
  ``DiskFullError``;
* once space is freed (the filler deleted, the fault switched off) the store reopens
  and recovers with nothing acknowledged lost (the oracle), and takes new writes
  (a few more operations, checked again).
"""

from __future__ import annotations

import errno as errno_mod
import os
import random
import shutil
import subprocess
import tempfile
from typing import Any

from engine.errors import DiskFullError, EngineError
from engine.fs import FileSystem, OsFileSystem
from stress.core import Op, Step, StoreAdapter, Violation, capture_warnings
from stress.faults import FaultyFS
from stress.results import Failure, Tally

#: Size of the tmpfs, KiB.
TMPFS_KIB = 1024


def _mount_tmpfs(size_kib: int) -> tuple[str | None, str]:
    """A fresh small tmpfs, or (None, why) where mounting is not allowed."""
    point = tempfile.mkdtemp(prefix="stress-full-")
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", point],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        os.rmdir(point)
        return None, f"mount could not run ({exc})"
    if proc.returncode != 0:
        os.rmdir(point)
        return None, f"mount refused: {proc.stderr.decode(errors='replace').strip()[:200]}"
    return point, ""


def _umount(point: str) -> None:
    subprocess.run(["umount", point], capture_output=True, timeout=10)
    shutil.rmtree(point, ignore_errors=True)


def _fill(point: str, leave: int) -> str:
    """Take all but about ``leave`` bytes of the file system at ``point``; the filler's path."""
    filler = os.path.join(point, "filler")
    st = os.statvfs(point)
    take = st.f_bavail * st.f_frsize - leave
    with open(filler, "wb") as f:
        if take > 0:
            f.write(bytes(take))
    return filler


def _is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the full disk, however it was wrapped."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, DiskFullError):
            return True
        if isinstance(seen, OSError) and seen.errno in (errno_mod.ENOSPC, errno_mod.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Run:
    """One workload on a disk that fills up: what was acknowledged and how it ended."""

    def __init__(self) -> None:
        self.acked: list[Step] = []
        self.ops: list[Op] = []
        self.inflight: Op | None = None
        self.problem: str | None = None
        self.error: str = ""


def _write_until_full(adapter: StoreAdapter, fs: FileSystem, root: str, rng: random.Random) -> _Run:
    run = _Run()
    try:
        session = adapter.session(fs, root)
    except DiskFullError as exc:
        run.error = f"DiskFullError while creating the store: {exc}"
        return run
    except Exception as exc:
        run.problem = f"creating the store on a full disk raised {type(exc).__name__}: {exc!r}"
        return run
    try:
        for _ in range(200):
            for op in adapter.workload(rng, 50):
                run.ops.append(op)
                try:
                    result = session.run(op)
                except DiskFullError as exc:
                    run.inflight, run.error = op, f"DiskFullError: {exc}"
                    return run
                except EngineError as exc:
                    run.inflight = op
                    if _is_disk_full(exc):
                        run.problem = f"op {op!r} met the full disk but raised {type(exc).__name__}: {exc}"
                    else:
                        run.problem = f"op {op!r} failed with {type(exc).__name__}: {exc} (expected DiskFullError)"
                    return run
                except Exception as exc:
                    run.inflight = op
                    run.problem = f"op {op!r} raised {type(exc).__name__}: {exc!r}, not DiskFullError"
                    return run
                run.acked.append(Step(op, result))
        run.error = "never full"
        return run
    finally:
        session.abandon()


def _reopen_checks(adapter: StoreAdapter, fs: FileSystem, free_fs: FileSystem, root: str, run: _Run,
                   rng: random.Random, free: Any) -> str | None:
    """Reopen on the full disk (works or DiskFullError), free space, reopen, write on."""
    try:
        with capture_warnings():
            adapter.check(fs, root, adapter.empty_model(), run.acked, run.inflight)
    except Violation as exc:
        return f"reopen on the full disk: {exc.detail}"
    except DiskFullError:
        pass  # it writes on open: checked again once space is freed
    except Exception as exc:
        return f"reopen on the full disk raised {type(exc).__name__}: {exc!r} (expected it to work or DiskFullError)"
    free()
    try:
        with capture_warnings():
            model = adapter.check(free_fs, root, adapter.empty_model(), run.acked, run.inflight)
    except Violation as exc:
        return f"reopen after freeing space: {exc.detail}"
    except Exception as exc:
        return f"reopen after freeing space raised {type(exc).__name__}: {exc!r}"
    more = adapter.workload(rng, 6)
    acked: list[Step] = []
    try:
        session = adapter.session(free_fs, root)
        for op in more:
            acked.append(Step(op, session.run(op)))
        session.close()
        with capture_warnings():
            adapter.check(free_fs, root, model, acked, None)
    except Violation as exc:
        return f"writing again after freeing space: {exc.detail}"
    except Exception as exc:
        return f"writing again after freeing space raised {type(exc).__name__}: {exc!r}"
    return None


def attack(adapter: StoreAdapter, tally: Tally, seed: int) -> None:
    """The tmpfs run (where mounting is allowed) and the injected run."""
    rng = random.Random(seed)
    point, why = _mount_tmpfs(TMPFS_KIB)
    if point is None:
        tally.note_once(f"disk full on a tmpfs: skipped, {why}; the injected ENOSPC run still ran")
    else:
        try:
            _tmpfs_run(adapter, tally, rng, point, seed)
        finally:
            _umount(point)
    _injected_run(adapter, tally, rng, seed)


def _tmpfs_run(adapter: StoreAdapter, tally: Tally, rng: random.Random, point: str, seed: int) -> None:
    fs = OsFileSystem()
    root = os.path.join(point, "db")
    adapter.prepare(fs, root)
    filler = _fill(point, adapter.enospc_room)
    run = _write_until_full(adapter, fs, root, rng)
    _judge(adapter, tally, seed, "tmpfs", run, rng, fs, fs, root, lambda: os.unlink(filler))


def _injected_run(adapter: StoreAdapter, tally: Tally, rng: random.Random, seed: int = 0) -> None:
    workdir = tempfile.mkdtemp(prefix=f"stress-full-{adapter.name}-")
    try:
        root = os.path.join(workdir, "db")
        real = OsFileSystem()
        adapter.prepare(real, root)
        # Let the store get going (creation, a few operations) before the disk fills.
        ffs = FaultyFS(real, fail_at=rng.randint(8, 120), errno=errno_mod.ENOSPC, persistent=True,
                       kinds=("write", "truncate", "fsync"))
        run = _write_until_full(adapter, ffs, root, rng)
        tally.faults += ffs.faults

        def free() -> None:
            ffs.fail_at = None

        _judge(adapter, tally, seed, "injected", run, rng, ffs, real, root, free)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _judge(adapter: StoreAdapter, tally: Tally, seed: int, how: str, run: _Run, rng: random.Random, fs: FileSystem,
           free_fs: FileSystem, root: str, free: Any) -> None:
    if run.error == "never full":
        tally.note_once(f"disk full ({how}): {adapter.enospc_room} free bytes never filled; nothing tested")
        tally.disk_full_run(f"{how}: never full")
        return
    problem = run.problem
    if problem is None:
        problem = _reopen_checks(adapter, fs, free_fs, root, run, rng, free)
    tally.real_enospc += how == "tmpfs"
    tally.disk_full_run(f"{how}: {'violation' if problem else 'DiskFullError, recovered'}")
    if problem is not None:
        extra = {"disk": how, "room": f"{adapter.enospc_room} bytes", "acknowledged": len(run.acked)}
        extra["reproduce"] = f"python -m stress --store {adapter.name} --attacks full (attack seed {seed})"
        tally.fail(Failure(adapter.name, f"disk full ({how})", seed, run.ops[-60:], problem, extra))
