"""Cell JSONs of one profile of a suite -> the final tables (CSV, Markdown, HTML).

A cell runs `repeats` times (fresh processes); its number is the median of the repeats' means with a 95% interval
(kbench.results.stats). Tables read the per-cell summary; cells_long keeps every repeat.

ms_per_step : rows model/task/batch/precision, one column per framework: ms/step "estimate ± half-width" (Markdown,
              HTML; the CSV has the estimate and `<framework> low` / `<framework> high`), or "failed: <error type>",
              "n/a: <reason>" (configured) or "unsupported: <reason>" (the adapter's); in a profile that reproduces
              the anchor, the departures no profile can keep that apply to the row
speedup     : per row the best Keras 3 backend (the lowest estimate of the row, selected per row), and against each
              column other/best - 1 in % where the two intervals separate, "tie (within CI)" where they overlap
params      : parameter counts per framework (total, and trainable where it differs), and a parity flag where two
              frameworks' counts for the same row differ by more than PARITY_TOLERANCE: those times compare
              different models (ms_per_step and speedup carry the flag too)
precision   : the mixed-precision study, per model/task: one row per framework, one column per precision (ms/step)
precision_speedup : per model/task and framework, baseline ms / ms at each other precision (x, above 1 is faster),
              whether the two intervals separate, beside the speedup usually claimed for that model/task
throughput  : per cell examples/s, generated tokens/s, model FLOPs per step (kbench.results.flops), achieved TFLOP/s, and on
              a GPU of kbench.gpu.peaks the peak of the arithmetic the cell ran and the MFU
memory      : per cell peak device memory (the framework's allocator; NVML's device memory in use after the steps,
              the driver's view) and peak host RSS, the largest over the repeats
cells_summary : the per-cell summary every table reads (estimate, interval, repeats, throughput, memory, ...)
cells_long  : every statistic and provenance field of every repeat of every cell, one row each
equivalence, equivalence_long : the equivalence check's tables (kbench.results.equivalence_tables), written here with
              the others; ms_per_step and speedup carry its flag per row
"""
from __future__ import annotations

import json

import pandas as pd

from kbench.contract.spec import StepShape
from kbench.contract import cell
from kbench.gpu import peaks
from kbench.models import family
from kbench.plan import departures
from kbench.results import equivalence_tables, flops, stats
from kbench.results.context import Records, RunContext, Table
from kbench.results.flat import FORMATS, ROW_KEYS, STUDY_KEYS, long_table, write, write_long
from kbench.results.equivalence_tables import EQUIVALENCE
from kbench.contract.precision import baselines as precision_baselines, label as precision_table_label

PARITY_TOLERANCE = 0.01
# The tables build() writes, each as CSV, Markdown and HTML, and the two long tables (CSV only): the rules' outputs.
TABLES = ("ms_per_step", "speedup", "params", "precision", "precision_speedup", "throughput", "memory", "energy",
          "equivalence")
SUMMARY, MS_PER_STEP = "cells_summary.csv", "ms_per_step.csv"     # the summary every reader starts from; ms/step's flags
OUTPUTS = [f"{name}.{fmt}" for name in TABLES for fmt in FORMATS] + [SUMMARY, "cells_long.csv",
                                                                      "equivalence_long.csv"]
UNREPRODUCED = "anchor settings not reproduced"
BEST = "best Keras 3 (lowest of the row)"
NETWORKS = "networks differ"
FLAGS = "cell flags"


# ---------------------------------------------------------------- one row per cell

