"""What each framework gains from its own documented tuning: the tuned profile against strict, per cell and per column,
and the published finding that Keras 3 is best out of the box while native PyTorch needs its user's tuning, as a
verdict per row (its rule: tuning_gain, through kbench.results.registry).

- The gain of a cell: strict ms/step / tuned ms/step (above 1: tuning made it faster), its interval the ratio of the
  two 95% intervals' far ends (strict low / tuned high .. strict high / tuned low): wide, and conservative.
- A tuned cell whose outputs the equivalence check did not show equivalent (the tuned profile's ms_per_step
  `equivalence` column) is marked: a setting that changes what the model computes is not tuning.
- Per column: the geometric mean of its cells' gains across rows (and of their interval ends).
- The finding, per row: it holds where the best Keras 3 column out of the box (strict) is not shown slower than the
  best native PyTorch column tuned (their intervals overlap, or Keras is faster), and native's gain (its best tuned
  column against the same column in strict) is larger than that Keras 3 column's, gain intervals apart; it does not
  hold where Keras 3 out of the box is shown slower than native tuned, or native's gain is shown smaller; "not shown"
  otherwise; not measured where a side did not run in both profiles. It says nothing about settings beyond those in
  config `tuning`, or about tuning effort.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from kbench.plan import matrix
from kbench.results import flat, plots, stats, tables
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED, NOT_SHOWN, on_this_run
from kbench.results.context import Records, RunContext, Table

KEYS = flat.ROW_KEYS + ["framework"]
NOT_TUNING = "outputs not shown equivalent: not tuning"
# A column no tuning setting applies to runs its strict cells again: its "gain" is the run-to-run variation of the
# measurement, the null control the other columns' gains are read against.
NO_SETTING = "none: strict re-run (the gain is run-to-run variation)"
VERDICTS = "tuning_verdicts.csv"        # the finding's verdict per row (kbench.claims reads it)
OUTPUTS = ["tuning_gain.csv", "tuning_gain.md", "tuning_gain.html", "tuning_columns.csv", VERDICTS]
PLOTS = ["tuning_gain.png", "tuning_gain.svg"]


def gain(strict: stats.Estimate, tuned: stats.Estimate) -> tuple[float, float | None, float | None]:
    """strict / tuned, and its interval from the two intervals' far ends (None where either has none)."""
    if strict.low is None or tuned.low is None:
        return strict.ms / tuned.ms, None, None
    return strict.ms / tuned.ms, strict.low / tuned.high, strict.high / tuned.low


def _ok(summary: pd.DataFrame) -> dict[tuple, stats.Estimate]:
    return {tuple(r[k] for k in KEYS): tables.as_estimate(r) for _, r in summary.iterrows() if r.status == "ok"}


