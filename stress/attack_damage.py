"""Attack 4: damaged closed files, read back through every read path.

Build a small store with a workload, close it cleanly, and read it back through each
read path of the store (:mod:`stress.readpaths`: the writer's open, the read-only
readers, the Spark sources' partition readers) and each of its CLI commands, run as
processes of their own (:mod:`stress.clirun`): the clean results.  Then damage one
file of a copy in one of these ways:

* ``flip``: one bit flipped at a random offset;
* ``truncate``: the file cut at a random length;
* ``zero``: a random range (1 byte to 4 KiB) overwritten with zeros;
* ``garbage``: a random range overwritten with random bytes;
* ``foreign``: the file replaced by another format's file (PNG, ELF, SQLite, JSON);
* ``delete``: the file removed;
* ``symlink loop``: the file replaced by a symbolic link to itself (ELOOP on open);

and read the copy back through every path (each on a fresh copy: a writer's open
may repair).  Each read is classified:

* ``typed error``: an ``EngineError`` (or, on the command line, a non-zero exit
  with a message): detected;
* ``reported cut``: a warning on the ``engine`` logger (stderr for the command
  line) and data that differs (a torn tail cut, an index rebuilt);
* ``identical``: the same data as the clean copy (padding, unused space);
* ``silent wrong data``: different data, no error, no warning, where a checksum
  covers the damaged file (:data:`stress.readpaths.COVERAGE`): a violation.  A
  silent cut-off prefix counts here only for flips, garbage and foreign files (a
  cut or zeros at a record boundary look like a shorter file in every format);
* ``undetectable by the format``: different data, no warning, where no checksum
  covers the file (or a silent cut by truncation, zeros or deletion): counted per
  file and damage kind, and documented in ``docs/reliability.md``;
* ``os error``: an ``OSError`` for a deleted file or a symlink loop (the API
  passes the operating system's error on; for byte damage it is a traceback);
* ``traceback`` / ``hang``: any other exception, or more than 10 s: a violation
  on every path (the command line must never show a traceback).
"""

from __future__ import annotations

import functools
import os
import random
import re
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError
from engine.fs import OsFileSystem
from stress import clirun
from stress.attack_sim import ROOT, current_image, run_on_sim
from stress.core import StoreAdapter, Violation, capture_warnings
from stress.readpaths import CLI_COMMANDS, READ_PATHS, ReadPath, coverage
from stress.results import Failure, Tally

#: Seconds a damaged store may take to read before it counts as hung.
READ_TIMEOUT = 10.0

#: Every kind of damage, in the order the report lists them.
KINDS = ("flip", "truncate", "zero", "garbage", "foreign", "delete", "symlink loop")

#: Kinds whose silent cut of a checksummed file is a violation (they change bytes
#: inside records; a cut or zeros may look exactly like the end of a file).
_STRICT_CUT = frozenset({"flip", "garbage", "foreign"})

#: Other formats' files, for ``foreign``.
FOREIGN = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(17),
    b"\x7fELF\x02\x01\x01" + bytes(57),
    b"SQLite format 3\x00" + bytes(84),
    b'{"not": "an engine file", "n": [1, 2, 3]}\n',
)

#: Outcomes from worst to best: a variant is reported by its worst read.
SEVERITY = (
    "hang",
    "traceback",
    "oracle violation",
    "silent wrong data",
    "undetectable by the format",
    "os error",
    "summary changed",
    "reported cut",
    "typed error",
    "identical",
)
VIOLATIONS = frozenset({"hang", "traceback", "oracle violation", "silent wrong data"})


class Hung(Exception):
    pass


