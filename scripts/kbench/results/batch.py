"""The batch study: each row's ms/step against its batch size, per column, split into a step's fixed cost and its cost
per example, and the published claim that a small batch makes PyTorch look slower through Python's overhead, as a
verdict (its rule: batch_study, through kbench.results.registry).

The cost model, per column and row: ms/step = a + c x batch, where a is what a step costs whatever its batch
(Python, dispatch, kernel launches, the sync) and c what each example adds. It holds while the device has room: past
the knee (the device full) a step grows faster than the line. The fit:

- weighted least squares, each rung weighted by 1 / sigma^2 with sigma its 95% interval's half-width / t (the same
  interval the tables print); a rung without an interval is not fitted;
- over the longest run of rungs from the smallest up that the line holds for: every fitted rung within
  `tolerance` (relative) or within its own interval of the line; the knee is the first rung above them, the
  throughput at the knee the examples/s of the last rung that holds;
- the intervals of a and c: the fit's covariance (X'WX)^-1, scaled by the reduced chi-square where the rungs scatter
  more than their intervals say, with Student's t on n - 2 degrees of freedom; three rungs at least.

The claim's verdict per row and native column (kbench.claims reads it for the first page): it holds where the native
column's fixed cost a is larger than the best Keras 3 column's (the Keras 3 column fastest at the row's own batch)
with intervals that do not overlap, and the native column's gap to that column (ms ratio) is smaller at the largest
rung both ran than at the smallest; it does not hold where native's a is shown smaller, or where it is larger but
the gap does not shrink; "not shown" where the intervals of a overlap; not measured where either fit is missing.
Where the fastest column changes between two rungs, the table names the two rungs: the change lies between them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.contract import cell
from kbench.plan import matrix
from kbench.results import flat, plots, stats, tables
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED, NOT_SHOWN, on_this_run
from kbench.results.context import Records, RunContext, Table

ROW = ["model", "task", "precision"]
MIN_RUNGS = 3
PLOTS = ["batch_curves.png", "batch_curves.svg"]
VERDICTS = "batch_verdicts.csv"         # the claim's verdict per row (kbench.claims reads it)
OUTPUTS = ["batch_study.csv", "batch_study.md", "batch_study.html", "batch_fit.csv", "batch_fit.md",
           "batch_fit.html", VERDICTS, "batch_cells_long.csv"]


@dataclass(frozen=True)
class Rung:
    batch: int
    estimate: stats.Estimate

    @property
    def sigma(self) -> float | None:
        """The rung's standard error, from its 95% interval."""
        e = self.estimate
        if e.low is None or e.high <= e.low:
            return None
        dof = max(len(e.means) - 1, 1) if e.method == "repeats" else None
        t = stats._scipy_stats().t.ppf((1 + stats.CONFIDENCE) / 2, dof) if dof else 1.96
        return e.half_width / t


@dataclass(frozen=True)
class Fit:
    a: float                 # fixed cost per step, ms
    a_low: float
    a_high: float
    c: float                 # cost per example, ms
    c_low: float
    c_high: float
    rungs: int               # the rungs the line holds for (from the smallest)
    knee: int | None         # the first rung above them (None: the line holds to the top)
    throughput_at_knee: float | None    # examples/s at the last rung the line holds for
    chi2_per_dof: float


def line(batches: list[int], ms: list[float], sigmas: list[float]) -> tuple[np.ndarray, np.ndarray, float]:
    """Weighted least squares of ms = a + c x batch: ((a, c), their covariance, reduced chi-square)."""
    x = np.column_stack([np.ones(len(batches)), np.asarray(batches, float)])
    w = 1.0 / np.asarray(sigmas, float) ** 2
    xtw = x.T * w
    covariance = np.linalg.inv(xtw @ x)
    coefficients = covariance @ (xtw @ np.asarray(ms, float))
    residuals = np.asarray(ms, float) - x @ coefficients
    dof = len(batches) - 2
    chi2 = float(np.sum(w * residuals ** 2) / dof) if dof > 0 else 0.0
    return coefficients, covariance * max(1.0, chi2), chi2


def _holds(rungs: list[Rung], coefficients: np.ndarray, tolerance: float) -> bool:
    for r in rungs:
        predicted = coefficients[0] + coefficients[1] * r.batch
        within_interval = r.estimate.low <= predicted <= r.estimate.high
        if not within_interval and abs(r.estimate.ms - predicted) > tolerance * r.estimate.ms:
            return False
    return True


