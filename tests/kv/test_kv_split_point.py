"""Where a node splits (``engine.kv.tree._balance_point``): the index in [lo, hi]
that divides the entries' sizes most evenly, the lower one of a tie, found by a
bisection of the running sums.  Checked against the plain scan of every index it
replaced, and a leaf split's sizes against the leaf's encoded size."""

from __future__ import annotations

import random

from engine.kv import node as nodes
from engine.kv import tree
from engine.kv.node import Leaf, Overflow


def _scan(sizes: list[int], lo: int, hi: int) -> int:
    """Every index tried in turn: the first with the smallest gap."""
    total = sum(sizes)
    best, best_gap = lo, None
    for m in range(len(sizes) + 1):
        if lo <= m <= hi:
            gap = abs(total - 2 * sum(sizes[:m]))
            if best_gap is None or gap < best_gap:
                best, best_gap = m, gap
    return best


def test_the_balance_point_is_the_scans_on_random_sizes() -> None:
    rng = random.Random(3)
    for _ in range(5000):
        n = rng.randrange(0, 12)
        sizes = [rng.choice((1, 2, 5, rng.randrange(1, 300))) for _ in range(n)]
        lo, hi = rng.randrange(0, n + 1), rng.randrange(-1, n + 1)  # bounds inside 0..n
        if n >= 2 and rng.random() < 0.7:  # a split's bounds
            lo, hi = 1, n - 1
        m, left, total = tree._balance_point(sizes, lo, hi)
        assert m == _scan(sizes, lo, hi), (sizes, lo, hi)
        assert total == sum(sizes)
        assert left == sum(sizes[:m])


def test_a_leaf_split_keeps_each_halfs_encoded_size() -> None:
    rng = random.Random(4)
    for _ in range(300):
        n = rng.randrange(2, 40)
        keys = sorted({rng.randbytes(rng.randrange(1, 20)) for _ in range(n)})
        vals: list[nodes.Value] = [
            Overflow(rng.randrange(2, 99), rng.randrange(2000))
            if rng.random() < 0.1
            else rng.randbytes(rng.randrange(90))
            for _ in keys
        ]
        if len(keys) < 2:
            continue
        leaf = Leaf(keys, vals, nodes.leaf_size(keys, vals))
        right, sep = tree._split(leaf)
        assert type(right) is Leaf and sep == right.keys[0]
        assert leaf.keys and right.keys and leaf.keys[-1] < sep
        assert leaf.size == nodes.leaf_size(leaf.keys, leaf.vals)
        assert right.size == nodes.leaf_size(right.keys, right.vals)
