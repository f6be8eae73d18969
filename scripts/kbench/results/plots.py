"""cells_summary.csv of one profile of a suite -> the charts a person would rather look at than read, PNG and SVG.

ms_per_step : one panel per model/task/batch/precision, a bar per framework (ms/step estimate, lower is better) with
              its 95% interval as an error bar, as the published benchmark's charts; failed and n/a cells are named
              on their empty slot
speedup     : the best Keras 3 backend's speedup over each framework per row, in % (the speedup table), rows whose
              parameter counts differ marked
(the time to the first step, cold and warm: kbench.results.first_step_tables, with dots_per_row)
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.ticker
matplotlib.use("Agg")      # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from kbench.results import flat, stats, tables  # noqa: E402
from kbench.results.context import Records, RunContext, Table  # noqa: E402

def save(fig, path: Path, **options) -> None:
    """The one place a figure becomes a file (PNG or SVG): the same figure gives the same bytes (no date or software
    in the metadata; SVG ids from a fixed salt, which matplotlib otherwise draws at random on every save)."""
    metadata = {"Software": None} if path.suffix == ".png" else {"Date": None, "Creator": None}
    with matplotlib.rc_context({"svg.hashsalt": "kbench"}):
        fig.savefig(path, metadata=metadata, **options)


PLOTS = ("ms_per_step", "speedup")     # first_step: kbench.results.first_step_tables
FORMATS = ("png", "svg")


def row_label(model, task, batch, precision) -> str:
    return f"{model} {task}\nbs {batch}, {precision}"


def panels(n: int):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def bars_per_row(summary: pd.DataFrame, frameworks: list[str], value: str, ylabel: str, log: bool = False,
                 interval: bool = False):
    """One panel per table row, one bar per framework; a cell without a value gets its status written in.
    interval: error bars from the cell's 95% interval (ci_low_ms .. ci_high_ms)."""
    rows = list(summary.groupby(flat.ROW_KEYS, sort=False))
    parity, networks = tables.parity_flags(summary), tables.network_flags(summary)
    fig, axes = panels(max(len(rows), 1))
    for ax, (key, group) in zip(axes, rows):
        by_framework = group.set_index("framework")
        present = [f for f in frameworks if f in by_framework.index]
        ok = [by_framework.at[f, "status"] == "ok" for f in present]
        heights = [by_framework.at[f, value] if good else 0.0 for f, good in zip(present, ok)]
        errors = None
        if interval:
            def reach(f, h, good, bound):       # a cell without an interval gets no error bar
                value = by_framework.at[f, bound] if good else h
                return 0.0 if pd.isna(value) else abs(value - h)
            errors = [[reach(f, h, good, "ci_low_ms") for f, h, good in zip(present, heights, ok)],
                      [reach(f, h, good, "ci_high_ms") for f, h, good in zip(present, heights, ok)]]
        ax.bar(range(len(present)), heights, color=[f"C{frameworks.index(f)}" for f in present], yerr=errors,
               capsize=3)
        for i, f in enumerate(present):
            if by_framework.at[f, "status"] != "ok":
                text = {"unsupported": "n/a", "oom": "oom"}.get(by_framework.at[f, "status"], "failed")
                # y in axes units: y=0 in data is -inf on a log axis (FreeType's raster overflows on it)
                ax.text(i, 0.02, text, rotation=90, ha="center", va="bottom", fontsize=8,
                        transform=ax.get_xaxis_transform())
        ax.set_xticks(range(len(present)), present, rotation=45, ha="right", fontsize=8)
        flag = ("params differ: " + parity.get(key, "")) if parity.get(key, "") else ""
        flag = flag or ("networks differ" if networks.get(key, "") else "")
        ax.set_title(row_label(*key) + (f"\n{flag}" if flag else ""), fontsize=9,
                     color="firebrick" if flag else "black")
        ax.set_ylabel(ylabel, fontsize=8)
        if log:
            ax.set_yscale("log")
    fig.tight_layout()
    return fig


def duration_text(ms: float) -> str:
    """170.2 -> "170 ms", 37012.5 -> "37 s": three figures, in the unit a reader takes in at once."""
    return f"{ms / 1e3:.3g} s" if ms >= 1e3 else f"{ms:.3g} ms"


