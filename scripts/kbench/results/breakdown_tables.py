"""The cells' breakdowns by kind of work (kbench.breakdown, recorded after each timed window) side by side: per row
and column the ms/step of each kind and its share of the profiled step, the waiting time, ops per step, the fused
share and the profiler's own overhead (profiled over timed ms/step); the top ops of each cell. A cell whose breakdown
did not close says so in place of its figures."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from kbench import breakdown, cell
from kbench.results import plots, tables

KINDS = list(breakdown.KIND_NAMES)
LONG = "time_by_kind_long.csv"
TOP = "top_ops.csv"


def first_breakdowns(results: list[cell.CellResult]) -> list[cell.CellResult]:
    """Each cell's first repeat that ran and has a breakdown (every repeat profiles the same steps of the same
    program: one is the cell's)."""
    chosen: dict[str, cell.CellResult] = {}
    for result in sorted(results, key=lambda r: (r.cell_id, r.repeat)):
        if result.status == "ok" and result.breakdown and result.cell_id not in chosen:
            chosen[result.cell_id] = result
    return list(chosen.values())


def breakdown_long(results: list[cell.CellResult]) -> pd.DataFrame:
    """One line per cell and kind (ms/step, share of the profiled step); a cell that did not close: one line with its
    reason and no kind."""
    lines = []
    for result in first_breakdowns(results):
        row, found = result.row(), result.breakdown
        key = {k: row[k] for k in tables.ROW_KEYS} | {"framework": row["framework"], "profile": row["profile"],
                                                      "device": found.get("device"),
                                                      "profiler_overhead": found.get("profiler_overhead"),
                                                      "ops_per_step": found.get("ops_per_step"),
                                                      "fused_share": found.get("fused_share"),
                                                      "library_fused_ms_per_step":
                                                          found.get("library_fused_ms_per_step"),
                                                      "window_ms_per_step": found.get("window_ms_per_step"),
                                                      "closes": bool(found.get("closes")),
                                                      "why": found.get("why")}
        if not found.get("closes"):
            lines.append({**key, "kind": None, "ms_per_step": None, "share": None})
            continue
        wall = found["window_ms_per_step"]
        lines += [{**key, "kind": kind, "ms_per_step": found["ms_per_step"][kind],
                   "share": found["ms_per_step"][kind] / wall if wall else None} for kind in KINDS]
    columns = [*tables.ROW_KEYS, "framework", "profile", "kind", "ms_per_step", "share", "device",
               "profiler_overhead", "ops_per_step", "fused_share", "library_fused_ms_per_step", "window_ms_per_step",
               "closes", "why"]
    return pd.DataFrame(lines, columns=columns)


def top_ops(results: list[cell.CellResult]) -> pd.DataFrame:
    lines = []
    for result in first_breakdowns(results):
        if not result.breakdown.get("closes"):
            continue
        row = result.row()          # the whole flat view: built once per cell, not once per op
        lines += [{**{k: row[k] for k in tables.ROW_KEYS}, "framework": row["framework"], "rank": i + 1,
                   "op": op["name"], "ms_per_step": op["ms_per_step"], "share": op["share"]}
                  for i, op in enumerate(result.breakdown.get("top_ops") or [])]
    return pd.DataFrame(lines, columns=[*tables.ROW_KEYS, "framework", "rank", "op", "ms_per_step", "share"])


