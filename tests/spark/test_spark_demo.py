"""``engine demo``: requirements checked first, reruns, one-line errors, the Spark phase and its chart."""

from __future__ import annotations

import io
import json
import os
import stat
from typing import Any

import pytest
from rich.console import Console

from engine.cli import main
from engine.errors import ConfigError
from engine.spark import cli as spark_cli
from engine.spark import demo


def _fake_java(tmp: str, version_line: str) -> str:
    home = os.path.join(tmp, "jdk")
    os.makedirs(os.path.join(home, "bin"))
    java = os.path.join(home, "bin", "java")
    with open(java, "w") as f:
        f.write(f"#!/bin/sh\necho '{version_line}' >&2\n")
    os.chmod(java, os.stat(java).st_mode | stat.S_IXUSR)
    return home


def test_no_java_is_refused_before_anything_is_created(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = str(tmp_path / "d")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert main(["demo", target]) == 2
    err = capsys.readouterr().err
    assert "bin/java" in err and "Java 17 or newer" in err and "JAVA_HOME" in err
    assert not os.path.exists(target)
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="no java on PATH"):
        demo.check_requirements()


def test_old_java_is_refused(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", _fake_java(str(tmp_path), 'openjdk version "1.8.0_392"'))
    with pytest.raises(ConfigError, match=r"is Java 8\. Spark needs Java 17"):
        demo.check_requirements()
    assert demo.java_version(os.path.join(_fake_java(str(tmp_path / "b"), 'openjdk version "21.0.2" 2024'),
                                          "bin", "java")) == 21


def test_missing_spark_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "SPARK_MODULES", ("pyspark", "no_such_module_for_the_test"))
    with pytest.raises(ConfigError, match=r"pip install 'engine\[spark\]'"):
        demo.check_requirements()


def test_rerun_reuses_an_unfinished_directory_and_force_keeps_other_files(tmp_path: Any) -> None:
    root = str(tmp_path / "d")
    quiet = Console(quiet=True)
    demo.prepare_dir(root)
    os.makedirs(os.path.join(root, "queues", "half-made"))  # a run that died here
    assert os.path.exists(os.path.join(root, demo.MARKER))
    made = demo.make_demo_data(root, scale=100, console=quiet)  # reused: no --force needed
    assert "queue" in made and not os.path.exists(os.path.join(root, "queues", "half-made"))
    assert not os.path.exists(os.path.join(root, demo.MARKER))
    with pytest.raises(ConfigError, match="--force"):
        demo.make_demo_data(root, scale=100, console=quiet)  # finished: not reused silently
    with open(os.path.join(root, "mine.txt"), "w") as f:
        f.write("keep")
    demo.make_demo_data(root, scale=100, console=quiet, force=True)
    with open(os.path.join(root, "mine.txt")) as f:
        assert f.read() == "keep"
    other = str(tmp_path / "other")
    os.makedirs(other)
    os.symlink(str(tmp_path / "d"), os.path.join(other, "logs"))
    demo.prepare_dir(other, force=True)
    assert os.path.exists(os.path.join(root, "mine.txt")) and os.path.exists(os.path.join(root, "logs"))


