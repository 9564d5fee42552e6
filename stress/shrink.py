"""Shrinking a failing workload to the smallest one that still fails.

Delta debugging (Zeller's ddmin, simplified): try dropping chunks of operations,
halves first, then quarters, down to single operations, keeping any smaller workload
that still fails; repeat until nothing can be dropped.  Operations are symbolic, so
every subsequence is a valid workload.  Each candidate costs a full attack run, so the
number of tries is capped.
"""

from __future__ import annotations

from collections.abc import Callable

from stress.core import Op


def shrink(ops: list[Op], fails: Callable[[list[Op]], bool], max_tries: int = 200) -> list[Op]:
    """The smallest workload found that still ``fails`` (``ops`` itself must fail)."""
    best = list(ops)
    tries = 0
    chunk = max(1, len(best) // 2)
    while chunk >= 1 and tries < max_tries:
        progressed = False
        start = 0
        while start < len(best) and tries < max_tries:
            candidate = best[:start] + best[start + chunk :]
            tries += 1
            if candidate and fails(candidate):
                best = candidate
                progressed = True  # retry at the same start: the next chunk moved here
            else:
                start += chunk
        if not progressed:
            if chunk == 1:
                break
            chunk = max(1, chunk // 2)
    return best
