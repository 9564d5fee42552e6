"""``engine kv ...`` through its own argument parser (the lead registers the
module in ``engine.cli``), plus the format handler for inspect/verify."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from engine.cli import main
from engine.fs import default_fs
from engine.kv import KV
from engine.kv.cli import register
from engine.kv.handler import HANDLER, is_kv_store
from engine.pages import PageStore


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="engine")
    register(parser.add_subparsers())
    args = parser.parse_args(["kv", *argv])
    code = args.func(args)
    return code, capsys.readouterr().out


def test_text_and_json_output(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    assert _run(capsys, "put", path, "hello", "world") == (0, "stored 5 B under 'hello' (commit 1)\n")
    code, out = _run(capsys, "put", path, "--json", "--hex", "00ff", "0102")
    assert json.loads(out) == {"key": None, "key_hex": "00ff", "value_bytes": 2, "txid": 2}
    assert main(["kv", "get", path, "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"engine kv get: no key 'nope' in {path}\n"
    assert main(["kv", "get", path, "nope", "--tree", "users"]) == 1
    assert capsys.readouterr().err == f"engine kv get: no tree 'users' in {path}\n"
    assert main(["kv", "put", path, "--tree", "users", "a", "1"]) == 0
    assert main(["kv", "get", path, "nope", "--tree", "users"]) == 1
    assert capsys.readouterr().err == f"engine kv get: no key 'nope' in {path} of tree 'users'\n"
    assert main(["kv", "delete", path, "x", "--tree", "other"]) == 1
    assert main(["kv", "scan", path, "--tree", "other"]) == 1
    assert capsys.readouterr().err.count("no tree 'other'") == 2
    code, out = _run(capsys, "get", path, "nope", "--json")
    assert code == 1 and json.loads(out) == {"key": "nope", "key_hex": "6e6f7065", "found": False}
    code, out = _run(capsys, "delete", path, "nope", "--json")
    assert code == 1 and json.loads(out)["deleted"] is False
    code, out = _run(capsys, "stats", path)
    assert "page size: 4 KiB (4096 bytes)" in out and "default tree: 2 keys, height 1" in out and "keys: 3" in out
    code, out = _run(capsys, "stats", path, "--json")
    stats = json.loads(out)
    assert stats["keys"] == 3 and stats["txid"] == 4 and stats["store_bytes"] == stats["page_size"] * 4
    code, out = _run(capsys, "scan", path, "--limit", "1")  # an unfinished scan closes cleanly
    assert out == "0x00ff\t\x01\x02\n"
    code, out = _run(capsys, "compact", path)
    assert out == "gave 0 B back to the file system; the store has 3 pages of 4 KiB (4096 bytes)\n"
    dest = os.path.join(str(tmp_path), "copy.kv")
    code, out = _run(capsys, "backup", path, dest)
    assert out.startswith("copied 16 KiB (16384 bytes) to ")


def test_bad_hex_is_one_line_naming_the_argument(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    assert main(["kv", "put", path, "--hex", "zz", "00"]) == 2
    err = capsys.readouterr().err
    assert "KEY: 'zz' is not hex" in err and len(err.strip().splitlines()) == 1


def test_commands(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "s.kv")
    assert _run(capsys, "put", path, "hello", "world")[0] == 0
    assert _run(capsys, "put", path, "--tree", "users", "alice", "1")[0] == 0
    assert _run(capsys, "put", path, "--hex", "00ff", "0102")[0] == 0
    assert _run(capsys, "get", path, "hello") == (0, "world\n")
    code, out = _run(capsys, "get", path, "--json", "--hex", "00ff")
    assert code == 0 and json.loads(out)["value_hex"] == "0102"
    assert _run(capsys, "get", path, "nope")[0] == 1
    code, out = _run(capsys, "scan", path, "--json")
    assert [json.loads(line)["key_hex"] for line in out.splitlines()] == ["00ff", b"hello".hex()]
    assert _run(capsys, "scan", path, "--tree", "users") == (0, "alice\t1\n")
    code, out = _run(capsys, "scan", path, "--prefix", "hel", "--limit", "1")
    assert out == "hello\tworld\n"
    code, out = _run(capsys, "stats", path, "--json")
    assert json.loads(out)["trees"]["users"]["keys"] == 1
    dest = os.path.join(str(tmp_path), "copy.kv")
    assert _run(capsys, "backup", path, dest)[0] == 0
    assert _run(capsys, "delete", path, "hello")[0] == 0
    assert _run(capsys, "delete", path, "hello") == (1, "")
    code, out = _run(capsys, "compact", path, "--json")
    assert code == 0 and json.loads(out)["freed_bytes"] >= 0
    with KV.open_reader(dest) as copy:
        assert copy[b"hello"] == b"world"


def test_handler_tells_kv_from_pages(tmp_path: os.PathLike[str]) -> None:
    fs = default_fs()
    kv_path = os.path.join(str(tmp_path), "a.kv")
    pages_path = os.path.join(str(tmp_path), "b.db")
    with KV.open(kv_path) as kv:
        kv[b"k"] = b"v"
    with PageStore.open(pages_path) as store, store.transaction() as tx:
        tx.allocate()

    def head(p: str) -> bytes:
        with open(p, "rb") as f:
            return f.read(64)

    assert HANDLER.sniff(fs, kv_path, head(kv_path), False)
    assert not HANDLER.sniff(fs, pages_path, head(pages_path), False)
    assert not is_kv_store(fs, kv_path + "-journal", head(kv_path + "-journal"))
    summary = HANDLER.summarize(fs, kv_path)
    assert summary["kv trees"] == {"": {"keys": 1, "height": 1}}
    notes = HANDLER.verify(fs, kv_path)
    assert any("1 keys" in n for n in notes)


@pytest.mark.parametrize("sub", ["stats", "backup", "compact"])
def test_whole_store_commands_offer_no_tree_or_hex(sub: str) -> None:
    """Issue 31: ``--tree``/``--hex`` do nothing for a command on the whole store,
    so its ``--help`` does not offer them (and using one is a usage error)."""
    out = subprocess.run([sys.executable, "-m", "engine", "kv", sub, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--json" in out.stdout
    assert "--tree" not in out.stdout and "--hex" not in out.stdout
