"""The queue in real processes, judged by its recorded history (stress/checker.py).

A short run of ``python -m stress.queue_procs`` (``python -m stress --store queue
--seconds N`` runs it for longer): producers and competing consumers of two
reader names join, leave and are SIGKILLed at random; every process logs what it
invoked and what came back, and the checker judges the whole history after the
final drain.  The pass criterion is the checker's: no violation (no timing, no
count of what happened, which depends on the machine's load).

And the issue-27 regression: competing consumers with no crash at all delivered
items that another, living consumer had confirmed (ids 139-148 twice).  On the
queue before the one-protocol rewrite (284c534) the checker finds such
redeliveries in every trial; today none.
"""

from __future__ import annotations

from pathlib import Path

from stress.queue_procs import compete, run, summary


def _dirs(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "q").mkdir()
    (tmp_path / "logs").mkdir()
    return str(tmp_path / "q"), str(tmp_path / "logs")


def test_joining_leaving_and_killed_producers_and_consumers_keep_every_promise(tmp_path: Path) -> None:
    directory, logs = _dirs(tmp_path)
    verdict = run(directory, logs, seconds=4.0, seed=27, interval=0.2)
    assert verdict.violations == [], [str(v) for v in verdict.violations[:10]]
    assert verdict.counts["starts"] > 0, summary(verdict)


def test_competing_consumers_never_deliver_what_a_live_consumer_confirmed(tmp_path: Path) -> None:
    """2,000 items, three processes start at once on one reader name, each
    get(timeout=0.2), sleep 1 ms, confirm, stop after an idle second."""
    directory, logs = _dirs(tmp_path)
    verdict = compete(directory, logs, items=2000, consumers=3, idle=1.0)
    assert verdict.violations == [], [str(v) for v in verdict.violations[:10]]
    assert verdict.counts["puts"] == 2000 and verdict.counts["consumer joins"] == 3, summary(verdict)
