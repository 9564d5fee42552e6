"""Scans (``items``, ``keys``, ranges, reverse) against a dict model, and what
``docs/guide/kv.md`` promises about iterating the writer while changing it: each
leaf is found by a fresh descent for the key past the last leaf's separator, so a
scan returns every key at most once, in order; keys no change touched are all
returned; changes made meanwhile may or may not be seen."""

from __future__ import annotations

import os
import random

import pytest

from engine.kv import KV


@pytest.fixture
def path(tmp_path: os.PathLike[str]) -> str:
    return os.path.join(str(tmp_path), "store.kv")


def _load(kv: KV, rng: random.Random, n: int) -> dict[bytes, bytes]:
    """``n`` random keys, some values on overflow pages."""
    model = {rng.randbytes(rng.randint(1, 20)): rng.randbytes(rng.choice([0, 9, 40, 700])) for _ in range(n)}
    with kv.transaction() as tx:
        tx.update(model.items())
    return model


def test_ranges_both_ways_match_the_model(path: str) -> None:
    rng = random.Random(5)
    with KV.open(path, page_size=512) as kv:
        model = _load(kv, rng, 1500)
        keys = sorted(model)
        assert list(kv.items()) == [(k, model[k]) for k in keys]
        assert list(kv) == keys and list(kv.values()) == [model[k] for k in keys]
        assert list(reversed(kv)) == keys[::-1]
        for _ in range(60):
            a, b = sorted(rng.choice([rng.choice(keys), rng.randbytes(rng.randint(0, 6)), None]) or b"" for _ in "ab")
            lo, hi = a or None, b or None
            want = [(k, model[k]) for k in keys if (lo is None or k >= lo) and (hi is None or k < hi)]
            assert list(kv.items(lo, hi)) == want
            assert list(kv.items(lo, hi, reverse=True)) == want[::-1]
            assert list(reversed(kv.items(lo, hi))) == want[::-1]  # type: ignore[call-overload]
        with kv.transaction() as tx:
            tx[b"\x00new"] = b"n"
            del tx[keys[10]]
            got = [k for k, _ in tx.items()]
            assert got == sorted({*keys, b"\x00new"} - {keys[10]})


@pytest.mark.parametrize("reverse", [False, True])
def test_changing_the_writer_while_scanning_it(path: str, reverse: bool) -> None:
    """Puts and deletes (splits and merges) between the scan's steps."""
    rng = random.Random(11 + reverse)
    with KV.open(path, page_size=512) as kv:
        model = _load(kv, rng, 2000)
        untouched = set(model)
        seen: list[bytes] = []
        for key, value in kv.items(reverse=reverse):
            seen.append(key)
            if key in untouched:
                assert value == model[key]
            for _ in range(3):
                if rng.random() < 0.5:
                    victim = rng.choice(sorted(model))
                    del kv[victim]
                    del model[victim]
                    untouched.discard(victim)
                else:
                    new = rng.randbytes(rng.randint(1, 20))
                    kv[new] = rng.randbytes(rng.choice([5, 700]))
                    model[new] = b""
                    untouched.discard(new)
            if len(seen) > 400:
                break
        assert seen == sorted(seen, reverse=reverse) and len(set(seen)) == len(seen)
        limit = seen[-1]
        inside = {k for k in untouched if (k <= limit if not reverse else k >= limit)}
        assert inside <= set(seen)
        assert kv.verify()
