"""CRC-32C (Castagnoli), the checksum of JRNL commits and of ENGSUMS2 page sums.

The algorithm is fixed by the formats, never by what is installed: the values
come from ``google-crc32c`` when it can be imported (hardware CRC in its C
build), else from :func:`extend_pure`, a table-driven pure-Python CRC-32C that
gives the same values (``tests/pages/test_pages_codec.py`` compares the two).
Pure bytes in, integers out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from types import ModuleType

#: The reflected Castagnoli polynomial.
POLY = 0x82F63B78


def _table() -> tuple[int, ...]:
    out = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
        out.append(crc)
    return tuple(out)


_TABLE = _table()
assert len(_TABLE) == 256 and _TABLE[1] == 0xF26B8303


def extend_pure(crc: int, data: bytes | bytearray | memoryview) -> int:
    """``crc`` (the CRC-32C of what came before) extended over ``data``: the
    reference implementation, one table lookup per byte."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _load_google() -> ModuleType | None:
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - installed with engine; the fallback is tested directly
        return None
    return google_crc32c


_GOOGLE = _load_google()
#: Where the values come from: "google-crc32c (c)", "google-crc32c (python)" or "pure".
IMPLEMENTATION = f"google-crc32c ({_GOOGLE.implementation})" if _GOOGLE is not None else "pure"


if _GOOGLE is not None:
    _extend = _GOOGLE.extend
    _value = _GOOGLE.value

    def extend(crc: int, data: bytes | bytearray | memoryview) -> int:
        """``crc`` extended over ``data`` (google-crc32c reads only ``bytes``)."""
        return _extend(crc, data if type(data) is bytes else bytes(data))  # type: ignore[no-any-return]

    def extend_all(crc: int, pieces: Iterable[bytes]) -> int:
        """``crc`` extended over each of ``pieces`` (``bytes``) in turn (the loop runs in C)."""
        return functools.reduce(_extend, pieces, crc)  # type: ignore[no-any-return]

    def value(data: bytes | bytearray | memoryview) -> int:
        """The CRC-32C of ``data``."""
        return _value(data if type(data) is bytes else bytes(data))  # type: ignore[no-any-return]

    #: :func:`extend` and :func:`value` of ``bytes`` only, the C functions themselves
    #: (no Python frame): for hot paths that hold ``bytes`` (a reader's meta page).
    extend_bytes: Callable[[int, bytes], int] = _extend
    value_bytes: Callable[[bytes], int] = _value

else:  # pragma: no cover - exercised by the parity tests through extend_pure
    extend = extend_pure

    def extend_all(crc: int, pieces: Iterable[bytes]) -> int:
        """``crc`` extended over each of ``pieces`` in turn."""
        return functools.reduce(extend_pure, pieces, crc)

    def value(data: bytes | bytearray | memoryview) -> int:
        """The CRC-32C of ``data``."""
        return extend_pure(0, data)

    extend_bytes = extend_pure
    value_bytes = value
