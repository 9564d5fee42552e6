"""Attack 3: I/O errors (SQLite's method), injected and real.

Injected: the workload runs on :class:`stress.faults.FaultyFS` over the crash
simulator, with the Nth mutating operation failing with EIO or ENOSPC, once or
from then on; N is swept from 1 until the workload completes without reaching the
fault.  The workload stops at the first operation that fails (its effect is
uncertain: the oracle treats it as in flight).  Then:

* the failing operation must fail with ``OSError`` or an ``EngineError``, nothing
  else, and an operation must never be acknowledged although an fsync failed under
  it;
* after a failed fsync, the next writing operation on the same open store must be
  refused with :class:`~engine.errors.PoisonedError` (the fsyncgate rule: retrying
  an fsync can lie);
* the store is reopened twice without the fault: on the file system as the process
  left it, and on the image a power loss right then would leave (nothing unsynced
  survives); both must satisfy the oracle with ``verify()`` passing.

A disk that stays full (real, on a small tmpfs, and injected) is attack 5,
:mod:`stress.attack_full`.
"""

from __future__ import annotations

import errno as errno_mod
import random
from typing import Any

from engine.errors import EngineError, PoisonedError
from stress.attack_sim import ROOT, current_image
from stress.core import Op, Step, StoreAdapter, Violation, capture_warnings
from stress.faults import FaultyFS, OpKind
from stress.results import Failure, Tally
from stress.simfs import SimFS

#: Upper bound of the sweep, in case a workload makes very many file operations.
MAX_SWEEP = 600


def _still_used(sim: SimFS, path: str) -> bool:
    """Whether a file whose fsync failed is still one of the store's files.

    A temporary file that an atomic replace abandoned after its fsync failed
    (``*.tmp``, ``*~~*``) holds nothing the store relies on; the store may go on
    (the rename never happened).  Any other file must poison the store.
    """
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".tmp") or "~" in name:
        return False
    return sim.exists(path)


def fault_run(
    adapter: StoreAdapter, ops: list[Op], fail_at: int, err: int, persistent: bool
) -> tuple[bool, str | None, int]:
    """One workload with the ``fail_at``-th mutating operation failing.

    Returns ``(reached, violation or None, faults injected)``; ``reached`` is False
    when the workload completed before operation ``fail_at`` (the sweep is over).
    """
    sim = SimFS()
    adapter.prepare(sim, ROOT)
    ffs = FaultyFS(sim, fail_at=fail_at, errno=err, persistent=persistent)
    acked: list[Step] = []
    inflight: Op | None = None
    problem: str | None = None
    session = None
    try:
        session = adapter.session(ffs, ROOT)
    except (OSError, EngineError):
        session = None  # opening failed under the fault: recovery below must still work
    except Exception as exc:
        return True, f"open raised untyped {type(exc).__name__}: {exc!r}", ffs.faults
    if session is not None:
        for index, op in enumerate(ops):
            log_mark = len(ffs.log)
            faults_before = ffs.faults
            try:
                result = session.run(op)
            except (OSError, EngineError) as exc:
                if ffs.faults == faults_before:
                    problem = f"op {index} {op!r} raised {type(exc).__name__} without an injected fault: {exc}"
                    break
                inflight = op
                failed_syncs = [e.path for e in ffs.failed_since(log_mark, OpKind.FSYNC)]
                if not persistent and any(_still_used(sim, path) for path in failed_syncs):
                    problem = _probe_poisoned(adapter, session, ffs, ops[index + 1 :])
                break
            except Exception as exc:
                problem = f"op {index} {op!r} raised untyped {type(exc).__name__}: {exc!r}"
                break
            if ffs.failed_since(log_mark, OpKind.FSYNC) and adapter.is_write(op):
                recent = "; ".join(map(str, ffs.log[-3:]))
                problem = f"op {index} {op!r} was acknowledged although an fsync failed under it ({recent})"
                break
            acked.append(Step(op, result))
        session.abandon()
    if problem is None or problem.startswith("after a failed fsync"):
        # The reopen is checked even when the probe complained: both are findings.
        again = _recheck(adapter, sim, acked, inflight, created=session is not None)
        if again is not None:
            problem = again if problem is None else f"{problem}; and {again}"
    reached = ffs.ops >= fail_at
    return reached, problem, ffs.faults


