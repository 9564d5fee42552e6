"""Judge a queue run's whole history (the Jepsen/Elle idea, sized for one machine).

The input is every log of a run (``stress/history.py``): the producers' and
consumers' own logs, the parent's starts, kills and exits, and the parent's final
drain of every reader name.  :func:`check` returns every violation found, each
with its kind, the ids, the processes and the log lines (``file:line``) that
show it, and the run's counts.

What the queue promises (docs/guide/queue.md), and so what is judged:

``lost``
    Every acknowledged put (``put`` ok) is delivered (a ``get`` ok, by any
    consumer or the drain) to every reader name, at least once.
``payload``
    A delivered id that a put acknowledged carries that put's payload (digest).
``phantom``
    Every delivered payload is one some producer put (acknowledged, or in flight
    when its producer died).
``unique``
    One payload per id and one id per put, over the acks and every delivery.
``id-order``
    Ids increase: each producer's acknowledged ids in its own order, and a put
    invoked after another put was acknowledged (by any process) gets a larger id.
``producer-order``
    Each consumer incarnation's first-hand deliveries (``errors`` 0: not given
    back by an abort, a death or another consumer) of one producer's items come
    in that producer's order.
``open-twice``
    No id is open in two live consumers of one reader name at once.  A consumer
    holds an item from its ``get`` returning (logged after) until it invokes
    ``confirm`` or ``abort`` of it, invokes ``close``, or the parent logs its
    kill (logged before the signal), or its last event if it ended otherwise:
    each logged span lies inside the real one, so an overlap is real.
``redelivered``
    An id confirmed for a reader name (``confirm`` ok) is delivered to that name
    again (a ``get`` logged after the confirm returned) only when the confirming
    consumer *C* may have died before a checkpoint wrote the confirmation: *C*
    was killed, its kill was logged before that delivery, and *C* logged no
    completed ``checkpoint`` or ``close`` after the confirm.  (A confirmed item
    stays claimed by *C* until *C*'s next checkpoint has written it; after that
    the reader file says it is done.  So while *C* lives, or once it has
    checkpointed, nobody gets it again.)
``crash``
    A child that was not killed exited with a status other than 0.
``verify``
    The reopened queue's ``verify()`` after the run raised.
``log``
    A log line (other than a last one cut by a kill) does not parse.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stress.history import Event, History

KINDS = ("lost", "payload", "phantom", "unique", "id-order", "producer-order", "open-twice", "redelivered",
         "crash", "verify", "log")


@dataclass(frozen=True)
class Violation:
    """One broken promise: its kind, the ids and processes involved, the log lines
    (``file:line``) that show it, and a sentence."""

    kind: str
    detail: str
    ids: tuple[int, ...] = ()
    procs: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail} [{', '.join(self.lines[:6])}]"


@dataclass
class Verdict:
    """The checker's answer: the violations, and the run's counts."""

    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def kinds(self) -> Counter[str]:
        return Counter(v.kind for v in self.violations)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Put:
    proc: str
    n: int
    digest: str
    invoke: Event
    ack: Event | None = None
    id: int | None = None


@dataclass
class _Hold:
    proc: str
    reader: str
    id: int
    start: int
    end: int
    got: Event


class _Judge:
    def __init__(self, history: History) -> None:
        self.procs = history.by_proc()
        self.out = Verdict()
        self.out.violations.extend(Violation("log", why, lines=(where,)) for where, why in history.bad)
        self.kills: dict[str, Event] = {}
        self.exits: dict[str, Event] = {}
        self.puts: dict[tuple[str, int], _Put] = {}
        self.by_digest: dict[str, _Put] = {}
        self.gets: list[Event] = []
        self.readers: set[str] = set()

    def flag(self, kind: str, detail: str, ids: tuple[int, ...], events: tuple[Event, ...]) -> None:
        procs = tuple(dict.fromkeys(e.proc for e in events))
        self.out.violations.append(Violation(kind, detail, ids, procs, tuple(e.where for e in events)))

    # -- reading -----------------------------------------------------------------
    def read(self) -> None:
        counts = self.out.counts
        for proc, events in self.procs.items():
            pending: list[_Put] = []
            for e in events:
                if e.f == "kill":
                    self.kills.setdefault(str(e.get("victim")), e)
                    counts["kills"] += 1
                elif e.f == "start":
                    counts["starts"] += 1
                elif e.f == "exit":
                    self.exits[str(e.get("victim"))] = e
                elif e.f == "verify" and e.type == "fail":
                    self.flag("verify", f"verify() after the run: {e.get('error')}", (), (e,))
                elif e.f == "open" and e.type == "invoke":
                    if e.get("role") in ("producer", "consumer"):
                        counts["joins"] += 1
                        counts[f"{e.get('role')} joins"] += 1
                    if e.get("reader") is not None:
                        self.readers.add(str(e.get("reader")))
                elif e.f == "close" and e.type == "ok":
                    counts["leaves"] += 1
                elif e.f == "put" and e.type == "invoke":
                    pending = [_Put(proc, int(n), str(d), e) for n, d in e.get("items", [])]
                    for put in pending:
                        self.puts[(proc, put.n)] = put
                        self.by_digest[put.digest] = put
                elif e.f == "put" and e.type == "ok":
                    for put, xid in zip(pending, e.get("ids", []), strict=False):
                        put.ack, put.id = e, int(xid)
                        counts["puts"] += 1
                    pending = []
                elif e.f == "get" and e.type == "ok":
                    self.gets.append(e)
                    self.readers.add(str(e.get("reader")))
                    counts["deliveries"] += 1
                elif e.f in ("confirm", "abort") and e.type == "ok":
                    counts[f"{e.f}s"] += 1
        counts["processes"] = len(self.procs)

    # -- the checks ----------------------------------------------------------------
    def crashes(self) -> None:
        for victim, e in self.exits.items():
            if victim not in self.kills and e.get("status") != 0:
                self.flag("crash", f"{victim} exited with status {e.get('status')}: {e.get('stderr', '')[-400:]}",
                          (), (e,))

    def payloads(self) -> None:
        by_id: dict[int, list[_Put]] = {}
        for p in self.puts.values():
            if p.id is not None:
                by_id.setdefault(p.id, []).append(p)
        for xid, twice in by_id.items():
            if len(twice) > 1:
                self.flag("unique", f"id {xid} acknowledged for {len(twice)} puts: "
                          f"{', '.join(f'{p.proc}#{p.n}' for p in twice)}", (xid,),
                          tuple(p.ack for p in twice if p.ack is not None))
        acked = {xid: puts[0] for xid, puts in by_id.items()}
        ids_of: dict[tuple[str, int], dict[int, Event]] = {}
        puts_of: dict[int, dict[tuple[str, int], Event]] = {}
        for xid, done in acked.items():
            assert done.ack is not None
            ids_of.setdefault((done.proc, done.n), {})[xid] = done.ack
            puts_of.setdefault(xid, {})[(done.proc, done.n)] = done.ack
        for g in self.gets:
            put = self.by_digest.get(str(g.get("digest")))
            if put is None:
                self.flag("phantom", f"id {g.id} delivered to {g.get('reader')} with a payload nobody put", (g.id,),
                          (g,))
                continue
            known = acked.get(g.id)
            if known is not None and put not in by_id[g.id]:
                assert known.ack is not None
                self.flag("payload", f"id {g.id} acknowledged for {known.proc}#{known.n} but delivered to "
                          f"{g.get('reader')} with the payload of {put.proc}#{put.n}", (g.id,), (known.ack, g))
                continue
            ids_of.setdefault((put.proc, put.n), {}).setdefault(g.id, g)
            puts_of.setdefault(g.id, {}).setdefault((put.proc, put.n), g)
        for key, ids in ids_of.items():
            if len(ids) > 1:
                self.flag("unique", f"one put ({key[0]}#{key[1]}) under ids {sorted(ids)}", tuple(sorted(ids)),
                          tuple(ids.values()))
        for xid, keys in puts_of.items():
            if len(keys) > 1:
                self.flag("unique", f"id {xid} carried {len(keys)} payloads: {sorted(keys)}", (xid,),
                          tuple(keys.values()))

    def id_order(self) -> None:
        last: dict[str, _Put] = {}
        for put in sorted((p for p in self.puts.values() if p.ack is not None), key=lambda p: (p.proc, p.n)):
            before = last.get(put.proc)
            assert put.id is not None and put.ack is not None
            if before is not None and before.id is not None and before.ack is not None and put.id <= before.id:
                self.flag("id-order", f"{put.proc} got id {put.id} for #{put.n} after id {before.id} for "
                          f"#{before.n}", (before.id, put.id), (before.ack, put.ack))
            last[put.proc] = put
        # Real time: a put invoked after another was acknowledged gets a larger id.
        done = [(p.ack.t, p.id, p) for p in self.puts.values() if p.ack is not None and p.id is not None]
        done.sort(key=lambda x: x[0])
        best: tuple[int, _Put] | None = None
        i = 0
        for put in sorted((p for _, _, p in done), key=lambda p: p.invoke.t):
            while i < len(done) and done[i][0] < put.invoke.t:
                if best is None or done[i][1] > best[0]:
                    best = (done[i][1], done[i][2])
                i += 1
            assert put.id is not None
            if best is not None and best[1].proc != put.proc and put.id <= best[0] and best[1].ack is not None:
                self.flag("id-order", f"{put.proc}#{put.n} was invoked after {best[1].proc}#{best[1].n} got id "
                          f"{best[0]} and got the smaller id {put.id}", (best[0], put.id), (best[1].ack, put.invoke))

    def lost(self) -> None:
        delivered: dict[str, set[str]] = {}
        for g in self.gets:
            delivered.setdefault(str(g.get("reader")), set()).add(str(g.get("digest")))
        for reader in sorted(self.readers):
            seen = delivered.get(reader, set())
            for put in self.puts.values():
                if put.ack is not None and put.digest not in seen:
                    assert put.id is not None
                    self.flag("lost", f"acknowledged put {put.proc}#{put.n} (id {put.id}) never delivered to "
                              f"reader {reader!r}", (put.id,), (put.ack,))

    def producer_order(self) -> None:
        for proc, events in self.procs.items():
            last: dict[str, tuple[int, Event]] = {}
            for g in events:
                if g.f != "get" or g.type != "ok" or g.get("errors", 0) != 0:
                    continue
                put = self.by_digest.get(str(g.get("digest")))
                if put is None:
                    continue
                before = last.get(put.proc)
                if before is not None and put.n < before[0]:
                    self.flag("producer-order", f"{proc} delivered {put.proc}#{put.n} (id {g.id}) after "
                              f"{put.proc}#{before[0]} (id {before[1].id})", (before[1].id, g.id), (before[1], g))
                last[put.proc] = (put.n, g)

    def holdings(self) -> list[_Hold]:
        holds: list[_Hold] = []
        for proc, events in self.procs.items():
            open_: dict[int, Event] = {}
            kill = self.kills.get(proc)
            for e in events:
                if e.f == "get" and e.type == "ok":
                    if e.id in open_:
                        self.flag("open-twice", f"{proc} got id {e.id} again while it held it", (e.id,),
                                  (open_[e.id], e))
                    open_[e.id] = e
                elif e.f in ("confirm", "abort") and e.type == "invoke" and e.id in open_:
                    got = open_.pop(e.id)
                    holds.append(_Hold(proc, str(got.get("reader")), e.id, got.t, e.t, got))
                elif e.f == "close" and e.type == "invoke":
                    holds.extend(_Hold(proc, str(g.get("reader")), x, g.t, max(g.t, e.t), g) for x, g in open_.items())
                    open_ = {}
            end = kill.t if kill is not None else (events[-1].t if events else 0)
            holds.extend(_Hold(proc, str(g.get("reader")), x, g.t, max(g.t, end), g) for x, g in open_.items())
        return holds

    def open_twice(self) -> None:
        by_item: dict[tuple[str, int], list[_Hold]] = {}
        for hold in self.holdings():
            by_item.setdefault((hold.reader, hold.id), []).append(hold)
        for (reader, xid), holds in by_item.items():
            holds.sort(key=lambda h: h.start)
            widest: _Hold | None = None
            for hold in holds:
                if widest is not None and hold.start < widest.end:
                    self.flag("open-twice", f"reader {reader!r}: id {xid} open in {widest.proc} and {hold.proc} "
                              "at once", (xid,), (widest.got, hold.got))
                if widest is None or hold.end > widest.end:
                    widest = hold

    def redelivered(self) -> None:
        confirms: dict[tuple[str, int], list[Event]] = {}
        durable: dict[str, list[Event]] = {}  # proc -> its completed checkpoints and closes
        for proc, events in self.procs.items():
            for e in events:
                if e.f == "confirm" and e.type == "ok" and e.get("n", 1):
                    confirms.setdefault((str(e.get("reader")), e.id), []).append(e)
                elif e.f in ("checkpoint", "close") and e.type == "ok":
                    durable.setdefault(proc, []).append(e)
        for g in self.gets:
            for c in confirms.get((str(g.get("reader")), g.id), ()):
                if g.t <= c.t:
                    continue
                kill = self.kills.get(c.proc)
                written = [e for e in durable.get(c.proc, ()) if e.seq > c.seq]
                if c.proc != g.proc and kill is not None and kill.t < g.t and not written:
                    continue  # at-least-once: the confirming consumer died before a checkpoint wrote it
                if c.proc == g.proc:
                    why = "the same consumer"
                elif kill is not None and kill.t < g.t:
                    why = f"it completed a {written[0].f} after the confirm, before its kill"
                elif any(e.f == "close" and e.t < g.t for e in written):
                    why = "it had closed cleanly since"
                else:
                    why = "it was alive"
                self.flag("redelivered", f"reader {g.get('reader')!r}: id {g.id} delivered to {g.proc} after "
                          f"{c.proc} confirmed it ({why})", (g.id,), (c, g))
                break


def check(history: History) -> Verdict:
    """Judge a run's history; see the module docstring for what each kind means."""
    judge = _Judge(history)
    judge.read()
    judge.crashes()
    judge.payloads()
    judge.id_order()
    judge.lost()
    judge.producer_order()
    judge.open_twice()
    judge.redelivered()
    return judge.out
