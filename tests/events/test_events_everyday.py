"""Everyday use of the event journal (issue 18): argument errors in the user's
terms, ``serializer=``, ``stats()`` as numbers, the Python protocols, closing an
unclosed journal, and the command line's ``--json``, help and not-found answers."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli import build_parser, main
from engine.errors import ClosedError, ConfigError
from engine.events import Event, EventJournal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def jdir(tmp_path: Path) -> str:
    return str(tmp_path / "journal")


# -- write's arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "words"),
    [
        (b"x", "not bytes b'x'"),
        ("x", "not str 'x'"),
        ((1, b"x"), "not one pair: write(persistence_id, [(1, b'x')])"),
        (5, "not int 5"),
        ({1: b"x"}, "sorted(events.items())"),
        ([(1, b"x", 2)], "events[0] is tuple (1, b'x', 2)"),
        ([(1, b"x"), 2], "events[1] is int 2"),
        ([1], "events[0] is int 1"),
    ],
)
def test_a_batch_of_the_wrong_shape_is_a_type_error_that_says_so(jdir: str, events: object, words: str) -> None:
    with EventJournal.open(jdir) as j:
        with pytest.raises(TypeError) as info:
            j.write("o3", events)  # type: ignore[arg-type]
        message = str(info.value)
        assert message.startswith("events must be an iterable of (sequence_number, payload) pairs")
        assert words in message
        assert "subscriptable" not in message and "unpack" not in message
        assert j.persistence_ids() == [] and j.verify() == []


def test_payloads_must_be_bytes(jdir: str) -> None:
    with EventJournal.open(jdir) as j:
        with pytest.raises(TypeError, match=r"events\[1\]: payload must be bytes, not str: encode it"):
            j.write("a", [(1, b"ok"), (2, "text")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="serializer="):
            j.write("a", [(1, {"an": "object"})])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"events\[0\]: a sequence number must be an int, not str '1'"):
            j.write("a", [("1", b"x")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="persistence_id must be a str, not bytes"):
            j.write(b"a", [(1, b"x")])  # type: ignore[arg-type]
        assert j.highest_sequence_nr("a") == 0
        # Bytes-like payloads are taken as their bytes.
        j.write("a", [(1, bytearray(b"ba")), (2, memoryview(b"mv")), (3, b"b")])
        assert [e.payload for e in j.replay("a")] == [b"ba", b"mv", b"b"]
        assert all(type(e.payload) is bytes for e in j.replay("a"))


def test_an_iterables_own_error_is_not_hidden(jdir: str) -> None:
    def events() -> Iterator[tuple[int, bytes]]:
        yield 1, b"x"
        raise TypeError("the caller's own bug")

    with EventJournal.open(jdir) as j:
        with pytest.raises(TypeError, match="the caller's own bug"):
            j.write("a", events())
        j.write("a", ((n, b"%d" % n) for n in range(1, 4)))  # any iterable of pairs
        assert j.highest_sequence_nr("a") == 3


# -- serializer= ---------------------------------------------------------------------


def test_json_serializer_round_trip_and_bytes_on_disk(jdir: str) -> None:
    with EventJournal.open(jdir, serializer="json") as j:
        n = j.highest_sequence_nr("order-1")
        j.write("order-1", [(n + 1, {"type": "created", "lines": [1, 2]}), (n + 2, {"type": "paid"})])
        events = list(j.replay("order-1"))
        assert [e.value["type"] for e in events] == ["created", "paid"]
        assert events[0].data == events[0].payload == b'{"type":"created","lines":[1,2]}'
        assert isinstance(events[0], Event) and repr(events[0]).startswith("Event(sequence_nr=1, payload=")
        # A decoded event pickles as a plain Event (its class is the journal's own).
        again = pickle.loads(pickle.dumps(events[0]))
        assert type(again) is Event and again == events[0]
    # The files hold bytes: without a serializer, value is the bytes.
    with EventJournal.open_reader(jdir) as reader:
        event = next(iter(reader.replay("order-1")))
        assert event.value == event.data == b'{"type":"created","lines":[1,2]}'
    with EventJournal.open_reader(jdir, serializer="json") as reader:
        assert [e.value for e in reader.replay("order-1", from_seq=2)] == [{"type": "paid"}]


def test_pickle_and_pair_serializers(jdir: str, tmp_path: Path) -> None:
    with EventJournal.open(jdir, serializer="pickle") as j:
        j.write("p", [(1, {"when": dt.date(2026, 11, 24)}), (2, b"raw bytes are pickled too")])
        assert [e.value for e in j.replay("p")] == [{"when": dt.date(2026, 11, 24)}, b"raw bytes are pickled too"]
    pair = (lambda obj: json.dumps(obj, sort_keys=True).encode(), json.loads)
    with EventJournal.open(str(tmp_path / "pair"), serializer=pair) as j:
        j.write("q", [(1, {"b": 1, "a": 2})])
        assert next(iter(j.replay("q"))).data == b'{"a": 2, "b": 1}'
    returns_str = (json.dumps, json.loads)
    with EventJournal.open(str(tmp_path / "bad"), serializer=returns_str) as j:
        with pytest.raises(TypeError, match="returned str, not bytes: its dumps must return bytes"):
            j.write("q", [(1, {"a": 1})])
        assert j.persistence_ids() == []
    with pytest.raises(ConfigError, match="serializer must be one of"):
        EventJournal.open(str(tmp_path / "x"), serializer="yaml")
    with pytest.raises(TypeError, match="serializer must be"):
        EventJournal.open_reader(jdir, serializer=42)


# -- stats() -------------------------------------------------------------------------


def test_stats_is_snake_case_numbers(jdir: str) -> None:
    with EventJournal.open(jdir, max_data_size=1 << 20) as j:
        j.write("a", [(1, b"x" * 100), (2, b"y")])
        j.write("b", [(1, b"z")])
        j.delete_to("a", 1)
        stats = j.stats()
    assert set(stats) == {
        "directory", "read_only", "meta_magic", "persistence_ids", "live_events", "events_ever_written",
        "data_committed_bytes", "data_capacity_bytes", "data_capacity_used_fraction",
        "data_bytes_past_committed_end", "meta_bytes", "recovery_actions",
    }
    assert all(key == key.lower() and " " not in key for key in stats)
    assert stats["persistence_ids"] == 2 and stats["live_events"] == 2 and stats["events_ever_written"] == 3
    assert stats["data_committed_bytes"] == 8 + 3 * 24 + 102
    assert stats["data_capacity_bytes"] == 1 << 20
    assert stats["data_capacity_used_fraction"] == pytest.approx(stats["data_committed_bytes"] / (1 << 20))
    assert stats["read_only"] is False and stats["recovery_actions"] == 0
    assert stats["data_bytes_past_committed_end"] > 0  # the writer's reserved zeros
    for key, value in stats.items():
        if key not in ("directory", "meta_magic", "read_only", "recovery_actions"):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), key
    with EventJournal.open_reader(jdir) as reader:
        stats = reader.stats()
    assert stats["read_only"] is True and stats["recovery_actions"] is None
    assert stats["data_bytes_past_committed_end"] == 0  # close trimmed the reserve
    assert 0 < stats["data_capacity_used_fraction"] < 1e-6


# -- protocols, paths, durations -----------------------------------------------------


def test_len_in_and_iteration_are_over_persistence_ids(tmp_path: Path) -> None:
    with EventJournal.open(tmp_path / "pathlib") as j:  # a PathLike directory
        assert len(j) == 0 and "a" not in j and list(j) == []
        j.write("a", [(1, b"1")])
        j.write("b", [(1, b"1")])
        j.delete_to("a", 1)  # every event of "a" deleted: still an id
        assert len(j) == 2 and "a" in j and "b" in j and "c" not in j and 3 not in j
        assert list(j) == ["a", "b"] == j.persistence_ids()
    with pytest.raises(ClosedError):
        len(j)
    with EventJournal.open_reader(tmp_path / "pathlib") as reader:
        assert sorted(reader) == ["a", "b"] and "b" in reader


def test_sync_takes_always_or_never_only(jdir: str) -> None:
    for period in (dt.timedelta(milliseconds=50), 0.5, "1"):
        with pytest.raises(ConfigError, match="sync must be 'always' or 'never' for an event journal"):
            EventJournal.open(jdir, sync=period)
    with EventJournal.open(jdir, sync="never") as j:
        assert str(j.sync) == "never"


# -- closing what was left open ------------------------------------------------------


def test_a_dropped_journal_is_closed_with_a_resource_warning(jdir: str) -> None:
    j = EventJournal.open(jdir, sync="never")
    j.write("a", [(1, b"x"), (2, b"y")])
    with pytest.warns(ResourceWarning, match="unclosed event journal"):
        del j
        gc.collect()
    with EventJournal.open(jdir) as again:  # the lock was released, and the close was clean
        assert not again.recovery.repaired
        assert [e.payload for e in again.replay("a")] == [b"x", b"y"]
    reader = EventJournal.open_reader(jdir)
    with pytest.warns(ResourceWarning, match="unclosed event journal reader"):
        del reader
        gc.collect()


def test_a_closed_journal_gives_no_warning(jdir: str, recwarn: pytest.WarningsRecorder) -> None:
    with EventJournal.open(jdir) as j:
        j.write("a", [(1, b"x")])
    del j
    reader = EventJournal.open_reader(jdir)
    reader.close()
    del reader
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_a_journal_left_open_at_exit_is_closed_cleanly(jdir: str) -> None:
    script = (
        "import sys\n"
        "from engine.events import EventJournal\n"
        "j = EventJournal.open(sys.argv[1], sync='never')\n"
        "j.write('a', [(1, b'x'), (2, b'y')])\n"
        "keep = EventJournal.open_reader(sys.argv[1])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script, jdir], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"unclosed event journal {jdir!r}" in done.stderr
    assert f"unclosed event journal reader {jdir!r}" in done.stderr
    with EventJournal.open(jdir) as j:
        assert not j.recovery.repaired, j.recovery.summary()
        assert [e.payload for e in j.replay("a")] == [b"x", b"y"]
    # The reserved zeros were trimmed, as by close().
    assert os.path.getsize(os.path.join(jdir, "data")) == 8 + 2 * 25


# -- the command line ----------------------------------------------------------------


@pytest.fixture()
def filled(jdir: str) -> str:
    with EventJournal.open(jdir) as j:
        j.write("order-1", [(1, b"created"), (2, b"paid")])
        j.write("order-2", [(1, b"\x00\xff")])
        j.write("order-1", [(3, b"shipped")])
        j.delete_to("order-1", 1)
    return jdir


def test_replay_of_an_unknown_id_says_so(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "replay", filled, "unknown-id"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.strip().count("\n") == 0
    assert "no persistence id 'unknown-id'" in err and filled in err
    assert main(["events", "replay", filled, "unknown-id", "--json"]) == 1
    assert "no persistence id" in capsys.readouterr().err
    # A known id with nothing in the range is no error: nothing to print.
    assert main(["events", "replay", filled, "order-1", "--from", "10"]) == 0
    assert capsys.readouterr() == ("", "")


def test_replay_json_lines(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "replay", filled, "order-1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {"persistence_id": "order-1", "sequence_nr": 2, "payload": "paid", "payload_hex": b"paid".hex()},
        {"persistence_id": "order-1", "sequence_nr": 3, "payload": "shipped", "payload_hex": b"shipped".hex()},
    ]
    assert main(["events", "replay", filled, "order-2", "--json", "--max", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"persistence_id": "order-2", "sequence_nr": 1,
                                                   "payload": None, "payload_hex": "00ff"}


def test_ids_and_stats_json(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "ids", filled, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {"persistence_id": "order-1", "lowest_sequence_nr": 2, "highest_sequence_nr": 3, "live_events": 2},
        {"persistence_id": "order-2", "lowest_sequence_nr": 1, "highest_sequence_nr": 1, "live_events": 1},
    ]
    assert main(["events", "stats", filled, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    with EventJournal.open_reader(filled) as reader:
        assert stats == json.loads(json.dumps(reader.stats()))
    assert stats["persistence_ids"] == 2 and isinstance(stats["data_capacity_used_fraction"], float)


def test_stats_text_has_units(filled: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "stats", filled]) == 0
    out = capsys.readouterr().out
    lines = {cells[1].strip(): cells[2].strip() for cells in
             (line.split("│") for line in out.splitlines()) if len(cells) == 4}
    assert lines["live events"] == "3"
    assert lines["data committed"].endswith(" B") and lines["data capacity"] == "2 GiB (2147483647 B)"
    assert lines["data capacity used"] == "< 0.0001 %" and lines["read only"] == "yes"
    assert lines["recovery actions"] == "-"


def _events_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    events = top.choices["events"]
    sub = next(a for a in events._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.help and sub.metavar == "SUBCOMMAND"
    return dict(sub.choices)


def test_every_argument_has_help_and_an_upper_case_placeholder() -> None:
    commands = _events_parsers()
    assert set(commands) == {"ids", "replay", "stats"}
    for name, command in commands.items():
        options = {o for a in command._actions for o in a.option_strings}
        assert "--json" in options, name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
            if action.metavar is not None:
                assert str(action.metavar).isupper(), (name, action.metavar)
    replay = commands["replay"].format_help()
    assert "--from SEQ" in replay and "--to SEQ" in replay and "--max COUNT" in replay
