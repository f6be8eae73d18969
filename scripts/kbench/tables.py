"""Cell JSONs of one profile of a suite -> the final tables (CSV, Markdown, HTML).

ms_per_step : rows model/task/batch/precision, one column per framework, mean ms/step (the anchor's statistic), or
              "failed: <error type>", "n/a: <reason>" (configured) or "unsupported: <reason>" (the adapter's); in a
              profile that reproduces the anchor, the departures no profile can keep that apply to the row
speedup     : how much faster the best Keras 3 backend (the lowest of the row, selected per row) is than each column,
              in %, as the anchor: other/best - 1, with the parity flag
params      : parameter counts per framework (total, and trainable where it differs), and a parity flag where two
              frameworks' counts for the same row differ by more than PARITY_TOLERANCE: those times compare
              different models (ms_per_step carries the flag too)
precision   : the mixed-precision study, per model/task: one row per framework, one column per precision (ms/step)
precision_speedup : per model/task and framework, baseline ms / ms at each other precision (x, above 1 is faster),
              beside the speedup usually claimed for that model/task
cells_long  : every statistic and provenance field of every cell, one row per cell (losses of fit cells included)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from kbench import cell, departures
from kbench.precision import label as precision_table_label

ROW_KEYS = ["model", "task", "batch_size", "precision"]
STUDY_KEYS = ["model", "task", "batch_size"]
PARITY_TOLERANCE = 0.01
# The tables build() writes, each as CSV, Markdown and HTML, and the long table (CSV only): the rules' outputs.
TABLES = ("ms_per_step", "speedup", "params", "precision", "precision_speedup")
FORMATS = ("csv", "md", "html")
OUTPUTS = [f"{name}.{fmt}" for name in TABLES for fmt in FORMATS] + ["cells_long.csv"]


def long_table(results: list[cell.CellResult]) -> pd.DataFrame:
    """One row per cell (CellResult.row), in the order given: the config's order of models, tasks and batches."""
    return pd.DataFrame([result.row() for result in results])


UNREPRODUCED = "anchor settings not reproduced"


def ms_per_step_table(long: pd.DataFrame, frameworks: list[str], unreproduced: list[dict] = ()) -> pd.DataFrame:
    wide = long.pivot(index=ROW_KEYS, columns="framework", values="text")
    rows = pd.MultiIndex.from_frame(long[ROW_KEYS].drop_duplicates())
    columns = [f for f in frameworks if f in wide.columns]
    table = wide.reindex(index=rows, columns=columns).fillna("")
    table["params_parity"] = parity_flags(long).reindex(rows).fillna("")
    if unreproduced:
        table[UNREPRODUCED] = [", ".join(departures.applying(list(unreproduced), model, task, columns))
                               for model, task, _, _ in table.index]
    return table


def parity_flags(long: pd.DataFrame, tolerance: float = PARITY_TOLERANCE) -> pd.Series:
    """Per row: "" when every framework's parameter counts agree within tolerance, else what differs and by how
    much ("total +1.5%, trainable +112%"), relative max/min - 1 over the frameworks that recorded counts."""
    counted = long.dropna(subset=["params_total"])

    def flag(group: pd.DataFrame) -> str:
        found = []
        for column, name in (("params_total", "total"), ("params_trainable", "trainable")):
            low, high = group[column].min(), group[column].max()
            spread = high / low - 1 if low > 0 else (0.0 if high == 0 else float("inf"))
            if spread > tolerance:
                found.append(f"{name} +{spread:.1%}")
        return ", ".join(found)
    if counted.empty:
        return pd.Series(dtype=str)
    return counted.groupby(ROW_KEYS, sort=False).apply(flag, include_groups=False)


def params_table(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Parameter counts as "total" or "total (trainable)" per framework, and the parity flag."""
    def text(row) -> str:
        if pd.isna(row.params_total):
            return ""
        total, trainable = int(row.params_total), int(row.params_trainable)
        return f"{total:,}" if trainable == total else f"{total:,} ({trainable:,} trainable)"
    wide = long.assign(value=long.apply(text, axis=1)).pivot(index=ROW_KEYS, columns="framework", values="value")
    rows = pd.MultiIndex.from_frame(long[ROW_KEYS].drop_duplicates())
    table = wide.reindex(index=rows, columns=[f for f in frameworks if f in wide.columns]).fillna("")
    table["params_parity"] = parity_flags(long).reindex(rows).fillna("")
    return table


BEST = "best Keras 3 (lowest of the row)"


def speedup_table(long: pd.DataFrame, frameworks: list[str], keras3: list[str]) -> pd.DataFrame:
    """The best Keras 3 backend is selected per row, as the anchor did: the row's lowest Keras 3 ms/step. Where the
    parity flag is set the columns ran different models, and their ratio says little."""
    ok = long[long.status == "ok"].pivot(index=ROW_KEYS, columns="framework", values="mean_ms")
    rows = ok.reindex(index=pd.MultiIndex.from_frame(long[ROW_KEYS].drop_duplicates()))
    candidates = rows.reindex(columns=[f for f in keras3 if f in rows.columns])
    table = pd.DataFrame(index=rows.index)
    timed = candidates[candidates.notna().any(axis=1)]      # a row whose Keras 3 cells all failed has no best
    table[BEST] = timed.idxmin(axis=1).reindex(rows.index) if not timed.empty else None
    best_ms = candidates.min(axis=1, skipna=True)
    table["best Keras 3 ms"] = best_ms.round(2)
    for framework in frameworks:
        if framework in rows.columns:
            table[f"vs {framework} %"] = ((rows[framework] / best_ms - 1) * 100).round(0)
    table["params_parity"] = parity_flags(long).reindex(rows.index).fillna("")
    return table


def study_cells(long: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The cells of every model/task/batch that ran the baseline precision and at least one other."""
    def in_study(group: pd.DataFrame) -> bool:
        return baseline in set(group.precision) and group.precision.nunique() > 1
    return long.groupby(STUDY_KEYS, sort=False).filter(in_study)


def precision_table(long: pd.DataFrame, frameworks: list[str], baseline: str) -> pd.DataFrame:
    """Rows model/task/batch/framework, one column per precision (baseline first): mean ms/step or the cell's status."""
    study = study_cells(long, baseline)
    keys = STUDY_KEYS + ["framework"]
    if study.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=keys))
    wide = study.pivot(index=keys, columns="precision", values="text")
    precisions = [baseline] + [p for p in study.precision.unique() if p != baseline]
    return wide.reindex(index=_study_rows(study, frameworks), columns=precisions).fillna("")


