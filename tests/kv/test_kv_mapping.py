"""The key-value store as a ``collections.abc`` mapping (issue 31).

``KV`` (and its transactions, named trees, readers and snapshots) pass CPython's
own mapping-protocol tests (``test.mapping_tests.BasicTestMappingProtocol``) with
``keys="str"`` and ``serializer="pickle"``, and the plain bytes store compares
equal to ``dict(kv)``, has ``setdefault``, ``popitem`` and ``clear``.
"""

from __future__ import annotations

import collections.abc as abc
import json
import tempfile
import unittest
from pathlib import Path
from typing import Any

import pytest

from engine import KV, ConfigError
from engine.kv.coding import Coding, KeyCodec

try:
    from test import mapping_tests
except ImportError:  # a Python built without its test package
    mapping_tests = None  # type: ignore[assignment]


def test_every_handle_is_a_mapping(tmp_path: Path) -> None:
    with KV.open(tmp_path / "m.kv") as kv:
        assert isinstance(kv, abc.MutableMapping)
        kv[b"a"] = b"1"
        assert isinstance(kv.tree("t"), abc.MutableMapping)
        with kv.transaction() as tx:
            assert isinstance(tx, abc.MutableMapping) and tx == {b"a": b"1"}
        with kv.snapshot() as snap:
            assert isinstance(snap, abc.Mapping) and snap == {b"a": b"1"}
    with KV.open_reader(tmp_path / "m.kv") as reader:
        assert isinstance(reader, abc.Mapping) and dict(reader) == {b"a": b"1"}


def test_dict_methods_on_bytes(tmp_path: Path) -> None:
    with KV.open(tmp_path / "d.kv") as kv:
        assert kv.setdefault(b"b", b"2") == b"2" and kv.setdefault(b"b", b"3") == b"2"
        kv.update({b"a": b"1"}, c=b"3") if False else kv.update({b"a": b"1", b"c": b"3"})
        assert kv == dict(kv) == {b"a": b"1", b"b": b"2", b"c": b"3"}
        assert kv != {b"a": b"1"} and kv != {b"a": b"1", b"b": b"2", b"c": b"4"}
        assert list(kv.keys()) == [b"a", b"b", b"c"] and len(kv.keys()) == 3 and b"b" in kv.keys()  # noqa: SIM118 (the view's in)
        assert list(kv.values()) == [b"1", b"2", b"3"] and b"2" in kv.values()
        assert (b"a", b"1") in kv.items() and (b"a", b"2") not in kv.items()
        assert len(kv.items(b"b")) == 2 and list(kv.items(b"b", reverse=True)) == [(b"c", b"3"), (b"b", b"2")]
        assert list(reversed(kv.keys())) == [b"c", b"b", b"a"]
        assert kv.popitem() == (b"a", b"1")  # the smallest key: a tree has no insertion order
        kv.clear()
        assert len(kv) == 0 and kv == {}
        with pytest.raises(KeyError, match="empty"):
            kv.popitem()


def test_str_keys_and_a_serializer(tmp_path: Path) -> None:
    with KV.open(tmp_path / "s.kv", keys="str", serializer="json") as kv:
        kv["été"] = {"n": 1}
        kv["apple"] = [1, 2]
        kv.tree("users")["ada"] = {"born": 1815}
        assert kv["été"] == {"n": 1} and list(kv) == ["apple", "été"]  # code point order
        assert dict(kv.items("b")) == {"été": {"n": 1}}
        assert kv.tree("users") == {"ada": {"born": 1815}}
        with pytest.raises(TypeError, match='key must be str with keys="str", not bytes'):
            kv[b"apple"]
        with kv.transaction() as tx:
            tx["pear"] = None
        with kv.snapshot() as snap:
            assert snap["pear"] is None and list(snap) == ["apple", "pear", "été"]
    # The file holds UTF-8 keys and JSON values: bytes handles see them as stored.
    with KV.open_reader(tmp_path / "s.kv") as raw:
        assert json.loads(raw["été".encode()]) == {"n": 1}
    with KV.open_reader(tmp_path / "s.kv", keys="str", serializer="json") as reader:
        assert reader["apple"] == [1, 2] and reader.coding.keys is not None


def test_a_custom_key_codec_keeps_its_order(tmp_path: Path) -> None:
    ints = (lambda n: (n + (1 << 63)).to_bytes(8, "big"), lambda b: int.from_bytes(b, "big") - (1 << 63))
    with KV.open(tmp_path / "i.kv", keys=ints, serializer="pickle") as kv:
        for n in (5, -3, 100, 0):
            kv[n] = n * 2
        assert list(kv) == [-3, 0, 5, 100] and dict(kv.items(0, 100)) == {0: 0, 5: 10}


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"keys": "int"}, ConfigError, 'keys must be "bytes", "str" or an (encode, decode) pair, not \'int\''),
        ({"keys": 5}, TypeError, 'keys must be "bytes", "str" or an (encode, decode) pair of functions, not 5'),
        ({"serializer": "yaml"}, ConfigError, "serializer must be one of 'pickle', 'json'"),
    ],
)
def test_wrong_coding_options_are_named(tmp_path: Path, options: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error) as info:
        KV.open(tmp_path / "w.kv", **options)
    assert words in str(info.value)
    assert not list(tmp_path.iterdir())  # refused before anything was created


