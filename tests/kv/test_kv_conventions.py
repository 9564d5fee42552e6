"""The key-value store meets the shared conventions (engine.conventions): the
dict protocols, TypeErrors that say what to do with a str, durations as
timedelta or seconds, stats() dicts, and stores left open closed cleanly at
collection or exit with a ResourceWarning."""

from __future__ import annotations

import datetime as dt
import gc
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from engine.errors import ConfigError, CorruptFileError, FormatError, LockedError
from engine.kv import KV


def test_the_dict_protocols(tmp_path: Path) -> None:
    with KV.open(tmp_path / "s.kv", page_size=512) as kv:
        kv.update({b"b": b"2", b"a": b"1"})
        assert len(kv) == 2 and list(kv) == [b"a", b"b"] and dict(kv.items()) == {b"a": b"1", b"b": b"2"}
        assert b"a" in kv and b"z" not in kv and kv[b"a"] == b"1"
        with pytest.raises(KeyError) as info:
            kv[b"missing"]
        assert info.value.args == (b"missing",)
        with pytest.raises(KeyError, match="gone"):
            del kv[b"gone"]
        assert kv.pop(b"a") == b"1" and kv.pop(b"a", None) is None
        with pytest.raises(KeyError, match="a"):
            kv.pop(b"a")
        with kv.transaction() as tx:
            assert len(tx) == 1 and b"b" in tx and list(tx) == [b"b"]
        with pytest.raises(KeyError, match="nope"):
            kv.tree("nope", create=False)
    with KV.open_reader(tmp_path / "s.kv") as reader:
        assert len(reader) == 1 and list(reader) == [b"b"] and b"b" in reader
        with pytest.raises(KeyError) as info:
            reader[b"a"]
        assert info.value.args == (b"a",)


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (lambda kv: kv.__setitem__("key", b"v"), "key must be bytes, not str: encode it (key.encode()"),
        (lambda kv: kv.__setitem__(b"k", "value"), "value must be bytes, not str: encode it (value.encode()"),
        (lambda kv: kv["key"], "key must be bytes, not str: encode it"),
        (lambda kv: "key" in kv, "key must be bytes, not str: encode it"),
        (lambda kv: list(kv.items("a")), "start must be bytes, not str: encode it"),
        (lambda kv: list(kv.prefix("a")), "prefix must be bytes, not str: encode it"),
        (lambda kv: kv.__setitem__(b"k", 5), "value must be bytes (or bytearray, memoryview), not int"),
    ],
)
def test_a_str_gets_a_type_error_that_says_so(tmp_path: Path, action: object, words: str) -> None:
    with KV.open(tmp_path / "s.kv") as kv, pytest.raises(TypeError) as info:
        action(kv)  # type: ignore[operator]
    assert words in str(info.value)


def test_reader_wait_takes_a_timedelta_or_seconds(tmp_path: Path) -> None:
    with KV.open(tmp_path / "s.kv", reader_wait=dt.timedelta(seconds=2)) as kv:
        assert kv.pages.reader_wait == 2.0
    with KV.open(tmp_path / "s.kv", reader_wait=0.5) as kv:
        assert kv.pages.reader_wait == 0.5
    with pytest.raises(TypeError, match=r"reader_wait must be a number of seconds or a datetime\.timedelta"):
        KV.open(tmp_path / "s.kv", reader_wait="2s")
    with pytest.raises(ConfigError, match="reader_wait must be >= 0 seconds"):
        KV.open(tmp_path / "s.kv", reader_wait=dt.timedelta(seconds=-1))


