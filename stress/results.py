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
    damage_outcomes: dict[str, int] = field(default_factory=dict)
    undetected: dict[str, int] = field(default_factory=dict)
    create_crash_errors: int = 0
    violations: int = 0
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, failure: Failure) -> None:
        self.violations += 1
        # Keep the first few for printing; the count says how many there were.
        if len(self.failures) < 8:
            self.failures.append(failure)

    def note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def outcome(self, name: str, kind: str | None = None) -> None:
        self.damage_outcomes[name] = self.damage_outcomes.get(name, 0) + 1
        if kind is not None:
            self.undetected[kind] = self.undetected.get(kind, 0) + 1

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
            "undetected": dict(self.undetected),
            "create_crash_errors": self.create_crash_errors,
            "violations": self.violations,
            "failures": [f.render() for f in self.failures],
            "notes": list(self.notes),
        }
