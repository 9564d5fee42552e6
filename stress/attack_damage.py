"""Attack 4: damaged closed files.

Build a small store with a workload, close it cleanly, read everything back (the
clean snapshot), then damage one file of a copy in one of three ways and read the
copy back:

* ``flip``: one bit flipped at a random offset;
* ``truncate``: the file cut at a random length;
* ``zero``: a random range (1 byte to 4 KiB) overwritten with zeros.

Every outcome is classified:

* ``typed error``: the store raised an ``EngineError`` (CorruptFileError, ...): detected;
* ``no effect``: the copy reads back identical (the damage hit padding or unused space);
* ``reported truncation``: the store logged a warning and shows a cut-off prefix;
* ``reported change``: the store logged a warning and shows something else;
* ``silent cut``: no warning, and what reads back is what cutting off a tail would
  give (data lost, nothing wrong shown);
* ``undetected``: different data and no warning: silently wrong data.  A violation
  for a checksummed format (and so is a silent cut caused by a bit flip there); for
  the others it is counted per damage kind and file so that
  ``docs/reliability.md`` can say what cannot be detected;
* ``untyped error`` / ``hang``: always a violation (a damaged file must give a clean,
  typed error, not an IndexError or an endless loop).
"""

from __future__ import annotations

import random
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engine.errors import EngineError
from stress.attack_sim import ROOT, current_image, run_on_sim
from stress.core import StoreAdapter, capture_warnings
from stress.results import Failure, Tally
from stress.simfs import SimFS

#: Seconds a damaged store may take to read before it counts as hung.
READ_TIMEOUT = 10.0


class _Hung(Exception):
    pass


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise _Hung()

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
    """``data`` damaged one way; returns the new bytes and where it was hit."""
    # Most of a preallocated file is zeros nobody reads: aim at the used part (up to
    # the last non-zero byte, plus a little) nine times out of ten.
    used = len(data.rstrip(b"\0")) + 64
    size = min(len(data), used) if rng.random() < 0.9 else len(data)
    if kind == "flip":
        offset = rng.randrange(size)
        bit = rng.randrange(8)
        out = bytearray(data)
        out[offset] ^= 1 << bit
        return bytes(out), f"bit {bit} of byte {offset}"
    if kind == "truncate":
        cut = rng.randrange(size)
        return data[:cut], f"cut to {cut} of {len(data)} bytes"
    offset = rng.randrange(size)
    length = min(len(data) - offset, rng.choice((1, 4, 16, 64, 512, 4096)))
    out = bytearray(data)
    out[offset : offset + length] = bytes(length)
    changed = "" if out != bytearray(data) else " (already zero)"
    return bytes(out), f"{length} zero bytes at {offset}{changed}"


def file_kind(path: str) -> str:
    """A file name with its numbers generalised (``q.1234`` -> ``q.N``)."""
    return re.sub(r"\d+", "N", path.rsplit("/", 1)[-1])


def classify(adapter: StoreAdapter, clean: Any, files: dict[str, bytes], dirs: set[str]) -> tuple[str, str]:
    """Read the damaged image back; returns (outcome, detail)."""
    fs = SimFS.from_image(files, dirs)
    try:
        with capture_warnings() as warned, _deadline(READ_TIMEOUT):
            got = adapter.snapshot(fs, ROOT)
    except _Hung:
        return "hang", f"reading took more than {READ_TIMEOUT} s"
    except EngineError as exc:
        return "typed error", f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        return "untyped error", f"{type(exc).__name__}: {exc!r}"
    if got == clean:
        return "no effect", ""
    if warned.reported:
        if adapter.damage_is_truncation(clean, got):
            return "reported truncation", "; ".join(warned.messages())[:200]
        return "reported change", "; ".join(warned.messages())[:200]
    if adapter.damage_is_truncation(clean, got):
        return "silent cut", "reads back a cut-off prefix without any error or warning"
    return "undetected", "reads back different data without any error or warning"


def attack(adapter: StoreAdapter, tally: Tally, seed: int, stores: int, per_store: int, n_ops: int) -> None:
    """Damage ``per_store`` copies of each of ``stores`` small clean stores."""
    rng = random.Random(seed)
    for _ in range(stores):
        wseed = rng.randrange(2**32)
        ops = adapter.workload(random.Random(wseed), n_ops)
        sim, _steps = run_on_sim(adapter, ops)
        all_files, dirs = current_image(sim)
        files = {p: d for p, d in all_files.items() if d}
        clean = adapter.snapshot(SimFS.from_image(all_files, dirs), ROOT)
        paths = sorted(files)
        drng = random.Random(wseed)
        for _ in range(per_store):
            path = drng.choice(paths)
            kind = drng.choice(("flip", "truncate", "zero"))
            new, where = damage(files[path], drng, kind)
            damaged = dict(all_files)
            damaged[path] = new
            outcome, detail = classify(adapter, clean, damaged, dirs)
            tally.damaged += 1
            what = f"{kind} in {file_kind(path)}"
            silent = outcome == "undetected" or outcome == "silent cut"
            tally.outcome(outcome, f"{outcome}: {what}" if silent else None)
            # A checksummed format must catch every bit flip and must never show
            # altered data; a zeroed range or a cut that looks exactly like the end of
            # the journal (a zero type word) is a limit of the format, documented.
            must_detect = adapter.checksummed and (outcome == "undetected" or (silent and kind == "flip"))
            if outcome in ("untyped error", "hang") or must_detect:
                tally.fail(
                    Failure(
                        adapter.name,
                        "damaged file",
                        wseed,
                        ops,
                        f"{outcome}: {detail}",
                        {"damage": f"{kind} of {path}: {where}"},
                    )
                )
                return  # one reproducible case per run; the counts above say how common
