"""``engine kv get|put|delete|scan|stats|backup|compact``.

Keys and values are given as text (UTF-8) or, with ``--hex``, as hex; output
shows them as text when they decode, else as hex (``--json``: objects with
``key``/``value`` as text and ``key_hex``/``value_hex``).  Reads (get, scan,
stats) open the store read-only, so they work beside a running writer; writes
(put, delete, compact) open it for writing (LockedError while another writer
has it).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.fs import default_fs
from engine.kv.api import TreeAPI
from engine.kv.reader import KVReader
from engine.kv.store import KV


def _arg_bytes(text: str, as_hex: bool) -> bytes:
    return bytes.fromhex(text) if as_hex else text.encode()


def _show(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "0x" + data.hex()


def _pair(key: bytes, value: bytes) -> dict[str, str]:
    return {"key": _show(key), "value": _show(value), "key_hex": key.hex(), "value_hex": value.hex()}


def _tree(handle: Any, name: str | None) -> TreeAPI:
    return handle if name is None else handle.tree(name)


def _emit(args: argparse.Namespace, obj: object, text: str) -> None:
    print(json.dumps(obj, sort_keys=True) if args.json else text)


def _cmd_get(args: argparse.Namespace) -> int:
    key = _arg_bytes(args.key, args.hex)
    with KVReader.open(args.path, fs=default_fs()) as kv:
        value = _tree(kv, args.tree).get(key)
    if value is None:
        _emit(args, {"key": _show(key), "found": False}, f"{_show(key)}: not found")
        return 1
    _emit(args, {**_pair(key, value), "found": True}, _show(value))
    return 0


def _cmd_put(args: argparse.Namespace) -> int:
    key, value = _arg_bytes(args.key, args.hex), _arg_bytes(args.value, args.hex)
    with KV.open(args.path, create=not args.no_create, fs=default_fs()) as kv:
        _tree(kv, args.tree)[key] = value
        txid = kv.txid
    text = f"stored {len(value)} bytes under {_show(key)}"
    _emit(args, {"key": _show(key), "stored": len(value), "txid": txid}, text)
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    key = _arg_bytes(args.key, args.hex)
    with KV.open(args.path, create=False, fs=default_fs()) as kv:
        tree = kv if args.tree is None else kv.tree(args.tree, create=False)
        found = tree.delete(key)
    _emit(args, {"key": _show(key), "deleted": found}, f"{_show(key)}: {'deleted' if found else 'not found'}")
    return 0 if found else 1


def _cmd_scan(args: argparse.Namespace) -> int:
    as_bytes = lambda s: None if s is None else _arg_bytes(s, args.hex)  # noqa: E731
    with KVReader.open(args.path, fs=default_fs()) as kv:
        tree = _tree(kv, args.tree)
        if args.prefix is not None:
            rows = tree.prefix(_arg_bytes(args.prefix, args.hex), reverse=args.reverse)
        else:
            rows = tree.items(as_bytes(args.start), as_bytes(args.stop), reverse=args.reverse)
        for n, (key, value) in enumerate(rows):
            if args.limit is not None and n >= args.limit:
                break
            _emit(args, _pair(key, value), f"{_show(key)}\t{_show(value)}")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with KVReader.open(args.path, fs=default_fs()) as kv:
        stats = kv.stats()
    if args.json:
        print(json.dumps(stats, sort_keys=True))
    else:
        for name, value in stats.items():
            print(f"{name}: {value}")
    return 0


def _cmd_backup(args: argparse.Namespace) -> int:
    with KVReader.open(args.path, fs=default_fs()) as kv:
        size = kv.backup(args.dest)
    _emit(args, {"path": args.path, "dest": args.dest, "bytes": size}, f"copied {size} bytes to {args.dest}")
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    with KV.open(args.path, create=False, fs=default_fs()) as kv:
        freed = kv.compact()
        pages = kv.pages.page_count
    _emit(args, {"path": args.path, "freed_bytes": freed, "pages": pages}, f"returned {freed} bytes; {pages} pages")
    return 0


def register(subparsers: Any) -> None:
    """Add ``engine kv get|put|delete|scan|stats|backup|compact``."""
    kv = subparsers.add_parser("kv", help="key-value store (B+trees on a page store) tools")
    sub = kv.add_subparsers(dest="kv_command", metavar="SUBCOMMAND")
    sub.required = True

    def command(name: str, help_text: str, func: Any, *, keyed: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("path", metavar="PATH")
        if keyed:
            p.add_argument("key", metavar="KEY")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--tree", metavar="NAME", help="a named tree instead of the default one")
        p.add_argument("--hex", action="store_true", help="keys and values given in hex")
        p.set_defaults(func=func)
        return p

    command("get", "print one key's value (exit 1 if missing)", _cmd_get, keyed=True)
    put = command("put", "store a value (creates the store if missing)", _cmd_put, keyed=True)
    put.add_argument("value", metavar="VALUE")
    put.add_argument("--no-create", action="store_true", help="fail if the store does not exist")
    command("delete", "remove a key (exit 1 if missing)", _cmd_delete, keyed=True)
    scan = command("scan", "list keys and values in order", _cmd_scan)
    scan.add_argument("--start", help="first key (inclusive)")
    scan.add_argument("--stop", help="end key (exclusive)")
    scan.add_argument("--prefix", help="only keys starting with this")
    scan.add_argument("--reverse", action="store_true")
    scan.add_argument("--limit", type=int)
    command("stats", "pages, trees, key counts, commit counter", _cmd_stats)
    backup = command("backup", "a consistent copy at one commit (beside a live writer)", _cmd_backup)
    backup.add_argument("dest", metavar="DEST")
    command("compact", "return free pages to the file system", _cmd_compact)


__all__ = ["register"]
