"""What the command line prints: never markup, never hard-wrapped, never a
traceback for an OS error, and ``--version``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import engine
from engine.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120)


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"engine {engine.__version__}"


def test_user_data_that_looks_like_markup_prints_as_it_is(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    odd = tmp_path / "[red]a" / "[" / "x] closing tag"  # the path holds "[red]a/[/x]"
    odd.parent.mkdir(parents=True)
    odd.write_bytes(b"not any engine format")
    assert main(["inspect", str(odd)]) == 1
    err = capsys.readouterr().err
    assert "[/x]" in str(odd) and str(odd) in err


def test_piped_output_is_not_hard_wrapped(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "log"
    log = engine.AppendLog.open(str(deep), create=True)
    log.append(b"x")
    log.close()
    done = run("verify", str(deep))
    assert done.returncode == 0, done.stderr
    assert any(str(deep) in line for line in done.stdout.splitlines()), done.stdout


def test_os_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    loop_a, loop_b = tmp_path / "a", tmp_path / "b"
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    directory = tmp_path / "dir.log"
    directory.mkdir()
    for args in (("verify", str(loop_a)), ("inspect", str(loop_a)), ("inspect", str(directory / "missing"))):
        done = run(*args)
        assert done.returncode in (1, 2), (args, done)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
