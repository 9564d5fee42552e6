"""``engine events ...``, ``engine inspect`` and ``engine verify`` on event journals."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import main
from engine.events import EventJournal


@pytest.fixture()
def journal_dir(tmp_path: Path) -> str:
    d = str(tmp_path / "j")
    with EventJournal.open(d) as j:
        j.write("order-1", [(1, b"created"), (2, b"paid")])
        j.write("order-2", [(1, b"\x00\xff")])
        j.write("order-1", [(3, b"shipped")])
        j.delete_to("order-1", 1)
    return d


def test_ids(journal_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "ids", journal_dir]) == 0
    out = capsys.readouterr().out
    assert "order-1" in out and "order-2" in out
    line = next(line for line in out.splitlines() if "order-1" in line)
    assert [cell.strip() for cell in line.split("│")[2:5]] == ["2", "3", "2"]


def test_replay(journal_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "replay", journal_dir, "order-1", "--from", "2", "--to", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["2\tpaid"]
    assert main(["events", "replay", journal_dir, "order-2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\t00 ff"]


def test_stats_inspect_verify(journal_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "stats", journal_dir]) == 0
    assert "live events" in capsys.readouterr().out
    assert main(["inspect", journal_dir, journal_dir + "/data", journal_dir + "/meta"]) == 0
    assert capsys.readouterr().out.count("events") >= 3
    assert main(["verify", journal_dir]) == 0
    assert "ok (events)" in capsys.readouterr().out


def test_verify_and_inspect_fail_cleanly_on_damage(journal_dir: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(journal_dir) / "data"
    raw = bytearray(data.read_bytes())
    raw[8 + 4] ^= 0x01  # the first block's own-offset field
    data.write_bytes(bytes(raw))
    assert main(["verify", journal_dir]) == 2
    assert "own-offset" in capsys.readouterr().err
    # a truncated lone meta file: a typed error, not a traceback
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "meta").write_bytes((Path(journal_dir) / "meta").read_bytes()[:20])
    assert main(["inspect", str(lone / "meta")]) == 2
    assert "expected" in capsys.readouterr().err
    assert main(["events", "ids", str(tmp_path / "missing")]) == 1  # no such event journal
