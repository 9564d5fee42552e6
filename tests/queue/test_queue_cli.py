"""The ``engine queue`` commands and ``engine inspect/verify`` on queue files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.cli import main
from engine.queue import Queue


def test_put_get_stats_dump_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    assert main(["queue", "put", d, "jobs", "alpha", "beta", "gamma"]) == 0
    assert "ids 1..3" in capsys.readouterr().out
    assert main(["queue", "get", d, "jobs", "--count", "2"]) == 0
    assert capsys.readouterr().out.split() == ["alpha", "beta"]
    assert main(["queue", "stats", d, "jobs"]) == 0
    out = capsys.readouterr().out
    assert "tail id 3" in out and "''" in out
    assert main(["queue", "dump", d, "jobs"]) == 0
    out = capsys.readouterr().out
    assert "id 1" in out and "gamma" in out
    writer = next(os.path.join(d, f) for f in os.listdir(d) if f.startswith("jobs.1"))
    assert main(["queue", "dump", writer]) == 0
    out = capsys.readouterr().out
    assert "PUT id=3" in out and "CHECK" in out
    assert main(["queue", "dump", os.path.join(d, "jobs.read.")]) == 0
    assert "READ_HEAD 2" in capsys.readouterr().out
    assert main(["queue", "repair", d, "jobs"]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def test_inspect_verify_and_truncated_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    q = Queue.open(d, "jobs")
    q.put_many([b"x" * 30, b"y" * 30])
    files = q.journal_files
    q.close()
    assert main(["inspect", d, files[0], os.path.join(d, "jobs.read.")]) == 0
    out = capsys.readouterr().out
    assert "writer journal" in out and "reader checkpoint" in out
    assert main(["verify", d]) == 0
    # Cut the writer file in the middle of a record: verify fails with the offset,
    # inspect reports the torn tail, repair cuts it and says what was lost.
    with open(files[0], "r+b") as f:
        f.truncate(os.path.getsize(files[0]) - 20)
    assert main(["verify", files[0]]) == 2
    assert "offset 13" in capsys.readouterr().err.replace("\n", " ")
    assert main(["inspect", files[0]]) == 0
    assert "torn tail" in capsys.readouterr().out
    # A truncated reader file is a clean typed error.
    reader = os.path.join(d, "jobs.read.")
    with open(reader, "r+b") as f:
        f.truncate(7)
    assert main(["inspect", reader]) == 2
    assert "offset 4" in capsys.readouterr().err
    assert main(["queue", "repair", d, "jobs"]) == 0
    out = capsys.readouterr().out
    assert "cut" in out and "reset to head" in out
    assert main(["verify", d]) == 0


@pytest.mark.parametrize("mask", [0x01, 0x10, 0xFF])
def test_dump_file_refuses_a_damaged_first_check(tmp_path: Path, capsys: pytest.CaptureFixture[str], mask: int) -> None:
    """A file this engine wrote starts with an empty CHECK: with that byte damaged,
    dump FILE must not show the rest unverified (as if it were a libkestrel file)."""
    d = str(tmp_path)
    assert main(["queue", "put", d, "jobs", "alpha", "beta"]) == 0
    assert main(["queue", "get", d, "jobs", "--count", "1"]) == 0
    capsys.readouterr()
    writer = next(os.path.join(d, f) for f in os.listdir(d) if f.startswith("jobs.1"))
    for path in (os.path.join(d, "jobs.read."), writer):
        with open(path, "r+b") as f:
            f.seek(4)
            byte = f.read(1)[0]
            f.seek(4)
            f.write(bytes((byte ^ mask,)))
        assert main(["queue", "dump", path]) != 0
        captured = capsys.readouterr()
        assert "offset 4" in captured.err or "offset 4" in captured.out
