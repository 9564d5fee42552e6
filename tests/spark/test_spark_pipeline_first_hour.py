"""The pipeline as a new user meets it (issue 31): a key-value store is summarised
as one (kind "kv", every tree), one unreadable subdirectory does not abort the
run, times carry their zone in tables and JSON, a log whose records share one
instant has no rate, errors go to standard error without markup, and every row
says what its store takes on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import engine
from engine.clireport import print_json
from engine.spark.pipeline import Summary, print_summary, run_pipeline
from engine.stores import discover

pytestmark = pytest.mark.spark


def _data(root: Path) -> None:
    (root / "kv").mkdir(parents=True)
    with engine.KV.open(root / "kv" / "app.kv") as kv:
        kv[b"a"] = b"1"
        kv.tree("other")[b"b"] = b"22"
    with engine.PageStore.open(root / "pages.db") as store, store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"x")
    with engine.AppendLog.open(root / "instant") as log:  # every record at one instant
        log.append_many([(b"r%d" % i, 0, 1_800_000_000_000_000_000) for i in range(1000)])
    with engine.AppendLog.open(root / "burst") as log:  # 10 records 1 ms apart: no rate either
        log.append_many([(b"b", 0, 1_800_000_000_000_000_000 + i * 1_000_000) for i in range(10)])
    with engine.AppendLog.open(root / "steady") as log:  # 5 records over 2 minutes: 2.5 a minute
        log.append_many([(b"s", 0, 1_800_000_000_000_000_000 + i * 30_000_000_000) for i in range(5)])
    (root / "locked").mkdir()


def test_pipeline_over_kv_unreadable_dirs_and_instants(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    _data(root)
    real = os.listdir
    locked = str(root / "locked")

    def listdir(path: Any) -> list[str]:  # what the OS says for a directory we may not read
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    found = discover(str(root))
    assert found.kv == [str(root / "kv" / "app.kv")] and found.pages == [str(root / "pages.db")]
    assert found.errors == [f"{locked}: permission denied"]
    summary = run_pipeline(spark, root, tmp_path / "out", chart=True)
    (kv,) = summary.of_kind("kv")
    assert (kv["name"], kv["keys"], kv["trees"], kv["bytes"]) == ("kv/app.kv", 2, 2, 1 + 1 + 1 + 2)
    assert kv["disk_bytes"] > 0 and not summary.of_kind("pages")[0]["name"].startswith("kv")
    burst, log, steady = summary.of_kind("log")
    assert log["records"] == 1000 and log["span_seconds"] == 0.0 and log["per_minute"] is None
    # A span under a second has no rate (it was 10 / 9 ms = 66,667 a minute), a longer one its own.
    assert burst["span_seconds"] == pytest.approx(0.009) and burst["per_minute"] is None
    assert steady["span_seconds"] == 120.0 and steady["per_minute"] == 2.5
    assert log["first_time"].utcoffset() is not None and log["first_time"].isoformat().endswith("+00:00")
    assert summary.errors == ["locked: permission denied"]
    # Said once, by whoever prints summary.errors: run_pipeline printed each a second time
    # (a logging warning on standard error).
    assert "permission denied" not in capsys.readouterr().err
    assert summary.chart and os.path.getsize(summary.chart) > 10_000
    # engine pipeline --json prints the rows as they are: times with their zone.
    print_json({"rows": summary.rows})
    printed = json.loads(capsys.readouterr().out)["rows"]
    assert next(r for r in printed if r["kind"] == "log")["first_time"] == "2027-01-15T08:00:00+00:00"


def test_summary_tables_say_utc_and_errors_go_to_stderr_without_markup() -> None:
    import datetime as dt

    row: dict[str, Any] = dict.fromkeys(("kind", "name", "records", "bytes", "first_time", "last_time",
                                         "span_seconds", "per_minute"))
    row.update(kind="log", name="clicks", records=3, bytes=9, span_seconds=0.0,
               first_time=dt.datetime(2026, 11, 24, 1, 0, 5, tzinfo=dt.UTC),
               last_time=dt.datetime(2026, 11, 24, 1, 0, 5, tzinfo=dt.UTC))
    summary = Summary(rows=[row], errors=["locked: permission denied"])
    # As the command line's consoles (engine.terminal): markup is not read, so a
    # "[red]" in the text would be printed as it is.
    out, err = Console(record=True, width=200, markup=False), Console(record=True, width=200, markup=False)
    print_summary(summary, out, err)
    text = out.export_text()
    assert "2026-11-24 01:00:05 UTC" in text and "could not read" not in text
    assert err.export_text().strip() == "could not read locked: permission denied"
    assert "[red]" not in err.export_text()
