"""``engine inspect`` / ``engine verify`` support for page stores and JRNL journals."""

from __future__ import annotations

from collections.abc import Mapping

from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.pages import diagnose


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    return not is_dir and diagnose.sniff_kind(head) is not None


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    return diagnose.summarize(fs, path)


def _verify(fs: FileSystem, path: str) -> list[str]:
    return diagnose.verify_files(fs, path)


HANDLER = FormatHandler(
    name="pages",
    description="page store (ENGPAGES), its JRNL write-ahead log and page checksums (ENGSUMS)",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
    stats=diagnose.file_stats,
)
