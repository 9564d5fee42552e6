"""Helpers shared by the append-log tests."""

from __future__ import annotations

import os


def segment_file_bytes(directory: str) -> dict[str, bytes]:
    """Every segment file (``.log``, ``.idx``, ``.crc``) of a log directory, by name:
    what two logs are compared by when they must be byte-identical."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".log", ".idx", ".crc")):
            with open(os.path.join(directory, name), "rb") as fh:
                out[name] = fh.read()
    return out
