"""The dict-like interface every key-value handle shares (store, transaction,
named tree, reader, snapshot), over a small backend protocol.

A handle is a :class:`TreeAPI` bound to a backend and a tree name; the backend
(``KV``, ``KVTransaction``, ``KVReader``) does the work under its own locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol, TypeVar, overload

from engine.errors import ConfigError
from engine.kv.node import MAX_VALUE

#: The tree ``kv[key]`` uses; ``kv.tree(name)`` names others.
DEFAULT_TREE = b""
_MISSING = object()
_T = TypeVar("_T")


class Backend(Protocol):
    """What a :class:`TreeAPI` needs of the object doing the work: public
    ``tree_*`` methods, since handles (views, stores) call them on other objects."""

    max_key: int

    def tree_get(self, name: bytes, key: bytes) -> bytes | None: ...

    def tree_count(self, name: bytes) -> int: ...

    def tree_items(
        self, name: bytes, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def tree_put(self, name: bytes, key: bytes, value: bytes) -> None: ...

    def tree_delete(self, name: bytes, key: bytes) -> bool: ...


def as_bytes(value: object, what: str) -> bytes:
    """``value`` as ``bytes`` (bytes, bytearray and memoryview accepted); a
    TypeError naming ``what`` otherwise, which tells a ``str`` to be encoded."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        raise TypeError(
            f"{what} must be bytes, not str: encode it ({what}.encode(), or b{value[:20]!r} for a literal)"
        )
    raise TypeError(f"{what} must be bytes (or bytearray, memoryview), not {type(value).__name__}")


def tree_name(name: str | bytes) -> bytes:
    """A tree name as stored (str names in UTF-8)."""
    raw = name.encode() if isinstance(name, str) else as_bytes(name, "name")
    if len(raw) > 255:
        raise ConfigError(f"a tree name is at most 255 bytes, not {len(raw)} ({name!r})")
    return raw


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class TreeAPI:
    """Dict-like access to one tree: bytes keys in bytewise order, bytes values."""

    _backend: Backend
    _name: bytes

    def _key(self, key: object) -> bytes:
        raw = as_bytes(key, "key")
        if len(raw) > self._backend.max_key:
            raise ConfigError(
                f"a key is at most {self._backend.max_key} bytes with this store's page size, not {len(raw)}"
            )
        return raw

    def __getitem__(self, key: bytes) -> bytes:
        backend = self._backend
        # the common case (a bytes key short enough) without _key's call
        raw = key if type(key) is bytes and len(key) <= backend.max_key else self._key(key)
        value = backend.tree_get(self._name, raw)
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        backend = self._backend
        raw = key if type(key) is bytes and len(key) <= backend.max_key else self._key(key)
        value = backend.tree_get(self._name, raw)
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return self._backend.tree_get(self._name, self._key(key)) is not None

    def __len__(self) -> int:
        return self._backend.tree_count(self._name)

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self._backend.tree_items(self._name, None, None, False))

    def keys(self) -> Iterator[bytes]:
        return iter(self)

    def values(self) -> Iterator[bytes]:
        return (v for _, v in self._backend.tree_items(self._name, None, None, False))

    def items(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) for ``start <= key < stop`` (either bound may be None), in
        key order or ``reverse``; lazy."""
        lo = None if start is None else as_bytes(start, "start")
        hi = None if stop is None else as_bytes(stop, "stop")
        return self._backend.tree_items(self._name, lo, hi, reverse)

    def prefix(self, prefix: bytes, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) for every key starting with ``prefix``; lazy."""
        p = as_bytes(prefix, "prefix")
        return self._backend.tree_items(self._name, p or None, prefix_end(p) if p else None, reverse)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        backend = self._backend
        raw = value if type(value) is bytes else as_bytes(value, "value")
        if len(raw) > MAX_VALUE:
            raise ConfigError(f"a value is at most {MAX_VALUE} bytes, not {len(raw)}")
        # the common case (a bytes key short enough) without _key's call
        backend.tree_put(self._name, key if type(key) is bytes and len(key) <= backend.max_key else self._key(key), raw)

    def put(self, key: bytes, value: bytes) -> None:
        self[key] = value

    def __delitem__(self, key: bytes) -> None:
        if not self._backend.tree_delete(self._name, self._key(key)):
            raise KeyError(key)

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False if it was not there."""
        return self._backend.tree_delete(self._name, self._key(key))

    @overload
    def pop(self, key: bytes) -> bytes: ...

    @overload
    def pop(self, key: bytes, default: _T) -> bytes | _T: ...

    def pop(self, key: bytes, default: object = _MISSING) -> object:
        """Remove ``key`` and return its value; ``default`` if it was not there,
        else KeyError (as ``dict.pop``)."""
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self.delete(key)
        return value

    def update(self, pairs: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]] = ()) -> None:
        """Store every (key, value) of ``pairs`` (in one transaction when called on
        the store: see ``KV.update``)."""
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        for key, value in items:
            self[key] = value


class TreeView(TreeAPI):
    """A named tree of a store, transaction or reader (``kv.tree("users")``)."""

    def __init__(self, backend: Backend, name: bytes) -> None:
        self._backend = backend
        self._name = name

    @property
    def name(self) -> bytes:
        return self._name

    def __repr__(self) -> str:
        return f"<kv tree {self._name!r} of {self._backend!r}>"