def dots_per_row(summary: pd.DataFrame, frameworks: list[str], value: str, ylabel: str,
                 series: tuple[str, dict] | None = None, scale: float = 1.0):
    """One panel per table row, one dot per framework on a log axis with its value written beside it: on a log axis
    a bar's length depends on where the axis happens to start, so a bar would mislead; a dot's height and the number
    do not. A cell without a value gets its status written in. series: (column, {its value: marker}), several dots
    per framework side by side (cold and warm), named in a legend; scale: the values' unit in ms (1e3: seconds)."""
    rows = list(summary.groupby(flat.ROW_KEYS, sort=False))
    column, markers = series or (None, {None: "o"})
    offsets = {name: (i - (len(markers) - 1) / 2) * 0.3 for i, name in enumerate(markers)}
    fig, axes = panels(max(len(rows), 1))
    for ax, (key, group) in zip(axes, rows):
        present = [f for f in frameworks if f in set(group.framework)]
        for i, f in enumerate(present):
            for _, entry in group[group.framework == f].iterrows():
                name = entry[column] if column else None
                if name not in markers:
                    continue
                x, shown = i + offsets[name], entry[value]
                if entry["status"] != "ok" or pd.isna(shown):
                    text = {"unsupported": "n/a", "oom": "oom"}.get(entry["status"], "failed")
                    ax.text(x, 0.02, text, rotation=90, ha="center", va="bottom", fontsize=8,
                            transform=ax.get_xaxis_transform())
                    continue
                ax.plot([x], [shown], markers[name], color=f"C{frameworks.index(f)}", markersize=7,
                        fillstyle="full" if name == next(iter(markers)) else "none")
                # the first series' value above its dot, the others' below theirs: close values side by side
                # (cold and warm) do not print over each other
                below = bool(column) and name != next(iter(markers))
                ax.annotate(duration_text(shown * scale), (x, shown), textcoords="offset points",
                            xytext=(0, -8 if below else 7), ha="center", va="top" if below else "baseline",
                            fontsize=7)
        first = next(iter(markers))
        firsts = {f: _value(group, f, column, first, value) for f in present}
        fastest = min((v for v in firsts.values() if v), default=None)
        labels = []
        for i, f in enumerate(present):
            # the ratios a log axis shows as distances, written: each column against the row's fastest, and a
            # second series against the first (warm against cold)
            ratio = firsts[f] / fastest if firsts[f] and fastest else None
            labels.append(f if ratio is None else f"{f}\n{ratio:.1f}x the fastest" if ratio > 1.0005 else
                          f"{f}\nthe fastest")
            for name in list(markers)[1:]:
                other = _value(group, f, column, name, value)
                if firsts[f] and other:
                    ax.annotate(f"{first} {firsts[f] / other:.1f}x\n{name}", (i, (firsts[f] * other) ** 0.5),
                                ha="center",
                                va="center", fontsize=7, style="italic", color="#444444")
        ax.set_xticks(range(len(present)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(present) - 0.4)
        ax.set_title(row_label(*key), fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_yscale("log")
        # ticks in the values' own unit (1 s, 2 s, 5 s, 10 s), not 4x10^0
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: duration_text(v * scale)))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.margins(y=0.3)
    if column and rows:
        handles = [plt.Line2D([], [], marker=m, linestyle="", color="grey",
                              fillstyle="full" if i == 0 else "none", label=str(name))
                   for i, (name, m) in enumerate(markers.items())]
        fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8)
        fig.tight_layout(rect=(0, 0, 1, 0.95))          # the legend above the panels, not over one
    else:
        fig.tight_layout()
    return fig


def _value(group: pd.DataFrame, framework: str, column: str | None, name, value: str) -> float | None:
    found = group[(group.framework == framework) & ((group[column] == name) if column else True)
                  & (group["status"] == "ok")]
    shown = found[value].iloc[0] if len(found) else None
    return float(shown) if shown is not None and pd.notna(shown) and shown > 0 else None


def speedup_chart(summary: pd.DataFrame, frameworks: list[str], keras3: list[str]):
    """Bars of other/best - 1 per row; a column whose interval overlaps the best's is drawn hatched and pale (a tie:
    its bar is no finding)."""
    table = tables.speedup_table(summary, frameworks, keras3)
    columns = [c for c in table.columns if c.startswith("vs ") and c.endswith(" %")]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(table)), 4.5))
    width = 0.8 / max(len(columns), 1)
    for i, column in enumerate(columns):
        ties = table[column.removesuffix(" %")].str.startswith((stats.NOT_SHOWN, "no interval"))
        bars = ax.bar([x + i * width for x in range(len(table))], table[column].fillna(0), width,
                      label=column.removeprefix("vs ").removesuffix(" %"), color=f"C{i}")
        for bar, tie in zip(bars, ties):
            if tie:
                bar.set_hatch("//")
                bar.set_alpha(0.35)
    labels = [row_label(*k) + ("\n(params differ)" if flag else "\n(networks differ)" if net else "")
              for k, flag, net in zip(table.index, table["params_parity"], table[tables.NETWORKS])]
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(table))], labels, fontsize=7, rotation=30, ha="right")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("best Keras 3 of the row faster by, % (other / best - 1); hatched: not shown to differ",
                  fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def build(records: Records, run: RunContext) -> list[Path]:
    """From the profile's cells' summary (kbench.results.tables' cells_summary.csv)."""
    out_dir, frameworks, keras3 = run.plots_dir, list(run.frameworks), list(run.keras3)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = pd.read_csv(run.tables_dir / tables.SUMMARY)
    figures = {
        "ms_per_step": bars_per_row(summary, frameworks, "estimate_ms", "ms/step (95% interval)", interval=True),
        "speedup": speedup_chart(summary, frameworks, keras3),
    }
    written = []
    for name, fig in figures.items():
        for fmt in FORMATS:
            path = out_dir / f"{name}.{fmt}"
            save(fig, path)
            written.append(path)
        plt.close(fig)
    return written


TABLE = Table(rule="plots", outputs=(), plots=tuple(f"{name}.{fmt}" for name in PLOTS for fmt in FORMATS), build=build,
              category="Plots", reads_tables=lambda run: [(None, tables.SUMMARY)], rebuilt=False)
