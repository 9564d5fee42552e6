"""The dict-like interface every key-value handle shares (store, transaction,
named tree, reader, snapshot), over a small backend protocol.

A handle is a :class:`TreeAPI` bound to a backend and a tree name; the backend
(``KV``, ``KVTransaction``, ``KVReader``) does the work under its own locks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from operator import itemgetter
from typing import Any, Protocol, overload

from engine.errors import ClosedError, ConfigError
from engine.kv.coding import PLAIN, Coding
from engine.kv.node import MAX_VALUE

#: A scan pair's key and value (C calls, for the views' iterators).
_KEY = itemgetter(0)
_VALUE = itemgetter(1)

#: The tree ``kv[key]`` uses; ``kv.tree(name)`` names others.
DEFAULT_TREE = b""
_MISSING = object()


class Backend(Protocol):
    """What a :class:`TreeAPI` needs of the object doing the work."""

    max_key: int

    def tree_get(self, name: bytes, key: bytes) -> bytes | None: ...

    def tree_count(self, name: bytes) -> int: ...

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> None: ...

    def tree_delete(self, name: bytes, key: bytes) -> bool: ...

    def tree_clear(self, name: bytes) -> None: ...

    def tree_put_many(self, name: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> None: ...


class EndedBackend:
    """The backend of a transaction's own tree API once the transaction is over:
    every call raises the ClosedError the transaction itself would.

    A transaction is the backend of its own default tree (``tx[key]``), so
    while bound to itself it is a reference cycle that only the garbage
    collector frees: with one transaction per durable put, those collections
    cost a fifth of the commit's CPU.  Rebinding to this at the end breaks the
    cycle, so reference counting frees the transaction at once.
    """

    def __init__(self, max_key: int, message: str) -> None:
        self.max_key = max_key
        self._message = message

    def _closed(self) -> ClosedError:
        return ClosedError(self._message)

    def tree_get(self, name: bytes, key: bytes) -> bytes | None:
        raise self._closed()

    def tree_count(self, name: bytes) -> int:
        raise self._closed()

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        raise self._closed()

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> None:
        raise self._closed()

    def tree_delete(self, name: bytes, key: bytes) -> bool:
        raise self._closed()

    def tree_clear(self, name: bytes) -> None:
        raise self._closed()

    def tree_put_many(self, name: bytes, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        raise self._closed()


def as_bytes(value: object, what: str, *, serializers: bool = False) -> bytes:
    """``value`` as ``bytes`` (bytes, bytearray and memoryview accepted); a
    TypeError naming ``what`` otherwise, which tells a ``str`` to be encoded (and,
    for values, ``serializers``, that the store can take ``serializer=``; for keys,
    that it can take ``keys="str"``)."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if what in ("key", "start", "stop", "prefix"):
        hint = ', or open the store with keys="str"'
    elif serializers:
        hint = ', or open the store with serializer="json" or serializer="pickle"'
    else:
        hint = ""
    if isinstance(value, str):
        raise TypeError(
            f"{what} must be bytes, not str: encode it ({what}.encode(), or b{value[:20]!r} for a literal){hint}"
        )
    raise TypeError(f"{what} must be bytes (or bytearray, memoryview), not {type(value).__name__}{hint}")


