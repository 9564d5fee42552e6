"""Counters and failure records shared by the attacks and printed by the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stress.core import Op, describe_ops


@dataclass
class Failure:
    """One violation, with everything needed to reproduce it."""

    store: str
    attack: str
    seed: int
    workload: list[Op]
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        lines = [
            f"VIOLATION in {self.store} ({self.attack}), seed {self.seed}",
            f"  workload ({len(self.workload)} ops): {describe_ops(self.workload)}",
            f"  {self.detail}",
        ]
        for key, value in self.extra.items():
            lines.append(f"  {key}: {value}")
        return "\n".join(lines)


@dataclass
class Tally:
    """What one store went through.  ``violations`` must stay 0."""

    store: str
    workloads: int = 0
    crash_states: int = 0
    sim_exhaustive: int = 0  # workloads whose every crash state was checked
    sim_sampled: int = 0  # workloads whose crash states were sampled
    kills: int = 0
    crashpoints: int = 0
    reader_procs: int = 0
    reader_passes: int = 0  # consistent full reads the reader processes made
    faults: int = 0
    fault_runs: int = 0
    real_enospc: int = 0
    damaged: int = 0
    damage_outcomes: dict[str, int] = field(default_factory=dict)  # worst outcome per variant
    damage_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> outcome -> variants
    read_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # read path -> outcome -> reads
    undetectable: dict[str, int] = field(default_factory=dict)  # "kind in file" -> variants
    cli_runs: int = 0
    reader_kills: int = 0  # reader processes killed mid-read (and replaced)
    drain_cycles: int = 0  # drain, retire, reopen after a kill
    disk_full: dict[str, int] = field(default_factory=dict)  # how each disk-full run went
    create_crash_errors: int = 0
    violations: int = 0
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, failure: Failure) -> None:
        self.violations += 1
        # Keep the first ones (printing shows fewer); the count says how many there were.
        if len(self.failures) < 200:
            self.failures.append(failure)

    def note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def damage_outcome(self, kind: str, outcome: str) -> None:
        """One damaged variant of ``kind`` whose worst read was ``outcome``."""
        self.damage_outcomes[outcome] = self.damage_outcomes.get(outcome, 0) + 1
        row = self.damage_by_kind.setdefault(kind, {})
        row[outcome] = row.get(outcome, 0) + 1

    def read_outcome(self, path: str, outcome: str) -> None:
        """One read of a damaged variant through read path (or command) ``path``."""
        row = self.read_outcomes.setdefault(path, {})
        row[outcome] = row.get(outcome, 0) + 1

    def undetectable_in(self, what: str) -> None:
        self.undetectable[what] = self.undetectable.get(what, 0) + 1

    def disk_full_run(self, how: str) -> None:
        self.disk_full[how] = self.disk_full.get(how, 0) + 1

    def count(self, outcome: str) -> int:
        """Variants whose worst read was ``outcome``."""
        return self.damage_outcomes.get(outcome, 0)

    def tracebacks(self) -> int:
        """Reads (any path, any command) that ended in a traceback or a hang."""
        return sum(row.get("traceback", 0) + row.get("hang", 0) for row in self.read_outcomes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "workloads": self.workloads,
            "crash_states": self.crash_states,
            "sim_exhaustive": self.sim_exhaustive,
            "sim_sampled": self.sim_sampled,
            "kills": self.kills,
            "crashpoints": self.crashpoints,
            "reader_procs": self.reader_procs,
            "reader_passes": self.reader_passes,
            "fault_runs": self.fault_runs,
            "faults": self.faults,
            "real_enospc": self.real_enospc,
            "damaged": self.damaged,
            "damage_outcomes": dict(self.damage_outcomes),
            "damage_by_kind": {k: dict(v) for k, v in self.damage_by_kind.items()},
            "read_outcomes": {k: dict(v) for k, v in self.read_outcomes.items()},
            "undetectable": dict(self.undetectable),
            "tracebacks": self.tracebacks(),
            "cli_runs": self.cli_runs,
            "reader_kills": self.reader_kills,
            "drain_cycles": self.drain_cycles,
            "disk_full": dict(self.disk_full),
            "create_crash_errors": self.create_crash_errors,
            "violations": self.violations,
            "failures": [f.render() for f in self.failures],
            "notes": list(self.notes),
        }