def summary_table(long: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its repeats reduced to an estimate, a 95% interval and the figures derived from them."""
    rows = [summarize_cell(group) for _, group in long.groupby("cell_id", sort=False)]
    return pd.DataFrame(rows)


# What an ok cell's summary adds (empty for a cell that is not ok).
MEASURED = ("estimate_ms", "ci_low_ms", "ci_high_ms", "ci_method", "repeat_means", "first_step_ms", "examples_per_s",
            "tokens_per_s", "flops_per_step", "tflops_per_s", "arithmetic", "peak_tflops", "mfu", "peak_device_mib",
            "nvml_used_mib", "nvml_process_mib", "memory_view", "peak_host_rss_mib", "energy_j_per_step",
            "energy_j_per_token", "mean_power_w", "sm_clock_mhz_mean", "sm_clock_mhz_min", "memory_clock_mhz_mean",
            "temperature_c_max", "slowdowns", "power_capped", "compiles_in_window", "graph_breaks", "cudagraph_skips", "device_busy_share",
            "cell_flags")
FLAGGED = " †"         # a number measured under a condition its cell flags name (throttled, recompiled, ...)


def cell_flags(first, ok: pd.DataFrame) -> str:
    """What qualifies a cell's number, from its repeats: a GPU that slowed itself (thermal, hardware, power brake)
    during the window (a power cap is not a slowdown: see kbench.gpu.nvml), compilation inside the window, graph
    breaks or skipped CUDA graphs in a compiled cell."""
    flags = []
    slowdowns = sorted({s for text in ok.slowdowns.dropna() for s in text.split(", ") if s})
    if slowdowns:
        flags.append(f"throttled: {', '.join(slowdowns)}")
    if ok.compiles_in_window.fillna(0).max() > 0:
        flags.append(f"compiled {int(ok.compiles_in_window.max())}x inside the timed window")
    if first.jit_compiled and ok.graph_breaks.fillna(0).max() > 0:
        flags.append(f"{int(ok.graph_breaks.max())} graph breaks")
    if first.jit_compiled and first.device != "cpu" and ok.cudagraph_skips.fillna(0).max() > 0:
        flags.append("CUDA graphs skipped")
    return "; ".join(flags)


def estimate_text(estimate: stats.Estimate) -> str:
    """How a table shows an estimate: "mean ± half-width" of the interval the verdicts use (* one repeat)."""
    if estimate.low is None:
        return f"{estimate.ms:.2f} (no interval)"
    return f"{estimate.ms:.2f} ± {estimate.half_width:.2f}" + (stats.ONE_RUN if estimate.one_run else "")


def summarize_cell(repeats: pd.DataFrame) -> dict:
    """One cell's summary row: who ran it, then (where every repeat is ok) the estimate and what each figure derived
    from it says: throughput, FLOPs and MFU, memory, energy and the compile counters."""
    first = repeats.iloc[0]
    ok = repeats[repeats.status == "ok"]
    row = {k: first[k] for k in ("cell_id", "suite", "profile", *ROW_KEYS, "framework", "adapter", "params_total",
                                 "params_trainable", "device", "runtime", "compute_dtype", "weights_dtype")}
    row.update(dict.fromkeys(MEASURED), repeats=len(repeats), repeats_ok=len(ok))
    if len(ok) < len(repeats):              # a cell is ok only if every repeat is: the worst repeat speaks for it
        bad = repeats[repeats.status != "ok"].iloc[0]
        row.update(status=bad.status, text=bad.text + (f" ({len(repeats) - len(ok)} of {len(repeats)} repeats)"
                                                       if len(repeats) > 1 else ""))
        return row
    estimate = stats.estimate(list(ok.mean_ms), list(ok.block_means))
    flags = cell_flags(first, ok)
    row.update(status="ok", text=estimate_text(estimate) + (FLAGGED if flags else ""), cell_flags=flags)
    per_second = 1e3 / estimate.ms
    for part in (timing_summary(estimate, ok), throughput_summary(first, ok, per_second),
                 flops_summary(first, ok, per_second), memory_summary(first, ok), energy_summary(ok),
                 compile_summary(ok)):
        row.update(part)
    return row


def timing_summary(estimate: stats.Estimate, ok: pd.DataFrame) -> dict:
    """The estimate and its interval, each repeat's mean, the first step, and how busy the device was."""
    return dict(estimate_ms=estimate.ms, ci_low_ms=estimate.low, ci_high_ms=estimate.high, ci_method=estimate.method,
                repeat_means=json.dumps(list(estimate.means)), first_step_ms=ok.first_step_ms.median(),
                device_busy_share=ok.device_busy_share.mean() if ok.device_busy_share.notna().all() else None)


def throughput_summary(first, ok: pd.DataFrame, per_second: float) -> dict:
    """Examples (batch elements) and generated tokens per second at the estimate."""
    tokens_per_step = ok.generated_tokens_per_step.iloc[0]
    return dict(examples_per_s=first.batch_size * per_second,
                tokens_per_s=tokens_per_step * per_second if pd.notna(tokens_per_step) else None)


def flops_summary(first, ok: pd.DataFrame, per_second: float) -> dict:
    """Model FLOPs per step (kbench.results.flops), the TFLOP/s achieved, the arithmetic the step's products could
    run in, and on a GPU of kbench.gpu.peaks the peak they reach together and the MFU."""
    shape = StepShape(first.model, first.task, first.batch_size, first.arch, first.inputs, first.task_options,
                      first.adapter)
    known = flops.known(first.model, first.task)
    flop_count = flops.per_step(shape) if known else None
    classes = peaks.arithmetic(first.compute_dtype, ok.probe_class.iloc[0], ok.precision_switches.iloc[0],
                               {"NVIDIA_TF32_OVERRIDE": first.tf32_override})
    # NVML's name of the GPU the cell ran on (the framework's own name where NVML gave none); a MIG instance has a
    # part of the chip, and no peak of its own in kbench.gpu.peaks: no MFU rather than the whole GPU's
    mig = first.get("mig")
    device = None if pd.notna(mig) and bool(mig) else (
        first.gpu_name if isinstance(first.gpu_name, str) else first.device)
    least_s = peaks.peak_seconds(device, flops.by_kind(shape), classes) if known else None
    return dict(flops_per_step=flop_count, tflops_per_s=flop_count * per_second / 1e12 if flop_count else None,
                arithmetic=peaks.label(classes),
                # the peak the step's products could reach together (each kind at its own arithmetic's peak)
                peak_tflops=flop_count / least_s / 1e12 if least_s else None,
                mfu=least_s * per_second if least_s else None)


def memory_summary(first, ok: pd.DataFrame) -> dict:
    """The largest device memory (the framework's allocator, NVML's device-wide and per-process) and host RSS over
    the repeats, and what the framework's figure counts."""
    return dict(peak_device_mib=ok.peak_device_mib.max(), nvml_used_mib=ok.nvml_used_mib.max(),
                nvml_process_mib=ok.nvml_process_mib.max(), memory_view=first.memory_view,
                peak_host_rss_mib=ok.peak_host_rss_mib.max())


def energy_summary(ok: pd.DataFrame) -> dict:
    """Energy per step (where every repeat measured one) and per generated token, mean power, clocks, temperature,
    the slowdowns the driver reported, and whether the GPU sat at its power cap."""
    tokens_per_step = ok.generated_tokens_per_step.iloc[0]
    energy = ok.energy_j_per_step.mean() if ok.energy_j_per_step.notna().all() else None
    return dict(
        energy_j_per_step=energy,
        energy_j_per_token=energy / tokens_per_step if energy is not None and pd.notna(tokens_per_step) else None,
        mean_power_w=ok.mean_power_w.mean(), sm_clock_mhz_mean=ok.sm_clock_mhz_mean.mean(),
        sm_clock_mhz_min=ok.sm_clock_mhz_min.min(), memory_clock_mhz_mean=ok.memory_clock_mhz_mean.mean(),
        temperature_c_max=ok.temperature_c_max.max(),
        slowdowns=", ".join(sorted({s for t in ok.slowdowns.dropna() for s in t.split(", ") if s})),
        power_capped=bool(ok.power_capped.fillna(False).astype(bool).any()) if "power_capped" in ok else None)


def compile_summary(ok: pd.DataFrame) -> dict:
    """The framework's compile counters, the most over the repeats: compiles inside the timed window, graph breaks,
    skipped CUDA graphs."""
    return dict(compiles_in_window=ok.compiles_in_window.max(), graph_breaks=ok.graph_breaks.max(),
                cudagraph_skips=ok.cudagraph_skips.max())


def as_estimate(r) -> stats.Estimate:
    """A summary row (a DataFrame row, or one read back from cells_summary.csv) as the Estimate it was made from."""
    def bound(value):
        return None if pd.isna(value) else float(value)
    means = r.repeat_means if isinstance(r.repeat_means, str) else "[]"
    return stats.Estimate(r.estimate_ms, bound(r.ci_low_ms), bound(r.ci_high_ms), int(r.repeats), r.ci_method,
                          tuple(json.loads(means)))


def estimates(summary: pd.DataFrame, row) -> dict[str, stats.Estimate]:
    """framework -> Estimate, for the ok cells of one table row."""
    return {r.framework: as_estimate(r) for r in row.itertuples() if r.status == "ok"}


# ---------------------------------------------------------------- the tables

def _rows(summary: pd.DataFrame, keys=ROW_KEYS) -> pd.MultiIndex:
    return pd.MultiIndex.from_frame(summary[keys].drop_duplicates())


def _wide(summary: pd.DataFrame, values: str, frameworks: list[str]) -> pd.DataFrame:
    wide = summary.pivot(index=ROW_KEYS, columns="framework", values=values)
    return wide.reindex(index=_rows(summary), columns=[f for f in frameworks if f in wide.columns])


def flag_rows(index: pd.MultiIndex, flags: pd.Series | None) -> list[str]:
    """A per model/task flag (the equivalence check's) on each table row of that model and task."""
    if flags is None or flags.empty:
        return [""] * len(index)
    return [flags.get((key[0], key[1]), "") for key in index]


def ms_per_step_table(summary: pd.DataFrame, frameworks: list[str], unreproduced: list[dict] = (),
                      readable: bool = False, equivalence: pd.Series | None = None) -> pd.DataFrame:
    """readable: "estimate ± half-width" per cell (Markdown, HTML); else the estimate and its interval's bounds."""
    text = _wide(summary, "text", frameworks).fillna("")
    if readable:
        table = text
    else:
        estimate, low, high = (_wide(summary, c, frameworks).round(3) for c in ("estimate_ms", "ci_low_ms",
                                                                                  "ci_high_ms"))
        table = pd.DataFrame(index=text.index)
        for framework in text.columns:
            table[framework] = estimate[framework].astype(object).where(estimate[framework].notna(), text[framework])
            table[f"{framework} low"], table[f"{framework} high"] = low[framework], high[framework]
    table["params_parity"] = parity_flags(summary).reindex(table.index).fillna("")
    table[NETWORKS] = network_flags(summary).reindex(table.index).fillna("")
    table[FLAGS] = row_flags(summary).reindex(table.index).fillna("")
    table[EQUIVALENCE] = flag_rows(table.index, equivalence)
    if unreproduced:
        columns = [f for f in frameworks if f in summary.framework.values]
        table[UNREPRODUCED] = [", ".join(departures.applying(list(unreproduced), model, task, columns))
                               for model, task, _, _ in table.index]
    return table


def parity_flags(summary: pd.DataFrame, tolerance: float = PARITY_TOLERANCE) -> pd.Series:
    """Per row: "" when every framework's parameter counts agree within tolerance, else what differs and by how
    much ("total +1.5%, trainable +112%"), relative max/min - 1 over the frameworks that recorded counts."""
    counted = summary.dropna(subset=["params_total"])

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


def row_flags(summary: pd.DataFrame) -> pd.Series:
    """Per row: each flagged cell's framework and flags ("keras3-jax: throttled: thermal (software)")."""
    flagged = summary[summary.cell_flags.fillna("") != ""]
    if flagged.empty:
        return pd.Series(dtype=str)
    return flagged.groupby(ROW_KEYS, sort=False).apply(
        lambda group: "; ".join(f"{r.framework}: {r.cell_flags}" for r in group.itertuples()), include_groups=False)


def network_flags(summary: pd.DataFrame) -> pd.Series:
    """Per row: "" where every column's network does the same FLOPs per step, else which networks the columns built
    and how their FLOPs differ (kbench.results.flops counts per column where libraries build different networks under one
    name, e.g. ResNet-50 v1 and v1.5): such a row's times are of different networks."""
    counted = summary.dropna(subset=["flops_per_step"])

    def flag(group: pd.DataFrame) -> str:
        if group.flops_per_step.nunique() < 2:
            return ""
        low, high = group.flops_per_step.min(), group.flops_per_step.max()
        built = []
        for value, columns in group.groupby("flops_per_step", sort=True):
            name = family.of(group.name[0]).network(columns.adapter.iloc[0])
            built.append(f"{name}: {', '.join(columns.framework)} ({value:.4g} FLOPs/step)")
        return f"FLOPs/step differ by {high / low - 1:.1%}: " + "; ".join(built)
    if counted.empty:
        return pd.Series(dtype=str)
    return counted.groupby(ROW_KEYS, sort=False).apply(flag, include_groups=False)


def params_table(summary: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Parameter counts as "total" or "total (trainable)" per framework, and the parity flag."""
    def text(row) -> str:
        if pd.isna(row.params_total):
            return ""
        total, trainable = int(row.params_total), int(row.params_trainable)
        return f"{total:,}" if trainable == total else f"{total:,} ({trainable:,} trainable)"
    wide = summary.assign(value=summary.apply(text, axis=1)).pivot(index=ROW_KEYS, columns="framework",
                                                                   values="value")
    rows = _rows(summary)
    table = wide.reindex(index=rows, columns=[f for f in frameworks if f in wide.columns]).fillna("")
    table["params_parity"] = parity_flags(summary).reindex(rows).fillna("")
    return table


def welch_verdicts(pairs: list[tuple[stats.Estimate, stats.Estimate] | None]) -> list[str]:
    """Welch's verdict of each (reference, other) pair where both have 2 or more repeats ("" otherwise), its p-value
    adjusted together with every other pair of the table (Benjamini-Hochberg): "faster (q=0.012)" says the other
    column is faster than the reference."""
    tested = [i for i, pair in enumerate(pairs) if pair and stats.testable(*pair)]
    q = stats.adjusted([stats.welch_p(list(pairs[i][0].means), list(pairs[i][1].means)) for i in tested])
    verdicts = [""] * len(pairs)
    for i, value in zip(tested, q):
        reference, other = pairs[i]
        if value < stats.SIGNIFICANCE:
            verdicts[i] = f"{'slower' if other.ms > reference.ms else 'faster'} (q={value:.3f})"
        else:
            verdicts[i] = f"{stats.NOT_SHOWN} (q={value:.3f})"
    return verdicts


def speedup_table(summary: pd.DataFrame, frameworks: list[str], keras3: list[str],
                  equivalence: pd.Series | None = None) -> pd.DataFrame:
    """The best Keras 3 backend is selected per row, as the anchor did: the row's lowest Keras 3 estimate; a Keras 3
    backend whose interval overlaps the best's is named as not shown to differ from it. Against each column:
    other/best - 1 in % (the CSV always has it), and two verdicts: the intervals' (that % only where they separate;
    * where either side is one repeat) and, where both sides have repeats, Welch's (BH-adjusted over the table)."""
    table = pd.DataFrame(index=_rows(summary))
    best_names, best_ms = [], []
    numbers, verdicts, pairs = ({f: [] for f in frameworks} for _ in range(3))
    for key in table.index:
        found = estimates(summary, summary.set_index(ROW_KEYS).loc[[key]].reset_index())
        candidates = {f: e for f, e in found.items() if f in keras3}
        best = min(candidates, key=lambda f: candidates[f].ms) if candidates else None
        tied = [f for f in candidates if f != best and not stats.separate(candidates[f], candidates[best])]
        best_names.append(None if best is None else best + (f" (not shown to differ: {', '.join(tied)})"
                                                            if tied else ""))
        best_ms.append(None if best is None else round(candidates[best].ms, 2))
        for framework in frameworks:
            if best is None or framework not in found:
                numbers[framework].append(None)
                verdicts[framework].append("")
                pairs[framework].append(None)
                continue
            percent = round((found[framework].ms / candidates[best].ms - 1) * 100)
            numbers[framework].append(percent)
            verdicts[framework].append("best" if framework == best else
                                       stats.interval_verdict(found[framework], candidates[best], f"{percent:+d}%"))
            pairs[framework].append(None if framework == best else (candidates[best], found[framework]))
    table[BEST], table["best Keras 3 ms"] = best_names, best_ms
    present = [f for f in frameworks if f in summary.framework.values]
    flat = [pair for f in present for pair in pairs[f]]
    welch = iter(welch_verdicts(flat))
    welch_by_framework = {f: [next(welch) for _ in pairs[f]] for f in present}
    for framework in present:
        table[f"vs {framework}"], table[f"vs {framework} %"] = verdicts[framework], numbers[framework]
        if any(welch_by_framework[framework]):
            table[f"vs {framework} Welch"] = welch_by_framework[framework]
    table["params_parity"] = parity_flags(summary).reindex(table.index).fillna("")
    table[NETWORKS] = network_flags(summary).reindex(table.index).fillna("")
    table[FLAGS] = row_flags(summary).reindex(table.index).fillna("")
    table[EQUIVALENCE] = flag_rows(table.index, equivalence)
    return table


def study_cells(summary: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The cells of every model/task/batch that ran the baseline precision and at least one other."""
    def in_study(group: pd.DataFrame) -> bool:
        return baseline in set(group.precision) and group.precision.nunique() > 1
    return summary.groupby(STUDY_KEYS, sort=False).filter(in_study)


def precision_table(summary: pd.DataFrame, frameworks: list[str], baseline: str) -> pd.DataFrame:
    """Rows model/task/batch/framework, one column per precision (baseline first): ms/step or the cell's status."""
    study = study_cells(summary, baseline)
    keys = STUDY_KEYS + ["framework"]
    if study.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=keys))
    wide = study.pivot(index=keys, columns="precision", values="text")
    precisions = [baseline] + [p for p in study.precision.unique() if p != baseline]
    return wide.reindex(index=_study_rows(study, frameworks), columns=precisions).fillna("")


