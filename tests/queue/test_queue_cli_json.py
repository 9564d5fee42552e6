"""``engine queue`` for everyday use: ``--json`` (stable keys, raw numbers), one
backlog figure, human times and sizes in text, time arguments as users type them,
"no such queue" as one line and status 1, help on every argument."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.cli import build_parser, main
from engine.queue import Queue

ITEM_KEYS = {"id", "add_time_ms", "expire_time_ms", "error_count", "size_bytes", "data", "data_hex"}


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _queue(d: str) -> None:
    """Items ``alpha``, 4 non-UTF-8 bytes, ``gamma`` (expiring); reader '' confirmed 1."""
    with Queue.open(d, "jobs") as q:
        q.put(b"alpha")
        q.put(b"\xff\xfe\x00\x01")
        q.put(b"gamma", expire_at=2_000_000_000.25)
        with q.reader() as r:
            item = r.get(0)
            assert item is not None
            r.confirm(item.id)


def test_stats_json_is_q_stats_and_text_has_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    _queue(d)
    assert main(["queue", "stats", d, "jobs", "--json"]) == 0
    (doc,) = _lines(capsys)
    with Queue.open(d, "jobs") as q:
        live: dict[str, Any] = q.stats()
        q.reader()  # open here: the live figures are the disk's
        opened: dict[str, Any] = q.stats()
    (reader,) = doc["readers"]
    (live_reader,) = opened["readers"]
    assert reader["backlog_bytes"] == live_reader["backlog_bytes"] == 9  # one figure: 4 + 5 payload bytes
    assert set(reader) == set(live_reader) and reader["open_reads"] is None and reader["items"] == 2
    assert isinstance(reader["oldest_age_s"], float)
    for key in ("queue", "tail_id", "journal_files", "journal_bytes"):
        assert doc[key] == live[key], key
    assert doc["directory"] == d and doc["tail_id"] == 3
    (entry,) = doc["files"]
    assert set(entry) == {"path", "bytes", "first_id"} and entry["first_id"] == 1 and entry["bytes"] > 0
    assert main(["queue", "stats", d, "jobs"]) == 0
    out = capsys.readouterr().out
    assert "tail id 3" in out and "9 B" in out and " B" in out.split("tail id 3", 1)[1].splitlines()[0]


def test_dump_items_and_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    _queue(d)
    assert main(["queue", "dump", d, "jobs", "--json"]) == 0
    items = _lines(capsys)
    assert [i["id"] for i in items] == [1, 2, 3] and all(set(i) == ITEM_KEYS for i in items)
    assert items[0]["data"] == "alpha" and items[1]["data"] is None and items[1]["data_hex"] == "fffe0001"
    assert items[2]["expire_time_ms"] == 2_000_000_000_250 and items[0]["expire_time_ms"] is None
    assert isinstance(items[0]["add_time_ms"], int) and items[0]["size_bytes"] == 5
    assert main(["queue", "dump", d, "jobs", "--limit", "1"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("id 1: added 20") and " UTC" in line and "expires never" in line and "5 B" in line
    assert main(["queue", "dump", d, "jobs", "--limit", "3"]) == 0
    assert "expires 2033-05-18 03:33:20.250 UTC" in capsys.readouterr().out
    writer = next(os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith("jobs.1"))
    assert main(["queue", "dump", writer, "--json"]) == 0
    records = _lines(capsys)
    kinds = [r["record"] for r in records]
    assert kinds[0] == "CHECK" and kinds.count("PUT") == 3 and kinds[-1] == "CHECK"
    put = next(r for r in records if r["record"] == "PUT")
    assert set(put) == ITEM_KEYS | {"offset", "record"} and put["data"] == "alpha"
    check = records[-1]
    assert set(check) == {"offset", "record", "crc32", "covered_bytes"} and check["covered_bytes"] > 0
    assert main(["queue", "dump", os.path.join(d, "jobs.read."), "--json"]) == 0
    head = next(r for r in _lines(capsys) if r["record"] == "READ_HEAD")
    assert head["id"] == 1
    assert main(["queue", "dump", writer, "--limit", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "CHECK" in out[0] and "PUT id=1 added 20" in out[1]


def test_get_json_and_time_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    assert main(["queue", "put", d, "jobs", "a", "b", "--expire-in", "1h", "--json"]) == 0
    (doc,) = _lines(capsys)
    assert doc["ids"] == [1, 2] and doc["recovery"]["repaired"] is False
    assert main(["queue", "put", d, "jobs", "c", "--expire-at", "2033-05-18T03:33:20.25"]) == 0
    assert "ids 3..3" in capsys.readouterr().out
    assert main(["queue", "get", d, "jobs", "--count", "5", "--timeout", "10ms", "--json"]) == 0
    items = _lines(capsys)
    assert [i["data"] for i in items] == ["a", "b", "c"] and all(set(i) == ITEM_KEYS for i in items)
    assert items[2]["expire_time_ms"] == 2_000_000_000_250
    added = items[0]["add_time_ms"]
    assert isinstance(added, int) and items[0]["expire_time_ms"] == pytest.approx(added + 3_600_000, abs=1000)
    assert main(["queue", "get", d, "jobs", "--timeout", "0"]) == 3  # nothing left
    with pytest.raises(SystemExit):
        main(["queue", "put", d, "jobs", "x", "--expire-in", "5", "--expire-at", "2030-01-01"])
    with pytest.raises(SystemExit):
        main(["queue", "get", d, "jobs", "--timeout", "soon"])
    assert "--timeout" in capsys.readouterr().err


def test_repair_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    _queue(d)
    assert main(["queue", "repair", d, "jobs", "--json"]) == 0
    (doc,) = _lines(capsys)
    assert doc["repaired"] is False and doc["actions"] == [] and doc["queue"] == "jobs"


@pytest.mark.parametrize("command", [["stats"], ["dump"], ["get"]])
def test_no_such_queue_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    d = str(tmp_path)
    _queue(d)
    assert main(["queue", *command, d, "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"engine queue {command[0]}: no queue 'nope' in {d} (queues there: jobs)"


def test_every_queue_argument_has_help_and_an_upper_case_placeholder() -> None:
    parser = build_parser()
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    queue = top.choices["queue"]
    sub = next(a for a in queue._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        options = {o for a in command._actions for o in a.option_strings}
        assert "--json" in options, name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert (action.help or "").strip(), (name, action.dest)
            if action.nargs != 0:
                assert action.metavar is not None and str(action.metavar).isupper(), (name, action.dest)
