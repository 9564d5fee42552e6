"""``engine kv get|put|delete|scan|stats|backup|compact``.

Keys and values are given as text (UTF-8) or, with ``--hex``, as hex; output
shows them as text when they decode, else as ``0x`` and hex.  Every command
takes ``--json``: one JSON document (``scan``: one per key, JSON Lines), with
keys and values as text (null when not UTF-8) beside ``key_hex``/``value_hex``;
the keys are listed in ``docs/guide/kv.md`` and are stable.  A key that is not
there (``get``, ``delete``) is a "not found" answer: one line on stderr, exit 1.
Reads (get, scan, stats, backup) open the store read-only, so they work beside
a running writer; writes (put, delete, compact) open it for writing
(LockedError while another writer has it).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from engine.clireport import add_json_option, bytes_fields, human_size, print_json, show_bytes
from engine.errors import ConfigError
from engine.fs import default_fs
from engine.kv.api import TreeAPI
from engine.kv.reader import KVReader
from engine.kv.store import KV


def _arg_bytes(text: str, as_hex: bool, option: str) -> bytes:
    """A key or value as typed: UTF-8 text, or hex with ``--hex``."""
    if not as_hex:
        return text.encode()
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not hex (--hex takes keys and values as hex digits)") from None


def _pair(key: bytes, value: bytes) -> dict[str, str | None]:
    return bytes_fields("key", key) | bytes_fields("value", value)


class _NoSuchTree(Exception):
    """``--tree NAME`` names no tree of the store (reported, exit 1)."""


def _tree(handle: Any, args: argparse.Namespace, **options: bool) -> TreeAPI:
    """The tree ``--tree`` names (the default one without it); a missing one is a
    "not found" answer, except where ``put`` creates it."""
    if args.tree is None:
        return handle  # type: ignore[no-any-return]
    try:
        return handle.tree(args.tree, **options)  # type: ignore[no-any-return]
    except KeyError:
        print(f"engine kv {args.kv_command}: no tree {args.tree!r} in {args.path}", file=sys.stderr)
        raise _NoSuchTree from None


def _answering(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``func`` with a missing ``--tree`` answered by exit status 1."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except _NoSuchTree:
            return 1

    return run


def _not_found(args: argparse.Namespace, key: bytes) -> None:
    where = "" if args.tree is None else f" of tree {args.tree!r}"
    print(f"engine kv {args.kv_command}: no key {show_bytes(key)!r} in {args.path}{where}", file=sys.stderr)


def _cmd_get(args: argparse.Namespace) -> int:
    key = _arg_bytes(args.key, args.hex, "KEY")
    with KVReader.open(args.path, fs=default_fs()) as kv:
        value = _tree(kv, args).get(key)
    if value is None:
        if args.json:
            print_json({**bytes_fields("key", key), "found": False})
        _not_found(args, key)
        return 1
    if args.json:
        print_json({**_pair(key, value), "found": True})
    else:
        print(show_bytes(value))
    return 0


def _cmd_put(args: argparse.Namespace) -> int:
    key, value = _arg_bytes(args.key, args.hex, "KEY"), _arg_bytes(args.value, args.hex, "VALUE")
    with KV.open(args.path, create=not args.no_create, fs=default_fs()) as kv:
        _tree(kv, args)[key] = value
        txid = kv.txid
    if args.json:
        print_json({**bytes_fields("key", key), "value_bytes": len(value), "txid": txid})
    else:
        print(f"stored {human_size(len(value))} under {show_bytes(key)!r} (commit {txid})")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    key = _arg_bytes(args.key, args.hex, "KEY")
    with KV.open(args.path, create=False, fs=default_fs()) as kv:
        tree = _tree(kv, args, create=False)
        found = tree.delete(key)
    if args.json:
        print_json({**bytes_fields("key", key), "deleted": found})
    elif found:
        print(f"deleted {show_bytes(key)!r}")
    if not found:
        _not_found(args, key)
    return 0 if found else 1


def _cmd_scan(args: argparse.Namespace) -> int:
    def bound(text: str | None, option: str) -> bytes | None:
        return None if text is None else _arg_bytes(text, args.hex, option)

    with KVReader.open(args.path, fs=default_fs()) as kv:
        tree = _tree(kv, args)
        if args.prefix is not None:
            rows = tree.prefix(_arg_bytes(args.prefix, args.hex, "--prefix"), reverse=args.reverse)
        else:
            rows = tree.items(bound(args.start, "--start"), bound(args.stop, "--stop"), reverse=args.reverse)
        try:
            for n, (key, value) in enumerate(rows):
                if args.limit is not None and n >= args.limit:
                    break
                if args.json:
                    print_json(_pair(key, value))
                else:
                    print(f"{show_bytes(key)}\t{show_bytes(value)}")
        finally:
            close = getattr(rows, "close", None)  # an unfinished scan lets its snapshot go now
            if close is not None:
                close()
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with KVReader.open(args.path, fs=default_fs()) as kv:
        stats = kv.stats()
    if args.json:
        print_json(stats)
        return 0
    trees = stats.pop("trees")
    assert isinstance(trees, dict)
    for name, value in stats.items():
        text = human_size(value) if name in ("page_size", "store_bytes") and isinstance(value, int) else value
        print(f"{name.replace('_', ' ')}: {text}")
    for name, tree in trees.items():
        label = "default tree" if name == "" else f"tree {name!r}"
        print(f"{label}: {tree['keys']} keys, height {tree['height']}")
    return 0


def _cmd_backup(args: argparse.Namespace) -> int:
    with KVReader.open(args.path, fs=default_fs()) as kv:
        size = kv.backup(args.dest)
    if args.json:
        print_json({"path": args.path, "dest": args.dest, "bytes": size})
    else:
        print(f"copied {human_size(size)} to {args.dest}")
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    with KV.open(args.path, create=False, fs=default_fs()) as kv:
        freed = kv.compact()
        pages = kv.pages.page_count
        page_size = kv.page_size
    if args.json:
        print_json({"path": args.path, "freed_bytes": freed, "pages": pages})
    else:
        size = human_size(page_size)
        print(f"gave {human_size(freed)} back to the file system; the store has {pages} pages of {size}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine kv get|put|delete|scan|stats|backup|compact``."""
    kv = subparsers.add_parser("kv", help="key-value store (B+trees on a page store) tools")
    sub = kv.add_subparsers(dest="kv_command", metavar="SUBCOMMAND", help="what to do")
    sub.required = True

    def command(
        name: str, help_text: str, func: Any, *, keyed: bool = False, whole: bool = False
    ) -> argparse.ArgumentParser:
        """A subcommand; ``whole``: it works on the whole store (no --tree, no --hex)."""
        p = sub.add_parser(name, help=help_text)
        p.add_argument("path", metavar="PATH", help="the key-value store file")
        if keyed:
            p.add_argument("key", metavar="KEY", help="the key (UTF-8 text, or hex with --hex)")
        add_json_option(p)
        if whole:
            p.set_defaults(tree=None, hex=False)
        else:
            p.add_argument("--tree", metavar="NAME", help="a named tree instead of the default one")
            p.add_argument("--hex", action="store_true", help="keys, values and bounds are given in hex")
        p.set_defaults(func=_answering(func))
        return p

    command("get", "print one key's value (exit 1 if there is no such key)", _cmd_get, keyed=True)
    put = command("put", "store a value (creates the store if missing)", _cmd_put, keyed=True)
    put.add_argument("value", metavar="VALUE", help="the value (UTF-8 text, or hex with --hex)")
    put.add_argument("--no-create", action="store_true", help="fail if the store does not exist")
    command("delete", "remove a key (exit 1 if there is no such key)", _cmd_delete, keyed=True)
    scan = command("scan", "list keys and values in key order", _cmd_scan)
    scan.add_argument("--start", metavar="KEY", help="the first key to list (inclusive)")
    scan.add_argument("--stop", metavar="KEY", help="list keys below this one (exclusive)")
    scan.add_argument("--prefix", metavar="PREFIX", help="only keys starting with PREFIX")
    scan.add_argument("--reverse", action="store_true", help="in descending key order")
    scan.add_argument("--limit", type=int, metavar="COUNT", help="list at most COUNT keys")
    command("stats", "pages, file size, trees and key counts, commit counter", _cmd_stats, whole=True)
    backup = command("backup", "a consistent copy at one commit (beside a live writer)", _cmd_backup, whole=True)
    backup.add_argument("dest", metavar="DEST", help="where the copy goes (must not exist)")
    command("compact", "move live pages down and give the free ones back to the file system", _cmd_compact, whole=True)


__all__ = ["register"]
