"""The fuzz targets of ``stress/fuzz.py`` run (without atheris) on random and
crafted inputs: the twins agree, and a target whose kernel is missing fails
loudly instead of fuzzing nothing."""

from __future__ import annotations

import random
from typing import Any

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


def test_kv_encode_target_reaches_valid_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4096-byte pages, level 1, two entries (4-byte key, 5-byte inline value), three
    # children, nothing dropped (see fuzz.kv_encode_target's draws): both twins encode.
    from engine.kv import node

    u16 = b"".join(n.to_bytes(2, "little") for n in (1, 6, 2, 2))
    entry = b"".join(n.to_bytes(2, "little") for n in (4, 5, 10))
    entries = entry + b"key1" + b"val01" + entry + b"key2" + b"val02"
    tail = (1).to_bytes(2, "little") + bytes(range(24)) + (1).to_bytes(2, "little") * 2
    images: list[bytes] = []

    def recording(ref: Any) -> Any:
        def encode(*args: Any) -> bytes:
            images.append(ref(*args))
            return images[-1]

        return encode

    for name in ("leaf_image", "branch_image"):
        monkeypatch.setattr(node, name, recording(getattr(node, name)))
    fuzz.kv_encode_target()(u16 + entries + tail)
    assert [(len(i), i[0]) for i in images] == [(4096, node.LEAF), (4096, node.BRANCH)]


def test_a_missing_kernel_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.events import runs

    monkeypatch.setattr(runs, "read_runs_native", None)
    with pytest.raises(ImportError, match="not built"):
        fuzz.events_target()
