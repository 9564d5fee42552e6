"""Each store's oracle as a hypothesis state machine with a power-loss rule.

Rules: run one random operation of the store's workload; lose power (pick one crash
image of everything done since the last loss, reopen it, check it with the store's
oracle, and carry on from the model the check returns, on the recovered files); reopen
cleanly.  Hypothesis explores and shrinks sequences of these; the crash simulator's
states are drawn with a seed the rule receives, so a failure replays exactly.
Derandomized, so a run is repeatable; a failure is a store bug (see
docs/reliability.md) or an oracle bug, never luck.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from engine.errors import EngineError
from stress.attack_sim import ROOT
from stress.core import Session, Step, capture_warnings
from stress.simfs import SimFS
from stress.stores import ADAPTER_MODULES, get_adapter


def machine_for(name: str) -> type[RuleBasedStateMachine]:
    adapter = get_adapter(name)

    class StoreMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.sim = SimFS()
            adapter.prepare(self.sim, ROOT)
            self.session: Session = adapter.session(self.sim, ROOT)
            self.sim.mark("opened")
            self.base: Any = adapter.empty_model()
            self.steps: list[Step] = []
            self.losses = 0

        @rule(seed=st.integers(0, 2**32 - 1))
        def operation(self, seed: int) -> None:
            op = adapter.workload(random.Random(seed), 1)[0]
            result = self.session.run(op)
            self.steps.append(Step(op, result))
            self.sim.mark(len(self.steps))

        @rule(seed=st.integers(0, 2**32 - 1))
        def power_loss(self, seed: int) -> None:
            states = [s for s in self.sim.crash_states(limit=25, seed=seed) if "opened" in s.marks]
            states.append(self.sim.durable_image())  # a loss right now: always a candidate
            state = states[seed % len(states)]
            self.session.abandon()
            acked_n = sum(1 for m in state.marks if isinstance(m, int))
            inflight = self.steps[acked_n].op if acked_n < len(self.steps) else None
            fs = state.fs()
            with capture_warnings():
                self.base = adapter.check(fs, ROOT, self.base, self.steps[:acked_n], inflight)
            # Carry on from the recovered files (the check's recovery writes included).
            self.sim = fs
            self.steps = []
            self.session = adapter.session(self.sim, ROOT)
            self.sim.mark("opened")
            self.losses += 1

        @rule()
        def clean_reopen(self) -> None:
            self.session.close()
            self.session = adapter.session(self.sim, ROOT)

        def teardown(self) -> None:
            self.session.abandon()

    StoreMachine.__name__ = f"{name.capitalize()}Machine"
    return StoreMachine


LOSSES: list[int] = []


def run_machine(name: str, examples: int = 20) -> None:
    machine = machine_for(name)
    original_teardown = machine.teardown

    def teardown(self: Any) -> None:
        LOSSES.append(self.losses)
        original_teardown(self)

    machine.teardown = teardown  # type: ignore[method-assign]
    test_case = machine.TestCase
    test_case.settings = settings(
        max_examples=examples,
        stateful_step_count=15,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    try:
        test_case().runTest()
    except EngineError as exc:
        raise AssertionError(f"{name}: a recovery raised {type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize("store", sorted(ADAPTER_MODULES))
def test_store_state_machine_with_power_loss(store: str) -> None:
    LOSSES.clear()
    run_machine(store)
    assert sum(LOSSES) >= 10, f"only {sum(LOSSES)} power losses were exercised"


def test_the_machine_catches_a_store_that_acknowledges_before_fsync() -> None:
    with pytest.raises(AssertionError, match="acknowledged"):
        run_machine("toy-nosync", examples=50)
