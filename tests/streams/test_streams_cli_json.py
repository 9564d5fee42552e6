"""``engine streams`` reports and listings: ``--json`` (stable keys, JSON Lines
for listings), human sizes in text, durations on the command line, OS errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import pytest

from engine.cli import build_parser, main
from engine.streams import StreamJournal
from engine.streams.cli import parse_delay_ms, parse_idle_timeout, parse_mode

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _make(path: str) -> None:
    """first: complete (10000 bytes); an aborted one with a non-UTF-8 identifier;
    third: complete (1 byte); left: open at the end of the file."""
    with StreamJournal.open(path, size=256 * 1024, page_size=4096) as journal:
        with journal.open_stream("first") as s:
            s.write(b"a" * 10_000)
        aborted = journal.open_stream(b"sec\xff")
        aborted.write(b"b" * 9000)
        aborted.abort()
        with journal.open_stream("third") as s:
            s.write(b"c")
        left = journal.open_stream("left")
        left.write(b"d" * 9000)
        journal.sync()
        with open(path, "rb") as f:
            snapshot = f.read()  # before close() aborts "left"
    with open(path, "wb") as f:
        f.write(snapshot)


def _lines(text: str) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in text.splitlines()]
    for row in rows:
        assert all(SNAKE.match(key) for key in row), row
    return rows


@pytest.fixture
def journal_path(tmp_path: object) -> str:
    path = os.path.join(str(tmp_path), "j")
    _make(path)
    return path


def test_dump_json_lines(journal_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "dump", "--json", journal_path]) == 0
    rows = _lines(capsys.readouterr().out)
    assert [(r["event"], r["stream"]) for r in rows] == [
        ("init", 0), ("append", 0), ("append", 0), ("end", 0),
        ("init", 1), ("append", 1), ("abort", 1),
        ("init", 2), ("append", 2), ("end", 2),
        ("init", 3), ("append", 3), ("unfinished", 3),
    ]
    first = rows[0]
    assert first == {
        "event": "init", "stream": 0, "record": 0, "offset": 0, "position": 4096, "global_record": 0,
        "ident": "first", "ident_hex": b"first".hex(), "data_bytes": None,
    }
    assert [r["data_bytes"] for r in rows if r["event"] == "append"] == [8192, 1808, 8192, 1, 8192]
    assert rows[4]["ident"] is None and rows[4]["ident_hex"] == "736563ff"  # not UTF-8: hex only
    assert rows[-1]["position"] is None and rows[-1]["global_record"] is None


def test_list_text_and_json(journal_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "list", journal_path]) == 0
    text = capsys.readouterr().out.splitlines()
    assert len(text) == 4
    assert "complete" in text[0] and "9.77 KiB" in text[0] and text[0].endswith("first")
    assert "aborted" in text[1] and text[1].endswith("sec\\xff")
    assert "open" in text[3] and "8 KiB" in text[3]
    assert main(["streams", "list", "--json", journal_path]) == 0
    rows = _lines(capsys.readouterr().out)
    assert [(r["stream"], r["status"], r["ident"], r["data_bytes"], r["records"]) for r in rows] == [
        (0, "complete", "first", 10_000, 2),
        (1, "aborted", None, 8192, 1),
        (2, "complete", "third", 1, 1),
        (3, "open", "left", 8192, 1),
    ]
    assert rows[0]["start_offset"] == 0 and rows[0]["position"] == 4096 and rows[1]["ident_hex"] == "736563ff"
    assert main(["streams", "list", "--json", "--status", "complete", journal_path]) == 0
    assert [r["stream"] for r in _lines(capsys.readouterr().out)] == [0, 2]


def test_stats_text_and_json(journal_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "stats", journal_path]) == 0
    text = capsys.readouterr().out
    assert "256 KiB (262144 bytes, 64 pages of 4 KiB)" in text
    assert "2 complete, 1 aborted, 1 open" in text and "clean" in text
    assert main(["streams", "stats", "--json", journal_path]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    stats = json.loads(out)
    assert all(SNAKE.match(key) for key in stats)
    assert stats == {
        "path": journal_path, "version": 2, "page_size": 4096, "file_size_bytes": 262144,
        "first_global_record": 0, "wrapped": False, "records": stats["records"],
        "next_global_record": stats["records"], "streams_complete": 2, "streams_aborted": 1, "streams_open": 1,
        "streams_absent": 0,
        "data_bytes": 10_000 + 8192 + 1 + 8192, "anomalies": 0,
        "end_position": stats["end_position"], "clean_end": True, "end_reason": "end of journal",
    }
    assert isinstance(stats["records"], int) and isinstance(stats["end_position"], int)


def test_extract_json_and_text_sizes(journal_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    out = os.path.join(str(tmp_path), "out")
    assert main(["streams", "extract", journal_path, "--out", out]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "0000000000-0-first: 9.77 KiB (10000 bytes)", "0000000002-0-third: 1 B"]
    assert main(["streams", "extract", journal_path, "--out", out, "--json"]) == 0
    rows = _lines(capsys.readouterr().out)
    assert rows == [
        {"stream": 0, "ident": "first", "ident_hex": b"first".hex(), "start_offset": 0, "data_bytes": 10_000,
         "file": os.path.join(out, "0000000000-0-first")},
        {"stream": 2, "ident": "third", "ident_hex": b"third".hex(), "start_offset": 0, "data_bytes": 1,
         "file": os.path.join(out, "0000000002-0-third")},
    ]
    quiet = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(); sys.exit(len(sys.argv[1]) % 2)"]
    assert main(["streams", "extract", "--json", journal_path, "--", *quiet]) == 1  # "first" has 5 letters
    rows = _lines(capsys.readouterr().out)
    assert [(r["stream"], r["exit_code"]) for r in rows] == [(0, 1), (2, 1)]


def test_missing_file_and_directory_are_one_line_exit_1(tmp_path: object, capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    missing = os.path.join(str(tmp_path), "nothing")
    for command in ("dump", "list", "stats"):
        assert main(["streams", command, "--json", missing]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no such file or directory" in err and missing in err
    assert main(["streams", "stats", str(tmp_path)]) == 1
    assert "is a directory, not a journal file" in capsys.readouterr().err


def test_durations_on_the_command_line() -> None:
    assert parse_idle_timeout("90s") == 90.0
    assert parse_idle_timeout("2m") == 120.0
    assert parse_idle_timeout("1.5") == 1.5
    assert parse_idle_timeout("0") is None  # never
    with pytest.raises(argparse.ArgumentTypeError, match="--idle-timeout: 'soon' is not a duration"):
        parse_idle_timeout("soon")
    assert parse_delay_ms("10") == 10.0
    assert parse_delay_ms("10ms") == 10.0
    assert parse_delay_ms("0.02s") == 20.0
    with pytest.raises(argparse.ArgumentTypeError, match="--delay-ms"):
        parse_delay_ms("-5")
    with pytest.raises(argparse.ArgumentTypeError, match="--delay-ms"):
        parse_delay_ms("later")
    args = build_parser().parse_args(
        ["streams", "serve", "S", "P", "--idle-timeout", "5m", "--delay-ms", "2ms", "--size", "1M"])
    assert (args.idle_timeout, args.delay_ms, args.size) == (300.0, 2.0, 1 << 20)


def test_every_report_takes_json_and_states_units() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["streams"]
    commands = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in ("dump", "list", "stats", "extract"):
        assert any(a.dest == "json" for a in commands[name]._actions), name
    units = {a.dest: (a.metavar, a.help) for a in commands["serve"]._actions}
    assert units["size"][0] == "BYTES" and units["page_size"][0] == "BYTES"
    assert units["idle_timeout"][0] == "SECONDS" and units["delay_ms"][0] == "MILLISECONDS"
    assert units["max_connections"][0] == "COUNT"


def test_socket_mode_is_octal() -> None:
    assert parse_mode("660") == 0o660 and parse_mode("0o600") == 0o600
    for bad in ("9x", "rw", "77777"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not octal permissions"):
            parse_mode(bad)


def test_serve_without_size_names_the_option(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(tmp_path)
    assert main(["streams", "serve", os.path.join(base, "s"), os.path.join(base, "new")]) == 2
    err = capsys.readouterr().err
    assert "give --size BYTES to create it" in err and err.count("\n") == 1
    assert not os.path.exists(os.path.join(base, "new")) and not os.path.exists(os.path.join(base, "s"))
    with pytest.raises(SystemExit):
        main(["streams", "serve", "S", "P", "--size", "lots"])
    assert "--size: 'lots' is not a size" in capsys.readouterr().err
