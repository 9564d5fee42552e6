"""The page store meets the shared conventions (engine.conventions): durations
as timedelta or seconds, stats() dicts, messages in a user's words, and stores
left open closed cleanly at collection or exit with a ResourceWarning."""

from __future__ import annotations

import datetime as dt
import gc
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from engine.errors import ConfigError, PageError
from engine.pages import PageStore


def test_reader_wait_and_flush_wait_take_timedeltas_or_seconds(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with PageStore.open(path, reader_wait=dt.timedelta(milliseconds=1500)) as store:
        assert store.reader_wait == 1.5
        with store.transaction() as tx:
            tx.allocate()
        assert store.flush(wait=dt.timedelta(seconds=1)) is True
        assert store.flush(wait=None) is True
        with pytest.raises(TypeError, match=r"wait must be a number of seconds or a datetime\.timedelta, not str"):
            store.flush(wait="1s")  # type: ignore[arg-type]
    with PageStore.open(path, reader_wait=0) as store:
        assert store.reader_wait == 0.0
    with pytest.raises(TypeError, match=r"reader_wait must be a number of seconds or a datetime\.timedelta, not str"):
        PageStore.open(path, reader_wait="10")  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="reader_wait must be >= 0 seconds, got -1"):
        PageStore.open(path, reader_wait=-1)
    with pytest.raises(ConfigError, match="checkpoint_bytes must be >= 0, got -5"):
        PageStore.open(path, checkpoint_bytes=-5)
    with pytest.raises(ConfigError, match="cache_pages must be >= 0, got -1"):
        PageStore.open(path, cache_pages=-1)


def test_stats_are_dicts_of_numbers(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"a")
            tx.allocate()
        with store.transaction() as tx:
            tx.free(2)
        stats = store.stats()
        assert stats["page_size"] == 512 and stats["pages"] == 2
        assert stats["live_pages"] == 1 and stats["free_pages"] == 1
        assert stats["commits"] == 2 and stats["pending_transactions"] == 2 and stats["unflushed_pages"] == 2
        assert all(key == key.lower() and " " not in key for key in stats)
        assert all(type(value) is int for value in stats.values())
        store.checkpoint()
        after = store.stats()
        assert after["pending_transactions"] == 0 and after["unflushed_pages"] == 0 and after["checkpoints"] == 1
        assert after["store_bytes"] == 3 * 512
        with PageStore.open_reader(path) as reader:
            assert reader.stats() == {
                "page_size": 512,
                "pages": 2,
                "live_pages": 1,
                "free_pages": 1,
                "store_bytes": 3 * 512,
            }


def test_a_reader_says_why_it_cannot_see_a_page(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.allocate()
        store.checkpoint()
        with store.transaction() as tx:
            tx.free(1)  # free in the writer, live in the file until the next flush
        with store.transaction() as tx:
            assert tx.allocate() == 1
            tx.allocate()
        with PageStore.open_reader(path) as reader:
            with pytest.raises(PageError) as info:
                reader.read(2)
            text = str(info.value)
            assert "page 2 (byte offset 1024): beyond what the store file holds yet" in text
            assert "(the store file holds page 1 only)" in text
            assert "next flush or checkpoint" in text
        with pytest.raises(PageError, match=r"never allocated \(page ids start at 1\)"):
            store.read(0)


def _script(body: str) -> str:
    return textwrap.dedent(body)


def _run(script: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_store_left_open_at_exit_is_closed_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    done = _run(
        _script(
            f"""
            from engine.pages import PageStore
            store = PageStore.open({str(path)!r}, page_size=512)
            with store.transaction() as tx:
                tx.write(tx.allocate(), 0, b"kept")
            reader = PageStore.open_reader({str(path)!r})
            """
        )
    )
    assert f"ResourceWarning: unclosed page store {str(path)!r}" in done.stderr
    assert f"ResourceWarning: unclosed page store reader {str(path)!r}" in done.stderr
    assert "failed" not in done.stderr
    with PageStore.open(path) as store:
        assert not store.recovery.repaired, store.recovery.summary()
        assert store.read(1, 0, 4) == b"kept"


def test_a_store_dropped_without_close_is_closed_when_collected(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = PageStore.open(path, page_size=512)
    with store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"kept")
    reader = PageStore.open_reader(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del store, reader, tx  # (a finished transaction refers to its store)
        gc.collect()
    words = sorted(str(w.message) for w in caught if w.category is ResourceWarning)
    assert [w.split(":")[0] for w in words] == [
        f"unclosed page store {str(path)!r}",
        f"unclosed page store reader {str(path)!r}",
    ]
    with PageStore.open(path) as again:  # the writer lock was let go, and nothing to recover
        assert not again.recovery.repaired
        assert again.read(1, 0, 4) == b"kept"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PageStore.open(path).close()
        gc.collect()
    assert not [w for w in caught if w.category is ResourceWarning]