def precision_speedup_table(long: pd.DataFrame, frameworks: list[str], baseline: str,
                            claims: list[dict]) -> pd.DataFrame:
    """Rows model/task/batch/framework: baseline ms / ms of each other precision (x; above 1 is faster), from cells
    that are ok at both precisions, beside the claimed speedup for the model/task."""
    study = study_cells(long, baseline)
    keys = STUDY_KEYS + ["framework"]
    if study.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=keys))
    ms = study[study.status == "ok"].pivot(index=keys, columns="precision", values="mean_ms")
    ms = ms.reindex(index=_study_rows(study, frameworks))
    table = pd.DataFrame(index=ms.index)
    for precision in [p for p in study.precision.unique() if p != baseline]:
        table[f"{precision_table_label(baseline)} / {precision_table_label(precision)} x"] = (ms.get(baseline) / ms.get(precision)).round(2)
    claimed = {(c["model"], c["task"]): c for c in claims}
    found = [claimed.get((model, task), {}) for model, task, _, _ in table.index]
    table["claimed x"] = [c.get("speedup") for c in found]
    table["claim"] = [c.get("quote", "") for c in found]
    return table


def _study_rows(study: pd.DataFrame, frameworks: list[str]) -> pd.MultiIndex:
    """Model/task/batch in the order they ran, frameworks in column order."""
    rows = study[STUDY_KEYS].drop_duplicates().itertuples(index=False)
    present = set(study.framework)
    return pd.MultiIndex.from_tuples([(*row, f) for row in rows for f in frameworks if f in present],
                                     names=STUDY_KEYS + ["framework"])


def sections_markdown(table: pd.DataFrame) -> str:
    """One Markdown table per model/task/batch, frameworks as rows (the study's reading order)."""
    parts = []
    for (model, task, batch), section in table.groupby(level=STUDY_KEYS, sort=False):
        parts.append(f"### {model} {task}, batch {batch}\n\n"
                     + markdown(section.droplevel(STUDY_KEYS)))
    return "\n".join(parts) or "(no model/task ran the baseline and another precision)\n"


def markdown(table: pd.DataFrame) -> str:
    """A Markdown table with empty cells where a value is missing (no ratio, no claim), not "nan"."""
    flat = table.reset_index()
    return flat.astype(object).where(flat.notna(), "").to_markdown(index=False) + "\n"


def write(table: pd.DataFrame, out_dir: Path, name: str, profile: str, by_section: bool = False) -> None:
    """CSV for programs, Markdown for reading, HTML for the Snakemake report; the profile heads the readable ones."""
    table.to_csv(out_dir / f"{name}.csv")
    text = sections_markdown(table) if by_section else markdown(table)
    (out_dir / f"{name}.md").write_text(f"## {name}, profile {profile}\n\n{text}")
    (out_dir / f"{name}.html").write_text(f"<html><body><h2>{name}, profile {profile}</h2>\n"
                                          + table.to_html(na_rep="", border=0) + "\n</body></html>\n")


def build(results: list[cell.CellResult], frameworks: list[str], keras3: list[str], out_dir: Path,
          profile: str, baseline: str = "float32", claims: list[dict] = (), unreproduced: list[dict] = ()) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    long = long_table(results)
    long.to_csv(out_dir / "cells_long.csv", index=False)
    write(ms_per_step_table(long, frameworks, unreproduced), out_dir, "ms_per_step", profile)
    write(speedup_table(long, frameworks, keras3), out_dir, "speedup", profile)
    write(params_table(long, frameworks), out_dir, "params", profile)
    write(precision_table(long, frameworks, baseline), out_dir, "precision", profile, by_section=True)
    write(precision_speedup_table(long, frameworks, baseline, list(claims)), out_dir, "precision_speedup", profile,
          by_section=True)


def comma_list(text: str) -> list[str]:
    return [name for name in text.split(",") if name]     # "" (no Keras 3 column selected) -> []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", required=True, help="column order, comma-separated")
    parser.add_argument("--keras3", required=True, help="the Keras 3 columns, comma-separated")
    parser.add_argument("--baseline", default="float32", help="the precision the study compares against")
    parser.add_argument("--claims", default="[]", type=json.loads,
                        help='JSON list of {"model", "task", "speedup", "quote"} (config precision_study.claims)')
    parser.add_argument("--profile", required=True)
    parser.add_argument("--unreproduced", default="[]", type=json.loads,
                        help="JSON list of the departures no profile keeps (kbench.departures.unreproduced)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    build([cell.read(p) for p in args.results], comma_list(args.frameworks), comma_list(args.keras3), args.out,
          args.profile, args.baseline, args.claims, args.unreproduced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
