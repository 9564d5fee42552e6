"""Coverage-guided differential fuzzing of the compiled decoder kernels (atheris).

Each target feeds one fuzzer input to a decoder kernel and to its pure-Python
reference and requires the same outcome: the same result, the same objects, the
same exception type and message (the parity the unit tests check on generated
cases, here searched by libFuzzer for as long as it is given).  atheris
instruments the pure-Python reference, so its branch coverage guides the search
into the format's corners; the C kernel is compared on every input.  (Coverage of
the C code itself would need the extension built with clang's
``-fsanitize=fuzzer-no-link``; this machine's compiler is gcc.)

Targets:

* ``queue``: ``engine.queue._native.decode_batch`` against
  ``engine.queue.codec.decode_batch`` (libkestrel journal records and CHECKs);
* ``queue_columns``: ``engine.queue._native.decode_columns`` against
  ``engine.queue.codec.decode_columns`` (the same records decoded into columns:
  the Spark queue source's decoder);
* ``events``: ``engine.events._native.read_runs`` against
  ``engine.events.runs.read_runs_py`` (a file journal chain walk, with and without
  ``data.crc`` entries);
* ``kv``: ``engine.kv._native.decode_node`` against
  ``engine.kv.node.decode_node`` (a B+tree node page: the input as it is, and
  resealed with a valid CRC-32C so that the structural checks are reached;
  decoded lazily and eagerly);
* ``kv_find``: ``engine.kv._native_descent.find``, ``leaf_items`` and ``leaf_pairs`` against
  ``engine.kv.descent.find_image``, ``leaf_items_image`` and ``leaf_pairs_image`` (a get and a scan's
  leaf over page images: the input cut into page images, each page id mapped to
  one of them);
* ``kv_diff``: ``engine.kv._native.diff_span`` against ``engine.kv.node.diff_span``
  (the span a commit journals of a node overwritten in place: the input split into
  an old and a new image of one length, ``lo`` taken from it);
* ``kv_encode``: ``engine.kv._native.encode_leaf`` and ``encode_branch`` against
  ``engine.kv.node.leaf_image`` and ``branch_image`` (a node's page image from its
  entries: keys and values carved from the input, now and then an overflow reference
  or an item of the wrong type, entries that overflow the page, any page size: the
  same image or an error on both);
* ``applog``: ``engine.applog._native.crc_failures`` against
  ``engine.applog.codec.crc_failures``, and ``engine.applog._native.encode_batch``
  against ``engine.applog.batch.encode_batch`` (records into a segment's write
  state, the extent's six i64 taken from the input).

Run: ``python -m stress.fuzz --seconds 60`` (every target, the budget split
between them) or ``python -m stress.fuzz --target queue --seconds 30``; the
stress suite's long mode (``python -m stress --seconds N`` with N >= 300) runs it
too.  A difference or a crash stops with the input saved as ``crash-*`` in the
working directory (libFuzzer's convention) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from array import array
from collections.abc import Callable
from typing import Any

#: Targets and the native module each needs.
TARGETS = {
    "queue": "engine.queue._native",
    "queue_columns": "engine.queue._native",
    "queue_put": "engine.queue._native",
    "events": "engine.events._native",
    "kv": "engine.kv._native",
    "kv_find": "engine.kv._native_descent",
    "kv_diff": "engine.kv._native",
    "kv_encode": "engine.kv._native",
    "applog": "engine.applog._native",
}


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # compared: the twins must raise the same
        return ("error", (type(exc), str(exc)))


class _Input:
    """Integers and bytes drawn from one fuzzer input (little-endian, wrapping)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def number(self, size: int, signed: bool = True) -> int:
        raw = self.data[self.at : self.at + size]
        self.at += size
        return int.from_bytes(raw.ljust(size, b"\0"), "little", signed=signed)

    def small(self, lo: int, hi: int) -> int:
        return lo + self.number(2, signed=False) % (hi - lo + 1)

    def rest(self) -> bytes:
        return self.data[self.at :]


