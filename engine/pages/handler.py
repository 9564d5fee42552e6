"""``engine inspect`` / ``engine verify`` support for page stores and JRNL journals."""

from __future__ import annotations

from collections.abc import Mapping

from engine.formats import FormatHandler
from engine.pages import diagnose


def _sniff(path: str, head: bytes, is_dir: bool) -> bool:
    return not is_dir and diagnose.sniff_kind(head) is not None


def _summarize(path: str) -> Mapping[str, object]:
    return diagnose.summarize(path)


def _verify(path: str) -> list[str]:
    return diagnose.verify_files(path)


HANDLER = FormatHandler(
    name="pages",
    description="page store (ENGPAGES), its JRNL write-ahead log (seed 001) and page checksums",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
)
