"""Run ``engine`` commands as processes of their own and classify what they print.

Two ways, both real processes:

* :func:`run_forked`: ``fork()`` this process (engine is already imported, so a
  command costs milliseconds, not the ~0.7 s of a fresh interpreter) and call
  :func:`engine.cli.main` in the child with its own stdout/stderr files; an
  exception that escapes ``main`` is printed as the interpreter would (a
  traceback) and the child exits 1, exactly as ``python -m engine`` would.
* :func:`run_exec`: ``python -m engine ...`` itself, for a sample, so that the
  entry point is exercised too.

:func:`cli_outcome` turns (exit status, stdout, stderr) into a damage outcome by
comparing stdout with the clean copy's.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError

#: Seconds one command may take on a damaged copy before it counts as hung.
CLI_TIMEOUT = 20.0

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class CliResult:
    """What one command did: its exit status (None: hung and killed) and output."""

    returncode: int | None
    out: str
    err: str


def _child(argv: list[str], out_path: str, err_path: str) -> int:
    """In the forked child: run the command with stdout/stderr on the two files."""
    out = open(out_path, "w", encoding="utf-8")  # noqa: SIM115 - closed by os._exit's flush below
    err = open(err_path, "w", encoding="utf-8")  # noqa: SIM115
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = out, err
    # Logging as a fresh interpreter has it: warnings on stderr (the parent's
    # handlers, pytest's capture say, are not the command's).
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(logging.StreamHandler(err))
    engine_logger = logging.getLogger("engine")
    for handler in list(engine_logger.handlers):
        engine_logger.removeHandler(handler)
    engine_logger.propagate = True
    rc = 1
    try:
        from engine.cli import main

        rc = int(main(argv) or 0)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc(file=err)
        rc = 1
    try:
        out.flush()
        err.flush()
    except Exception:
        pass
    return rc


_warm = False


def _warm_up() -> None:
    """Import every CLI module here once, so that each forked child need not."""
    global _warm
    if not _warm:
        from engine.cli import build_parser

        build_parser()
        _warm = True


def run_forked(argv: list[str], timeout: float = CLI_TIMEOUT) -> CliResult:
    """``engine <argv>`` in a forked child of this process."""
    _warm_up()
    with tempfile.TemporaryDirectory(prefix="stress-cli-") as tmp:
        out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                code = _child(argv, out_path, err_path)
            finally:
                os._exit(code & 0xFF)
        deadline = time.monotonic() + timeout
        status: int | None = None
        while True:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        with open(out_path, encoding="utf-8", errors="replace") as f:
            out = f.read()
        with open(err_path, encoding="utf-8", errors="replace") as f:
            err = f.read()
    return CliResult(status, out, err)


def run_forked_read(read: Callable[[], Any], timeout: float = CLI_TIMEOUT) -> tuple[str, Any]:
    """``read()`` in a forked child; returns ("ok", its result) or (outcome, detail).

    The outcome of a failed read is ``typed error`` (an EngineError), ``os error``,
    ``traceback`` (anything else, or the child died) or ``hang``.  The result travels
    back pickled through a file.
    """
    with tempfile.TemporaryDirectory(prefix="stress-read-") as tmp:
        out_path = os.path.join(tmp, "result")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                try:
                    answer: tuple[str, Any] = ("ok", read())
                except EngineError as exc:
                    answer = ("typed error", f"{type(exc).__name__}: {exc}")
                except OSError as exc:
                    answer = ("os error", f"{type(exc).__name__}: {exc}")
                except Exception as exc:
                    answer = ("traceback", f"{type(exc).__name__}: {exc!r}")
                with open(out_path, "wb") as f:
                    pickle.dump(answer, f)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + timeout
        while True:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "hang", f"the reader process took more than {timeout} s"
            time.sleep(0.002)
        try:
            with open(out_path, "rb") as f:
                result: tuple[str, Any] = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            return "traceback", f"the reader process died (status {os.waitstatus_to_exitcode(raw)}) without an answer"
    return result


def run_exec(argv: list[str], timeout: float = CLI_TIMEOUT) -> CliResult:
    """``python -m engine <argv>`` as a fresh interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "160"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "engine", *argv], capture_output=True, timeout=timeout, env=env, cwd=_REPO
        )
    except subprocess.TimeoutExpired as exc:
        return CliResult(None, _text(exc.stdout), _text(exc.stderr))
    return CliResult(proc.returncode, _text(proc.stdout), _text(proc.stderr))


def _text(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else raw.decode(errors="replace")


def normalized(result: CliResult, directory: str) -> CliResult:
    """``result`` with ``directory`` (a copy's temporary directory) written as ``<dir>``.

    The copies' directories have names of the same length, so tables keep their
    widths and the clean and damaged outputs compare line by line.
    """
    return CliResult(result.returncode, result.out.replace(directory, "<dir>"), result.err.replace(directory, "<dir>"))


#: Commands that print a summary of the store, not its data: a different summary
#: on exit 0 is counted (``summary changed``), not judged as wrong data.
SUMMARY_COMMANDS = frozenset({"inspect", "verify", "stats"})


def is_summary(command: list[str]) -> bool:
    return command[0] in SUMMARY_COMMANDS or (len(command) > 1 and command[1] in SUMMARY_COMMANDS)


def cli_outcome(result: CliResult, clean: CliResult | None, summary: bool = False) -> tuple[str, str]:
    """(outcome, detail) of one command on a damaged copy, given the clean copy's run.

    ``traceback`` (an exception escaped the command) and ``hang`` are violations
    wherever they happen; a non-zero exit with a message is the typed error of the
    command line; exit 0 with the clean copy's output is ``identical``; exit 0 with
    other output is ``reported`` when the command also warned on stderr, else
    ``summary changed`` for a summary command, else ``silent change``.
    """
    if result.returncode is None:
        return "hang", f"took more than {CLI_TIMEOUT} s"
    if "Traceback (most recent call last)" in result.err:
        return "traceback", result.err.strip().splitlines()[-1][:300]
    if result.returncode != 0:
        last = (result.err.strip().splitlines() or ["(nothing on stderr)"])[-1]
        return "typed error", f"exit {result.returncode}: {last[:200]}"
    if clean is not None and result.out == clean.out:
        return "identical", ""
    if result.err.strip():
        return "reported", result.err.strip().splitlines()[-1][:200]
    if summary:
        return "summary changed", "exit 0, the summary differs from the clean copy's, nothing on stderr"
    return "silent change", "exit 0, output differs from the clean copy's, nothing on stderr"


def clean_text(result: CliResult) -> str:
    """A short description of a clean run that failed (the command is then unusable)."""
    buf = io.StringIO()
    buf.write(f"exit {result.returncode}; ")
    buf.write((result.err.strip().splitlines() or [""])[-1][:300])
    return buf.getvalue()
