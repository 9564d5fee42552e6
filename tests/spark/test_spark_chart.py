"""The pipeline's chart answers what a user asks of the stores (issue 31): which
queue reader is falling behind, how much disk each store takes (the bytes were
in the table only), how each append log grew (two flat lines before), and the
key-value store is in it.  Drawn from a summary made by hand: no Spark needed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from engine.spark.pipeline import SUMMARY_COLUMNS, Summary, draw_chart

T0 = dt.datetime(2026, 11, 24, 1, 0, tzinfo=dt.UTC)


def _row(kind: str, name: str, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(SUMMARY_COLUMNS)
    row.update(kind=kind, name=name, **values)
    return row


def _summary() -> Summary:
    rows = [
        _row("queue", "queues/orders", detail="billing", backlog=50, bytes=1_400, oldest=T0, disk_bytes=40_000),
        _row("queue", "queues/orders", detail="audit", backlog=500, bytes=14_000, oldest=T0, disk_bytes=40_000),
        _row("log", "logs/clicks", records=1_000, bytes=19_000, disk_bytes=30_000),
        _row("pages", "pages.db", pages=10, free_pages=2, bytes=40_960, disk_bytes=50_000),
        _row("kv", "kv/app.kv", keys=300, trees=2, bytes=9_000, records=300, disk_bytes=70_000),
    ]
    growth = {"logs/clicks": [(T0 + dt.timedelta(minutes=m), 100 * m) for m in range(1, 11)]}
    return Summary(rows=rows, log_growth=growth)


def test_the_chart_says_who_falls_behind_disk_per_store_growth_and_the_kv_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    drawn: list[Figure] = []
    real = Figure.savefig

    def savefig(self: Figure, *args: Any, **kwargs: Any) -> None:
        drawn.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    path = draw_chart(_summary(), str(tmp_path / "summary.png"))
    assert Path(path).stat().st_size > 10_000
    assert len(drawn) == 1
    figure: Any = drawn[0]  # (matplotlib's own annotations are looser than these checks need)
    panels: dict[str, Any] = {ax.get_title(loc="left").split(":")[0]: ax
                              for ax in figure.axes if ax.get_title(loc="left")}
    assert list(panels) == ["Queues", "Disk", "Append logs", "Page stores", "Key-value stores"]
    # The reader most behind is named and red.
    queues = panels["Queues"]
    assert "queues/orders: audit" in queues.get_title(loc="left")
    colors = [bar.get_facecolor() for bar in queues.patches]
    assert colors.count(colors[1]) == 1 and colors[1][0] > 0.8 and colors[1][2] < 0.3  # audit's bar: red
    # Disk: every store (a queue once), the largest first, with its kind.
    disk = panels["Disk"]
    assert [t.get_text() for t in disk.get_yticklabels()] == [
        "kv/app.kv (kv)", "pages.db (pages)", "queues/orders (queue)", "logs/clicks (log)"]
    assert [bar.get_width() for bar in disk.patches] == [70_000, 50_000, 40_000, 30_000]
    # The log's growth: records held over time, rising (not a flat line).
    (line,) = panels["Append logs"].get_lines()
    held = list(line.get_ydata())
    assert held == sorted(held) and held[0] < held[-1]
    # The key-value store: its keys and trees.
    kv = panels["Key-value stores"]
    assert [t.get_text() for t in kv.get_yticklabels()] == ["kv/app.kv"]
    assert "300 keys in 2 trees" in " ".join(t.get_text() for t in kv.texts)