def test_a_value_str_says_serializer(tmp_path: Path) -> None:
    with KV.open(tmp_path / "v.kv") as kv, pytest.raises(TypeError, match='serializer="json"'):
        kv[b"k"] = "text"
    with KV.open(tmp_path / "v.kv") as kv, pytest.raises(TypeError, match='keys="str"'):
        kv["k"] = b"v"


def test_coding_describes_itself() -> None:
    assert Coding.parse().describe() == "" and Coding.parse("str", "json").describe() == "keys=str serializer=json"
    assert isinstance(Coding.parse("str").keys, KeyCodec)


if mapping_tests is not None:

    class _Stores:
        """Fresh stores for CPython's mapping tests, closed after each test."""

        opened: list[Any]

        def setUp(self) -> None:
            self.opened = []
            self.dir = tempfile.TemporaryDirectory()

        def test_items(self) -> None:
            # CPython's test also asserts that items(None) is a TypeError: a dict's
            # items() takes no argument, ours takes a range, whose None is "no bound".
            d = self._empty_mapping()  # type: ignore[attr-defined]
            assert list(d.items()) == [] and list(d.items(None)) == []

        def tearDown(self) -> None:
            for handle in self.opened:
                handle.close()
            self.dir.cleanup()

        def _fresh(self) -> KV:
            kv = KV.open(Path(self.dir.name) / f"{len(self.opened)}.kv", keys="str", serializer="pickle")
            self.opened.append(kv)
            return kv

    class TestStoreMappingProtocol(_Stores, mapping_tests.BasicTestMappingProtocol):  # type: ignore[misc]
        """A ``KV`` with str keys and pickled values, as CPython tests a mapping."""

        def _empty_mapping(self) -> Any:
            return self._fresh()

    class TestTreeMappingProtocol(_Stores, mapping_tests.BasicTestMappingProtocol):  # type: ignore[misc]
        """A named tree of such a store."""

        def _empty_mapping(self) -> Any:
            return self._fresh().tree("t")


if __name__ == "__main__":
    unittest.main()


def test_clear_on_the_store_is_one_commit(tmp_path: Path) -> None:
    with KV.open(tmp_path / "c.kv") as kv:
        kv.update({b"%03d" % i: b"v" for i in range(100)})
        before = kv.commits
        kv.clear()
        assert len(kv) == 0 and kv.commits == before + 1


def test_clear_on_a_tree_is_one_commit(tmp_path: Path) -> None:
    """``kv.tree(name).clear()`` committed once per key (the tree view's clear
    deleted key by key through the store); now one transaction, as ``kv.clear()``."""
    with KV.open(tmp_path / "c.kv") as kv:
        users = kv.tree("users")
        with kv.transaction() as tx:
            tx.tree("users").update({b"%03d" % i: b"v" for i in range(100)})
        kv[b"kept"] = b"1"
        before = kv.commits
        users.clear()
        assert len(users) == 0 and kv.commits == before + 1
        assert dict(kv) == {b"kept": b"1"} and kv.tree("users", create=False) == {}
        with kv.transaction() as tx:  # inside a transaction: part of its one commit
            tx.tree("users")[b"a"] = b"1"
            tx.tree("users").clear()
            tx[b"b"] = b"2"
        assert kv.commits == before + 2 and len(users) == 0
    with KV.open_reader(tmp_path / "c.kv") as reader, pytest.raises(ConfigError, match="read-only"):
        reader.tree("users").clear()


def test_update_on_a_tree_is_one_commit_and_all_or_nothing(tmp_path: Path) -> None:
    """``kv.tree(name).update(...)`` committed once per key (the mapping mixin's
    update through the store); now one transaction, as ``kv.update``, and a pair
    that fails (a str value without a serializer) leaves none of the others."""
    with KV.open(tmp_path / "u.kv") as kv:
        users = kv.tree("users")
        before = kv.commits
        users.update({b"%03d" % i: b"v" for i in range(100)})
        assert len(users) == 100 and kv.commits == before + 1
        users.update([(b"x", b"1")])
        users.update((b"y", b"2") for _ in range(1))
        assert kv.commits == before + 3 and users[b"x"] == b"1" and users[b"y"] == b"2"
        with pytest.raises(TypeError):
            users.update([(b"z1", b"1"), (b"z2", "not bytes")])
        with pytest.raises(TypeError):
            kv.update([(b"z1", b"1"), (b"z2", "not bytes")])
        assert b"z1" not in users and b"z1" not in kv and kv.commits == before + 3
    with KV.open(tmp_path / "s.kv", keys="str") as kv:
        kv.update({"a": b"1"}, b=b"2")
        kv.tree("t").update(c=b"3")
        assert dict(kv) == {"a": b"1", "b": b"2"} and dict(kv.tree("t")) == {"c": b"3"}
    with KV.open_reader(tmp_path / "u.kv") as reader, pytest.raises(ConfigError, match="read-only"):
        reader.tree("users").update({b"a": b"1"})
