"""Crash choices numbered: one option per file and directory with pending
operations (:class:`stress.simfs.SimFS`'s crash points), as one integer (mixed radix,
the first axis lowest), so that a sample of states is a set of integers."""

from __future__ import annotations


def rank(choice: list[int], counts: list[int]) -> int:
    """The combination number of ``choice`` (the inverse of :func:`unrank`)."""
    index = 0
    for pick, c in zip(reversed(choice), reversed(counts), strict=True):
        index = index * c + pick
    return index


def unrank(index: int, counts: list[int]) -> list[int]:
    """The choice numbered ``index`` (one pick below each of ``counts``)."""
    choice = []
    for c in counts:
        choice.append(index % c)
        index //= c
    return choice
