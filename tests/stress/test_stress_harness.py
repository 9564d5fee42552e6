"""The stress harness itself: payloads, shrinking, damage, and calibration.

The calibration tests run every attack against :mod:`stress.toystore`, a tiny log
with switchable bugs: the honest version must pass, and each bug must be caught
by the attack meant for it (and the failing workload shrunk).  Without this, a
silent stress run would prove nothing.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stress import attack_damage, attack_io, attack_kill, attack_sim
from stress.__main__ import main as stress_main
from stress.core import MIN_PAYLOAD, capture_warnings, payload, payload_ok, split_payloads
from stress.results import Tally
from stress.shrink import shrink
from stress.stores import get_adapter

# -- payloads ---------------------------------------------------------------------------------


@given(st.integers(0, 2**40), st.integers(MIN_PAYLOAD, 3000))
@settings(max_examples=60, deadline=None)
def test_payload_has_its_size_and_checks_itself(tag: int, size: int) -> None:
    data = payload(0, tag, size)
    assert len(data) == size
    assert payload_ok(data)


@given(st.integers(0, 2**20), st.integers(MIN_PAYLOAD, 500), st.data())
@settings(max_examples=60, deadline=None)
def test_any_single_change_breaks_a_payload(tag: int, size: int, data: st.DataObject) -> None:
    raw = bytearray(payload(0, tag, size))
    pos = data.draw(st.integers(0, size - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    assert not payload_ok(bytes(raw))
    assert not payload_ok(bytes(raw[: pos]))


def test_split_payloads_cuts_a_concatenation_and_rejects_a_torn_one() -> None:
    parts = [payload(0, i, 40 + 7 * i) for i in range(5)]
    assert split_payloads(b"".join(parts)) == parts
    assert split_payloads(b"".join(parts)[:-1]) is None
    assert split_payloads(b"".join(parts) + bytes(10)) is None
    assert split_payloads(b"") == []


# -- shrinking ------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.sets(st.integers(0, 9), min_size=1, max_size=3))
@settings(max_examples=80, deadline=None)
def test_shrink_finds_a_one_minimal_failing_workload(ops: list[int], needed: set[int]) -> None:
    workload = [(x,) for x in ops]

    def fails(cand: list[tuple[int]]) -> bool:
        return needed <= {op[0] for op in cand}

    if not fails(workload):
        return
    small = shrink(workload, fails, max_tries=10_000)
    assert fails(small)
    assert len(small) == len(needed)  # one of each needed op, nothing else
    for i in range(len(small)):  # 1-minimal: dropping any op makes it pass
        assert not fails(small[:i] + small[i + 1 :])


# -- damage ----------------------------------------------------------------------------------------


def test_damage_kinds_do_what_they_say() -> None:
    data = bytes(range(256)) * 8
    rng = random.Random(3)
    flipped, where = attack_damage.damage(data, rng, "flip")
    diff = [i for i in range(len(data)) if data[i] != flipped[i]]
    assert len(flipped) == len(data) and len(diff) == 1
    assert bin(data[diff[0]] ^ flipped[diff[0]]).count("1") == 1
    assert f"byte {diff[0]}" in where
    cut, _ = attack_damage.damage(data, rng, "truncate")
    assert len(cut) < len(data) and data.startswith(cut)
    zeroed, _ = attack_damage.damage(data, rng, "zero")
    assert len(zeroed) == len(data)
    assert all(zeroed[i] == 0 for i in range(len(data)) if zeroed[i] != data[i])


def test_file_kind_generalises_numbers() -> None:
    assert attack_damage.file_kind("/db/jobs.1795326891523") == "jobs.N"
    assert attack_damage.file_kind("/db/00000000000000000012.log") == "N.log"


def test_capture_warnings_sees_engine_warnings_only_inside() -> None:
    import logging

    with capture_warnings() as warned:
        logging.getLogger("engine.somewhere").warning("torn tail cut")
        logging.getLogger("elsewhere").warning("not engine's")
    logging.getLogger("engine.somewhere").warning("after")
    assert warned.messages() == ["torn tail cut"]


# -- calibration against the toy store ---------------------------------------------------------------


def test_honest_toy_store_passes_every_attack() -> None:
    adapter = get_adapter("toy-honest")
    tally = Tally(adapter.name)
    attack_sim.attack(adapter, tally, 11, workloads=6, max_ops=10, sample_limit=200)
    attack_io.attack(adapter, tally, 11, workloads=1, n_ops=5)
    attack_damage.attack(adapter, tally, 11, stores=1, per_store=60, n_ops=8)
    attack_kill.attack(adapter, tally, 11, rounds=3, n_ops=6, readers=0, crashpoint_hits=1)
    assert tally.violations == 0, "\n".join(f.render() for f in tally.failures)
    assert tally.crash_states > 50 and tally.sim_exhaustive >= 1
    assert tally.fault_runs > 10 and tally.faults > 10
    assert tally.crashpoints >= 1  # toy.append.before-fsync was found and used
    assert tally.damage_outcomes.get("typed error", 0) + tally.damage_outcomes.get("reported truncation", 0) > 0


def test_acknowledging_before_fsync_is_caught_by_power_loss_and_shrunk() -> None:
    adapter = get_adapter("toy-nosync")
    tally = Tally(adapter.name)
    attack_sim.attack(adapter, tally, 5, workloads=3, max_ops=10, sample_limit=200)
    assert tally.violations == 1
    failure = tally.failures[0]
    assert len(failure.workload) == 1  # one unsynced append is enough
    assert "acknowledged" in failure.detail
    assert "seed" in failure.render() and str(failure.seed) in failure.render()


def test_chained_power_losses_pass_an_honest_store_and_catch_a_lying_one() -> None:
    honest = Tally("toy-honest")
    attack_sim.chained(get_adapter("toy-honest"), honest, 2, chains=2, links=4, n_ops=5, limit=40)
    assert honest.violations == 0, "\n".join(f.render() for f in honest.failures)
    assert honest.crash_states > 100
    lying = Tally("toy-nosync")
    attack_sim.chained(get_adapter("toy-nosync"), lying, 2, chains=2, links=4, n_ops=5, limit=40)
    assert lying.violations == 1 and "chained" in lying.failures[0].attack


def test_a_format_without_checksums_is_caught_by_torn_writes_and_damage() -> None:
    adapter = get_adapter("toy-nocrc")
    tally = Tally(adapter.name)
    attack_sim.attack(adapter, tally, 5, workloads=6, max_ops=10, sample_limit=300)
    assert tally.violations == 1 and "different data" in tally.failures[0].detail
    tally = Tally(adapter.name)
    attack_damage.attack(adapter, tally, 5, stores=1, per_store=60, n_ops=8)
    assert tally.violations >= 1 and all(f.attack == "damaged file" for f in tally.failures)
    assert tally.damage_outcomes.get("silent wrong data", 0) >= 1


def test_writing_on_after_a_failed_fsync_is_caught() -> None:
    adapter = get_adapter("toy-dodge")
    tally = Tally(adapter.name)
    attack_io.attack(adapter, tally, 5, workloads=1, n_ops=5)
    assert tally.violations == 1
    assert "PoisonedError" in tally.failures[0].detail


def test_the_runner_prints_seed_and_counts_and_fails_on_a_violation(capsys) -> None:  # type: ignore[no-untyped-def]
    # The runner only knows the real stores; call it for one that exists, sim only.
    status = stress_main(["--store", "streams", "--bounded", "--seed", "3", "--attacks", "sim"])
    out = capsys.readouterr().out
    assert "seed 3" in out and "crash states" in out
    assert status in (0, 1)
    assert ("violation(s)" in out) and (status == 0) == ("seed 3: 0 violation(s)" in out)


# -- a store that does not import fails loudly ---------------------------------------------------------


def test_a_store_that_does_not_import_fails_the_runner(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Never "not available, skipped": a broken store is an error naming it."""
    import sys

    import pytest

    from stress.stores import AdapterImportError

    monkeypatch.delitem(sys.modules, "stress.stores.queue", raising=False)
    monkeypatch.setitem(sys.modules, "engine.queue", None)  # "import engine.queue" now raises ImportError
    with pytest.raises(AdapterImportError, match=r"the queue store cannot be attacked: stress\.stores\.queue"):
        get_adapter("queue")
    assert stress_main(["--store", "streams", "--store", "queue", "--bounded", "--seed", "3"]) == 2
    captured = capsys.readouterr()
    assert "stress.stores.queue failed to import" in captured.err and "engine.queue" in captured.err
    assert "crash states" not in captured.out  # nothing ran: the run failed before any attack