def precision_speedup_table(summary: pd.DataFrame, frameworks: list[str], baseline: str,
                            claims: list[dict], costs: dict | None = None) -> pd.DataFrame:
    """Rows model/task/batch/framework: each baseline's ms / the ms of each other precision (x; above 1 is faster):
    the configured baseline (float32) and every other baseline precision that ran (tf32, on a GPU), from cells
    that are ok at both; whether their intervals separate (* one repeat) and, with repeats on both sides, Welch's
    verdict; beside the claimed speedup and the baseline the claim is read against."""
    study = study_cells(summary, baseline)
    keys = STUDY_KEYS + ["framework"]
    if study.empty:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=keys))
    ok = study[study.status == "ok"].set_index(keys + ["precision"])
    table = pd.DataFrame(index=_study_rows(study, frameworks))
    ran = list(study.precision.unique())
    denominators = [b for b in precision_baselines(baseline) if b in ran]
    for over in denominators:
        # against the configured baseline every other precision (tf32 too: what TF32 buys), against the others
        # the non-baselines
        for name in [p for p in ran if p != over and (over == baseline or p not in denominators)]:
            ratios, verdicts, pairs = [], [], []
            for key in table.index:
                a, b = (as_estimate(ok.loc[key + (p,)]) if key + (p,) in ok.index else None for p in (over, name))
                if a is None or b is None:
                    ratios.append(None)
                    verdicts.append("")
                    pairs.append(None)
                    continue
                ratios.append(round(a.ms / b.ms, 2))
                verdicts.append(stats.interval_verdict(a, b, "different"))
                pairs.append((a, b))
            if over != baseline and not any(pairs):
                continue          # a baseline no cell of the study ran (tf32 on a CPU): no empty columns
            label = f"{precision_table_label(over)} / {precision_table_label(name)}"
            table[f"{label} x"], table[f"{label} verdict"] = ratios, verdicts
            welch = welch_verdicts(pairs)
            if any(welch):
                table[f"{label} Welch"] = welch
        if costs and over == baseline:      # what the precision costs in accuracy, beside what it buys in speed
            found = [costs.get((model, task, framework, name)) for model, task, _, framework in table.index]
            if any(found):
                label = precision_table_label(name)
                table[f"{label} output rel error"] = [None if f is None else float(f"{f[0]:.2g}") for f in found]
                if any(f and f[1] is not None for f in found):
                    table[f"{label} loss rel error"] = [None if f is None or f[1] is None else float(f"{f[1]:.2g}")
                                                        for f in found]
    claimed = {(c["model"], c["task"]): c for c in claims}
    found = [claimed.get((model, task), {}) for model, task, _, _ in table.index]
    table["claimed x"] = [c.get("speedup") for c in found]
    table["claim against"] = [precision_table_label(c.get("baseline", baseline)) if c else "" for c in found]
    table["claim"] = [c.get("quote", "") for c in found]
    return table


