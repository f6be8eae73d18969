"""The cells' breakdowns by kind of work (kbench.breakdown, recorded after each timed window) side by side: per row
and column each kind's ms/step in the timed window's terms (its share of the profiled step times the timed ms/step:
the profiler lengthens a step, not what it is made of) and its share, with the share's 95% interval across the
profiled steps; the waiting time, ops per step, the share in compiler fusions (a property, not a kind), the share in
the fused ops a layer chose and the kinds of work they hold (layer_fused_kinds: the fused-ops verdict sets Keras 3's
time on the same work against them), the share read from what the compiler says it put in, and the profiler's own
overhead (profiled over timed ms/step); the top ops of each cell. A cell whose breakdown did not close says so in
place of its figures."""
from __future__ import annotations

import statistics

import pandas as pd

from kbench.contract import cell
from kbench.breakdown import kinds
from kbench.results import flat, plots, stats
from kbench.results.context import Records, RunContext, Table

KINDS = list(kinds.KIND_NAMES)
LONG = "time_by_kind_long.csv"
NOT_SEPARATED = "not separated (in matmul and conv)"
TOP = "top_ops.csv"
# Stacked from the bottom in this order, the legend read top-down in the same: waiting on top, hatched
STACK = KINDS


def first_breakdowns(results: list[cell.CellResult]) -> list[cell.CellResult]:
    """Each cell's first repeat that ran and has a breakdown (every repeat profiles the same steps of the same
    program: one is the cell's)."""
    chosen: dict[str, cell.CellResult] = {}
    for result in sorted(results, key=lambda r: (r.cell_id, r.repeat)):
        if result.status == "ok" and result.breakdown and result.cell_id not in chosen:
            chosen[result.cell_id] = result
    return list(chosen.values())


def share_interval(per_step: dict | None, kind: str) -> tuple[float | None, float | None]:
    """The 95% interval of a kind's share of the step across the profiled steps (Student's t; none from fewer than
    two steps)."""
    if not per_step or kind not in per_step or len(per_step["step_ms"]) < 2:
        return None, None
    shares = [v / step if step else 0.0 for v, step in zip(per_step[kind], per_step["step_ms"])]
    if statistics.pstdev(shares) == 0:
        return shares[0], shares[0]
    low, high = stats.t_interval(shares)
    return max(low, 0.0), min(high, 1.0)            # a share lies in [0, 1], whatever few steps spread


def breakdown_long(results: list[cell.CellResult]) -> pd.DataFrame:
    """One line per cell and kind (profiled ms/step, timed ms/step, share of the step with its interval across the
    profiled steps); a cell that did not close: one line with its reason and no kind."""
    lines = []
    for result in first_breakdowns(results):
        row, found = flat.row(result), result.breakdown
        step = found.get("step_ms_per_step") or found.get("window_ms_per_step")
        timed = found.get("timed_ms_per_step")
        layer_low, layer_high = share_interval(found.get("per_step"), "layer_fused")
        key = {k: row[k] for k in flat.ROW_KEYS} | {
            "framework": row["framework"], "profile": row["profile"], "device": found.get("device"),
            "profiler_overhead": found.get("profiler_overhead"), "ops_per_step": found.get("ops_per_step"),
            "fused_share": found.get("fused_share"), "xla_share": found.get("xla_share"),
            "program_share": (found.get("read_from") or {}).get("program"),
            "unrecognised_share": found.get("unrecognised_share"),
            # a record from before these figures (library_fused_ms_per_step) has none: read as not measured
            "layer_fused_share": _over(found.get("layer_fused_ms_per_step"), step),
            "layer_fused_low": layer_low, "layer_fused_high": layer_high,
            "layer_fused_kinds": fused_kinds(found),
            "graph_fused_share": _over(found.get("graph_fused_ms_per_step"), step),
            "window_ms_per_step": found.get("window_ms_per_step"), "step_ms_per_step": step,
            "timed_ms_per_step": timed, "waiting_basis": found.get("waiting_basis"),
            "steps": found.get("steps"), "closes": bool(found.get("closes")), "why": found.get("why")}
        if not found.get("closes"):
            lines.append({**key, "kind": None, "ms_per_step": None, "timed_ms": None, "share": None})
            continue
        ms = dict(found["ms_per_step"])
        if "fused" in ms:       # a record of the earlier reader, whose fusions were a kind: their content unread
            ms["fusion_unread"] = ms.get("fusion_unread", 0.0) + ms.pop("fused")
        for kind in KINDS:
            value = ms.get(kind, 0.0)
            share = value / step if step else None
            low, high = share_interval(found.get("per_step"), kind)
            lines.append({**key, "kind": kind, "ms_per_step": value, "share": share, "share_low": low,
                          "share_high": high, "timed_ms": share * timed if share is not None and timed else None})
    columns = [*flat.ROW_KEYS, "framework", "profile", "kind", "ms_per_step", "timed_ms", "share", "share_low",
               "share_high", "device", "profiler_overhead", "ops_per_step", "fused_share", "xla_share",
               "program_share", "unrecognised_share", "layer_fused_share", "layer_fused_low", "layer_fused_high",
               "layer_fused_kinds", "graph_fused_share", "window_ms_per_step", "step_ms_per_step",
               "timed_ms_per_step", "waiting_basis", "steps", "closes", "why"]
    return pd.DataFrame(lines, columns=columns)


