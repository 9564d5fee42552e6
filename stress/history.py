"""Histories of a queue stress run: what each process invoked and what came back.

Every producer and consumer process of a run (``stress/queue_procs.py``), the
parent that starts, stops and kills them, and the parent's final drain append
events to a log file of their own, one JSON object a line, flushed after every
event (the kills are process kills: what ``write`` handed the kernel survives
them, so no fsync is needed).  ``stress/checker.py`` reads every log after the
run and judges the whole history.

An event is ``{"proc", "pid", "seq", "t", "f", "type", ...}``:

* ``proc``: the process's name in the run, unique per incarnation (``p3``, a
  producer; ``c7.a``, a consumer of reader name ``a``; ``drain.a``, the parent's
  final drain of ``a``; ``parent``);
* ``seq``: that process's own sequence number (0, 1, 2, ...), ``t``:
  ``time.monotonic_ns()`` (one clock for every process of the machine);
* ``f``: what was done, ``type``: ``invoke`` (before the call), ``ok`` (it
  returned), ``fail`` (it raised: ``error``), or ``info`` (the parent's notes).

The operations (``f``) and their fields:

=============  ===========================================================
``open``       ``role`` (``producer`` / ``consumer``), ``reader``: a join
``put``        invoke: ``items`` [[n, digest], ...] (n: the producer's own
               number of the item, digest: :func:`digest` of its payload);
               ok: ``ids`` (in the same order)
``get``        ok only: ``reader``, ``id``, ``digest``, ``errors``
               (``item.error_count``): an item delivered
``confirm``    ``reader``, ``id``
``abort``      ``reader``, ``id``
``checkpoint`` ``reader``: a consumer's explicit checkpoint
``close``      a clean close: a leave (``ok``: it completed)
``start``      parent, info: ``victim`` (the child's proc), ``child_pid``
``kill``       parent, info, logged *before* SIGKILL is sent: ``victim``,
               ``child_pid``
``exit``       parent, info: ``victim``, ``status`` (the child's exit
               status), ``stderr`` (its tail)
``verify``     parent: the reopened queue's ``verify()`` (fail: ``error``)
=============  ===========================================================
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


def digest(data: bytes) -> str:
    """The payload digest the logs carry (16 hex digits of blake2b)."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class HistoryLog:
    """One process's log: appends events with its own sequence and the time."""

    def __init__(self, path: str | os.PathLike[str], proc: str) -> None:
        self.path = Path(path)
        self.proc = proc
        self.pid = os.getpid()
        self._seq = 0
        self._file: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def log(self, f: str, type_: str, **fields: Any) -> None:
        """Append one event and flush it to the kernel."""
        event = {"proc": self.proc, "pid": self.pid, "seq": self._seq, "t": time.monotonic_ns(), "f": f,
                 "type": type_, **fields}
        self._seq += 1
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Event:
    """One logged event, with where it was read (``where``: ``file:line``)."""

    proc: str
    seq: int
    t: int
    f: str
    type: str
    where: str
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def id(self) -> int:
        return int(self.fields["id"])


@dataclass
class History:
    """Every event of a run, per process in its own order, and the lines that
    could not be read (``bad``: ``file:line`` and why)."""

    events: list[Event] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)

    def by_proc(self) -> dict[str, list[Event]]:
        procs: dict[str, list[Event]] = {}
        for event in self.events:
            procs.setdefault(event.proc, []).append(event)
        for events in procs.values():
            events.sort(key=lambda e: e.seq)
        return procs


_KNOWN = frozenset({"proc", "pid", "seq", "t", "f", "type"})


def parse_lines(lines: Iterable[str], name: str, history: History) -> None:
    """Add one log's lines to ``history``.  Its last line may be cut short (the
    process was killed in the middle of writing it): that one is dropped; any
    other line that does not parse is recorded in ``history.bad``."""
    numbered = list(enumerate(lines, 1))
    for number, line in numbered:
        where = f"{name}:{number}"
        try:
            raw = json.loads(line)
            event = Event(str(raw["proc"]), int(raw["seq"]), int(raw["t"]), str(raw["f"]), str(raw["type"]), where,
                          {k: v for k, v in raw.items() if k not in _KNOWN})
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(numbered) and not line.endswith("\n"):
                continue  # cut by the kill
            history.bad.append((where, f"unreadable log line: {exc}"))
            continue
        history.events.append(event)


def load(paths: Iterable[str | os.PathLike[str]]) -> History:
    """Read every log file of a run."""
    history = History()
    for path in sorted(Path(p) for p in paths):
        with open(path, encoding="utf-8", newline="") as f:
            parse_lines(f.readlines(), path.name, history)
    return history


def load_dir(directory: str | os.PathLike[str]) -> History:
    """Read every ``*.jsonl`` log in ``directory``."""
    return load(Path(directory).glob("*.jsonl"))


def each_line(events: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Events as log lines (for histories built by hand: tests)."""
    for event in events:
        yield json.dumps(event, separators=(",", ":")) + "\n"