@contextmanager
def read_deadline(seconds: float) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hung()

    try:
        old = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread: no deadline
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def damage(data: bytes, rng: random.Random, kind: str) -> tuple[bytes, str]:
    """``data`` damaged one way (a byte kind); returns the new bytes and where it was hit."""
    # Most of a preallocated file is zeros nobody reads: aim at the used part (up to
    # the last non-zero byte, plus a little) nine times out of ten.
    used = len(data.rstrip(b"\0")) + 64
    size = max(1, min(len(data), used) if rng.random() < 0.9 else len(data))
    if kind == "flip":
        offset = rng.randrange(size)
        bit = rng.randrange(8)
        out = bytearray(data)
        out[offset] ^= 1 << bit
        return bytes(out), f"bit {bit} of byte {offset}"
    if kind == "truncate":
        cut = rng.randrange(size)
        return data[:cut], f"cut to {cut} of {len(data)} bytes"
    if kind == "foreign":
        sample = FOREIGN[rng.randrange(len(FOREIGN))]
        return sample, f"replaced by {len(sample)} bytes of another format ({sample[:8]!r})"
    offset = rng.randrange(size)
    length = min(len(data) - offset, rng.choice((1, 4, 16, 64, 512, 4096)))
    out = bytearray(data)
    if kind == "garbage":
        out[offset : offset + length] = rng.randbytes(length)
        return bytes(out), f"{length} random bytes at {offset}"
    out[offset : offset + length] = bytes(length)
    changed = "" if out != bytearray(data) else " (already zero)"
    return bytes(out), f"{length} zero bytes at {offset}{changed}"


def file_kind(path: str) -> str:
    """A file name with its numbers generalised (``q.1234`` -> ``q.N``)."""
    return re.sub(r"\d+", "N", path.rsplit("/", 1)[-1])


@dataclass(frozen=True)
class Variant:
    """One damaged copy: which file, how, and its new bytes (None: deleted or a link)."""

    path: str
    kind: str
    new: bytes | None
    where: str

    def describe(self) -> str:
        return f"{self.kind} of {self.path}: {self.where}"


def make_variant(files: dict[str, bytes], path: str, kind: str, rng: random.Random) -> Variant:
    if kind == "delete":
        return Variant(path, kind, None, "file removed")
    if kind == "symlink loop":
        return Variant(path, kind, None, "file replaced by a link to itself")
    new, where = damage(files[path], rng, kind)
    return Variant(path, kind, new, where)


def materialize(files: dict[str, bytes], dirs: set[str], dest: str, variant: Variant | None) -> str:
    """Write the image (damaged by ``variant``) below ``dest``; returns the store root."""
    for d in sorted(dirs):
        os.makedirs(dest + d, exist_ok=True)
    for path, data in files.items():
        if variant is not None and path == variant.path:
            if variant.kind == "symlink loop":
                os.symlink(path.rsplit("/", 1)[-1], dest + path)
                continue
            if variant.new is None:
                continue
            data = variant.new
        with open(dest + path, "wb") as f:
            f.write(data)
    return dest + ROOT


def _fresh(workdir: str) -> str:
    return tempfile.mkdtemp(dir=workdir)


def is_cut(adapter: StoreAdapter, clean: Any, got: Any) -> bool:
    """Whether ``got`` only lacks data ``clean`` has (a cut), nothing changed."""
    if isinstance(clean, list) and isinstance(got, list):
        have = Counter(map(repr, clean))
        return all(have[k] >= v for k, v in Counter(map(repr, got)).items())
    try:
        return adapter.damage_is_truncation(clean, got)
    except Exception:  # a path whose shape is not the snapshot's
        return False


def read_outcome(adapter: StoreAdapter, read: ReadPath, root: str, clean: Any) -> tuple[str, str, bool]:
    """Read a damaged copy through one path: (outcome, detail, silent-and-a-cut)."""
    try:
        with capture_warnings() as warned, read_deadline(READ_TIMEOUT):
            got = read(OsFileSystem(), root)
    except Hung:
        return "hang", f"reading took more than {READ_TIMEOUT} s", False
    except Violation as exc:
        return "oracle violation", exc.detail, False
    except EngineError as exc:
        return "typed error", f"{type(exc).__name__}: {exc}", False
    except OSError as exc:
        return "os error", f"{type(exc).__name__}: {exc}", False
    except Exception as exc:
        return "traceback", f"{type(exc).__name__}: {exc!r}", False
    if got == clean:
        return "identical", "", False
    if warned.reported:
        return "reported cut", "; ".join(warned.messages())[:200], False
    return "silent", "reads back different data without any error or warning", is_cut(adapter, clean, got)


