"""Producers and consumers in real processes, SIGKILLed at random (a short run of
``python -m stress.queue_procs``, which the stress suite runs for longer): three
producers, a fanout reader, and two competing consumers sharing a reader name.

Every acknowledged put is delivered to every reader name with its payload, no id
is ever seen with two payloads, no item is open in two live consumers at once,
a fanout consumer's incarnation sees increasing ids, and ``verify()`` passes
after the last kill.
"""

from __future__ import annotations

from pathlib import Path

from stress.queue_procs import run


def test_killed_producers_and_consumers_lose_nothing(tmp_path: Path) -> None:
    outcome = run(str(tmp_path), seconds=8.0, seed=20, producers=3, consumers=1, interval=0.06, competing=2)
    assert outcome.violations == [], outcome.violations[:10]
    assert outcome.kills >= 40, outcome.kills  # (fewer on a loaded machine: each restart waits for the last)
    sharing = {span[2][:2] for (reader, _), spans in outcome.held.items() if reader == "w" for span in spans}
    assert sharing  # (which of the two competing consumers delivered depends on the kills)
    assert len(outcome.acked) > 100, len(outcome.acked)  # the producers got work done between the kills