def tree_name(name: str | bytes) -> bytes:
    """A tree name as stored (str names in UTF-8; surrogates from :func:`tree_label`
    back to the bytes they stand for)."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else as_bytes(name, "name")
    if len(raw) > 255:
        raise ConfigError(f"a tree name is at most 255 bytes, not {len(raw)} ({name!r})")
    return raw


def tree_label(raw: bytes) -> str:
    """A stored tree name as ``str`` (what ``trees()`` and ``stats()`` show): UTF-8,
    a byte that is not kept as a surrogate so that ``tree(label)`` finds it again."""
    return raw.decode("utf-8", "surrogateescape")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class TreeAPI(MutableMapping[Any, Any]):
    """One tree as a :class:`collections.abc.MutableMapping`: keys in bytewise order.

    Keys and values are bytes, or what the handle's :class:`~engine.kv.coding.Coding`
    makes of them (``KV.open(..., keys="str", serializer="json")``).  ``keys()``,
    ``values()`` and ``items()`` are live views, as a dict's; ``items(start, stop,
    reverse)`` and ``prefix(p)`` view a range.  A reader's handles raise
    ``ReadOnlyError`` on writes.
    """

    _backend: Backend
    _name: bytes
    _coding: Coding = PLAIN
    # Set by _bind: the longest key the hot paths pass through unencoded (-1 with a
    # key codec: every key goes through _key), and the serializer's two functions.
    _key_max: int = -1
    _dumps: Callable[[Any], bytes] | None = None
    _loads: Callable[[bytes], Any] | None = None

    def _bind(self, backend: Backend, name: bytes, coding: Coding) -> None:
        """Make this handle the tree ``name`` of ``backend``, coded by ``coding``."""
        self._backend = backend
        self._name = name
        self._coding = coding
        self._key_max = backend.max_key if coding.keys is None else -1
        self._dumps = None if coding.values is None else coding.values.dumps
        self._loads = None if coding.values is None else coding.values.loads

    @property
    def coding(self) -> Coding:
        """How this handle codes keys and values (see :mod:`engine.kv.coding`)."""
        return self._coding

    def _key(self, key: object, what: str = "key") -> bytes:
        codec = self._coding.keys
        raw = as_bytes(key, what) if codec is None else as_bytes(codec.encode(key), f"the key codec's {what}")
        if len(raw) > self._backend.max_key:
            raise ConfigError(
                f"a key is at most {self._backend.max_key} bytes with this store's page size, not {len(raw)}"
            )
        return raw

    def _value(self, value: object) -> bytes:
        dumps = self._dumps
        if dumps is not None:
            raw = as_bytes(dumps(value), "the serializer's output")
        else:
            raw = as_bytes(value, "value", serializers=True)
        if len(raw) > MAX_VALUE:
            raise ConfigError(f"a value is at most {MAX_VALUE} bytes, not {len(raw)}")
        return raw

    def _bound(self, key: object | None, what: str) -> bytes | None:
        return None if key is None else self._key(key, what)

    def _decoded(self, pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        """``pairs`` as the user's keys and values."""
        codec, loads = self._coding.keys, self._loads
        if codec is None and loads is None:
            return pairs
        kd = codec.decode if codec is not None else _same
        vd = loads if loads is not None else _same
        return ((kd(k), vd(v)) for k, v in pairs)

    def scan_stored(self, lo: bytes | None, hi: bytes | None, reverse: bool = False) -> Iterator[tuple[Any, Any]]:
        """(key, value), decoded, for stored keys ``lo <= key < hi`` (bounds as
        stored: encoded; None: open), in key order or ``reverse`` (the views' scan)."""
        return self._decoded(self._backend.tree_items(self._name, lo, hi, reverse))

    def count_stored(self, lo: bytes | None, hi: bytes | None) -> int:
        """How many stored keys ``lo <= key < hi`` (bounds as stored)."""
        if lo is None and hi is None:
            return len(self)
        return sum(1 for _ in self._backend.tree_items(self._name, lo, hi, False))

    def stored_key(self, key: object) -> bytes:
        """``key`` as stored (encoded by the key codec; TypeError / ConfigError as
        ``[]`` raises them)."""
        return self._key(key)

    def __getitem__(self, key: Any) -> Any:
        # the common case (a bytes key short enough, no key codec) without _key's call
        raw = key if type(key) is bytes and len(key) <= self._key_max else self._key(key)
        value = self._backend.tree_get(self._name, raw)
        if value is None:
            raise KeyError(key)
        loads = self._loads
        return value if loads is None else loads(value)

    def get(self, key: Any, default: Any = None) -> Any:
        raw = key if type(key) is bytes and len(key) <= self._key_max else self._key(key)
        value = self._backend.tree_get(self._name, raw)
        if value is None:
            return default
        loads = self._loads
        return value if loads is None else loads(value)

    def __contains__(self, key: object) -> bool:
        # (A key of the wrong type is a TypeError that says so, not False: a str
        # looked up in a store of bytes keys is a mistake, never an answer.)
        return self._backend.tree_get(self._name, self._key(key)) is not None

    def __len__(self) -> int:
        return self._backend.tree_count(self._name)

    def __iter__(self) -> Iterator[Any]:
        # map over the scan's pairs: no Python frame per key (the scan itself has none)
        keys = map(_KEY, self._backend.tree_items(self._name, None, None, False))
        codec = self._coding.keys
        return keys if codec is None else map(codec.decode, keys)

    def __reversed__(self) -> Iterator[Any]:
        return map(_KEY, self.scan_stored(None, None, True))

    def keys(self) -> KeysView[Any]:
        """The keys, in order: a live view (``len``, ``in``, iteration)."""
        return _Keys(self)

    def values(self) -> ValuesView[Any]:
        """The values, in key order: a live view."""
        return _Values(self)

    def items(self, start: Any = None, stop: Any = None, reverse: bool = False) -> ItemsView[Any, Any]:
        """(key, value) for ``start <= key < stop`` (either bound may be None), in
        key order or ``reverse``: a live view of that range (lazy)."""
        return _Items(self, self._bound(start, "start"), self._bound(stop, "stop"), reverse)

    def prefix(self, prefix: Any, reverse: bool = False) -> ItemsView[Any, Any]:
        """(key, value) for every key starting with ``prefix``: a view (lazy)."""
        p = self._key(prefix, "prefix") if prefix not in (b"", "") else b""
        return _Items(self, p or None, prefix_end(p) if p else None, reverse)

    def __setitem__(self, key: Any, value: Any) -> None:
        raw = value if type(value) is bytes and self._dumps is None and len(value) <= MAX_VALUE else self._value(value)
        # the common case (a bytes key short enough, no key codec) without _key's call
        raw_key = key if type(key) is bytes and len(key) <= self._key_max else self._key(key)
        self._backend.tree_put(self._name, raw_key, raw)

    def put(self, key: Any, value: Any) -> None:
        self[key] = value

    def __delitem__(self, key: Any) -> None:
        if not self._backend.tree_delete(self._name, self._key(key)):
            raise KeyError(key)

    def delete(self, key: Any) -> bool:
        """Remove ``key``; False if it was not there."""
        return self._backend.tree_delete(self._name, self._key(key))

    @overload
    def pop(self, key: Any) -> Any: ...

    @overload
    def pop(self, key: Any, default: Any) -> Any: ...

    def pop(self, key: Any, default: object = _MISSING) -> Any:
        """Remove ``key`` and return its value; ``default`` if it was not there,
        else KeyError (as ``dict.pop``)."""
        raw = self._key(key)
        value = self._backend.tree_get(self._name, raw)
        if value is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._backend.tree_delete(self._name, raw)
        loads = self._loads
        return value if loads is None else loads(value)

    def popitem(self) -> tuple[Any, Any]:
        """Remove and return the first (smallest key's) item; KeyError when empty.
        (A dict pops its newest item: a tree has no insertion order, so the first.)"""
        for raw, value in self._backend.tree_items(self._name, None, None, False):
            self._backend.tree_delete(self._name, raw)
            codec, loads = self._coding.keys, self._loads
            return (raw if codec is None else codec.decode(raw)), (value if loads is None else loads(value))
        raise KeyError("popitem(): the tree is empty")

    def clear(self) -> None:
        """Remove every key of this tree, in one transaction (one commit, not one
        per key as the mapping mixin's clear would) when called on the store or
        one of its trees."""
        self._backend.tree_clear(self._name)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """``self[key]`` if present, else store ``default`` and return it."""
        try:
            return self[key]
        except KeyError:
            self[key] = default
            return default

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Store every (key, value) of ``other`` (a mapping or pairs) and of
        ``kwargs`` (str keys: with ``keys="str"``): in one transaction (one
        commit, not one per key as the mapping mixin's update would) when called
        on the store or one of its trees; nothing of it if one pair fails."""
        self._backend.tree_put_many(self._name, self._encoded(other, kwargs))

    def _encoded(self, other: Any, kwargs: dict[str, Any]) -> Iterator[tuple[bytes, bytes]]:
        """``update``'s pairs as stored bytes, read from ``other`` as
        ``dict.update`` reads it (a mapping, anything with ``keys()`` and ``[]``,
        or pairs), lazily: the backend consumes them inside its transaction."""
        if isinstance(other, Mapping):
            pairs: Iterable[tuple[Any, Any]] = other.items()
        elif hasattr(other, "keys"):
            pairs = ((key, other[key]) for key in other.keys())  # noqa: SIM118 (what dict.update calls)
        else:
            pairs = other
        for key, value in itertools.chain(pairs, kwargs.items()):
            yield self._key(key), self._value(value)

    def __eq__(self, other: object) -> bool:
        """Equal to any mapping with the same items (``kv == dict(kv)``)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(key in other and other[key] == value for key, value in self.items())

    __hash__ = None  # type: ignore[assignment]  # (mutable, as a dict)


def _same(raw: bytes) -> bytes:
    return raw


class _Keys(KeysView[Any]):
    """``tree.keys()``: a live view; iteration is an ordered scan of the tree."""

    _mapping: TreeAPI

    def __iter__(self) -> Iterator[Any]:
        return iter(self._mapping)

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._mapping)