def fit(rungs: list[Rung], tolerance: float) -> Fit | None:
    """The cost model over the longest run of rungs from the smallest that it holds for; None with fewer than
    MIN_RUNGS rungs with intervals (the ladder stops at the first rung without one: a fit cannot skip a rung)."""
    usable = []
    for r in sorted(rungs, key=lambda r: r.batch):
        if r.sigma is None:
            break
        usable.append(r)
    if len(usable) < MIN_RUNGS:
        return None
    chosen = None
    for n in range(MIN_RUNGS, len(usable) + 1):
        part = usable[:n]
        coefficients, covariance, chi2 = line([r.batch for r in part], [r.estimate.ms for r in part],
                                              [r.sigma for r in part])
        if not _holds(part, coefficients, tolerance):
            break
        chosen = (n, coefficients, covariance, chi2)
    if chosen is None:
        return None
    n, (a, c), covariance, chi2 = chosen
    t = stats._scipy_stats().t.ppf((1 + stats.CONFIDENCE) / 2, max(n - 2, 1))
    half_a, half_c = t * math.sqrt(covariance[0, 0]), t * math.sqrt(covariance[1, 1])
    last = usable[n - 1]
    knee = sorted(rungs, key=lambda r: r.batch)[n].batch if n < len(rungs) else None
    return Fit(float(a), float(a - half_a), float(a + half_a), float(c), float(c - half_c), float(c + half_c), n,
               knee, last.batch * 1e3 / last.estimate.ms if knee is not None else None, chi2)


# ---------------------------------------------------------------- from cells to tables

def ladders(summary: pd.DataFrame) -> dict[tuple, dict[str, list[Rung]]]:
    """(model, task, precision) -> framework -> its ok rungs, smallest batch first."""
    found: dict[tuple, dict[str, list[Rung]]] = {}
    for r in summary.itertuples():
        per_column = found.setdefault((r.model, r.task, r.precision), {})
        rungs = per_column.setdefault(r.framework, [])
        if r.status == "ok":
            rungs.append(Rung(int(r.batch_size), tables.as_estimate(r)))
    for per_column in found.values():
        for rungs in per_column.values():
            rungs.sort(key=lambda r: r.batch)
    return found


def fits(summary: pd.DataFrame, tolerance: float) -> dict[tuple, dict[str, Fit | None]]:
    return {row: {f: fit(rungs, tolerance) for f, rungs in per_column.items()}
            for row, per_column in ladders(summary).items()}


def study_table(summary: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Per row and rung: every column's ms/step (or why it has none) and examples/s."""
    rows = []
    for key, group in summary.groupby(ROW + ["batch_size"], sort=True):
        row = dict(zip(ROW + ["batch"], key))
        by_framework = group.set_index("framework")
        for f in frameworks:
            if f in by_framework.index:
                r = by_framework.loc[f]
                row[f"{f} ms/step"] = r.text
                row[f"{f} examples/s"] = (f"{r.batch_size * 1e3 / r.estimate_ms:.1f}" if r.status == "ok" else "")
                row[f"{f} device busy"] = (f"{r.device_busy_share:.0%}" if pd.notna(r.device_busy_share)
                                           else "not measured" if r.status == "ok" else "")
        rows.append(row)
    table = pd.DataFrame(rows, columns=None if rows else ROW + ["batch"])
    # device-busy columns only where some rung measured it (a GPU with a device profiler: kbench.instruments.timing.device_busy)
    busy = [c for c in table.columns if c.endswith(" device busy")]
    measured = any(table[c].fillna("").str.endswith("%").any() for c in busy)
    return table if measured else table.drop(columns=busy)


def fit_table(fitted: dict[tuple, dict[str, Fit | None]], frameworks: list[str]) -> pd.DataFrame:
    rows = []
    for (model, task, precision), per_column in fitted.items():
        for f in frameworks:
            if f not in per_column:
                continue
            found = per_column[f]
            row = {"model": model, "task": task, "precision": precision, "framework": f}
            if found is None:
                row["fixed ms/step (a)"] = f"no fit: fewer than {MIN_RUNGS} rungs with intervals on a line"
            else:
                row.update({"fixed ms/step (a)": f"{found.a:.3f} [{found.a_low:.3f}, {found.a_high:.3f}]",
                            "ms per example (c)": f"{found.c:.4f} [{found.c_low:.4f}, {found.c_high:.4f}]",
                            "rungs on the line": found.rungs, "knee (first rung off it)": found.knee or "",
                            "examples/s at the knee": (f"{found.throughput_at_knee:.1f}"
                                                       if found.throughput_at_knee else ""),
                            **{k: v for k, v in asdict(found).items()}})
            rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else ROW + ["framework", "fixed ms/step (a)"])