def _read_warned(read: ReadPath, root: str) -> tuple[Any, str]:
    """``read`` with what it logged as warnings (run in a reader process)."""
    with capture_warnings() as warned:
        got = read(OsFileSystem(), root)
    return got, "; ".join(warned.messages())[:200]


def judge(adapter: StoreAdapter, variant: Variant, outcome: str, cut: bool, cli: bool) -> str:
    """The final outcome of one read: silent reads become wrong data or undetectable."""
    if outcome == "os error" and variant.kind not in ("delete", "symlink loop"):
        return "traceback"  # byte damage must give a typed error, not the OS's
    if outcome not in ("silent", "silent change"):
        return "reported cut" if outcome == "reported" else outcome
    covered = adapter.checksummed or coverage(adapter.name).covers(file_kind(variant.path))
    if not covered or variant.kind in ("delete", "symlink loop"):
        return "undetectable by the format"
    if cli or cut:
        # The command line prints summaries (a cut shows as other sizes); only damage
        # inside records must never print as data.
        return "silent wrong data" if variant.kind in _STRICT_CUT else "undetectable by the format"
    return "silent wrong data"


def _paths(adapter: StoreAdapter) -> dict[str, ReadPath]:
    return READ_PATHS.get(adapter.name, {"snapshot": adapter.snapshot})


def _worst(outcomes: list[str]) -> str:
    return min(outcomes, key=SEVERITY.index)


