"""``benchmarks.versions``: every measure runs against this tree's public API (the
tool compares versions only through API that both have), in-process and in the
fresh worker process the tool starts.  Nothing here is timed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import versions

HERE = str(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("key", sorted(versions.BY_NAME))
def test_each_measure_runs_and_reports_a_rate(key: str, tmp_path: Path) -> None:
    measure = versions.BY_NAME[key]
    amount = 2 if measure.run is versions._events_replay else 8  # threads split the count
    assert measure.run(str(tmp_path), amount) > 0


def test_the_worker_runs_the_tree_on_its_pythonpath(tmp_path: Path) -> None:
    """The worker process imports ``engine`` from the tree it is given, nothing else."""
    rate = versions._run(HERE, "events/durable write, 1 event", str(tmp_path), 4)
    assert rate > 0
    assert os.listdir(tmp_path) == []  # each run's directory is removed after it


def test_every_store_has_measures_and_every_measure_a_store() -> None:
    assert {m.store for m in versions.MEASURES} == set(versions.STORES)
    assert all(0 < m.quick <= m.amount for m in versions.MEASURES)
