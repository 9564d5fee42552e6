"""`engine inspect` and `engine verify` on files no store knows."""

from __future__ import annotations

import subprocess
import sys

from engine.cli import main


def test_inspect_unknown_file(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "foreign.bin"
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00 not ours")
    assert main(["inspect", str(p)]) == 1
    err = capsys.readouterr().err
    assert "foreign.bin" in err and "unrecognised" in err and "7f 45 4c 46" in err


def test_inspect_empty_and_missing(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert main(["inspect", str(p)]) == 1
    assert "empty" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "missing")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_python_dash_m_engine_help() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "inspect" in out.stdout and "verify" in out.stdout
