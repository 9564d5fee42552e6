"""The fuzz targets of ``stress/fuzz.py`` run (without atheris) on random and
crafted inputs: the twins agree, and a target whose kernel is missing fails
loudly instead of fuzzing nothing."""

from __future__ import annotations

import random

import pytest

from engine.native import pure_python_forced
from engine.queue import codec
from stress import fuzz

pytestmark = pytest.mark.skipif(pure_python_forced(), reason="ENGINE_PURE_PYTHON: the compiled twins are off")


@pytest.mark.parametrize("target", sorted(fuzz.BUILDERS))
def test_targets_agree_on_random_inputs(target: str) -> None:
    one = fuzz.BUILDERS[target]()
    rng = random.Random(target)
    for size in list(range(0, 64)) + [rng.randrange(64, 2048) for _ in range(200)]:
        one(bytes(rng.randrange(256) for _ in range(size)))


def test_queue_target_reaches_valid_records() -> None:
    # Parameters that start decoding at 0 with no carried CRC, then a valid batch.
    records = codec.encode_put(1, 1_700_000_000_000, b"hello") + codec.encode_put(2, 1_700_000_000_001, b"x")
    batch = records + codec.encode_check(records)
    # pos 0, no carried CRC, covered 0, max_records 64 (see fuzz.queue_target's draws).
    header = b"".join(n.to_bytes(2, "little") for n in (4, 1, 4, 65))
    fuzz.queue_target()(header + batch)


def test_a_missing_kernel_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.events import runs

    monkeypatch.setattr(runs, "read_runs_native", None)
    with pytest.raises(ImportError, match="not built"):
        fuzz.events_target()
