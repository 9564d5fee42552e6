"""How a key-value handle turns the user's keys and values into stored bytes.

A store holds bytes keys (in bytewise order) and bytes values.  ``KV.open(path,
keys="str", serializer="json")`` asks for ``str`` keys (stored as UTF-8, whose
bytewise order is the code points' order, so ranges and ordered scans mean what
they say) and values through a serializer (the same ``serializer=`` every store
takes: ``engine.conventions.serializer``).  The choice belongs to the handle, not
the file: the file is the same either way, and a reader may open it with other
choices (bytes, say, to see what is stored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.conventions import Serializer
from engine.conventions import serializer as parse_serializer
from engine.errors import ConfigError


@dataclass(frozen=True)
class KeyCodec:
    """A key type: ``encode(key) -> bytes`` (order-preserving), ``decode(bytes)``."""

    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    name: str


def _encode_str(key: Any) -> bytes:
    if type(key) is not str:
        raise TypeError(f'key must be str with keys="str", not {type(key).__name__}')
    return key.encode()


def _decode_str(raw: bytes) -> str:
    return raw.decode()


#: The named key types ``keys=`` accepts ("bytes": no codec).
KEY_CODECS: dict[str, KeyCodec | None] = {
    "bytes": None,
    "str": KeyCodec(_encode_str, _decode_str, "str"),
}


def key_codec(value: object) -> KeyCodec | None:
    """Parse ``keys=``: ``"bytes"`` (the default; or None), ``"str"``, a :class:`KeyCodec`
    or an ``(encode, decode)`` pair (``encode`` must keep the order ranges need)."""
    if value is None or isinstance(value, KeyCodec):
        return value
    if isinstance(value, str):
        if value not in KEY_CODECS:
            raise ConfigError(f'keys must be "bytes", "str" or an (encode, decode) pair, not {value!r}')
        return KEY_CODECS[value]
    if isinstance(value, tuple) and len(value) == 2 and all(callable(f) for f in value):
        return KeyCodec(value[0], value[1], getattr(value[0], "__qualname__", "custom"))
    raise TypeError(f'keys must be "bytes", "str" or an (encode, decode) pair of functions, not {value!r}')


@dataclass(frozen=True)
class Coding:
    """A handle's key type and value serializer (None, None: bytes and bytes)."""

    keys: KeyCodec | None = None
    values: Serializer | None = None

    @classmethod
    def parse(cls, keys: object = "bytes", serializer: object = None) -> Coding:
        """From ``KV.open``'s ``keys=`` and ``serializer=`` (errors name them)."""
        return cls(key_codec(keys), parse_serializer(serializer))

    def describe(self) -> str:
        """For ``repr``: ``""`` for bytes and bytes."""
        parts = []
        if self.keys is not None:
            parts.append(f"keys={self.keys.name}")
        if self.values is not None:
            parts.append(f"serializer={self.values.name}")
        return " ".join(parts)


#: Bytes keys, bytes values.
PLAIN = Coding()
