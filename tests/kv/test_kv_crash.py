"""Crash-simulator tests: every crash image reopens to the state after a prefix
of the transactions that includes every acknowledged one, and verify() passes."""

from __future__ import annotations

import random

import pytest

from engine.fs import make_dirs
from engine.kv import KV
from stress.simfs import SimFS


def _random_transaction(kv: KV, model: dict[bytes, bytes], rng: random.Random) -> dict[bytes, bytes]:
    """Puts, deletes and a range delete in one transaction; returns the new model."""
    new = dict(model)
    with kv.transaction() as tx:
        for _ in range(rng.randint(1, 12)):
            roll = rng.random()
            if new and roll < 0.3:
                key = rng.choice(sorted(new))
                del tx[key]
                del new[key]
            elif new and roll < 0.38:
                start = rng.choice(sorted(new))
                for key, _ in list(tx.items(start, start + b"\xff", reverse=rng.random() < 0.5))[:5]:
                    del tx[key]
                    del new[key]
            else:
                key = b"%03d" % rng.randrange(400)
                value = rng.randbytes(rng.choice([1, 30, 90, 400]))
                tx[key] = value
                new[key] = value
    return new


@pytest.mark.parametrize(("seed", "checkpoint_bytes"), [(1, 1 << 20), (2, 6000), (3, 0), (4, 20000)])
def test_every_crash_state_is_a_prefix_of_the_transactions(seed: int, checkpoint_bytes: int) -> None:
    rng = random.Random(seed)
    sim = SimFS()
    make_dirs(sim, "/db")
    kv = KV.open("/db/kv", page_size=512, checkpoint_bytes=checkpoint_bytes, fs=sim)
    models = [dict[bytes, bytes]()]
    sim.mark(0)
    for i in range(1, 13):
        models.append(_random_transaction(kv, models[-1], rng))
        sim.mark(i)
    kv.close()
    checked = 0
    for state in sim.crash_states(limit=150, seed=seed):
        acked = [m for m in state.marks if isinstance(m, int)]
        if not acked:
            continue  # crashed while creating the store
        k = acked[-1]
        reopened = KV.open("/db/kv", fs=state.fs())
        try:
            reopened.verify()
            got = dict(reopened.items())
            assert got in models[k : k + 2], state.describe()
            assert len(reopened) == len(got)
        finally:
            reopened.close()
        checked += 1
    assert checked > 30