def test_spark_errors_are_one_line_unless_verbose(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    trace = ("An error occurred while calling o87.collect.\n"
             ": org.apache.spark.SparkException: Job aborted due to stage failure: disk gone\n"
             "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2)\n"
             "\tat scala.collection.immutable.List.foreach(List.scala:334)\n")

    def failing(*args: Any, **kw: Any) -> None:
        raise RuntimeError(trace)

    monkeypatch.setattr(demo, "run_demo", failing)
    assert main(["demo", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().err  # errors go to stderr
    assert "engine demo: error: : org.apache.spark.SparkException: Job aborted due to stage failure: disk gone" in out
    assert "at org.apache" not in out and "--verbose" in out
    assert "running it again reuses" in out
    with pytest.raises(RuntimeError):
        main(["demo", str(tmp_path / "d"), "--verbose"])
    # engine pipeline: the same.
    monkeypatch.setattr(demo, "start_spark", failing)
    assert main(["pipeline", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().err
    assert "engine pipeline: error: : org.apache.spark.SparkException: Job aborted" in out
    assert "at org.apache" not in out and os.path.join(str(tmp_path), "out", "spark.log") in out


def test_spark_phase_and_chart(spark: Any, tmp_path: Any) -> None:
    root = str(tmp_path / "d")
    demo.make_demo_data(root, scale=300, console=Console(quiet=True))
    steps: list[str] = []
    from engine.spark.pipeline import run_pipeline

    summary = run_pipeline(spark, root, os.path.join(root, "out"), step=steps.append)
    assert steps == ["reading 2 append logs", "reading 1 queue directory", "reading 1 stream journal",
                     "reading 1 event journal", "reading 1 page store", "reading 1 key-value store",
                     "writing summary.parquet",
                     "drawing summary.png"]
    logs = {r["name"]: r for r in summary.of_kind("log")}
    assert set(summary.log_rates) == set(logs) == {"logs/clicks", "logs/metrics"}
    for name, points in summary.log_rates.items():
        assert len(points) > 10  # an hour of data in buckets of a minute
        minutes = len(points)
        assert sum(rate for _, rate in points) == pytest.approx(logs[name]["records"], rel=0.5 * 60 / minutes + 0.1)
    (events,) = summary.of_kind("events")
    dist = summary.events_per_id["events/accounts"]
    assert sum(n * ids for n, ids in dist.items()) == events["events"]
    assert summary.chart and os.path.getsize(summary.chart) > 10_000


def test_spark_phase_spinner_follows_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.spark import pipeline

    seen: list[str] = []

    def fake(spark: Any, root: str, out: str, *, chart: bool, step: Any) -> str:
        assert chart
        for what in ("reading 2 append logs", "writing summary.parquet"):
            step(what)
            seen.append(what)
        return "done"

    monkeypatch.setattr(pipeline, "run_pipeline", fake)
    console = Console(record=True, force_terminal=False, width=100)
    assert demo.run_spark_phase(object(), "/r", "/o", console) == "done"
    assert seen == ["reading 2 append logs", "writing summary.parquet"]
    # Not a terminal (piped): no spinner, and none of the blank lines it left above the tables.
    assert console.export_text() == ""


def test_pipeline_quiet_and_json_send_progress_away_from_stdout(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main
    from engine.spark.pipeline import Summary

    seen: list[Any] = []

    class FakeSpark:
        def stop(self) -> None:
            pass

    def fake_start(master: Any, app: str, console: Any, **kw: Any) -> FakeSpark:
        console.print("progress: starting Spark")
        return FakeSpark()

    def fake_phase(spark: Any, data: str, out: str, console: Any, chart: bool = True) -> Summary:
        seen.append(console)
        console.print("progress: reading stores")
        return Summary(rows=[{"kind": "log", "name": "clicks", "records": 3}], parquet=out + "/summary.parquet")

    monkeypatch.setattr(demo, "start_spark", fake_start)
    monkeypatch.setattr(demo, "run_spark_phase", fake_phase)
    args = ["pipeline", str(tmp_path), "--out", str(tmp_path / "out"), "--no-chart"]
    assert main([*args, "--quiet", "--json"]) == 0
    captured = capsys.readouterr()
    assert "progress" not in captured.out + captured.err
    assert json.loads(captured.out)["rows"] == [{"kind": "log", "name": "clicks", "records": 3}]
    # A spinner is for a terminal: piped (as here, under capsys) there is none.
    assert main([*args, "--json"]) == 0
    captured = capsys.readouterr()
    assert "progress" not in captured.out + captured.err and json.loads(captured.out)["errors"] == []
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    monkeypatch.setattr(spark_cli, "err_console", terminal)
    assert main([*args, "--json"]) == 0
    assert "progress" in terminal.file.getvalue()  # type: ignore[attr-defined]
    assert json.loads(capsys.readouterr().out)["errors"] == []


def test_pipeline_piped_prints_the_tables_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Piped, standard output is the tables and the file names, nothing before
    them (the spinners left blank lines) and no markup; the problems go to
    standard error, one plain line each, and the exit status is 1."""
    from engine.cli import main
    from engine.spark.pipeline import SUMMARY_COLUMNS, Summary

    row: dict[str, Any] = dict.fromkeys(SUMMARY_COLUMNS)
    row.update(kind="log", name="clicks", records=3, bytes=9, span_seconds=0.0)

    class FakeSpark:
        def stop(self) -> None:
            pass

    def fake_start(master: Any, app: str, console: Any, **kw: Any) -> FakeSpark:
        console.print("progress: starting Spark")
        return FakeSpark()

    def fake_phase(spark: Any, data: str, out: str, console: Any, chart: bool = True) -> Summary:
        console.print("progress: reading stores")
        return Summary(rows=[row], errors=["locked: permission denied"], parquet=out + "/summary.parquet")

    monkeypatch.setattr(demo, "start_spark", fake_start)
    monkeypatch.setattr(demo, "run_spark_phase", fake_phase)
    assert main(["pipeline", str(tmp_path), "--out", str(tmp_path / "out"), "--no-chart"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("Append logs\n"), captured.out
    assert "clicks" in captured.out and "progress" not in captured.out and "[" not in captured.out
    assert "\x1b" not in captured.out + captured.err
    assert captured.err == "could not read locked: permission denied\n"