def attack(
    adapter: StoreAdapter,
    tally: Tally,
    seed: int,
    stores: int,
    per_store: int,
    n_ops: int,
    cli_variants: int = 4,
    exec_commands: int = 1,
) -> None:
    """Damage ``per_store`` copies of each of ``stores`` small clean stores.

    Every copy is read through every in-process read path; the first
    ``cli_variants`` copies of each store also through every CLI command (forked
    processes), and ``exec_commands`` commands per store as ``python -m engine``.
    """
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix=f"stress-damage-{adapter.name}-")
    try:
        for _ in range(stores):
            wseed = rng.randrange(2**32)
            ops = adapter.workload(random.Random(wseed), n_ops)
            sim, _steps = run_on_sim(adapter, ops)
            all_files, dirs = current_image(sim)
            _one_store(adapter, tally, wseed, ops, all_files, dirs, workdir, per_store, cli_variants, exec_commands)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _one_store(
    adapter: StoreAdapter,
    tally: Tally,
    wseed: int,
    ops: list[Any],
    all_files: dict[str, bytes],
    dirs: set[str],
    workdir: str,
    per_store: int,
    cli_variants: int,
    exec_commands: int,
) -> None:
    files = {p: d for p, d in all_files.items() if d}
    paths = _paths(adapter)
    clean: dict[str, Any] = {}
    for name, read in paths.items():
        root = materialize(all_files, dirs, _fresh(workdir), None)
        clean[name] = read(OsFileSystem(), root)  # a clean copy must read: errors propagate
    commands = CLI_COMMANDS.get(adapter.name, [])
    clean_root = materialize(all_files, dirs, _fresh(workdir), None)
    clean_cli: dict[tuple[int, str], clirun.CliResult] = {}

    def clean_run(i: int, named: str) -> clirun.CliResult:
        """Command ``i`` on the clean copy, naming the same file as on the damaged one."""
        if (i, named) not in clean_cli:
            argv = _argv(commands[i], clean_root, clean_root[: -len(ROOT)] + named)
            result = clirun.normalized(clirun.run_forked(argv), clean_root[: -len(ROOT)])
            # A workload need not write every persistence id the commands name, so
            # ``events replay`` may rightly answer "no persistence id" (exit 1) on a
            # clean store; the damaged copy is then compared with that answer.
            absent = result.returncode == 1 and "has no persistence id" in result.err
            if (result.returncode != 0 and not absent) or "Traceback" in result.err:
                tally.fail(Failure(adapter.name, "CLI on a clean store", wseed, ops,
                                   f"engine {' '.join(commands[i])}: {clirun.clean_text(result)}"))
            clean_cli[(i, named)] = result
        return clean_cli[(i, named)]
    drng = random.Random(wseed)
    for number in range(per_store):
        path = drng.choice(sorted(files))
        kind = KINDS[number % len(KINDS)] if number < len(KINDS) else drng.choice(KINDS)
        variant = make_variant(files, path, kind, drng)
        results: list[tuple[str, str, str]] = []  # (read path, outcome, detail)
        for name, read in paths.items():
            root = materialize(all_files, dirs, _fresh(workdir), variant)
            outcome, detail, cut = read_outcome(adapter, read, root, clean[name])
            results.append((name, judge(adapter, variant, outcome, cut, cli=False), detail))
        if number < cli_variants:
            # The first read path again, in a process of its own (readers in other
            # processes must see the damage the same way).
            name, read = next(iter(paths.items()))
            root = materialize(all_files, dirs, _fresh(workdir), variant)
            outcome, answer = clirun.run_forked_read(functools.partial(_read_warned, read, root))
            cut = False
            if outcome == "ok":
                got, warned = answer
                if got == clean[name]:
                    outcome, answer = "identical", ""
                elif warned:
                    outcome, answer = "reported cut", warned
                else:
                    outcome, answer = "silent", "reads back different data without any error or warning"
                    cut = is_cut(adapter, clean[name], got)
            results.append((f"{name} (other process)", judge(adapter, variant, outcome, cut, cli=False), str(answer)))
        if number < cli_variants and commands:
            root = materialize(all_files, dirs, _fresh(workdir), variant)
            # A deleted file is not named on the command line (that is the hostile-path
            # attack's business): the commands get another file of the store.
            other = sorted(p for p in files if p != variant.path)
            named = variant.path if kind != "delete" or not other else other[0]
            target = root[: -len(ROOT)] + named
            for i, command in enumerate(commands):
                runner = clirun.run_exec if number == 0 and i < exec_commands else clirun.run_forked
                got = clirun.normalized(runner(_argv(command, root, target)), root[: -len(ROOT)])
                same_clean = clean_run(i, named) if runner is clirun.run_forked else None
                outcome, detail = clirun.cli_outcome(got, same_clean, clirun.is_summary(command))
                if runner is clirun.run_exec and outcome == "silent change":
                    outcome, detail = "identical", "(exec run: output not compared)"
                name = "engine " + " ".join(shown_arg(c) for c in command)
                results.append((name, judge(adapter, variant, outcome, False, cli=True), detail))
            tally.cli_runs += len(commands)
        _record(adapter, tally, wseed, ops, variant, results)


def shown_arg(arg: str) -> str:
    """A command's argument as the report shows it (``{root}/journal`` -> ``DIR/journal``)."""
    return arg.replace("{root}", "DIR").replace("{file}", "FILE")


def _argv(command: list[str], root: str, file: str) -> list[str]:
    return [c.replace("{root}", root).replace("{file}", file) for c in command]


def _record(
    adapter: StoreAdapter,
    tally: Tally,
    wseed: int,
    ops: list[Any],
    variant: Variant,
    results: list[tuple[str, str, str]],
) -> None:
    tally.damaged += 1
    worst = _worst([outcome for _name, outcome, _detail in results])
    tally.damage_outcome(variant.kind, worst)
    for name, outcome, _detail in results:
        tally.read_outcome(name, outcome)
    if worst == "undetectable by the format":
        tally.undetectable_in(f"{variant.kind} in {file_kind(variant.path)}")
    bad = [(n, o, d) for n, o, d in results if o in VIOLATIONS]
    if bad:
        name, outcome, detail = bad[0]
        others = "; ".join(f"{n}: {o}" for n, o, _ in results if (n, o) != (name, outcome))
        tally.fail(
            Failure(
                adapter.name,
                "damaged file",
                wseed,
                ops,
                f"{outcome} via {name}: {detail}",
                {"damage": variant.describe(), "other read paths": others[:600]},
            )
        )
