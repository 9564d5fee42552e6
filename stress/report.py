"""Turn the JSON of a stress run (``python -m stress --json PATH``) into Markdown.

    python -m stress.report PATH

prints the per-store figures table and the damage breakdown used in
``docs/reliability.md``, so that the figures there are copied from a run, not typed.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def markdown(run: dict[str, Any]) -> str:
    lines = [
        "| store | workloads | crash states checked (exhaustive / sampled workloads) | processes killed "
        "(at crash points) | reader processes (consistent passes) | fault runs / faults injected | real ENOSPC "
        "| damaged files | violations |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in run["stores"]:
        lines.append(
            f"| {t['store']} | {t['workloads']} | {t['crash_states']} ({t['sim_exhaustive']} / {t['sim_sampled']}) "
            f"| {t['kills']} ({t['crashpoints']}) | {t['reader_procs']} ({t['reader_passes']}) "
            f"| {t['fault_runs']} / {t['faults']} | {t['real_enospc']} | {t['damaged']} | {t['violations']} |"
        )
    lines.append("")
    lines.append("| store | damage outcomes | silent (kind: count) |")
    lines.append("|---|---|---|")
    for t in run["stores"]:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(t["damage_outcomes"].items()))
        silent = ", ".join(f"{k} {v}" for k, v in sorted(t["undetected"].items())) or "none"
        lines.append(f"| {t['store']} | {outcomes} | {silent} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        run = json.load(f)
    print(f"Seed {run['seed']}, attacks {', '.join(run['attacks'])}.\n")
    print(markdown(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
