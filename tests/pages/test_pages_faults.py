"""Fault injection: after a failed write or fsync the store refuses writes; reopen is clean."""

from __future__ import annotations

import errno
import random

import pytest

from engine.errors import EngineError, PoisonedError
from engine.fs import make_dirs
from engine.pages import PageStore
from stress.faults import FaultyFS
from stress.simfs import SimFS
from tests.pages.pages_helpers import Model, assert_matches, random_transaction


def _matches(store: PageStore, model: Model) -> bool:
    try:
        assert_matches(store, model)
    except AssertionError:
        return False
    return True


def _run(fail_at: int, apply: str) -> tuple[bool, int]:
    """Run a workload failing at operation ``fail_at``; returns (fault hit, ops)."""
    sim = SimFS()
    make_dirs(sim, "/db")
    PageStore.open("/db/s", page_size=512, fs=sim).close()
    ffs = FaultyFS(sim, fail_at=fail_at, errno=errno.EIO)
    rng = random.Random(fail_at)
    models = [Model()]
    failed = False
    attempt: list[Model] = []
    try:
        # The open writes too (the header's JOURNAL_LIVE flag, synced): the first
        # failure points hit it, and a failed open leaves the store as it was.
        store = PageStore.open("/db/s", checkpoint_bytes=2500, apply=apply, fs=ffs)
    except (OSError, EngineError):
        _reopens_as(sim, models[-1], fail_at)
        return True, ffs.ops
    for _ in range(10):
        try:
            models.append(random_transaction(store, models[-1], rng, attempt=attempt))
        except (OSError, EngineError):
            failed = True
            break
    if failed:
        # Every later write is refused until the store is reopened.
        with pytest.raises(PoisonedError):
            with store.transaction() as tx:
                tx.allocate()
        with pytest.raises(PoisonedError):
            store.checkpoint()
    try:
        store.close()  # checkpoints: may hit the fault too, and still releases the files
    except (OSError, EngineError):
        failed = True
    assert store.closed
    for fs in (sim, sim.durable_image().fs()):
        reopened = PageStore.open("/db/s", fs=fs)
        reopened.verify()
        # The failed commit may or may not have reached the journal; nothing else changed.
        allowed = [models[-1]] + ([attempt[-1]] if failed else [])
        assert any(_matches(reopened, m) for m in allowed), f"fail_at={fail_at}"
        reopened.close()
    return failed, ffs.ops


def _reopens_as(sim: SimFS, model: Model, fail_at: int) -> None:
    """The store (as written, and as a crash right now would leave it) holds ``model``."""
    for fs in (sim, sim.durable_image().fs()):
        with PageStore.open("/db/s", fs=fs) as reopened:
            reopened.verify()
            assert _matches(reopened, model), f"fail_at={fail_at}"


@pytest.mark.parametrize("apply", ["checkpoint", "commit"])
def test_sweep_every_failure_point(apply: str) -> None:
    hit = 0
    fail_at = 1
    while True:
        failed, _ops = _run(fail_at, apply)
        if not failed:
            break
        hit += 1
        fail_at += 1
    assert hit > 30  # the workload has that many mutating operations, each one failed once