def queue_target() -> Callable[[bytes], None]:
    """decode_batch(buf, pos, out, crc, covered, max_records) on both twins."""
    from engine.queue import codec

    native = importlib.import_module(TARGETS["queue"])

    def one(data: bytes) -> None:
        src = _Input(data)
        pos = src.small(-4, 64)
        crc = None if src.small(0, 1) else src.number(4, signed=False)
        covered = src.small(-4, 256)
        max_records = src.small(-1, 64)
        buf = src.rest()
        results = []
        for decode in (codec.decode_batch, native.decode_batch):
            out: list[Any] = [codec.Put(99, b"carried", 1, None, 0)]
            got = _outcome(lambda d=decode, o=out: d(buf, pos, o, crc, covered, max_records=max_records))  # type: ignore[misc]
            results.append((got, [(type(p), tuple(p)) for p in out]))
        if results[0] != results[1]:
            raise AssertionError(f"queue decode_batch twins differ on {data.hex()}: {results[0]} != {results[1]}")

    return one


def queue_columns_target() -> Callable[[bytes], None]:
    """decode_columns(buf, pos, checked, max_items) on both twins."""
    from engine.queue import codec

    native = importlib.import_module(TARGETS["queue_columns"])

    def one(data: bytes) -> None:
        src = _Input(data)
        pos = src.small(-4, 64)
        checked = bool(src.small(0, 1))
        max_items = src.small(-1, 64)
        buf = src.rest()
        got = [
            _outcome(lambda d=decode: d(buf, pos, checked, max_items))  # type: ignore[misc]
            for decode in (codec.decode_columns, native.decode_columns)
        ]
        if got[0] != got[1]:
            raise AssertionError(f"queue decode_columns twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


def queue_put_target() -> Callable[[bytes], None]:
    """encode_put(xid, add_time, data, expire_time, error_count) on both twins:
    ints anywhere in (and past) their fields' ranges, an expiry or None, data as
    bytes or not (the same record, or the same error)."""
    from engine.queue import codec

    native = importlib.import_module(TARGETS["queue_put"])

    def one(data: bytes) -> None:
        src = _Input(data)
        wide = src.small(0, 3)  # 0: in range; 1-3: wider than the fields (i64 plus a bit)
        xid = src.number(8) if wide == 0 else src.number(9)
        add = src.number(8 if wide < 2 else 9)
        expire = None if src.small(0, 1) else src.number(8 if wide < 3 else 9)
        errors = src.number(4 if wide == 0 else 5)
        payload: Any = src.rest()
        if src.small(0, 7) == 0:
            payload = payload.decode("latin-1")  # not bytes: both refuse it the same way
        got = [
            _outcome(lambda e=encode: e(xid, add, payload, expire, errors))  # type: ignore[misc]
            for encode in (codec.encode_put, native.encode_put)
        ]
        if got[0] != got[1]:
            raise AssertionError(f"queue encode_put twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


def events_target() -> Callable[[bytes], None]:
    """read_runs(read_at, offset, prev, expected, hi, limit, cap, want, max_events[, sums]) on both twins."""
    from engine.events import runs

    native = runs.read_runs_native
    if native is None:
        raise ImportError("engine.events._native is not built (or ENGINE_PURE_PYTHON is set)")

    def one(data: bytes) -> None:
        src = _Input(data)
        args = (
            src.small(-8, 600),
            runs.ANY_PREVIOUS if src.small(0, 1) else src.small(-8, 600),
            src.small(-2, 50),
            src.small(-2, 60),
            src.small(-8, 700),
            src.small(-5, 5000),
            src.small(-5, 5000),
            src.small(-2, 12),
        )
        with_sums = src.small(0, 1)
        count = src.small(0, 5)
        entries = [(src.small(-50, 800), src.small(-50, 800), src.number(4, signed=False)) for _ in range(count)]
        checked = bytes(src.small(0, 1) for _ in range(count))
        blob = b"AKFD\0\0\0\0" + src.rest()
        outcomes = []
        for walk in (runs.read_runs_py, native):
            calls: list[tuple[int, int]] = []

            def read_at(offset: int, size: int, calls: list[tuple[int, int]] = calls) -> bytes:
                calls.append((offset, size))
                return blob[max(0, offset) : max(0, offset) + size]

            sums = None
            if with_sums:
                sums = (
                    array("q", [e[0] for e in entries]),
                    array("q", [e[1] for e in entries]),
                    array("I", [e[2] for e in entries]),
                    bytearray(checked),
                )
            got = _outcome(lambda w=walk, s=sums: w(read_at, *args, s) if s is not None else w(read_at, *args))  # type: ignore[misc]
            outcomes.append((got, calls, None if sums is None else bytes(sums[3])))
        if outcomes[0] != outcomes[1]:
            raise AssertionError(f"events read_runs twins differ on {data.hex()}: {outcomes[0]} != {outcomes[1]}")

    return one


def kv_target() -> Callable[[bytes], None]:
    """decode_node(page, page_count, eager) on both twins, lazily and eagerly, the
    page as given and resealed."""
    from engine.kv import node

    native = importlib.import_module(TARGETS["kv"])

    def shape(result: Any) -> Any:
        if type(result) is node.Leaf:
            offs = None if result._voffs is None else result._voffs.tolist()
            return ("leaf", result.keys, result.values(), result.size, offs, result._page)
        if type(result) is node.Branch:
            return ("branch", result.level, result.keys, result.children, result.size)
        return result

    def one(data: bytes) -> None:
        src = _Input(data)
        page_count = src.small(-2, 5000)
        reseal = src.small(0, 1)
        page = src.rest()
        if reseal and len(page) >= node.HEAD:
            used = int.from_bytes(page[4:8], "little")
            crc = node.page_crc(page, node.CRC_AT, min(max(used, 12), len(page)))
            page = page[:8] + crc.to_bytes(4, "little") + page[12:]
        twins = (node.decode_node, native.decode_node)
        for eager in (False, True):  # lazily and eagerly (a transaction's read): the same input
            got = [_outcome(lambda d=decode, e=eager: shape(d(page, page_count, e))) for decode in twins]  # type: ignore[misc]
            errors = [(g[0], g[1][0], g[1][1]) if g[0] == "error" else g for g in got]
            if errors[0] != errors[1]:
                raise AssertionError(f"kv decode_node twins differ on {data.hex()} (eager {eager}): "
                                     f"{got[0]} != {got[1]}")

    return one


def kv_find_target() -> Callable[[bytes], None]:
    """find(images, root, height, key, page_count), leaf_items(...) and leaf_pairs(...) on both twins:
    pages 2..page_count each one of the images cut from the input (so descents meet pages again)."""
    from engine.kv.descent import find_image, leaf_items_image, leaf_pairs_image

    native = importlib.import_module(TARGETS["kv_find"])

    def one(data: bytes) -> None:
        src = _Input(data)
        page_count = src.small(2, 9)
        height = src.small(1, 4)
        size = src.small(0, 600)
        key = src.data[src.at : src.at + src.small(0, 12)]
        src.at += len(key)
        rest = src.rest()
        cuts = [rest[i : i + size] for i in range(0, len(rest), max(1, size))] or [b""]
        images = {p: cuts[(p - 2) % len(cuts)] for p in range(2, page_count + 1)}
        got = [_outcome(lambda f=f: f(images, 2, height, key, page_count)) for f in (find_image, native.find)]  # type: ignore[misc]
        if got[0] != got[1]:
            raise AssertionError(f"kv find twins differ on {data.hex()}: {got[0]} != {got[1]}")
        before = bool(height & 1)
        twins = (leaf_items_image, native.leaf_items)
        got = [_outcome(lambda f=f: f(images, 2, height, key or None, before, page_count)) for f in twins]  # type: ignore[misc]
        if got[0] != got[1]:
            raise AssertionError(f"kv leaf_items twins differ on {data.hex()}: {got[0]} != {got[1]}")
        # leaf_pairs: the key as the lower or the upper bound (the other open, or the key and one more byte)
        lower, upper = (key or None, None) if page_count & 1 else (None, key or None)
        if height & 2 and key:
            lower, upper = key, key + b"\xff"
        pairs_twins = (leaf_pairs_image, native.leaf_pairs)
        got = [_outcome(lambda f=f: f(images, 2, height, lower, upper, before, page_count)) for f in pairs_twins]  # type: ignore[misc]
        if got[0] != got[1]:
            raise AssertionError(f"kv leaf_pairs twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


EXTENT_AT = 3  # engine.applog.batch.EXTENT (imported by the target, inside atheris' instrumentation)


def kv_diff_target() -> Callable[[bytes], None]:
    """diff_span(old, new, lo) on both twins.  The input's rest is cut in two: the
    old image and either the new one as it is (lengths may differ: the errors are
    compared too) or, mostly, edits to the old one as (u16 position, byte) triples
    (the small spans a commit journals)."""
    from engine.kv import node

    native = importlib.import_module(TARGETS["kv_diff"])

    def one(data: bytes) -> None:
        src = _Input(data)
        mode = src.small(0, 3)
        lo = src.number(2)
        rest = src.rest()
        half = len(rest) // 2
        old, tail = rest[:half], rest[half:]
        if mode == 0 or not old:
            new = tail
        else:
            edited = bytearray(old)
            for i in range(0, len(tail) - 2, 3):
                edited[int.from_bytes(tail[i : i + 2], "little") % len(old)] = tail[i + 2]
            new = bytes(edited)
        got = [_outcome(lambda f=f: f(old, new, lo)) for f in (node.diff_span, native.diff_span)]  # type: ignore[misc]
        if got[0] != got[1]:
            raise AssertionError(f"kv diff_span twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


def kv_encode_target() -> Callable[[bytes], None]:
    """encode_leaf(keys, vals, page_size) and encode_branch(level, keys, children,
    page_size) on both twins: the same page image (every byte: header, arrays,
    padding), or an error on both."""
    from engine.kv import node

    native = importlib.import_module(TARGETS["kv_encode"])

    def one(data: bytes) -> None:
        src = _Input(data)
        page_size = src.small(0, 3 * node.HEAD + 1100) if src.small(0, 3) == 0 else 1 << src.small(6, 17)
        level = src.small(-1, 260)
        n = src.small(0, 60)
        keys: list[Any] = []
        vals: list[Any] = []
        for _ in range(n):
            klen, vlen, kind = src.small(0, 40), src.small(0, 300), src.small(0, 40)
            key: Any = src.data[src.at : src.at + klen]
            src.at += klen
            value: Any = src.data[src.at : src.at + vlen]
            src.at += vlen
            if kind == 0:
                value = node.Overflow(src.small(0, 9999), src.number(4, signed=False))
            elif kind == 1:
                value = value.hex()  # not bytes (a bytearray the reference would take: not compared)
            elif kind == 2:
                key = str(key)
            keys.append(key)
            vals.append(value)
        children: list[Any] = [src.number(8, signed=False) for _ in range(len(keys) + src.small(0, 2))]
        if src.small(0, 7) == 0 and children:
            children[0] = -1
        if src.small(0, 7) == 0 and vals:
            vals.pop()
        pairs = (
            (lambda: node.leaf_image(keys, vals, page_size), lambda: native.encode_leaf(keys, vals, page_size)),
            (
                lambda: node.branch_image(level, keys, children, page_size),
                lambda: native.encode_branch(level, keys, children, page_size),
            ),
        )
        for ref, twin in pairs:
            got = [_outcome(ref), _outcome(twin)]
            # The same image, or an error on both sides: not the same error, since the
            # reference's errors on a wrongly typed entry or an out-of-range level or
            # child come from struct and attribute access, where the kernel checks first.
            kinds = [g if g[0] == "ok" else "error" for g in got]
            if kinds[0] != kinds[1]:
                raise AssertionError(f"kv encode twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


def applog_target() -> Callable[[bytes], None]:
    """Both compiled applog kernels on every input, each against its reference.

    * crc_failures(log, crcs, count): records walked by their own size fields
      over hostile bytes, checked against a run of ``.crc`` entries (inputs
      whose first byte is even);
    * encode_batch(items, flags, time_ns, state): records carved from the input
      (as bytes, a list or a tuple, now and then one that is not bytes), flags
      and time from it, a write state whose 48-byte extent is input bytes (any
      six i64: bases past indexes, negative offsets, limits and report sizes
      anywhere) and whose buffers have pending bytes, are too short, or alias;
      the same result or error, the same bytes and extent after (odd first byte).
    """
    from engine.applog import batch, codec

    native = importlib.import_module(TARGETS["applog"])

    def encode(data: bytes) -> None:
        src = _Input(data[1:])
        shape = src.small(0, 15)
        flags = src.number(5) if shape == 14 else src.number(4, signed=False)  # a u32, or not
        t = src.number(9) if shape == 15 else src.number(8)  # an i64, or not
        extent = bytearray(src.data[src.at : src.at + 48 + (shape == 9) - (shape == 10)])
        src.at += len(extent)
        pending = bytes(src.data[src.at : src.at + src.small(0, 40)])
        src.at += len(pending)
        rest = src.rest()
        cut = [rest[k : k + 1 + rest[k] % 64] for k in range(0, len(rest), 37)]
        items: Any = cut[0] if shape == 0 and cut else cut if shape != 1 else tuple(cut)
        if shape == 2 and cut:
            items = [*cut[:-1], bytearray(cut[-1])]
        outcomes = []
        for twin in (batch.encode_batch, native.encode_batch):
            state: Any = [bytearray(pending), bytearray(pending[:4]), bytearray(pending[:9]), bytearray(extent)]
            if shape == 11:
                state[EXTENT_AT] = state[0]
            elif shape == 12:
                state = tuple(state)
            elif shape == 13:
                state[1] = bytes(state[1])
            got = _outcome(lambda f=twin, st=state: f(items, flags, t, st))  # type: ignore[misc]
            outcomes.append((got, [bytes(b) if isinstance(b, (bytes, bytearray)) else b for b in state]))
        if outcomes[0] != outcomes[1]:
            raise AssertionError(f"applog encode_batch twins differ on {data.hex()}: {outcomes[0]} != {outcomes[1]}")

    def one(data: bytes) -> None:
        if data[:1] and data[0] & 1:
            encode(data)
            return
        src = _Input(data)
        count = src.small(-2, 40)
        entries = src.small(0, 48)
        crcs = bytes(src.data[src.at : src.at + 4 * entries])
        src.at += 4 * entries
        log = src.rest()
        got = [_outcome(lambda f=twin: f(log, crcs, count)) for twin in (codec.crc_failures, native.crc_failures)]  # type: ignore[misc]
        if got[0] != got[1]:
            raise AssertionError(f"applog crc_failures twins differ on {data.hex()}: {got[0]} != {got[1]}")

    return one


BUILDERS = {
    "queue": queue_target,
    "queue_columns": queue_columns_target,
    "queue_put": queue_put_target,
    "events": events_target,
    "kv": kv_target,
    "kv_find": kv_find_target,
    "kv_diff": kv_diff_target,
    "kv_encode": kv_encode_target,
    "applog": applog_target,
}


def run_one(target: str, seconds: int, corpus: str | None) -> None:
    """Fuzz ``target`` in this process for ``seconds`` (atheris never returns: libFuzzer exits).
    A kernel that is not built raises ImportError: it fails loudly, never skips."""
    import atheris  # type: ignore[import-untyped]  # the [fuzz] extra; imported here so `--help` works without it

    # engine's modules must be first imported here, inside the block, to be instrumented.
    with atheris.instrument_imports(include=["engine"]):
        one = BUILDERS[target]()
    argv = [sys.argv[0], f"-max_total_time={seconds}", "-max_len=4096", "-print_final_stats=1"]
    if corpus:
        os.makedirs(corpus, exist_ok=True)
        argv.append(corpus)
    atheris.Setup(argv, one)
    atheris.Fuzz()


def run_all(seconds: float, targets: list[str] | None = None, corpus_root: str | None = None) -> dict[str, int]:
    """Fuzz each target in a child process for its share of ``seconds``; returns
    {target: exit status} (0: no difference and no crash found)."""
    chosen = targets or sorted(TARGETS)
    share = max(1, int(seconds / len(chosen)))
    statuses = {}
    for target in chosen:
        cmd = [sys.executable, "-m", "stress.fuzz", "--target", target, "--seconds", str(share)]
        if corpus_root:
            cmd += ["--corpus", os.path.join(corpus_root, target)]
        statuses[target] = subprocess.run(cmd, timeout=share + 120).returncode
    return statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default=None, help="one target (default: all, in turn)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget (all targets together)")
    parser.add_argument("--corpus", default=None, metavar="DIR", help="keep the inputs found (a directory per target)")
    args = parser.parse_args(argv)
    if args.target is None:
        statuses = run_all(args.seconds, corpus_root=args.corpus)
        for target, status in statuses.items():
            print(f"fuzz {target}: {'ok' if status == 0 else f'FAILED (exit {status})'}")
        return 0 if all(s == 0 for s in statuses.values()) else 1
    run_one(args.target, int(args.seconds), args.corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