def time_by_kind_table(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Row x column: each kind as "ms (share %)", then the waiting time, ops/step, the fused share and the profiled
    over timed ms/step; a cell that did not close reads "does not close: <why>"."""
    lines = []
    for key, group in long.groupby([*tables.ROW_KEYS, "framework"], sort=False):
        *row_values, framework = key
        first = group.iloc[0]
        line = {**dict(zip(tables.ROW_KEYS, row_values)), "framework": framework}
        if not first["closes"]:
            line.update({breakdown.KIND_NAMES[k]: None for k in KINDS}, closes=f"does not close: {first['why']}")
        else:
            by_kind = group.set_index("kind")
            line.update({breakdown.KIND_NAMES[k]: f"{by_kind.at[k, 'ms_per_step']:.2f} ({by_kind.at[k, 'share']:.0%})"
                         for k in KINDS}, closes="closes")
        line.update({"ops/step": _round(first["ops_per_step"], 0), "fused %": _percent(first["fused_share"]),
                     "profiled / timed": _round(first["profiler_overhead"], 2)})
        lines.append(line)
    table = pd.DataFrame(lines)
    if table.empty:
        return table
    order = {f: i for i, f in enumerate(frameworks)}
    table["_order"] = table["framework"].map(order)
    return table.sort_values([*tables.ROW_KEYS, "_order"], kind="stable").drop(columns="_order").reset_index(drop=True)


def _round(value, digits):
    return None if value is None or pd.isna(value) else round(float(value), digits)


def _percent(value):
    return None if value is None or pd.isna(value) else f"{float(value):.0%}"


NOTE = ("\nEach cell's step after its timed window, profiled by its framework's own profiler (kbench.breakdown): per kind "
        "of work its ms/step (share of the profiled step); waiting: on a GPU the device idle, on a CPU the host "
        "outside any op (the framework's and Python's own time). ops/step: the ops (kernels) launched, their "
        "wrappers not counted. fused %: kernels the framework fused that are not matrix products. profiled / "
        "timed: the profiled steps' ms/step over the timed window's, the profiler's own cost (the timed window "
        "never ran under it). CPU figures check the pipeline; they say nothing about a GPU.\n")


def figure(long: pd.DataFrame, frameworks: list[str]):
    """One panel per row, one stacked bar per column (ms/step by kind, the waiting time on top), on the panel's one
    scale; a cell whose breakdown did not close is named on its empty slot."""
    rows = list(long.groupby(tables.ROW_KEYS, sort=False))
    fig, axes = plots.panels(max(len(rows), 1))
    for ax, (key, group) in zip(axes, rows):
        present = [f for f in frameworks if f in set(group["framework"])]
        bottoms = [0.0] * len(present)
        for k_index, kind in enumerate(KINDS):
            heights = []
            for f in present:
                cell_rows = group[(group["framework"] == f) & (group["kind"] == kind)]
                heights.append(float(cell_rows["ms_per_step"].iloc[0]) if len(cell_rows) else 0.0)
            ax.bar(range(len(present)), heights, bottom=bottoms, color=f"C{k_index}",
                   label=breakdown.KIND_NAMES[kind], hatch="//" if kind == "waiting" else None)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        for i, f in enumerate(present):
            if not group[group["framework"] == f]["closes"].iloc[0]:
                ax.text(i, 0.02, "does not close", rotation=90, ha="center", va="bottom", fontsize=8,
                        transform=ax.get_xaxis_transform())
        ax.set_xticks(range(len(present)), present, rotation=45, ha="right", fontsize=8)
        ax.set_title(plots.row_label(*key), fontsize=9)
        ax.set_ylabel("profiled ms/step by kind", fontsize=8)
    if rows:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=min(len(labels), 5))
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def build(results: list[cell.CellResult], frameworks: list[str], profile: str, out_dir: Path,
          plots_dir: Path | None = None) -> None:
    """The tables into out_dir, the picture into plots_dir (None: none, as an archive's check rebuilds tables only)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    long = breakdown_long(results)
    long.to_csv(out_dir / LONG, index=False)
    top_ops(results).to_csv(out_dir / TOP, index=False)
    table = time_by_kind_table(long, frameworks)
    tables.write(table.set_index([*tables.ROW_KEYS, "framework"]) if not table.empty else table, out_dir,
                 "time_by_kind", profile, note=NOTE)
    if plots_dir is None:
        return
    plots_dir.mkdir(parents=True, exist_ok=True)
    fig = figure(long, frameworks)
    for fmt in ("png", "svg"):
        fig.savefig(plots_dir / f"time_by_kind.{fmt}",
                    metadata={"Software": None} if fmt == "png" else {"Date": None, "Creator": None})
    plots.plt.close(fig)


OUTPUTS = [f"time_by_kind.{fmt}" for fmt in tables.FORMATS] + [LONG, TOP]
PLOTS = ["time_by_kind.png", "time_by_kind.svg"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tables.profile_arguments(parser)
    parser.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    build([cell.read(path) for path in args.results], tables.comma_list(args.frameworks), args.profile, args.out,
          args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
