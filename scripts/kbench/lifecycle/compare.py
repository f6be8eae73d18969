"""Two runs side by side (archives or results directories): per cell old and new ms/step, % change, the packages and
images that changed, and whether the change is significant: Welch's t-test over both sides' repeat means, its
p-values adjusted over every cell tested in the comparison (Benjamini-Hochberg: among the changes reported at
q < 0.05, about 5% are expected to be false, however many cells a run has); with one repeat a side, a noise band that
is not a test. Direction, size and test all use the same statistic: the mean of the repeats' means.

    .venv/bin/kbench compare OLD NEW [--suite S] [--noise-floor PCT] [--out diff.csv]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

from kbench.contract import cell
from kbench.results import stats
from kbench.lifecycle.archive import Run
from kbench.files import BadFile, refuse

# Changes smaller than this floor (or than twice the two runs' combined standard error) are marked as noise. One run
# per side cannot show run-to-run spread: on the 2-core CI machine repeats of one tiny cell differed by 2% to 7%
# (BERT predict), and by up to 40% (keras3-jax BERT fit). A verdict outside the band is a lead; repeat the cell.
NOISE_FLOOR_PCT = 10.0


def compare(old: Run, new: Run, noise_floor_pct: float = NOISE_FLOOR_PCT) -> pd.DataFrame:
    """Per cell: old and new ms/step (the mean of each side's repeat means), % change, and a verdict. With 2 or more
    repeats on both sides the verdict is Welch's t-test on the repeat means, BH-adjusted over the tested cells
    ("faster"/"slower" at q < 0.05, else "no significant change"); with one repeat on a side it falls back to the
    noise band ("faster"/"slower" or "within noise (±N%)", not a test: rerun with repeats to know)."""
    return compare_cells(old.cells(), new.cells(), noise_floor_pct)


def compare_cells(old_cells: dict[str, list[cell.CellResult]], new_cells: dict[str, list[cell.CellResult]],
                  noise_floor_pct: float = NOISE_FLOOR_PCT) -> pd.DataFrame:
    """compare() on two runs' cells (cell_id -> repeats): also what kbench.lifecycle.history compares consecutive runs with."""
    rows, tested = [], []
    for cell_id in list(dict.fromkeys([*old_cells, *new_cells])):
        a, b = old_cells.get(cell_id), new_cells.get(cell_id)
        row = {"cell": cell_id, "old ms": ms(a), "new ms": ms(b), "repeats": repeats(a, b), "change %": None,
               "verdict": "", "significant": "", "packages changed": package_changes(a, b),
               "image changed": image_change(a, b)}
        rows.append(row)
        if a is None or b is None:
            row["verdict"] = "only in new" if a is None else "only in old"
        elif a == b:
            row["verdict"] = "same record (not rerun)"
        elif row["old ms"] is None or row["new ms"] is None:
            row["verdict"] = f"old {status(a)}, new {status(b)}"
        else:
            change = (row["new ms"] / row["old ms"] - 1) * 100
            row["change %"] = round(change, 1)
            if len(a) >= 2 and len(b) >= 2:
                tested.append((row, stats.welch_p([r.mean_ms for r in a], [r.mean_ms for r in b])))
            else:
                band = noise_band_pct(a[0], b[0], noise_floor_pct)
                row["significant"] = "untested (1 repeat)"
                row["verdict"] = f"within noise (±{band:.0f}%)" if abs(change) <= band else direction(change)
    for (row, p), q in zip(tested, stats.adjusted([p for _, p in tested])):
        found = q < stats.SIGNIFICANCE
        row["significant"] = f"{'yes' if found else 'no'} (Welch q={q:.3f}, p={p:.3f})"
        row["verdict"] = direction(row["change %"]) if found else "no significant change"
    for row in rows:
        row["old ms"], row["new ms"] = (None if v is None else round(v, 2) for v in (row["old ms"], row["new ms"]))
    return pd.DataFrame(rows)


def direction(change_pct: float) -> str:
    return "slower" if change_pct > 0 else "faster"


def ms(repeats: list[cell.CellResult] | None) -> float | None:
    """The side's ms/step: the mean of its repeats' means (kbench.results.stats' estimate), when every repeat is ok."""
    if not repeats or any(r.mean_ms is None for r in repeats):
        return None
    return statistics.fmean(r.mean_ms for r in repeats)


def repeats(a: list | None, b: list | None) -> str:
    return f"{len(a) if a else 0} / {len(b) if b else 0}"


def status(repeats: list[cell.CellResult]) -> str:
    bad = [r for r in repeats if r.status != "ok"]
    return "ok" if not bad else f"{bad[0].status}: {(bad[0].error or {}).get('type')}"


def noise_band_pct(a: cell.CellResult, b: cell.CellResult, floor: float) -> float:
    """Twice the combined standard error of the two means, as % of the old mean, and never below the run-to-run
    floor, which one run's step spread cannot show. The spread is robust (median absolute deviation of the per-step
    times): the last step of an async window carries the drain of all queued work and would swamp a stdev."""
    def se(timing):
        steps = timing["step_ms"]
        median = statistics.median(steps)
        return 1.4826 * statistics.median(abs(x - median) for x in steps) / math.sqrt(len(steps))
    return max(floor, 200 * math.hypot(se(a.timing), se(b.timing)) / a.timing["mean_ms"])


def package_changes(a: list[cell.CellResult] | None, b: list[cell.CellResult] | None) -> str:
    if a is None or b is None:
        return ""
    old, new = a[0].provenance.get("packages") or {}, b[0].provenance.get("packages") or {}
    return ", ".join(f"{name} {old.get(name, '-')} -> {new.get(name, '-')}" for name in sorted({*old, *new})
                     if old.get(name) != new.get(name))


def image_change(a: list[cell.CellResult] | None, b: list[cell.CellResult] | None) -> str:
    if a is None or b is None:
        return ""
    old, new = [(r[0].provenance.get("environment") or {}).get("id") for r in (a, b)]
    return "" if old == new else f"{str(old)[:19]} -> {str(new)[:19]}"


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--suite", help="for a results directory holding several suites (archives name their own)")
    parser.add_argument("--noise-floor", type=float, default=NOISE_FLOOR_PCT, help="percent (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    try:
        old, new = Run(args.old, args.suite), Run(args.new, args.suite)
    except BadFile as error:
        return refuse("archive compare", error)
    except ValueError as error:         # a results folder of several suites, and no --suite
        parser.error(str(error))
    try:
        table = compare(old, new, args.noise_floor)
    except BadFile as error:            # a cell record that is not whole JSON, or not a cell's
        return refuse("archive compare", error)
    if args.out:
        table.to_csv(args.out, index=False)
    print(table.astype(object).where(table.notna(), "").to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
