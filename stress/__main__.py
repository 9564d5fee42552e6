"""``python -m stress``: run the six attacks against the stores.

    python -m stress [--store NAME ...] [--seconds N] [--seed S] [--bounded]
                     [--attacks sim,kill,io,damage,full,paths] [--json PATH]
                     [--report docs/reliability.md]

Every run prints its seed and, per store, the counts: workloads, crash states
checked, processes killed (writers at random moments and at named crash points,
readers mid-read), drain/retire/reopen cycles after kills, I/O faults injected,
disk-full runs, damaged files tried and how each turned out (per damage kind, and
per read path and CLI command), tracebacks, and violations.  ``--report PATH``
rewrites the figures section of that Markdown file from the run.  A violation
prints the seed and the smallest workload found that reproduces it; the exit
status is 1 if there was any, 2 if a store (or its adapter) failed to import: no
store is ever skipped.

``--bounded`` is the fixed, small budget the normal test suite runs; ``--seconds``
is a time budget per store spread over the attacks (a long run repeats each attack
with fresh seeds until its share of the time is used up).  A long run that
includes the queue also runs its producers and consumers in real processes that
join, leave and are SIGKILLed at random, for ``min(--seconds, 120)`` seconds, and
judges their recorded histories (``stress/queue_procs.py``, ``stress/checker.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from stress import attack_damage, attack_full, attack_io, attack_kill, attack_paths, attack_sim, report
from stress.core import StoreAdapter
from stress.results import Failure, Tally
from stress.stores import ADAPTER_MODULES, AdapterImportError, get_adapter, load_adapters

console = Console(highlight=False, width=200)

ATTACKS = ("sim", "kill", "io", "damage", "full", "paths")
#: Attacks a long run does once per store, not in every pass.
ONCE = frozenset({"full", "paths"})


@dataclass(frozen=True)
class Budget:
    """How much of each attack one pass does."""

    sim_workloads: int
    sim_max_ops: int
    sim_sample: int
    chains: int
    chain_links: int
    chain_ops: int
    chain_sample: int
    kill_rounds: int
    kill_ops: int
    kill_readers: int
    crashpoint_hits: int
    crashpoint_names: int | None  # crash points attacked per pass (None: every one passed)
    io_workloads: int
    io_ops: int
    damage_stores: int
    damage_per_store: int
    damage_ops: int
    damage_cli: int  # damaged copies per store also read by every CLI command
    damage_exec: int  # CLI commands per store run as a fresh ``python -m engine``


BOUNDED = Budget(
    sim_workloads=6,
    sim_max_ops=12,
    sim_sample=150,
    chains=1,
    chain_links=3,
    chain_ops=6,
    chain_sample=40,
    kill_rounds=4,
    kill_ops=12,
    kill_readers=1,
    crashpoint_hits=1,
    crashpoint_names=8,
    io_workloads=1,
    io_ops=6,
    damage_stores=1,
    damage_per_store=42,
    damage_ops=10,
    damage_cli=7,
    damage_exec=1,
)

LONG_PASS = Budget(
    sim_workloads=12,
    sim_max_ops=30,
    sim_sample=400,
    chains=3,
    chain_links=5,
    chain_ops=10,
    chain_sample=80,
    kill_rounds=15,
    kill_ops=25,
    kill_readers=2,
    crashpoint_hits=3,
    crashpoint_names=None,
    io_workloads=2,
    io_ops=12,
    damage_stores=2,
    damage_per_store=200,
    damage_ops=25,
    damage_cli=25,
    damage_exec=3,
)


def run_store(
    name: str, seed: int, budget: Budget, attacks: Sequence[str], seconds: float | None, keep_going: bool = False
) -> Tally:
    """Attack one store; with ``seconds``, repeat passes until the time is used.

    A long run stops repeating after a pass that found a violation, unless
    ``keep_going`` (then the count says how often it was found again).
    """
    adapter = get_adapter(name)
    tally = Tally(name)
    rng = random.Random(seed)
    started = time.monotonic()
    deadline = None if seconds is None else started + seconds
    first = True
    once_done: set[str] = set()  # attacks that run once per store, already run
    while first or (deadline is not None and time.monotonic() < deadline):
        first = False
        pass_seed = rng.randrange(2**32)
        share = None if deadline is None else (deadline - time.monotonic()) / max(1, len(attacks))
        for attack in attacks:
            # Every attack runs even after another found a violation (each stops at
            # its own first one); a long run stops repeating once anything failed.
            attack_seed = random.Random(f"{pass_seed}/{attack}").randrange(2**32)
            t0 = time.monotonic()
            local_deadline = None if share is None else t0 + share
            try:
                if attack in ONCE and attack in once_done:
                    continue  # a full disk and the hostile paths once per store are enough
                _run_attack(adapter, tally, attack, attack_seed, budget, local_deadline)
            except Exception as exc:
                # A store that raises something the attack did not expect is a
                # finding, not a reason to lose the rest of the run.
                detail = "".join(traceback.format_exception(exc))[-3000:]
                tally.fail(Failure(name, f"{attack} (attack aborted)", attack_seed, [], detail))
            once_done.add(attack)
        if tally.violations and not keep_going:
            break
    tally.notes.append(f"time: {time.monotonic() - started:.1f} s")
    return tally


def _run_attack(
    adapter: StoreAdapter,
    tally: Tally,
    attack: str,
    attack_seed: int,
    budget: Budget,
    local_deadline: float | None,
) -> None:
    """Run one attack with its share of the budget."""
    if attack == "sim":
        attack_sim.attack(adapter, tally, attack_seed, budget.sim_workloads, budget.sim_max_ops, budget.sim_sample)
        attack_sim.chained(
            adapter, tally, attack_seed + 1, budget.chains, budget.chain_links, budget.chain_ops, budget.chain_sample
        )
    elif attack == "kill":
        attack_kill.attack(
            adapter,
            tally,
            attack_seed,
            budget.kill_rounds,
            budget.kill_ops,
            budget.kill_readers,
            budget.crashpoint_hits,
            deadline=local_deadline,
            crashpoint_names=budget.crashpoint_names,
        )
    elif attack == "io":
        attack_io.attack(adapter, tally, attack_seed, budget.io_workloads, budget.io_ops)
    elif attack == "damage":
        attack_damage.attack(
            adapter,
            tally,
            attack_seed,
            budget.damage_stores,
            budget.damage_per_store,
            budget.damage_ops,
            cli_variants=budget.damage_cli,
            exec_commands=budget.damage_exec,
        )
    elif attack == "full":
        attack_full.attack(adapter, tally, attack_seed)
    elif attack == "paths":
        attack_paths.attack(adapter, tally, attack_seed)


def print_tallies(tallies: list[Tally], seed: int) -> None:
    table = Table(title=f"stress run, seed {seed}")
    columns = ("store", "workloads", "crash states", "kills (crash pts)", "readers (passes)", "readers killed",
               "drains", "fault runs / faults", "disk full", "damaged (CLI runs)", "silent wrong",
               "undetectable", "tracebacks", "violations")
    for col in columns:
        table.add_column(col, justify="right" if col != "store" else "left")
    for t in tallies:
        table.add_row(
            t.store,
            str(t.workloads),
            f"{t.crash_states} ({t.sim_exhaustive}/{t.sim_sampled})",
            f"{t.kills} ({t.crashpoints})",
            f"{t.reader_procs} ({t.reader_passes})",
            str(t.reader_kills),
            str(t.drain_cycles),
            f"{t.fault_runs} / {t.faults}",
            str(sum(t.disk_full.values())),
            f"{t.damaged} ({t.cli_runs})",
            str(t.count("silent wrong data")),
            str(t.count("undetectable by the format")),
            str(t.tracebacks()),
            str(t.violations),
        )
    console.print(table)
    run = {"seed": seed, "stores": [t.as_dict() for t in tallies]}
    if any(t.damaged for t in tallies):
        console.print(report.damage_table(run), markup=False)
    for t in tallies:
        if t.disk_full:
            runs = ", ".join(f"{k} x{v}" for k, v in sorted(t.disk_full.items()))
            console.print(f"[bold]{t.store}[/] disk full: {runs}")
        if t.undetectable:
            shown = ", ".join(f"{k} {v}" for k, v in sorted(t.undetectable.items()))
            console.print(f"[bold]{t.store}[/] undetectable by the format: {shown}")
        for note in t.notes:
            console.print(f"  {t.store}: {note}", markup=False)
        for failure in t.failures[:8]:
            console.print(failure.render(), markup=False)
        if t.violations > 8:
            console.print(f"  {t.store}: ... {t.violations - 8} more violation(s)", markup=False)


#: The most seconds a long run gives the queue's processes judged by their
#: histories (it runs ``min(--seconds, this)``).
PROCS_SECONDS = 120.0
#: The counts of that run in the report (``--json``): stress/checker.py's.
PROCS_COUNTS = ("starts", "joins", "producer joins", "consumer joins", "leaves", "kills", "puts", "deliveries",
                "confirms", "aborts")

#: A run of at least this many seconds per store is a long run that also fuzzes ...
LONG_RUN = 300.0
#: ... for this many seconds (all targets together).
LONG_FUZZ = 120.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", action="append", choices=sorted(ADAPTER_MODULES), help="repeatable; default all")
    parser.add_argument("--seconds", type=float, default=None, help="time budget per store (long run)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--bounded", action="store_true", help="the small fixed budget of the test suite")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated subset of " + ",".join(ATTACKS))
    parser.add_argument("--json", default=None, help="write the counts to this file")
    parser.add_argument("--keep-going", action="store_true", help="long run: go on after a violation")
    parser.add_argument("--fuzz", type=float, default=None, metavar="SECONDS",
                        help="differential fuzzing of the compiled decoders (stress/fuzz.py, atheris) after the "
                        f"stores, SECONDS in all; default {LONG_FUZZ:g} in a run of --seconds >= {LONG_RUN:g}, "
                        "else none; 0 turns it off")
    parser.add_argument("--report", default=None, metavar="MARKDOWN",
                        help="rewrite the generated figures section of this file (docs/reliability.md)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    unknown = set(attacks) - set(ATTACKS)
    if unknown:
        parser.error(f"unknown attacks: {', '.join(sorted(unknown))}")
    budget = BOUNDED if args.bounded or args.seconds is None else LONG_PASS
    console.print(f"stress: seed {seed}; attacks {', '.join(attacks)}; "
                  f"{'bounded' if budget is BOUNDED else f'{args.seconds} s per store'}")
    names = args.store or list(ADAPTER_MODULES)
    try:
        load_adapters(names)
    except AdapterImportError as exc:
        # Every store is part of engine: one that does not import fails the run.
        print(f"python -m stress: error: {exc}", file=sys.stderr)
        return 2
    tallies = []
    for name in names:
        store_seed = random.Random(f"{seed}/{name}").randrange(2**32)
        console.print(f"{name}: store seed {store_seed} ...")
        seconds = None if budget is BOUNDED else args.seconds
        tallies.append(run_store(name, store_seed, budget, attacks, seconds, args.keep_going))
    print_tallies(tallies, seed)
    procs: dict[str, Any] | None = None
    if "queue" in names and budget is not BOUNDED:
        # The queue across processes: producers and consumers that join, leave and
        # are SIGKILLed, judged by their recorded histories (stress/queue_procs.py,
        # stress/checker.py; the test suite runs a few seconds of it).
        from stress import queue_procs

        procs_seconds = min(float(args.seconds or 0), PROCS_SECONDS)
        procs_seed = random.Random(f"{seed}/queue-procs").randrange(2**31)
        console.print(f"queue processes: seed {procs_seed}, {procs_seconds:g} s ...")
        verdict = queue_procs.run_checked(procs_seconds, procs_seed)
        procs = {"seed": procs_seed, "seconds": procs_seconds, "violations": len(verdict.violations),
                 **{k: verdict.counts[k] for k in PROCS_COUNTS}, "kinds": dict(verdict.kinds())}
        for violation in verdict.violations[:20]:
            console.print(f"queue processes VIOLATION: {violation}", markup=False)
        console.print(f"queue processes: {queue_procs.summary(verdict)}", markup=False)
    fuzz_seconds = args.fuzz if args.fuzz is not None else (
        LONG_FUZZ if budget is not BOUNDED and (args.seconds or 0) >= LONG_RUN else 0)
    fuzzed: dict[str, int] = {}
    if fuzz_seconds > 0:
        from stress import fuzz  # atheris (the [fuzz] extra) is imported only by the children

        console.print(f"fuzz: {', '.join(sorted(fuzz.TARGETS))} for {fuzz_seconds:g} s in all ...")
        fuzzed = fuzz.run_all(fuzz_seconds)
        for target, status in fuzzed.items():
            console.print(f"fuzz {target}: {'ok' if status == 0 else f'FAILED (exit {status})'}", markup=False)
    run = {
        "seed": seed,
        "attacks": attacks,
        "budget": "bounded" if budget is BOUNDED else f"{args.seconds} s per store",
        "stores": [t.as_dict() for t in tallies],
        "fuzz": {"seconds": fuzz_seconds, "targets": fuzzed},
        "queue_processes": procs,
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(run, f, indent=2)
    if args.report:
        report.write_section(args.report, run)
        console.print(f"figures written to {args.report}")
    violations = sum(t.violations for t in tallies) + (procs["violations"] if procs else 0)
    fuzz_failures = sum(1 for status in fuzzed.values() if status != 0)
    console.print(f"seed {seed}: {violations} violation(s)"
                  + (f", {fuzz_failures} fuzz target(s) failed" if fuzz_failures else ""))
    return 1 if violations or fuzz_failures else 0


if __name__ == "__main__":
    sys.exit(main())
