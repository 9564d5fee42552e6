"""Crash-simulator tests: every crash image reopens to a prefix of the commits."""

from __future__ import annotations

import random

import pytest

from engine.fs import make_dirs
from engine.pages import PageStore, codec
from stress.simfs import SimFS
from tests.pages.pages_helpers import Model, assert_matches, random_transaction


def _states_equal(store: PageStore, model: Model) -> bool:
    try:
        assert_matches(store, model)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(
    ("seed", "checkpoint_bytes", "page_size", "apply", "exact_header"),
    [
        (1, 1 << 20, 512, "checkpoint", False),
        (2, 3000, 512, "checkpoint", False),
        (3, 0, 512, "checkpoint", False),
        (4, 5000, 1024, "commit", False),
        (5, 1 << 20, 512, "commit", False),
        (6, 1 << 20, 512, "checkpoint", True),
        (7, 3000, 512, "checkpoint", True),
        (8, 5000, 1024, "commit", True),
    ],
)
def test_every_crash_state_is_a_prefix_of_the_commits(
    seed: int, checkpoint_bytes: int, page_size: int, apply: str, exact_header: bool
) -> None:
    """Random transactions; every crash image reopens to the state after some
    prefix of them that includes every acknowledged one, and verify() passes.
    Both commit forms: one pre-linked range (the default) and the exact header."""
    rng = random.Random(seed)
    sim = SimFS()
    make_dirs(sim, "/db")
    models = [Model()]
    store = PageStore.open(
        "/db/p",
        page_size=page_size,
        checkpoint_bytes=checkpoint_bytes,
        apply=apply,
        exact_header=exact_header,
        fs=sim,
    )
    sim.mark(0)
    for i in range(1, 9):
        models.append(random_transaction(store, models[-1], rng))
        sim.mark(i)
    store.close()
    sim.mark("closed")
    checked = 0
    for state in sim.crash_states(limit=400, seed=seed):
        acked = [m for m in state.marks if isinstance(m, int)]
        if not acked:
            continue  # crashed while creating the store
        k = acked[-1]
        fs2 = state.fs()
        reopened = PageStore.open("/db/p", fs=fs2)
        try:
            reopened.verify()
            candidates = range(k, len(models))
            assert any(_states_equal(reopened, models[j]) for j in candidates[:2]), state.describe()
        finally:
            reopened.close()
        # Recovery left a clean store: a second open has nothing to repair or redo.
        again = PageStore.open("/db/p", fs=fs2)
        assert again.recovery.redone == 0 and not again.recovery.journal_notes
        again.close()
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("apply", ["checkpoint", "commit"])
def test_crash_during_a_large_page_transaction(apply: str) -> None:
    """64 KiB pages: whole-page writes split into two MODIFY ops, torn store writes."""
    sim = SimFS()
    make_dirs(sim, "/db")
    store = PageStore.open("/db/big", page_size=65536, checkpoint_bytes=1 << 30, apply=apply, fs=sim)
    images = [b"", bytes([1]) * 65536, bytes([2]) * 65536]
    with store.transaction() as tx:
        page = tx.allocate()
        tx.write(page, 0, images[1])
    sim.mark(1)
    with store.transaction() as tx:
        tx.write(page, 0, images[2])
    sim.mark(2)
    store.close()
    checked = 0
    for state in sim.crash_states(limit=300, seed=9):
        acked = [m for m in state.marks if isinstance(m, int)]
        if not acked:
            continue  # crashed before the first commit returned (maybe before the directory existed)
        reopened = PageStore.open("/db/big", fs=state.fs())
        reopened.verify()
        assert reopened.read(page) in images[acked[-1] : acked[-1] + 2], state.describe()
        reopened.close()
        checked += 1
    assert checked > 10


@pytest.mark.parametrize(
    ("seed", "options", "writer_crc"),
    [
        (11, {"checkpoint_bytes": 1500, "checkpoint_max_bytes": 12000}, codec.CRC_32C),  # adaptive checkpoints
        (12, {}, codec.CRC_32C),  # the defaults: no checkpoint before close
        (13, {"checkpoint_bytes": 2500}, codec.CRC_ZLIB),  # the writer without hardware CRC-32C
    ],
)
def test_crash_states_with_checkpoint_policy_and_checksum(
    seed: int, options: dict[str, int], writer_crc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same prefix property with the adaptive checkpoint policy, and with
    journals sealed by zlib CRC-32 (the previous writer's COMPLETE) reopened by
    today's code."""
    monkeypatch.setattr(codec, "WRITER_CRC", writer_crc)
    rng = random.Random(seed)
    sim = SimFS()
    make_dirs(sim, "/db")
    models = [Model()]
    store = PageStore.open("/db/p", page_size=512, fs=sim, **options)
    sim.mark(0)
    for i in range(1, 13):
        models.append(random_transaction(store, models[-1], rng))
        sim.mark(i)
    store.close()
    monkeypatch.setattr(codec, "WRITER_CRC", codec.CRC_32C)  # recovery runs with today's writer
    checked = 0
    for state in sim.crash_states(limit=300, seed=seed):
        acked = [m for m in state.marks if isinstance(m, int)]
        if not acked:
            continue
        reopened = PageStore.open("/db/p", fs=state.fs())
        try:
            reopened.verify()
            assert any(_states_equal(reopened, models[j]) for j in range(acked[-1], len(models))[:2]), state.describe()
        finally:
            reopened.close()
        checked += 1
    assert checked > 50
