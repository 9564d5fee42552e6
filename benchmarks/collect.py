"""Regenerate ``docs/benchmarks.md`` from ``benchmarks/results/``.

``python -m benchmarks.collect`` reads each runner's JSON (the figures and the
targets it checked) and its notes (``<name>.md``: method, several runs, profiles),
and writes one page: a summary of every target, then each store's section.
"""

from __future__ import annotations

import json
import os

RESULTS = os.path.join(os.path.dirname(__file__), "results")
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks.md")
ORDER = (
    "queue", "queue_mp", "kestrel", "pagestore", "kv", "kv-200k",
    "streams", "applog", "append_ceiling", "events", "versions", "spark", "spark_cluster",
)

INTRO = """# Benchmarks

Each store has a runner, `python3 -m benchmarks.NAME` (`--quick` for a short run), that
measures engine and its peers **side by side in one run** on the same disk, prints a
table with ratios and writes `benchmarks/results/NAME.json`. Only the ratios carry
from machine to machine. The figures below were taken on the project's 2-core, 24 GiB
virtual machine while other jobs shared both cores and the disk, so single runs swing;
each store's section says how many runs it took and how far they spread.
This page is generated: `python3 -m benchmarks.collect`.

Each store's runner also has **floor** rows (issue 19): a small C program
(`benchmarks/floor/`, built by the runner with `cc -O2`, cached by source hash) that
does exactly the I/O the store's format requires for the same work -- the same bytes
written, the same syncs, in the same order -- and nothing else. It is the format's
physical limit on this machine; the runner runs it paired and alternating with the
engine and checks that both wrote the same bytes (the kernel's own count, from
`/proc/self/io`). "against ... (median of N paired rounds)" marks a target checked on
the median of per-round ratios rather than on the rows' values.

## Targets at a glance (latest recorded run)

| store | measure | against | ratio | target | met |
|---|---|---|---:|---:|:-:|
"""


def demote(body: str) -> str:
    """The notes' headings one level down, so they nest under the page's; lines in
    fenced code blocks (shell comments, say) are left as written."""
    out, fenced = [], False
    for line in body.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(out)


def render() -> str:
    """The page: the targets of every runner's JSON, then each runner's notes."""
    lines = [INTRO]
    sections = []
    for name in ORDER:
        json_path = os.path.join(RESULTS, f"{name}.json")
        md_path = os.path.join(RESULTS, f"{name}.md")
        if os.path.exists(json_path):
            with open(json_path, encoding="utf-8") as f:
                data = json.load(f)
            for t in data.get("targets", []):
                met = "yes" if t["met"] else "**no**"
                sign = "<= " if t.get("op") == "<=" else ""
                how = f" ({t['how']})" if t.get("how") else ""
                lines.append(
                    f"| {name} | {t['measure']} | {t['against']}{how} | {t['ratio']:.2f}x "
                    f"| {sign}{t['target']:.2g}x | {met} |\n"
                )
        if os.path.exists(md_path):
            with open(md_path, encoding="utf-8") as f:
                body = f.read().strip()
            sections.append(demote(body))
    lines.append("\n")
    lines.append("\n\n".join(sections))
    lines.append("\n")
    return "".join(lines)


def main() -> None:
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(render())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