def _best_keras3_at(summary: pd.DataFrame, row: tuple, batch: int | None, keras3: list[str]) -> str | None:
    model, task, precision = row
    at = summary[(summary.model == model) & (summary.task == task) & (summary.precision == precision)
                 & (summary.batch_size == batch) & (summary.status == "ok") & summary.framework.isin(keras3)]
    return at.loc[at.estimate_ms.idxmin(), "framework"] if len(at) else None


def _ratio_at(per_column: dict[str, list[Rung]], native: str, keras: str, batch: int) -> float:
    ms = {f: next(r.estimate.ms for r in per_column[f] if r.batch == batch) for f in (native, keras)}
    return ms[native] / ms[keras]


def verdict(native: Fit | None, keras: Fit | None, gap_small: float | None, gap_large: float | None) -> str:
    """The claim for one row and native column (see the module docstring)."""
    if native is None or keras is None or gap_small is None:
        return NOT_MEASURED
    if native.a_high < keras.a_low:
        return FAILS
    if native.a_low <= keras.a_high:
        return NOT_SHOWN
    return HOLDS if gap_large < gap_small else FAILS


def verdicts(summary: pd.DataFrame, fitted: dict[tuple, dict[str, Fit | None]], own_batch: dict[tuple, int],
             native: list[str], keras3: list[str], on_gpu: bool) -> pd.DataFrame:
    """Per row and native column: the claim's verdict and what it rests on, and where the fastest column changes."""
    rows, per_row = [], ladders(summary)
    for row, per_column in per_row.items():
        best = _best_keras3_at(summary, row, own_batch.get(row), keras3)
        for n in [f for f in native if f in per_column]:
            found_native, found_keras = per_column[n] and fitted[row].get(n), best and fitted[row].get(best)
            common = sorted({r.batch for r in per_column[n]} & {r.batch for r in per_column.get(best, [])})
            small = _ratio_at(per_column, n, best, common[0]) if len(common) >= 2 else None
            large = _ratio_at(per_column, n, best, common[-1]) if len(common) >= 2 else None
            said = verdict(found_native or None, found_keras or None, small, large)
            rests_on = (f"{n} a = {found_native.a:.3f} [{found_native.a_low:.3f}, {found_native.a_high:.3f}] ms, "
                        f"{best} a = {found_keras.a:.3f} [{found_keras.a_low:.3f}, {found_keras.a_high:.3f}] ms; "
                        f"{n}/{best} {small:.2f}x at bs {common[0]}, {large:.2f}x at bs {common[-1]}"
                        if said != NOT_MEASURED else
                        f"a fit of {n} and of the best Keras 3 column ({best or 'none ran'}) over two shared rungs")
            rows.append({"model": row[0], "task": row[1], "precision": row[2], "native": n, "best Keras 3": best,
                         "verdict": on_this_run(said, on_gpu),
                         "rests on": rests_on, "fastest column changes": fastest_changes(per_column)})
    return pd.DataFrame(rows, columns=["model", "task", "precision", "native", "best Keras 3", "verdict",
                                       "rests on", "fastest column changes"])


def fastest_changes(per_column: dict[str, list[Rung]]) -> str:
    """Where the fastest column changes along the ladder: between two rungs, each change marked where the two
    columns' intervals at the upper rung do not separate them."""
    batches = sorted({r.batch for rungs in per_column.values() for r in rungs})
    fastest = []
    for b in batches:
        at = {f: r.estimate for f, rungs in per_column.items() for r in rungs if r.batch == b}
        if len(at) >= 2:
            best = min(at, key=lambda f: at[f].ms)
            fastest.append((b, best, at))
    changes = []
    for (b0, f0, _), (b1, f1, at) in zip(fastest, fastest[1:]):
        if f0 != f1:
            shown = f0 in at and stats.separate(at[f0], at[f1])
            changes.append(f"{f0} -> {f1} between bs {b0} and bs {b1}" + ("" if shown else " (not shown to differ)"))
    return "; ".join(changes) or ("none" if fastest else "")