def test_stats_are_dicts_of_numbers(tmp_path: Path) -> None:
    path = tmp_path / "s.kv"
    with KV.open(path, page_size=512) as kv:
        kv[b"a"] = b"1"
        kv.tree("users")[b"u"] = b"2"
        stats = kv.stats()
        assert stats["keys"] == 2 and stats["txid"] == 3 and stats["commits"] == 3
        assert stats["trees"] == {"": {"keys": 1, "height": 1}, "users": {"keys": 1, "height": 1}}
        assert stats["pages"] == stats["live_pages"] + stats["free_pages"]  # type: ignore[operator]
        numbers = {k: v for k, v in stats.items() if k not in ("path", "trees")}
        assert all(type(v) is int for v in numbers.values()) and all(" " not in k for k in stats)
        with KV.open_reader(path) as reader:
            seen = reader.stats()
        mine = {k: stats[k] for k in seen}
        assert seen == mine and set(stats) - set(seen) == {
            "commits",
            "cached_nodes",
            "journal_bytes",
            "pending_transactions",
        }


def test_stores_left_open_at_exit_are_closed_cleanly(tmp_path: Path) -> None:
    path = str(tmp_path / "s.kv")
    script = textwrap.dedent(
        f"""
        from engine.kv import KV
        kv = KV.open({path!r})
        reader = KV.open_reader({path!r})
        kv[b"k"] = b"kept"
        assert reader[b"k"] == b"kept"
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"ResourceWarning: unclosed key-value store {path!r}" in done.stderr
    assert f"ResourceWarning: unclosed key-value store reader {path!r}" in done.stderr
    assert "unclosed page store" not in done.stderr and "failed" not in done.stderr
    with KV.open(path) as kv:
        assert not kv.recovery.repaired, kv.recovery.summary()
        assert kv[b"k"] == b"kept"


def test_a_store_dropped_without_close_is_closed_when_collected(tmp_path: Path) -> None:
    path = tmp_path / "s.kv"
    kv = KV.open(path)
    kv[b"k"] = b"kept"
    reader = KV.open_reader(path)
    assert reader[b"k"] == b"kept"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del kv, reader
        gc.collect()
    words = sorted(str(w.message).split(":")[0] for w in caught if w.category is ResourceWarning)
    assert words == [f"unclosed key-value store {str(path)!r}", f"unclosed key-value store reader {str(path)!r}"]
    with KV.open(path) as again:
        assert not again.recovery.repaired and again[b"k"] == b"kept"


def test_a_reader_before_the_first_checkpoint_sees_an_empty_store(tmp_path: Path) -> None:
    """Not a PageError about page 1: the store file holds nothing yet."""
    path = tmp_path / "s.kv"
    with KV.open(path, apply="checkpoint") as kv:
        kv[b"a"] = b"1"
        with KV.open_reader(path) as reader:
            assert len(reader) == 0 and reader.get(b"a") is None and reader.txid == 0
            assert reader.stats()["keys"] == 0
            kv.checkpoint()
            assert reader[b"a"] == b"1" and reader.txid == kv.txid == 1


def test_messages_name_what_the_user_typed(tmp_path: Path) -> None:
    """Issue 31: the KV store's own words, not the page store's underneath."""
    unexpected = r"KV.open\(\) got an unexpected keyword argument 'cache_node' \(did you mean cache_nodes\?\)"
    with pytest.raises(TypeError, match=unexpected):
        KV.open(tmp_path / "a.kv", cache_node=5)
    with KV.open(tmp_path / "b.kv"), pytest.raises(LockedError, match="another writer has the key-value store open"):
        KV.open(tmp_path / "b.kv")


def test_a_refused_open_creates_nothing(tmp_path: Path) -> None:
    """Issue 31: a foreign file or a directory is refused before any lock,
    journal or checksum file is created beside it."""
    (tmp_path / "garbage.bin").write_bytes(b"garbage\n")
    (tmp_path / "adir").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CorruptFileError):
        KV.open(tmp_path / "garbage.bin")
    with pytest.raises(IsADirectoryError):
        KV.open(tmp_path / "adir")
    (tmp_path / "foreign.db").write_bytes(b"SQLite format 3\x00" + bytes(100))
    before.append("foreign.db")
    with pytest.raises(FormatError):
        KV.open(tmp_path / "foreign.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)