def _probe_poisoned(adapter: StoreAdapter, session: Any, ffs: FaultyFS, rest: list[Op]) -> str | None:
    """After a failed fsync, no later operation may write anything until reopened.

    Each remaining writing operation must raise PoisonedError or succeed without a
    single mutating file operation (a checkpoint with nothing to write, an op that
    is a no-op in the session): only writing is refused.  A probe that is refused
    changes nothing, so the oracle's view (the failed op in flight) stays right.
    """
    for op in rest:
        if not adapter.is_write(op):
            # Not run: a read-side op (a queue confirm, say) would change what the
            # oracle must expect without being an attempt to write.
            continue
        before = ffs.ops
        try:
            session.run(op)
        except PoisonedError:
            continue
        except (OSError, EngineError) as exc:
            return f"after a failed fsync, {op!r} raised {type(exc).__name__} ({exc}), not PoisonedError"
        except Exception as exc:
            return f"after a failed fsync, {op!r} raised untyped {type(exc).__name__}: {exc!r}"
        if ffs.ops > before:
            wrote = "; ".join(map(str, ffs.log[before:]))[:300]
            return f"after a failed fsync, {op!r} was accepted and wrote ({wrote}); it must raise PoisonedError"
    return None


def _recheck(adapter: StoreAdapter, sim: SimFS, acked: list[Step], inflight: Op | None, created: bool) -> str | None:
    """Reopen without faults: as the process left the disk, and after a power loss.

    If creating the store failed (``created`` false), a typed error on reopen is
    accepted: nothing was ever acknowledged, and the debris is reported, not hidden.
    """
    images = [("as left by the process", SimFS.from_image(*current_image(sim)))]
    state = sim.durable_image()
    images.append(("after a power loss right then", state.fs()))
    for label, fs in images:
        try:
            with capture_warnings():
                adapter.check(fs, ROOT, adapter.empty_model(), acked, inflight)
        except Violation as exc:
            return f"reopen {label}: {exc.detail}"
        except EngineError as exc:
            if created:
                return f"reopen {label} raised {type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"reopen {label} raised {type(exc).__name__}: {exc!r}"
    return None


def attack(adapter: StoreAdapter, tally: Tally, seed: int, workloads: int, n_ops: int) -> None:
    """Sweep N for EIO and ENOSPC, once and persistent, over ``workloads`` workloads."""
    from stress.shrink import shrink

    rng = random.Random(seed)
    for _ in range(workloads):
        wseed = rng.randrange(2**32)
        ops = adapter.workload(random.Random(wseed), n_ops)
        tally.workloads += 1
        for err in (errno_mod.EIO, errno_mod.ENOSPC):
            for persistent in (False, True):
                for n in range(1, MAX_SWEEP + 1):
                    reached, problem, faults = fault_run(adapter, ops, n, err, persistent)
                    tally.fault_runs += 1
                    tally.faults += faults
                    if problem is not None:
                        mode = f"{errno_mod.errorcode[err]} at op {n}, {'persistent' if persistent else 'once'}"

                        def fails(cand: list[Op], n: int = n, err: int = err, persistent: bool = persistent) -> bool:
                            return fault_run(adapter, cand, n, err, persistent)[1] is not None

                        small = shrink(ops, fails, max_tries=40)
                        detail = fault_run(adapter, small, n, err, persistent)[1] or problem
                        tally.fail(Failure(adapter.name, "I/O error", wseed, small, detail, {"fault": mode}))
                        return
                    if not reached:
                        break
