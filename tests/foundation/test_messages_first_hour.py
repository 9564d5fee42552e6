"""Messages that name what the user typed (issue 31), outside the queue and the KV store.

* ``StreamJournal.open(p, size="1M")``: not "unsupported operand type(s)";
* ``tx.write(page, 0, "abc")``: not "string argument without an encoding";
* a str written to a stream: no advice to pass a ``serializer=`` the stream
  journal does not take;
* a ResourceWarning for a store left open points at the user's line (the
  ``del`` that dropped it, or, at exit, the line that opened it), never into
  engine's own modules.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import engine


def test_stream_journal_size_as_text_names_the_argument(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"size must be a whole number of bytes .* not str '1M'"):
        engine.StreamJournal.open(tmp_path / "s.jnl", size="1M")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"page_size must be a whole number of bytes .* not float 4096.0"):
        engine.StreamJournal.open(tmp_path / "s.jnl", size=1 << 20, page_size=4096.0)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # nothing created, the lock file neither


def test_stream_journal_too_small_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(engine.ConfigError, match="at least 4 pages"):
        engine.StreamJournal.open(tmp_path / "s.jnl", size=100)
    with pytest.raises(engine.ConfigError, match="needs size="):
        engine.StreamJournal.open(tmp_path / "s.jnl")
    assert list(tmp_path.iterdir()) == []


def test_a_str_in_a_stream_is_not_told_to_use_a_serializer(tmp_path: Path) -> None:
    with engine.StreamJournal.open(tmp_path / "s.jnl", size=1 << 20) as sj:
        stream = sj.open_stream("upload")
        with pytest.raises(TypeError) as caught:
            stream.write("abc")  # type: ignore[arg-type]
        stream.close()
    message = str(caught.value)
    assert message.startswith("data must be bytes, not str: encode it (data.encode())")
    assert "serializer" not in message


def test_a_str_written_to_a_page_says_so(tmp_path: Path) -> None:
    with engine.PageStore.open(tmp_path / "p.db") as store, store.transaction() as tx:
        page = tx.allocate()
        with pytest.raises(TypeError) as caught:
            tx.write(page, 0, "abc")  # type: ignore[arg-type]
        assert str(caught.value) == "data must be bytes, not str: encode it (data.encode())"
        with pytest.raises(TypeError, match="data must be bytes, not int"):
            tx.write(page, 0, 5)  # type: ignore[arg-type]
        tx.write(page, 0, bytearray(b"ok"))  # bytes-like still works
        assert tx.read(page, 0, 2) == b"ok"


def test_resource_warnings_point_at_the_users_line(tmp_path: Path) -> None:
    script = tmp_path / "user_code.py"
    script.write_text(textwrap.dedent(f"""\
        import engine
        d = {str(tmp_path)!r}
        log = engine.AppendLog.open(d + "/log")
        journal = engine.EventJournal.open(d + "/events")
        sj = engine.StreamJournal.open(d + "/s.jnl", size=1 << 16)
        store = engine.PageStore.open(d + "/p.db")
        del log
        del journal
        print("end")
        """))
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", str(script)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "ResourceWarning" in line]
    assert len(warnings) == 4, done.stderr
    for line in warnings:
        assert line.startswith(f"{script}:"), line
        assert "engine/" not in line.split(":")[0]
    where = {line.split("unclosed ")[1].split(" ")[0]: int(line.split(":")[1]) for line in warnings}
    # Dropped by a del: that line; still open at exit: the line that opened it.
    assert where == {"append": 7, "event": 8, "stream": 5, "page": 6}, done.stderr


def test_every_store_and_reader_left_open_is_warned_at_the_line_that_opened_it(tmp_path: Path) -> None:
    """The queue and the key-value store too (their warnings pointed into
    engine/conventions.py), and every store's reader."""
    opens = [
        'engine.Queue.open(d + "/q", "jobs")',
        'engine.Queue.open_reader(d + "/q", "jobs")',
        'engine.KV.open(d + "/k.kv")',
        'engine.KV.open_reader(d + "/k.kv")',
        'engine.AppendLog.open(d + "/log")',
        'engine.AppendLog.open_reader(d + "/log")',
        'engine.EventJournal.open(d + "/events")',
        'engine.EventJournal.open_reader(d + "/events")',
        'engine.PageStore.open(d + "/p.db")',
        'engine.PageStore.open_reader(d + "/p.db")',
        'engine.StreamJournal.open(d + "/s.jnl", size=1 << 16)',
        'engine.StreamJournal.open_reader(d + "/s.jnl")',
    ]
    script = tmp_path / "user_code.py"
    script.write_text("import engine\n" + f"d = {str(tmp_path)!r}\n"
                      + "".join(f"h{i} = {call}\n" for i, call in enumerate(opens)) + 'print("end")\n')
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", str(script)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "ResourceWarning" in line]
    assert len(warnings) == len(opens), done.stderr
    assert all(line.startswith(f"{script}:") for line in warnings), done.stderr
    assert sorted(int(line.split(":")[1]) for line in warnings) == list(range(3, 3 + len(opens)))
