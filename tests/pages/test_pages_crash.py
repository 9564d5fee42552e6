"""Crash-simulator tests: every crash image reopens to a prefix of the commits."""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.fs import make_dirs
from engine.pages import PageStore, codec
from engine.pages import journal as journal_module
from stress.simevents import Truncate
from stress.simfs import SimFS
from tests.pages.pages_helpers import Model, assert_matches, random_transaction, use_pure_crc32c


def _states_equal(store: PageStore, model: Model) -> bool:
    try:
        assert_matches(store, model)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(
    ("seed", "checkpoint_bytes", "page_size", "apply"),
    [
        (1, 1 << 20, 512, "checkpoint"),
        (2, 3000, 512, "checkpoint"),
        (3, 0, 512, "checkpoint"),
        (4, 5000, 1024, "commit"),
        (5, 1 << 20, 512, "commit"),
        (6, 2000, 512, "checkpoint"),
        (7, 3000, 512, "checkpoint"),
        (8, 5000, 1024, "commit"),
    ],
)
def test_every_crash_state_is_a_prefix_of_the_commits(
    seed: int, checkpoint_bytes: int, page_size: int, apply: str
) -> None:
    """Random transactions; every crash image reopens to the state after some
    prefix of them that includes every acknowledged one, and verify() passes;
    after recovery the journal is at rest (the JRNL picture of an empty journal)."""
    rng = random.Random(seed)
    sim = SimFS()
    make_dirs(sim, "/db")
    models = [Model()]
    store = PageStore.open(
        "/db/p",
        page_size=page_size,
        checkpoint_bytes=checkpoint_bytes,
        apply=apply,
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
        assert fs2.durable_image().files["/db/p-journal"][:20] == codec.encode_file_header(0, 0)
        # Recovery left a clean store: a second open has nothing to repair or redo.
        again = PageStore.open("/db/p", fs=fs2)
        assert not again.recovery.repaired, again.recovery.summary()
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
    ("seed", "options", "pure_crc"),
    [
        (11, {"checkpoint_bytes": 1500, "checkpoint_max_bytes": 12000}, False),  # adaptive checkpoints
        (12, {}, False),  # the defaults: no checkpoint before close
        (13, {"checkpoint_bytes": 2500}, True),  # the writer without google-crc32c
    ],
)
def test_crash_states_with_checkpoint_policy_and_checksum(
    seed: int, options: dict[str, Any], pure_crc: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same prefix property with the adaptive checkpoint policy, and with
    journals sealed by the pure-Python CRC-32C (no google-crc32c) reopened by the
    usual code: the same on-disk form."""
    if pure_crc:
        use_pure_crc32c(monkeypatch)
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
    monkeypatch.undo()  # recovery runs with google-crc32c
    assert _reopened_at_acknowledged(sim, models, limit=300, seed=seed) > 50


def _reopened_at_acknowledged(sim: SimFS, models: list[Model], *, limit: int, seed: int) -> int:
    """Reopen ``/db/p`` from up to ``limit`` crash states of ``sim`` (marks: the index of
    the last acknowledged transaction): each must verify and hold that transaction's
    state or the next one's (in flight at the crash).  The states checked."""
    checked = 0
    for state in sim.crash_states(limit=limit, seed=seed):
        acked = [m for m in state.marks if isinstance(m, int)]
        if not acked:
            continue
        reopened = PageStore.open("/db/p", fs=state.fs())
        try:
            reopened.verify()
            candidates = range(acked[-1], len(models))
            assert any(_states_equal(reopened, models[j]) for j in candidates[:2]), state.describe()
        finally:
            reopened.close()
        checked += 1
    return checked


@pytest.mark.parametrize(("seed", "apply"), [(21, "commit"), (22, "checkpoint")])
def test_crash_states_across_the_journal_extensions(
    seed: int, apply: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer extends its journal ahead of the commits (``GROW_BYTES``, an
    unsynced truncate before the durable write): with 512-byte steps a commit
    crosses an extension every few transactions, and every crash image (the
    extension lost, kept, or kept under a torn commit) still reopens to a prefix
    of the commits holding every acknowledged one."""
    monkeypatch.setattr(journal_module, "GROW_BYTES", 512)
    rng = random.Random(seed)
    sim = SimFS()
    make_dirs(sim, "/db")
    models = [Model()]
    store = PageStore.open("/db/p", page_size=512, checkpoint_bytes=6000, apply=apply, fs=sim)
    sim.mark(0)
    for i in range(1, 11):
        models.append(random_transaction(store, models[-1], rng))
        sim.mark(i)
    store.close()
    extensions = [e for e in sim.trace if isinstance(e, Truncate) and e.size > 512]
    assert len(extensions) >= 3
    assert _reopened_at_acknowledged(sim, models, limit=400, seed=seed) > 50