class _Values(ValuesView[Any]):
    """``tree.values()``: a live view, in key order."""

    _mapping: TreeAPI

    def __iter__(self) -> Iterator[Any]:
        return map(_VALUE, self._mapping.scan_stored(None, None, False))


class _Items(ItemsView[Any, Any]):
    """``tree.items(start, stop, reverse)``: a live view of a key range (the whole
    tree by default); iteration is one ordered scan."""

    _mapping: TreeAPI

    def __init__(self, tree: TreeAPI, lo: bytes | None, hi: bytes | None, reverse: bool) -> None:
        super().__init__(tree)
        self._lo, self._hi, self._reverse = lo, hi, reverse

    def _whole(self) -> bool:
        return self._lo is None and self._hi is None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._mapping.scan_stored(self._lo, self._hi, self._reverse)

    def __reversed__(self) -> Iterator[tuple[Any, Any]]:
        return self._mapping.scan_stored(self._lo, self._hi, not self._reverse)

    def __len__(self) -> int:
        return self._mapping.count_stored(self._lo, self._hi)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        key, value = item
        tree = self._mapping
        try:
            raw = tree.stored_key(key)
        except TypeError:
            return False
        if (self._lo is not None and raw < self._lo) or (self._hi is not None and raw >= self._hi):
            return False
        found = tree.get(key, _MISSING)
        return found is not _MISSING and found == value

    def __repr__(self) -> str:
        return f"<items of {self._mapping!r}{'' if self._whole() else f' from {self._lo!r} to {self._hi!r}'}>"


class TreeView(TreeAPI):
    """A named tree of a store, transaction or reader (``kv.tree("users")``)."""

    def __init__(self, backend: Backend, name: bytes, coding: Coding = PLAIN) -> None:
        self._bind(backend, name, coding)

    @property
    def name(self) -> bytes:
        return self._name

    def __repr__(self) -> str:
        return f"<kv tree {self._name!r} of {self._backend!r}>"