def fused_kinds(breakdown: dict) -> str | None:
    """The kinds of work the fused ops a layer chose hold (layer_fused_kinds: FusedBatchNormV3 normalization), joined
    by ","; "" where they hold none; None where the record has no such field (one from before it: not measured)."""
    found = breakdown.get("layer_fused_kinds")
    return None if found is None else ",".join(sorted(found))


def _over(value, step):
    return value / step if value is not None and step else None


def top_ops(results: list[cell.CellResult]) -> pd.DataFrame:
    lines = []
    for result in first_breakdowns(results):
        if not result.breakdown.get("closes"):
            continue
        row = flat.row(result)          # the whole flat view: built once per cell, not once per op
        lines += [{**{k: row[k] for k in flat.ROW_KEYS}, "framework": row["framework"], "rank": i + 1,
                   "op": op["name"], "kind": op.get("kind"), "ms_per_step": op["ms_per_step"], "share": op["share"]}
                  for i, op in enumerate(result.breakdown.get("top_ops") or [])]
    return pd.DataFrame(lines, columns=[*flat.ROW_KEYS, "framework", "rank", "op", "kind", "ms_per_step", "share"])


def time_by_kind_table(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Row x column: each kind as "timed ms (share % ± half-width)", then ops/step, the compiler-fused share, the
    share read from the compiler's programs and the profiled over timed ms/step; a cell that did not close reads
    "does not close: <why>"; a column whose trace shows no attention core where another column of its row does
    reads "not separated" there, never 0 (its core's products read as matrix products: docs/breakdown.md)."""
    lines = []
    blind = not_separated(long)
    for key, group in long.groupby([*flat.ROW_KEYS, "framework"], sort=False):
        *row_values, framework = key
        first = group.iloc[0]
        line = {**dict(zip(flat.ROW_KEYS, row_values)), "framework": framework}
        if not first["closes"]:
            line.update({kinds.KIND_NAMES[k]: None for k in KINDS}, closes=f"does not close: {first['why']}")
        else:
            by_kind = group.set_index("kind")
            line.update({kinds.KIND_NAMES[k]: _cell_text(by_kind.loc[k]) for k in KINDS}, closes="closes")
            if key in blind:
                line[kinds.KIND_NAMES["attention"]] = NOT_SEPARATED
        line.update({"ops/step": _round(first["ops_per_step"], 0), "in compiler fusions": _percent(first["fused_share"]),
                     "read from the program": _percent(first["program_share"]),
                     "profiled / timed": _round(first["profiler_overhead"], 2)})
        lines.append(line)
    table = pd.DataFrame(lines)
    if table.empty:
        return table
    order = {f: i for i, f in enumerate(frameworks)}
    table["_order"] = table["framework"].map(order)
    return table.sort_values([*flat.ROW_KEYS, "_order"], kind="stable").drop(columns="_order").reset_index(drop=True)


def not_separated(long: pd.DataFrame) -> set[tuple]:
    """The (row..., framework) cells whose breakdown closes with no attention while another column of the row
    found an attention core: their attention is not separated from the matrix products, not absent."""
    if long.empty:
        return set()
    attention = long[long.closes.astype(bool) & (long.kind == "attention")]
    found = set()
    for _, group in attention.groupby(flat.ROW_KEYS, sort=False):
        if (group.share > 0).any():
            found |= {tuple(r) for r in group.loc[group.share == 0, [*flat.ROW_KEYS, "framework"]].itertuples(
                index=False)}
    return found


def _cell_text(entry) -> str:
    ms = entry["timed_ms"] if pd.notna(entry["timed_ms"]) else entry["ms_per_step"]
    half = ((entry["share_high"] - entry["share_low"]) / 2 if pd.notna(entry.get("share_low"))
            and pd.notna(entry.get("share_high")) else None)
    return f"{ms:.2f} ({entry['share']:.0%}" + (f" ± {half:.0%})" if half else ")")


def _round(value, digits):
    return None if value is None or pd.isna(value) else round(float(value), digits)


def _percent(value):
    return None if value is None or pd.isna(value) else f"{float(value):.0%}"


NOTE = ("\nEach cell's steps after its timed window, profiled by its framework's own profiler (kbench.breakdown; "
        "docs/breakdown.md says what each kind holds): per kind of work its ms/step in the timed window's terms (its "
        "share of the profiled step times the timed ms/step) and its share, ± the half-width of the share's 95% "
        "interval across the profiled steps. A compiler's fusion is of the kind of what it holds, read from the "
        "program the compiler built (XLA) or the kernel's name (Inductor); fusion, content not read: one whose "
        "content the trace does not say. waiting: on a GPU the timed step less the device's busy time, on a CPU the "
        "host outside any op (the framework's and Python's own time). ops/step: the ops (kernels) launched, their "
        "wrappers not counted. in compiler fusions: the share of the step in kernels a compiler fused, whatever "
        "they hold (a property, not a kind). read from the program: the share of the ops' time whose kind the "
        "compiler's program said. not separated: a column whose trace shows no attention core where another "
        "column of its row does (its core's products read as matmul and conv). profiled / timed: the profiled "
        "steps' ms/step over the timed window's (the "
        "profiler's own cost; the timed window never ran under it). CPU figures check the pipeline; they say "
        "nothing about a GPU.\n")
# No alarm colour for ordinary work: matrix products blue, the rest of the compute in calm hues, waiting grey
COLOURS = {"matmul_conv": "#1f77b4", "attention": "#9467bd", "normalization": "#2ca02c", "random": "#bcbd22",
           "elementwise": "#17becf", "data_movement": "#8c564b", "optimizer": "#e377c2",
           "fusion_unread": "#7f7f7f", "other": "#c7c7c7", "waiting": "#f0f0f0"}


def figure(long: pd.DataFrame, frameworks: list[str]):
    """One panel per row, one stacked bar per column: each kind's timed ms/step (its share of the profiled step
    times the timed ms/step), the waiting time on top; the legend in the stack's order, top first; a cell whose
    breakdown did not close is named on its empty slot."""
    rows = list(long.groupby(flat.ROW_KEYS, sort=False))
    fig, axes = plots.panels(max(len(rows), 1))
    for ax, (key, group) in zip(axes, rows):
        present = [f for f in frameworks if f in set(group["framework"])]
        bottoms = [0.0] * len(present)
        for kind in STACK:
            heights = []
            for f in present:
                cell_rows = group[(group["framework"] == f) & (group["kind"] == kind)]
                value = cell_rows["timed_ms"].iloc[0] if len(cell_rows) else None
                heights.append(float(value) if value is not None and pd.notna(value) else 0.0)
            ax.bar(range(len(present)), heights, bottom=bottoms, color=COLOURS[kind], edgecolor="#555555",
                   linewidth=0.3, label=kinds.KIND_NAMES[kind], hatch="//" if kind == "waiting" else None)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        for i, f in enumerate(present):
            if not group[group["framework"] == f]["closes"].iloc[0]:
                ax.text(i, 0.02, "does not close", rotation=90, ha="center", va="bottom", fontsize=8,
                        transform=ax.get_xaxis_transform())
            elif bottoms[i]:
                ax.annotate(plots.duration_text(bottoms[i]), (i, bottoms[i]), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(present)), present, rotation=45, ha="right", fontsize=8)
        ax.set_title(plots.row_label(*key), fontsize=9)
        ax.set_ylabel("ms/step (timed), by kind", fontsize=8)
        ax.margins(y=0.12)
    if rows:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles[::-1], labels[::-1], fontsize=7, loc="center right", title="top of the bar first",
                   title_fontsize=7)
        cpu = set(long["device"].dropna()) <= {"cpu"}
        if cpu:
            fig.text(0.01, 0.005, "CPU timings of shrunk models: they check the pipeline, not the frameworks.",
                     fontsize=7, ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.03 if cpu else 0, 0.8, 1))
    return fig