NOTE = ("\nThe batch study: ms/step = a + c x batch fitted (weighted by each rung's 95% interval) over the rungs from "
        "the smallest that the line holds for; a: the fixed cost of a step (Python, dispatch, launches, the sync), "
        "c: the cost of each example, both with their 95% intervals; the knee: the first rung off the line (the "
        "device full). oom: the batch did not fit in memory (the ladder stops there for that column). See "
        "docs/batch-study.md.\n")


def plot(summary: pd.DataFrame, fitted: dict[tuple, dict[str, Fit | None]], frameworks: list[str],
         out_dir: Path) -> None:
    """Per row, ms/step and examples/s against batch (log-log), a line per column with its intervals, and each
    column's fitted line over the rungs it holds for (dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = ladders(summary)
    rows = list(found) or [("no ladder ran", "", "")]
    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 3.4 * len(rows)), squeeze=False)
    for (ms_ax, rate_ax), row in zip(axes, rows):
        for f in frameworks:
            rungs = found.get(row, {}).get(f) or []
            if not rungs:
                continue
            colour = f"C{frameworks.index(f)}"
            b = [r.batch for r in rungs]
            ms = [r.estimate.ms for r in rungs]
            errors = [[r.estimate.ms - (r.estimate.low or r.estimate.ms) for r in rungs],
                      [(r.estimate.high or r.estimate.ms) - r.estimate.ms for r in rungs]]
            ms_ax.errorbar(b, ms, yerr=errors, marker="o", color=colour, label=f, capsize=2)
            rate_ax.plot(b, [x * 1e3 / m for x, m in zip(b, ms)], marker="o", color=colour, label=f)
            line_fit = fitted.get(row, {}).get(f)
            if line_fit:
                on = b[:line_fit.rungs]
                ms_ax.plot(on, [line_fit.a + line_fit.c * x for x in on], "--", color=colour, linewidth=1)
        for ax, label in ((ms_ax, "ms/step"), (rate_ax, "examples/s")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch")
            ax.set_ylabel(label)
            ax.set_title(f"{' '.join(map(str, row))}: {label}", fontsize=9)
        ms_ax.legend(fontsize=7)
    fig.tight_layout()
    for name in PLOTS:
        plots.save(fig, out_dir / name, dpi=100)
    plt.close(fig)


def build(records: Records, run: RunContext) -> None:
    out_dir, plots_dir, frameworks, profile = run.tables_dir, run.plots_dir, list(run.ladder_frameworks), run.profile
    own_batch = {tuple(entry[:3]): int(entry[3]) for entry in run.own_batch}
    out_dir.mkdir(parents=True, exist_ok=True)
    long = flat.long_table(list(records.ladder))
    flat.write_long(long, out_dir / "batch_cells_long.csv")   # every rung's repeats, as cells_long (archive verify)
    summary = tables.summary_table(long)
    fitted = fits(summary, run.batch_tolerance)
    flat.write(study_table(summary, frameworks).set_index(ROW + ["batch"]), out_dir, "batch_study", profile,
                 note=NOTE)
    fit_frame = fit_table(fitted, frameworks).set_index(ROW + ["framework"])
    readable = fit_frame[[c for c in fit_frame.columns if " " in c]]
    flat.write(fit_frame, out_dir, "batch_fit", profile, readable=readable, note=NOTE)
    verdicts(summary, fitted, own_batch, list(run.native), list(run.keras3), run.on_gpu).to_csv(out_dir / VERDICTS, index=False)
    if plots_dir:
        plots_dir.mkdir(parents=True, exist_ok=True)
        plot(summary, fitted, frameworks, plots_dir)


def _planned(config: dict, suite: str) -> list[str | None]:
    """The profiles whose runs include the suite's ladder (none where the suite has none)."""
    return matrix.ladder_profiles(config) if config.get("batch_study") and matrix.batch_cells(config, suite) else []


TABLE = Table(rule="batch_study", outputs=tuple(OUTPUTS), plots=tuple(PLOTS), build=build, category="Batch study",
              reads=("ladder",), planned=_planned)
