"""Attack 1: simulated power loss.

Run a workload against the crash simulator (:class:`stress.simfs.SimFS`), marking
every acknowledged operation; then reopen every crash image the simulator can
produce and ask the store's oracle whether what survived is allowed.  Workloads of
up to 5 operations are checked exhaustively (every crash point, every way the
unsynced writes and directory entries may have landed); longer ones are sampled
with the run's seed.
"""

from __future__ import annotations

import random

from engine.errors import EngineError
from stress.core import Op, Step, StoreAdapter, Violation, capture_warnings
from stress.results import Failure, Tally
from stress.simfs import SimFS

ROOT = "/db"

#: Crash-state budget per workload: large enough that 5-op workloads are exhaustive.
EXHAUSTIVE_LIMIT = 20000


def run_on_sim(
    adapter: StoreAdapter, ops: list[Op], root: str = ROOT, sim: SimFS | None = None
) -> tuple[SimFS, list[Step]]:
    """Run ``ops`` on a fresh simulator (or ``sim``, holding an existing store);
    every acknowledged op is marked with its count."""
    sim = SimFS() if sim is None else sim
    adapter.prepare(sim, root)
    session = adapter.session(sim, root)
    sim.mark("opened")
    steps: list[Step] = []
    for op in ops:
        result = session.run(op)
        steps.append(Step(op, result))
        sim.mark(len(steps))
    session.close()
    return sim, steps


def current_image(sim: SimFS) -> tuple[dict[str, bytes], set[str]]:
    """What the simulator holds now (a clean process exit, no power loss)."""
    dirs = {"/"}
    stack = ["/"]
    while stack:
        d = stack.pop()
        for name in sim.listdir(d):
            path = d.rstrip("/") + "/" + name
            if sim.isdir(path):
                dirs.add(path)
                stack.append(path)
    return sim.snapshot(), dirs


def first_failure(
    adapter: StoreAdapter, ops: list[Op], limit: int, seed: int, tally: Tally | None = None
) -> tuple[str, str] | None:
    """Check every (or a sample of the) crash state(s) of ``ops``.

    Returns ``(detail, crash description)`` of the first violation, or ``None``.
    """
    try:
        sim, steps = run_on_sim(adapter, ops)
    except Exception as exc:  # a workload that errors is itself a failure
        return f"workload raised {type(exc).__name__}: {exc}", "during the workload, no crash"
    states = sim.crash_states(limit=limit, seed=seed)
    for state in states:
        acked_n = sum(1 for m in state.marks if isinstance(m, int))
        acked = steps[:acked_n]
        inflight = steps[acked_n].op if acked_n < len(steps) else None
        if tally is not None:
            tally.crash_states += 1
        try:
            with capture_warnings():
                adapter.check(state.fs(), ROOT, adapter.empty_model(), acked, inflight)
        except Violation as exc:
            return exc.detail, state.describe()
        except EngineError as exc:
            if "opened" not in state.marks:
                # The power went while the store was being created, before open()
                # returned: a typed error (rather than an empty store) is allowed,
                # but counted, because the user must then delete the debris.
                if tally is not None:
                    tally.create_crash_errors += 1
                    tally.note_once(f"crash while creating the store, reopen raises {type(exc).__name__}: {exc}")
                continue
            return f"reopen failed with {type(exc).__name__}: {exc}", state.describe()
        except Exception as exc:
            return f"untyped {type(exc).__name__} on reopen: {exc!r}", state.describe()
    if tally is not None and sim.last_stats is not None:
        if sim.last_stats.exhaustive:
            tally.sim_exhaustive += 1
        else:
            tally.sim_sampled += 1
    return None