def build(records: Records, run: RunContext) -> None:
    """The tables, and the picture where the run has a plots folder (an archive's check rebuilds tables only). The
    batch study's rungs are read beside the cells: the Python-overhead verdict reads them."""
    out_dir, plots_dir, frameworks, profile = run.tables_dir, run.plots_dir, list(run.frameworks), run.profile
    results = [*records.cells, *records.ladder]
    out_dir.mkdir(parents=True, exist_ok=True)
    long = breakdown_long(results)
    long.to_csv(out_dir / LONG, index=False)
    top_ops(results).to_csv(out_dir / TOP, index=False)
    table = time_by_kind_table(long, frameworks)
    flat.write(table.set_index([*flat.ROW_KEYS, "framework"]) if not table.empty else table, out_dir,
                 "time_by_kind", profile, note=NOTE)
    if plots_dir is None:
        return
    plots_dir.mkdir(parents=True, exist_ok=True)
    fig = figure(long, frameworks)
    for fmt in ("png", "svg"):
        plots.save(fig, plots_dir / f"time_by_kind.{fmt}")
    plots.plt.close(fig)


OUTPUTS = [f"time_by_kind.{fmt}" for fmt in flat.FORMATS] + [LONG, TOP]
PLOTS = ["time_by_kind.png", "time_by_kind.svg"]


TABLE = Table(rule="time_by_kind", outputs=tuple(OUTPUTS), plots=tuple(PLOTS), build=build, category="Time by kind",
              reads=("cells", "ladder"))