def gain_table(strict: pd.DataFrame, tuned: pd.DataFrame, flags: dict[tuple, str],
               applied: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """Per cell ok in both profiles: both estimates, the gain with its interval, the tuning settings it ran with and
    the tuned cell's equivalence mark. flags: (model, task, batch, precision) -> the tuned profile's equivalence flag
    of the row; applied: "model/task/framework" -> its tuning ids (kbench.plan.matrix.tuning_ids)."""
    before, after = _ok(strict), _ok(tuned)
    rows = []
    for key in [k for k in before if k in after]:
        x, low, high = gain(before[key], after[key])
        flagged = {part.split(":", 1)[0].strip() for part in flags.get(key[:-1], "").split("; ") if part}
        rows.append({**dict(zip(KEYS, key)), "strict ms/step": tables.estimate_text(before[key]),
                     "tuned ms/step": tables.estimate_text(after[key]), "gain x": round(x, 3),
                     "gain low": None if low is None else round(low, 3),
                     "gain high": None if high is None else round(high, 3),
                     "tuned settings": settings_text((applied or {}).get(f"{key[0]}/{key[1]}/{key[-1]}")),
                     "tuned outputs": NOT_TUNING if key[-1] in flagged else ""})
    return pd.DataFrame(rows, columns=KEYS + ["strict ms/step", "tuned ms/step", "gain x", "gain low", "gain high",
                                              "tuned settings", "tuned outputs"])


def settings_text(ids: list[str] | None) -> str:
    return "" if ids is None else ", ".join(ids) or NO_SETTING


def column_table(gains: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Per column: the geometric mean gain across its rows (and of the interval ends), rows counted."""
    rows = []
    for f in frameworks:
        mine = gains[gains.framework == f]
        if mine.empty:
            continue

        def geo(values):
            values = [v for v in values if pd.notna(v)]
            return round(math.exp(sum(map(math.log, values)) / len(values)), 3) if values else None
        rows.append({"framework": f, "rows": len(mine), "gain x (geometric mean)": geo(mine["gain x"]),
                     "low": geo(mine["gain low"]) if mine["gain low"].notna().all() else None,
                     "high": geo(mine["gain high"]) if mine["gain high"].notna().all() else None,
                     "rows whose tuned outputs differ": int((mine["tuned outputs"] != "").sum())})
    return pd.DataFrame(rows)


def verdict(keras_strict: stats.Estimate | None, native_tuned: stats.Estimate | None,
            native_gain: tuple | None, keras_gain: tuple | None) -> str:
    """The finding for one row (see the module docstring); gains are (x, low, high)."""
    if keras_strict is None or native_tuned is None or native_gain is None or keras_gain is None:
        return NOT_MEASURED
    keras_slower = stats.separate(keras_strict, native_tuned) and keras_strict.ms > native_tuned.ms
    if keras_slower:
        return FAILS
    if native_gain[1] is None or keras_gain[1] is None:
        return NOT_SHOWN
    if native_gain[1] > keras_gain[2]:
        return HOLDS
    if native_gain[2] < keras_gain[1]:
        return FAILS
    return NOT_SHOWN


def verdicts(strict: pd.DataFrame, tuned: pd.DataFrame, keras3: list[str], native: list[str],
             on_gpu: bool) -> pd.DataFrame:
    before, after = _ok(strict), _ok(tuned)
    rows = []
    for row in dict.fromkeys(tuple(r) for r in strict[flat.ROW_KEYS].itertuples(index=False)):
        keras_strict = {f: before[row + (f,)] for f in keras3 if row + (f,) in before}
        native_tuned = {f: after[row + (f,)] for f in native if row + (f,) in after and row + (f,) in before}
        best_keras = min(keras_strict, key=lambda f: keras_strict[f].ms) if keras_strict else None
        best_native = min(native_tuned, key=lambda f: native_tuned[f].ms) if native_tuned else None
        keras_gain = (gain(before[row + (best_keras,)], after[row + (best_keras,)])
                      if best_keras and row + (best_keras,) in after else None)
        native_gain = gain(before[row + (best_native,)], native_tuned[best_native]) if best_native else None
        said = verdict(keras_strict.get(best_keras), native_tuned.get(best_native), native_gain, keras_gain)
        rests_on = ("" if said == NOT_MEASURED else
                    f"{best_keras} strict {tables.estimate_text(keras_strict[best_keras])} ms vs {best_native} tuned "
                    f"{tables.estimate_text(native_tuned[best_native])} ms; gains {best_native} "
                    f"{native_gain[0]:.2f}x, {best_keras} {keras_gain[0]:.2f}x")
        rows.append({**dict(zip(flat.ROW_KEYS, row)), "best Keras 3 (strict)": best_keras,
                     "best native (tuned)": best_native,
                     "verdict": on_this_run(said, on_gpu),
                     "rests on": rests_on})
    return pd.DataFrame(rows, columns=flat.ROW_KEYS + ["best Keras 3 (strict)", "best native (tuned)", "verdict",
                                                         "rests on"])


def equivalence_flags(ms_per_step: Path) -> dict[tuple, str]:
    """The tuned profile's per-row equivalence flags (ms_per_step's `equivalence` column), or none."""
    if not ms_per_step.exists():
        return {}
    table = pd.read_csv(ms_per_step)
    if tables.EQUIVALENCE not in table.columns:
        return {}
    return {tuple(r[k] for k in flat.ROW_KEYS): r[tables.EQUIVALENCE] for _, r in table.iterrows()
            if isinstance(r[tables.EQUIVALENCE], str) and r[tables.EQUIVALENCE]}


def plot(gains: pd.DataFrame, frameworks: list[str], out_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.model} {r.task} bs{r.batch_size} {r.precision}" for r in
              gains[flat.ROW_KEYS].drop_duplicates().itertuples()]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) + 2), 3.6))
    present = [f for f in frameworks if f in set(gains.framework)]
    width = 0.8 / max(len(present), 1)
    for i, f in enumerate(present):
        mine = gains[gains.framework == f]
        at = [labels.index(f"{r.model} {r.task} bs{r.batch_size} {r.precision}") + i * width for r in mine.itertuples()]
        errors = [[x - low if pd.notna(low) else 0 for x, low in zip(mine["gain x"], mine["gain low"])],
                  [high - x if pd.notna(high) else 0 for x, high in zip(mine["gain x"], mine["gain high"])]]
        ax.bar(at, mine["gain x"], width, yerr=errors, label=f, color=f"C{frameworks.index(f)}", capsize=2)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=8)
    ax.set_ylabel("strict ms / tuned ms (x)")
    ax.set_title("What each column gains from its documented tuning", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    for name in PLOTS:
        plots.save(fig, out_dir / name, dpi=100)
    plt.close(fig)


NOTE = ("\nThe tuning gain: strict ms/step / tuned ms/step (above 1: tuning made the cell faster), its interval from the "
        "two 95% intervals' far ends. The tuned profile's settings and their sources: the departures page and config "
        "`tuning`. A tuned cell whose outputs the equivalence check did not show equivalent is marked: a setting "
        "that changes what the model computes is not tuning. See docs/profiles.md.\n")


def build(records: Records, run: RunContext) -> None:
    """strict against tuned, from the two profiles' tables (the cells' summaries and ms/step's equivalence flags)."""
    strict_dir, tuned_dir, out_dir, plots_dir = (run.tables_of("strict"), run.tables_of(run.tuned_profile),
                                                 run.tables_dir, run.plots_dir)
    frameworks, applied = list(run.frameworks), run.tuning_applied
    out_dir.mkdir(parents=True, exist_ok=True)
    strict = pd.read_csv(strict_dir / tables.SUMMARY)
    tuned = pd.read_csv(tuned_dir / tables.SUMMARY)
    gains = gain_table(strict, tuned, equivalence_flags(tuned_dir / tables.MS_PER_STEP), applied)
    flat.write(gains.set_index(KEYS), out_dir, "tuning_gain", "tuned against strict", note=NOTE)
    column_table(gains, frameworks).to_csv(out_dir / "tuning_columns.csv", index=False)
    verdicts(strict, tuned, list(run.keras3), list(run.native), run.on_gpu).to_csv(out_dir / VERDICTS, index=False)
    if plots_dir:
        plots_dir.mkdir(parents=True, exist_ok=True)
        plot(gains, frameworks, plots_dir)


def _planned(config: dict, suite: str) -> list[str | None]:
    return [None] if matrix.tuned_profile(config) else []


def _reads(run: RunContext) -> list[tuple[str, str]]:
    return [(profile, name) for profile in ("strict", run.tuned_profile)
            for name in (tables.SUMMARY, tables.MS_PER_STEP)]


TABLE = Table(rule="tuning_gain", outputs=tuple(OUTPUTS), plots=tuple(PLOTS), build=build, category="Tuning",
              reads_tables=_reads, per_profile=False, planned=_planned)
