"""What the docs count and list matches the code (issue 31): docs/index.md said
"five formats" where seven are recognised, and the pipeline's table of Spark
sources left out ``engine-kv``."""

from __future__ import annotations

import re
from pathlib import Path

import engine
from engine.detection import handlers
from engine.spark.jvmbuild import REGISTERED_NAMES

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def test_index_counts_the_formats_inspect_recognises() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    said = re.search(r"any of the (\w+) formats", index)
    assert said is not None, "docs/index.md no longer says how many formats `engine inspect` recognises"
    assert WORDS.get(said.group(1)) == len(handlers()), (said.group(0), [h.name for h in handlers()])


def test_index_counts_and_lists_the_stores() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    said = re.search(r"It offers (\w+) stores", index)
    assert said is not None
    stores = re.findall(r"^\| [^|]+ \| `engine\.(\w+)` \|", index, flags=re.M)
    assert WORDS.get(said.group(1)) == len(stores) == 6, (said.group(0), stores)
    assert {"Queue", "PageStore", "StreamJournal", "EventJournal", "KV", "AppendLog"} == set(stores)
    assert all(hasattr(engine, name) for name in stores)


def test_the_pipeline_doc_lists_every_spark_source() -> None:
    text = (ROOT / "docs" / "pipeline.md").read_text()
    table = text[: text.index("\n\n", text.index("| short name"))]
    listed = re.findall(r"^\| `(engine-[\w-]+)`", table, flags=re.M)
    # the JVM connector's short names, in its registry's order (registry.available_sources)
    assert listed == list(REGISTERED_NAMES)
