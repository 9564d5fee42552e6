"""benchmarks.append_ceiling: its measured loops run (the counting needs valgrind,
which the suite does not; the loops are what it counts)."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import append_ceiling


@pytest.mark.parametrize("kind", sorted(append_ceiling.LOOPS))
def test_each_measured_loop_runs(kind: str) -> None:
    assert append_ceiling.main(["--worker", kind, "50"]) == 0


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_the_skeleton_costs_fewer_instructions_than_the_real_append() -> None:
    """The skeleton bounds what a rule-abiding append can reach: it must do less."""
    skeleton = append_ceiling.per_call("skeleton", None)
    assert 0 < skeleton < append_ceiling.per_call("append", None)
