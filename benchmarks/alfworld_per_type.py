"""Per-task-type success (95% Wilson intervals) of `deciplane evaluate --json` reports on
deciplane/ALFWorld-v0, side by side (e.g. before and after training).

    python benchmarks/alfworld_per_type.py before.json after.json
"""

from __future__ import annotations

import json
import sys

from deciplane.envs.alfworld.results import per_task_type_report


def main(paths: list[str]) -> None:
    reports = [(p, per_task_type_report(json.loads(open(p).read()))) for p in paths]
    types = [t for t in reports[0][1]]
    print("| task type | " + " | ".join(p for p, _ in reports) + " |")
    print("|---|" + "---|" * len(reports))
    for t in types:
        cells = []
        for _, r in reports:
            x = r.get(t)
            cells.append("-" if x is None else
                         f"{x['won']}/{x['episodes']} ({x['success_rate']:.0%}, "
                         f"95% CI {x['ci95'][0]:.2f}-{x['ci95'][1]:.2f})")
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
