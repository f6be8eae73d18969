"""Two runs side by side (archives or results directories): per cell old and new ms/step, % change, the packages and
images that changed, and whether the change is inside the run-to-run noise.

    python scripts/archive.py compare OLD NEW [--suite S] [--noise-floor PCT] [--out diff.csv]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

from kbench import cell
from kbench.archive import Run

# Changes smaller than this floor (or than twice the two runs' combined standard error) are marked as noise. One run
# per side cannot show run-to-run spread: on the 2-core CI machine repeats of one tiny cell differed by 2% to 7%
# (BERT predict), and by up to 40% (keras3-jax BERT fit). A verdict outside the band is a lead; repeat the cell.
NOISE_FLOOR_PCT = 10.0


def compare(old: Run, new: Run, noise_floor_pct: float = NOISE_FLOOR_PCT) -> pd.DataFrame:
    old_cells, new_cells = old.cells(), new.cells()
    rows = []
    for cell_id in list(dict.fromkeys([*old_cells, *new_cells])):
        a, b = old_cells.get(cell_id), new_cells.get(cell_id)
        row = {"cell": cell_id, "old ms": ms(a), "new ms": ms(b), "change %": None, "verdict": "",
               "packages changed": package_changes(a, b), "image changed": image_change(a, b)}
        if a is None or b is None:
            row["verdict"] = "only in new" if a is None else "only in old"
        elif a == b:
            row["verdict"] = "same record (not rerun)"
        elif row["old ms"] is None or row["new ms"] is None:
            row["verdict"] = f"old {status(a)}, new {status(b)}"
        else:
            change = (row["new ms"] / row["old ms"] - 1) * 100
            band = noise_band_pct(a, b, noise_floor_pct)
            row["change %"] = round(change, 1)
            row["verdict"] = (f"within noise (±{band:.0f}%)" if abs(change) <= band
                              else "slower" if change > 0 else "faster")
        rows.append(row)
    return pd.DataFrame(rows)


def ms(result: cell.CellResult | None) -> float | None:
    return round(result.mean_ms, 2) if result and result.mean_ms is not None else None


def status(result: cell.CellResult) -> str:
    if result.status == "ok":
        return "ok"
    return f"{result.status}: {(result.error or {}).get('type')}"


def noise_band_pct(a: cell.CellResult, b: cell.CellResult, floor: float) -> float:
    """Twice the combined standard error of the two means, as % of the old mean, and never below the run-to-run
    floor, which one run's step spread cannot show. The spread is robust (median absolute deviation of the per-step
    times): the last step of an async window carries the drain of all queued work and would swamp a stdev."""
    def se(timing):
        steps = timing["step_ms"]
        median = statistics.median(steps)
        return 1.4826 * statistics.median(abs(x - median) for x in steps) / math.sqrt(len(steps))
    return max(floor, 200 * math.hypot(se(a.timing), se(b.timing)) / a.timing["mean_ms"])


def package_changes(a: cell.CellResult | None, b: cell.CellResult | None) -> str:
    if a is None or b is None:
        return ""
    old, new = a.provenance.get("packages") or {}, b.provenance.get("packages") or {}
    return ", ".join(f"{name} {old.get(name, '-')} -> {new.get(name, '-')}" for name in sorted({*old, *new})
                     if old.get(name) != new.get(name))


def image_change(a: cell.CellResult | None, b: cell.CellResult | None) -> str:
    if a is None or b is None:
        return ""
    old, new = [(r.provenance.get("environment") or {}).get("id") for r in (a, b)]
    return "" if old == new else f"{str(old)[:19]} -> {str(new)[:19]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--suite", help="for a results directory holding several suites (archives name their own)")
    parser.add_argument("--noise-floor", type=float, default=NOISE_FLOOR_PCT, help="percent (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    try:
        old, new = Run(args.old, args.suite), Run(args.new, args.suite)
    except ValueError as error:
        parser.error(str(error))
    table = compare(old, new, args.noise_floor)
    if args.out:
        table.to_csv(args.out, index=False)
    print(table.astype(object).where(table.notna(), "").to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