def attack(
    adapter: StoreAdapter,
    tally: Tally,
    seed: int,
    workloads: int,
    max_ops: int,
    sample_limit: int,
    shrink_failures: bool = True,
) -> None:
    """Run ``workloads`` random workloads: a third of them of at most 5 ops (exhaustive)."""
    from stress.shrink import shrink

    rng = random.Random(seed)
    for w in range(workloads):
        wseed = rng.randrange(2**32)
        wrng = random.Random(wseed)
        n = wrng.randint(1, 5) if w % 3 == 0 else wrng.randint(6, max_ops)
        ops = adapter.workload(wrng, n)
        limit = EXHAUSTIVE_LIMIT if n <= 5 else sample_limit
        tally.workloads += 1
        found = first_failure(adapter, ops, limit, wseed, tally)
        if found is None:
            continue
        small = ops
        if shrink_failures:

            def fails(cand: list[Op], limit: int = limit, wseed: int = wseed) -> bool:
                return first_failure(adapter, cand, limit, wseed) is not None

            small = shrink(ops, fails, max_tries=60)
            found = first_failure(adapter, small, limit, wseed) or found
        tally.fail(Failure(adapter.name, "sim power loss", wseed, small, found[0], {"crash": found[1]}))
        return  # one shrunk failure per store and run is what a human can act on


def chained(adapter: StoreAdapter, tally: Tally, seed: int, chains: int, links: int, n_ops: int, limit: int) -> None:
    """Power loss after power loss: crash, recover, continue, on the simulator.

    Each link runs a workload on the image the previous crash left (recovered by the
    oracle's reopen, whose own writes are recorded too, so the next crash may land
    in the middle of that recovery), checks a sample of its crash states against the
    model the previous check returned, and continues from one of them chosen with the
    seed.  This finds bugs that only a second crash exposes (recovery that is not
    idempotent, repairs that are not durable before the store goes on).
    """
    rng = random.Random(seed)
    for _ in range(chains):
        cseed = rng.randrange(2**32)
        crng = random.Random(cseed)
        base = adapter.empty_model()
        sim: SimFS | None = None
        history: list[Op] = []
        for link in range(links):
            ops = adapter.workload(crng, n_ops)
            history.extend(ops)
            tally.workloads += 1
            # A link that creates the store (none there yet) may leave half-created
            # debris, which reopening may refuse with a typed error (as in attack 1).
            fresh = sim is None or not adapter.store_exists(sim, ROOT)
            try:
                sim, steps = run_on_sim(adapter, ops, sim=sim)
            except Exception as exc:
                detail = f"link {link}: workload on the recovered store raised {type(exc).__name__}: {exc}"
                tally.fail(Failure(adapter.name, "sim power loss, chained", cseed, history, detail))
                return
            states = list(sim.crash_states(limit=limit, seed=crng.randrange(2**32)))
            chosen = crng.randrange(len(states))
            next_base = None
            for i, state in enumerate(states):
                acked_n = sum(1 for m in state.marks if isinstance(m, int))
                inflight = steps[acked_n].op if acked_n < len(steps) else None
                tally.crash_states += 1
                fs = state.fs()
                try:
                    with capture_warnings():
                        model = adapter.check(fs, ROOT, base, steps[:acked_n], inflight)
                except Violation as exc:
                    detail = f"link {link}: {exc.detail}"
                    tally.fail(Failure(adapter.name, "sim power loss, chained", cseed, history, detail,
                                       {"crash": state.describe()}))
                    return
                except Exception as exc:
                    if fresh and "opened" not in state.marks and isinstance(exc, EngineError):
                        continue  # power lost while creating the store: allowed (counted in attack 1)
                    detail = f"link {link}: reopen raised {type(exc).__name__}: {exc}"
                    tally.fail(Failure(adapter.name, "sim power loss, chained", cseed, history, detail,
                                       {"crash": state.describe()}))
                    return
                if i == chosen:
                    next_base, sim = model, fs  # fs now also holds the check's recovery writes
            if next_base is None:  # the chosen state was a half-created store: start over
                base, sim = adapter.empty_model(), None
            else:
                base = next_base
