"""The bounded stress run: every attack against every store.

This is ``python -m stress --bounded`` as a test, one store per test case with a
fixed seed, so that a failure is reproducible with the command in its message.  A store that
does not import fails its case (never a skip: a skipped store proves nothing).
Each store takes a few seconds (a few hundred crash states, a dozen killed
processes, a few hundred injected faults, 60 damaged files).
"""

from __future__ import annotations

import pytest

from stress.__main__ import ATTACKS, BOUNDED, run_store
from stress.stores import ADAPTER_MODULES

SEED = 20261122


@pytest.mark.parametrize("store", sorted(ADAPTER_MODULES))
def test_bounded_stress_run_finds_no_violation(store: str) -> None:
    import random

    store_seed = random.Random(f"{SEED}/{store}").randrange(2**32)
    tally = run_store(store, store_seed, BOUNDED, ATTACKS, None)
    report = "\n".join(f.render() for f in tally.failures)
    assert tally.violations == 0, (
        f"reproduce: python -m stress --store {store} --bounded --seed {SEED}\n{report}"
    )
    # The run did what it claims (a run that silently skipped an attack proves nothing).
    assert tally.crash_states > 0 and tally.sim_exhaustive > 0
    assert tally.kills > 0
    assert tally.fault_runs > 0 and tally.faults > 0
    assert tally.damaged == BOUNDED.damage_stores * BOUNDED.damage_per_store