# What examples_per_s counts: one batch element of the step.
def example(model: str, task: str) -> str:
    """What one example of the step is (the model family's `example` fact)."""
    return family.of(model).example[task]


def throughput_table(summary: pd.DataFrame) -> pd.DataFrame:
    ok = summary[summary.status == "ok"]
    table = ok.set_index(ROW_KEYS + ["framework"])[
        ["examples_per_s", "tokens_per_s", "flops_per_step", "tflops_per_s", "arithmetic", "peak_tflops", "mfu"]]
    table.insert(1, "one example is", [example(*key[:2]) for key in table.index])
    table = table.assign(flops_per_step=table.flops_per_step.map(lambda f: f"{f:.4g}" if pd.notna(f) else None),
                         mfu=(table.mfu * 100).round(2))
    return table.rename(columns={"mfu": "MFU %"}).round({"examples_per_s": 2, "tokens_per_s": 1,
                                                          "tflops_per_s": 4})


def memory_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Three views of device memory, each named: the framework's allocator peak (what it counts differs by
    framework: memory_view), NVML's device-wide use (every process, and under MIG in a container the parent GPU),
    and NVML's per-process figure where one process was on the GPU."""
    ok = summary[summary.status == "ok"]
    return ok.set_index(ROW_KEYS + ["framework"])[
        ["peak_device_mib", "memory_view", "nvml_used_mib", "nvml_process_mib", "peak_host_rss_mib"]].rename(
        columns={"peak_device_mib": "peak device MiB (framework)", "memory_view": "what the framework counts",
                 "nvml_used_mib": "device MiB in use (NVML, device-wide)",
                 "nvml_process_mib": "device MiB of the cell's process (NVML)", "peak_host_rss_mib": "peak host RSS MiB"})


