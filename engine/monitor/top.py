"""``engine top DIR``: a live terminal view of every store in a directory.

Two tables, refreshed every few seconds (rich's ``Live``):

* **Readers**, the one most behind first: backlog (items and bytes), how fast
  it grows (``+12.5/s``, red: falling behind; green: catching up), how long the
  oldest item has waited, how fast the reader confirms;
* **Stores**: kind, disk bytes and their growth per second, files, records and
  records per second, and a store that could not be read with why.

A line above them names the reader falling behind fastest.  ``--once --json``
prints the same figures once as one JSON document (two scans ``--interval``
apart, so the rates are there), for scripts.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from engine.clireport import human_bytes, human_duration_ns
from engine.monitor.track import Tracker


def _per_s(value: float | None, unit: str = "", *, bytes_: bool = False) -> Text:
    if value is None:
        return Text("-")
    if value == 0:
        return Text("0/s", style="dim")
    shown = human_bytes(int(abs(value))) if bytes_ else f"{abs(value):,.1f}{unit}"
    return Text(f"{'+' if value > 0 else '-'}{shown}/s", style="red" if value > 0 else "green")


def headline(view: dict[str, Any]) -> Text:
    """Who is falling behind, in one line."""
    behind = view["behind"]
    window = f"over the last {view['window_s']:.0f} s" if view["window_s"] else "(rates after the next scan)"
    if behind is None:
        return Text(f"{view['root']}: every reader is caught up {window}", style="green")
    growth = behind["backlog_per_s"]
    trend = ("growing " + f"{growth:,.1f} items/s" if growth and growth > 0 else
             "shrinking " + f"{-growth:,.1f} items/s" if growth and growth < 0 else "steady")
    return Text(f"{view['root']}: most behind: {behind['store']}: {behind['reader']} — "
                f"{behind['backlog_items']:,} items ({human_bytes(behind['backlog_bytes'])}) waiting, "
                f"{trend} {window}", style="bold red" if growth and growth > 0 else "bold")


def render(view: dict[str, Any]) -> Group:
    """The view as rich renderables."""
    readers = Table(title="Readers (most behind first)", title_justify="left", expand=False)
    for col, justify in (("queue", "left"), ("reader", "left"), ("backlog", "right"), ("bytes", "right"),
                         ("backlog growth", "right"), ("oldest waited", "right"), ("confirms", "right")):
        readers.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in view["readers"]:
        age = r["oldest_age_s"]
        readers.add_row(r["store"], r["reader"], f"{r['backlog_items']:,}", human_bytes(r["backlog_bytes"]),
                        _per_s(r["backlog_per_s"]), "-" if age is None else human_duration_ns(int(age * 1e9)),
                        _per_s(r["confirmed_per_s"]))
    stores = Table(title="Stores", title_justify="left", expand=False)
    for col, justify in (("kind", "left"), ("store", "left"), ("disk", "right"), ("disk growth", "right"),
                         ("files", "right"), ("records", "right"), ("records rate", "right"), ("status", "left")):
        stores.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in view["stores"]:
        stores.add_row(s["kind"], s["name"], human_bytes(s["disk_bytes"]),
                       _per_s(s["disk_bytes_per_s"], bytes_=True), f"{s['files']:,}",
                       "-" if s["records"] is None else f"{s['records']:,}", _per_s(s["records_per_s"]),
                       Text(s["error"], style="red") if s["error"] else Text("ok", style="green"))
    parts: list[Any] = [headline(view)]
    if view["readers"]:
        parts.append(readers)
    parts.append(stores)
    parts.extend(Text(f"could not read {problem}", style="red") for problem in view["errors"])
    return Group(*parts)


def run_live(tracker: Tracker, console: Console, interval: float, *, iterations: int | None = None) -> None:
    """Refresh the view every ``interval`` seconds until Ctrl-C (or ``iterations``)."""
    tracker.sample()
    done = 0
    with Live(render(tracker.view()), console=console, auto_refresh=False, screen=False) as live:
        while iterations is None or done < iterations:
            time.sleep(interval)
            tracker.sample()
            live.update(render(tracker.view()), refresh=True)
            done += 1


def once(tracker: Tracker, interval: float) -> dict[str, Any]:
    """Two scans ``interval`` seconds apart; the view with its rates."""
    tracker.sample()
    time.sleep(interval)
    tracker.sample()
    return tracker.view()
