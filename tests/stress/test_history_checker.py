"""The queue history checker (stress/checker.py) against histories built by hand.

A clean history (with the redeliveries the queue allows: after an abort, after a
consumer died holding an item, after a consumer died before a checkpoint wrote
its confirm, after a leave with items open) passes; each kind of violation,
injected into it, is caught with the ids, processes and log lines that show it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stress.checker import Verdict, check
from stress.history import History, digest, each_line, load, parse_lines


class Builder:
    """Log lines for a history: each process's events with its own sequence, the
    time one microsecond further at every event, one log file per process."""

    def __init__(self) -> None:
        self.t = 0
        self.logs: dict[str, list[dict[str, Any]]] = {}

    def ev(self, proc: str, f: str, type_: str, **fields: Any) -> None:
        self.t += 1000
        events = self.logs.setdefault(proc, [])
        events.append({"proc": proc, "pid": 100, "seq": len(events), "t": self.t, "f": f, "type": type_, **fields})

    def open(self, proc: str, reader: str | None = None) -> None:
        role = "producer" if reader is None else "consumer"
        self.ev(proc, "open", "invoke", role=role, reader=reader)
        self.ev(proc, "open", "ok", role=role, reader=reader)

    def put(self, proc: str, n: int, xid: int) -> None:
        self.ev(proc, "put", "invoke", items=[[n, digest(f"{proc}:{n}:".encode())]])
        self.ev(proc, "put", "ok", ids=[xid])

    def get(self, proc: str, xid: int, of: tuple[str, int], errors: int = 0) -> None:
        reader = proc.rsplit(".", 1)[1]
        self.ev(proc, "get", "ok", reader=reader, id=xid, digest=digest(f"{of[0]}:{of[1]}:".encode()), errors=errors)

    def done(self, proc: str, what: str, xid: int) -> None:
        reader = proc.rsplit(".", 1)[1]
        self.ev(proc, what, "invoke", reader=reader, id=xid)
        self.ev(proc, what, "ok", reader=reader, id=xid, n=1)

    def checkpoint(self, proc: str) -> None:
        self.ev(proc, "checkpoint", "invoke")
        self.ev(proc, "checkpoint", "ok")

    def close(self, proc: str) -> None:
        self.ev(proc, "close", "invoke")
        self.ev(proc, "close", "ok")

    def kill(self, victim: str) -> None:
        self.ev("parent", "kill", "info", victim=victim, child_pid=200)
        self.ev("parent", "exit", "info", victim=victim, status=-9, stderr="")

    def history(self) -> History:
        history = History()
        for proc, events in sorted(self.logs.items()):
            parse_lines(list(each_line(events)), f"{proc}.jsonl", history)
        return history


def clean(b: Builder, *, skip: str = "", inject: Callable[[Builder], None] | None = None) -> None:
    """A clean run: producer p1 puts ids 1-4 (p2 joins and puts 5), two competing
    consumers of reader ``a`` and the drains of ``a`` and ``b``; ``inject`` adds
    events before the drains."""
    b.open("p1")
    b.open("c1.a", "a")
    b.open("c2.a", "a")
    b.put("p1", 0, 1)
    b.put("p1", 1, 2)
    b.get("c1.a", 1, ("p1", 0))
    b.get("c2.a", 2, ("p1", 1))
    b.done("c2.a", "abort", 2)  # given back: c1.a has it next, errors 1
    b.get("c1.a", 2, ("p1", 1), errors=1)
    b.done("c1.a", "confirm", 1)
    b.done("c1.a", "confirm", 2)
    b.checkpoint("c1.a")
    b.put("p1", 2, 3)
    b.put("p1", 3, 4)
    b.get("c2.a", 3, ("p1", 2))
    b.done("c2.a", "confirm", 3)  # confirmed, then killed before any checkpoint: may come again
    b.get("c2.a", 4, ("p1", 3))  # open when killed: comes again
    b.kill("c2.a")
    b.close("p1")
    b.ev("parent", "exit", "info", victim="p1", status=0, stderr="")
    b.open("p2")
    b.put("p2", 0, 5)
    b.kill("p2")
    b.get("c1.a", 3, ("p1", 2))
    b.get("c1.a", 4, ("p1", 3), errors=1)
    b.get("c1.a", 5, ("p2", 0))
    if skip != "close":
        b.close("c1.a")  # a leave with 3, 4, 5 open: given back
        b.ev("parent", "exit", "info", victim="c1.a", status=0, stderr="")
    if inject is not None:
        inject(b)
    for xid, of in ((3, ("p1", 2)), (4, ("p1", 3)), (5, ("p2", 0))):
        b.get("drain.a", xid, of)
        b.done("drain.a", "confirm", xid)
    for xid, of in ((1, ("p1", 0)), (2, ("p1", 1)), (3, ("p1", 2)), (4, ("p1", 3)), (5, ("p2", 0))):
        if skip == "lost" and xid == 4:
            continue
        b.get("drain.b", xid, of)
        b.done("drain.b", "confirm", xid)
    b.ev("parent", "verify", "ok")


def judged(inject: Callable[[Builder], None] | None = None, **kwargs: Any) -> Verdict:
    b = Builder()
    clean(b, inject=inject, **kwargs)
    return check(b.history())


def test_a_clean_history_passes_and_is_counted() -> None:
    verdict = judged()
    assert verdict.violations == []
    c = verdict.counts
    assert (c["joins"], c["leaves"], c["kills"], c["puts"]) == (4, 2, 2, 5)
    assert (c["deliveries"], c["confirms"], c["aborts"]) == (16, 11, 1)


def only(verdict: Verdict, kind: str) -> None:
    assert {v.kind for v in verdict.violations} == {kind}, [str(v) for v in verdict.violations]


def test_an_acknowledged_put_never_delivered_to_a_reader_is_lost() -> None:
    verdict = judged(skip="lost")
    only(verdict, "lost")
    (v,) = verdict.violations
    assert v.ids == (4,) and "'b'" in v.detail and v.lines == ("p1.jsonl:10",)


def test_an_acknowledged_id_delivered_with_another_payload() -> None:
    def inject(b: Builder) -> None:
        b.open("c9.b", "b")
        b.get("c9.b", 2, ("p1", 0))
        b.done("c9.b", "abort", 2)

    verdict = judged(inject)
    only(verdict, "payload")
    (v,) = verdict.violations
    assert v.ids == (2,) and v.procs == ("p1", "c9.b")


def test_a_payload_nobody_put_is_a_phantom() -> None:
    verdict = judged(lambda b: b.get("drain.b", 6, ("p9", 0)))
    only(verdict, "phantom")


def test_two_puts_acknowledged_with_one_id() -> None:
    def inject(b: Builder) -> None:
        b.open("p3")
        b.put("p3", 0, 5)  # id 5 was p2's

    verdict = judged(inject)
    assert "unique" in verdict.kinds()


def test_one_put_delivered_under_two_ids() -> None:
    def inject(b: Builder) -> None:
        b.open("p3")
        b.ev("p3", "put", "invoke", items=[[0, digest(b"p3:0:")]])  # killed in flight
        b.kill("p3")
        b.get("drain.b", 6, ("p3", 0))
        b.get("drain.b", 7, ("p3", 0))

    only(judged(inject), "unique")


def test_ids_going_down_in_one_producer() -> None:
    def inject(b: Builder) -> None:
        b.open("p3")
        b.put("p3", 0, 7)
        b.put("p3", 1, 6)
        for xid, n in ((7, 0), (6, 1)):
            b.get("drain.a", xid, ("p3", n), errors=1)
            b.get("drain.b", xid, ("p3", n), errors=1)

    only(judged(inject), "id-order")


def test_a_put_invoked_after_another_was_acknowledged_gets_a_smaller_id() -> None:
    def inject(b: Builder) -> None:
        b.open("p3")
        b.open("p4")
        b.put("p3", 0, 9)
        b.put("p4", 0, 8)
        for xid, of in ((9, ("p3", 0)), (8, ("p4", 0))):
            b.get("drain.a", xid, of, errors=1)
            b.get("drain.b", xid, of, errors=1)

    verdict = judged(inject)
    only(verdict, "id-order")
    assert verdict.violations[0].ids == (9, 8)


def test_a_producers_order_broken_in_a_consumers_deliveries() -> None:
    def inject(b: Builder) -> None:
        b.open("c9.b", "b")
        b.get("c9.b", 2, ("p1", 1))
        b.get("c9.b", 1, ("p1", 0))  # first-hand (errors 0), before p1's item 1

    only(judged(inject), "producer-order")


def test_an_item_open_in_two_live_consumers_at_once() -> None:
    def inject(b: Builder) -> None:
        b.open("c8.b", "b")
        b.open("c9.b", "b")
        b.get("c8.b", 1, ("p1", 0))
        b.get("c9.b", 1, ("p1", 0), errors=1)  # c8.b has neither confirmed, aborted nor died
        b.close("c8.b")

    verdict = judged(inject)
    only(verdict, "open-twice")
    assert verdict.violations[0].procs == ("c8.b", "c9.b")


def test_an_item_got_twice_by_one_consumer_without_a_confirm() -> None:
    def inject(b: Builder) -> None:
        b.open("c8.b", "b")
        b.get("c8.b", 1, ("p1", 0))
        b.get("c8.b", 1, ("p1", 0), errors=1)

    only(judged(inject), "open-twice")


def test_delivered_again_after_a_live_consumers_confirm() -> None:
    """The issue-27 case: the first consumer confirmed and lives."""

    def inject(b: Builder) -> None:
        b.open("c8.b", "b")
        b.open("c9.b", "b")
        b.get("c8.b", 1, ("p1", 0))
        b.done("c8.b", "confirm", 1)
        b.get("c9.b", 1, ("p1", 0))

    verdict = judged(inject)
    only(verdict, "redelivered")
    assert verdict.violations[0].procs == ("c8.b", "c9.b") and "alive" in verdict.violations[0].detail


def test_delivered_again_after_the_confirmer_checkpointed_and_died() -> None:
    def inject(b: Builder) -> None:
        b.open("c8.b", "b")
        b.get("c8.b", 1, ("p1", 0))
        b.done("c8.b", "confirm", 1)
        b.checkpoint("c8.b")
        b.kill("c8.b")
        b.open("c9.b", "b")
        b.get("c9.b", 1, ("p1", 0))

    verdict = judged(inject)
    only(verdict, "redelivered")
    assert "checkpoint after the confirm" in verdict.violations[0].detail


def test_delivered_again_after_the_confirmer_left_cleanly() -> None:
    verdict = judged(lambda b: b.get("drain.a", 1, ("p1", 0)))  # c1.a confirmed 1 and closed
    only(verdict, "redelivered")


def test_delivered_again_before_the_confirmers_kill() -> None:
    def inject(b: Builder) -> None:
        b.open("c8.b", "b")
        b.open("c9.b", "b")
        b.get("c8.b", 1, ("p1", 0))
        b.done("c8.b", "confirm", 1)
        b.get("c9.b", 1, ("p1", 0))
        b.kill("c8.b")  # too late to excuse it

    only(judged(inject), "redelivered")


def test_a_child_that_died_unkilled() -> None:
    verdict = judged(lambda b: b.ev("parent", "exit", "info", victim="c9.a", status=1, stderr="Traceback: boom"))
    only(verdict, "crash")
    assert "boom" in verdict.violations[0].detail


def test_verify_failing_after_the_run() -> None:
    only(judged(lambda b: b.ev("parent", "verify", "fail", error="CorruptFileError: q.1 at 40")), "verify")


def test_an_unreadable_line_inside_a_log_but_not_a_last_line_cut_by_a_kill(tmp_path: Any) -> None:
    b = Builder()
    clean(b)
    history = b.history()
    parse_lines(['{"proc": "c7.a", "seq": 0, "t": 1, "f": "open", "type": "invoke"}\n', '{"proc": "c7'], "cut.jsonl",
                history)
    assert check(history).violations == []
    parse_lines(['{"proc": "c7', '{"proc": "c6.a"}\n'], "bad.jsonl", history)
    verdict = check(history)
    only(verdict, "log")
    assert {v.lines[0] for v in verdict.violations} == {"bad.jsonl:1", "bad.jsonl:2"}
    (tmp_path / "x.jsonl").write_text("".join(each_line(b.logs["p1"])))
    assert len(load([tmp_path / "x.jsonl"]).events) == len(b.logs["p1"])
