"""docs/benchmarks.md is generated from benchmarks/results: the page must be what
``python -m benchmarks.collect`` writes, so a note edited in the page alone (and lost at
the next run) fails here."""

from __future__ import annotations

from benchmarks import collect


def test_page_is_generated() -> None:
    with open(collect.OUT, encoding="utf-8") as f:
        page = f.read()
    assert page == collect.render(), (
        "docs/benchmarks.md differs from what benchmarks/results gives: put the text in "
        "benchmarks/results/<runner>.md and run `python3 -m benchmarks.collect`")


def test_fenced_code_keeps_its_comments() -> None:
    body = "# Title\n\n```\n# a shell comment\n```\n## Part"
    assert collect.demote(body) == "## Title\n\n```\n# a shell comment\n```\n### Part"