def energy_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per GPU cell: energy per step (and per generated token) from NVML's energy counter around the timed window,
    mean power, clocks and temperature during it, the slowdowns the driver reported, and the MFU beside them."""
    ok = summary[(summary.status == "ok") & summary.energy_j_per_step.notna()]
    table = ok.set_index(ROW_KEYS + ["framework"])[
        ["energy_j_per_step", "energy_j_per_token", "mean_power_w", "mfu", "sm_clock_mhz_mean", "sm_clock_mhz_min",
         "memory_clock_mhz_mean", "temperature_c_max", "power_capped", "slowdowns"]]
    return table.assign(mfu=(table.mfu * 100).round(2)).rename(columns={
        "energy_j_per_step": "J/step", "energy_j_per_token": "J/token", "mean_power_w": "mean W", "mfu": "MFU %",
        "sm_clock_mhz_mean": "SM MHz (mean)", "sm_clock_mhz_min": "SM MHz (min)",
        "memory_clock_mhz_mean": "memory MHz (mean)", "temperature_c_max": "max °C",
        "power_capped": "at its power cap", "slowdowns": "slowdowns seen"}).round(
        {"J/step": 4, "J/token": 5, "mean W": 1})


def _study_rows(study: pd.DataFrame, frameworks: list[str]) -> pd.MultiIndex:
    """Model/task/batch in the order they ran, frameworks in column order."""
    rows = study[STUDY_KEYS].drop_duplicates().itertuples(index=False)
    present = set(study.framework)
    return pd.MultiIndex.from_tuples([(*row, f) for row in rows for f in frameworks if f in present],
                                     names=STUDY_KEYS + ["framework"])


# ---------------------------------------------------------------- files

NOTE = ("\nms/step: the mean of the repeats' means ± the half-width of its 95% interval (Student's t over the "
        f"repeats; {stats.ONE_RUN}: one repeat, t over its synced blocks, within-run only: it cannot see run-to-run "
        "spread). Verdicts: the % where two intervals do not overlap; \"not shown to differ\" where they do, which "
        "is not \"equal\": non-overlap is a strict test (with 3 repeats at 4% run-to-run spread it calls 0.5% of "
        f"equal pairs different and finds a true 10% difference about 15% of the time); {stats.ONE_RUN} marks a "
        "verdict resting on a one-repeat interval. Where both sides have repeats, the Welch column gives Welch's "
        "t-test on the repeat means, its p-values adjusted over the table (Benjamini-Hochberg q, different at "
        "q < 0.05; about 50% power in the same case).\n")


def build(records: Records, run: RunContext) -> None:
    out_dir, profile, frameworks, keras3 = run.tables_dir, run.profile, list(run.frameworks), list(run.keras3)
    baseline, unreproduced = run.precision_baseline, list(run.unreproduced)
    out_dir.mkdir(parents=True, exist_ok=True)
    long = long_table(list(records.cells))
    write_long(long, out_dir / "cells_long.csv")
    summary = summary_table(long)
    summary.to_csv(out_dir / SUMMARY, index=False)
    checked = equivalence_tables.equivalence_long(list(records.equivalence), list(run.differences),
                                                  list(run.departures))
    flags = equivalence_tables.equivalence_flags(checked)
    write(ms_per_step_table(summary, frameworks, unreproduced, equivalence=flags), out_dir, "ms_per_step", profile,
          readable=ms_per_step_table(summary, frameworks, unreproduced, readable=True, equivalence=flags),
          note=NOTE)
    write(speedup_table(summary, frameworks, keras3, flags), out_dir, "speedup", profile, note=NOTE)
    checked.to_csv(out_dir / "equivalence_long.csv", index=False)
    write(equivalence_tables.equivalence_table(checked, frameworks), out_dir, EQUIVALENCE, profile,
          note=equivalence_tables.EQUIVALENCE_NOTE + equivalence_tables.difference_notes(checked))
    write(params_table(summary, frameworks), out_dir, "params", profile)
    write(precision_table(summary, frameworks, baseline), out_dir, "precision", profile, by_section=True)
    costs = equivalence_tables.accuracy_costs(checked)
    write(precision_speedup_table(summary, frameworks, baseline, list(run.precision_claims), costs), out_dir, "precision_speedup",
          profile, by_section=True)
    write(throughput_table(summary), out_dir, "throughput", profile,
          note="\nexamples/s: batch elements per second (\"one example is\" says what one is: for SD predict a latent "
               "through one denoising step, not an image). FLOPs: model FLOPs per step (kbench.results.flops: 2 x "
               "multiply-accumulates of matrix products, convolutions and attention; per column where the libraries "
               "build different networks). MFU: the time those FLOPs take at the device's dense peak for the "
               "arithmetic each product could run in (matmuls as the float32 probe saw, convolutions as the "
               "recorded switches allowed; kbench.gpu.peaks), over the measured time; peak TFLOP/s: the peak they "
               "reach together. GPUs in kbench.gpu.peaks only.\n")
    write(memory_table(summary), out_dir, "memory", profile)
    write(energy_table(summary), out_dir, "energy", profile,
          note="\nGPU cells only: NVML's energy counter (mJ since the driver loaded) read just before and after the "
               "timed window, over its steps (and generated tokens), for windows of 1 s or more (the counter moves "
               "in ~100 ms steps); mean W = energy / window time; clocks and temperature sampled every 50 ms in the "
               "window; at its power cap: the driver held the clocks at the power limit (normal for a heavy step on "
               "an H100/H200; not a slowdown); slowdowns: the clock-event reasons that mean the GPU slowed itself "
               "(thermal, hardware slowdown, power brake), which also flag the cell's number (†) in ms_per_step.\n")


TABLE = Table(rule="tables", outputs=tuple(OUTPUTS), build=build, category="Tables", reads=("cells", "equivalence"))
