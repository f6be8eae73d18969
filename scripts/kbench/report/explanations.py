"""The published benchmark's own explanations of its findings, as verdicts on this run's breakdowns by kind of work
(kbench.breakdown, time_by_kind_long.csv) and its ms/step (cells_summary.csv): holds / does not hold / not measured,
each with the figures it rests on. One rule per kind of explanation (config published.explanations):

- library_fused_ops: "Keras 3 beats Keras 2 mainly because Keras 2 uses more TensorFlow fused operations": on the rows
  where both columns have a breakdown and Keras 3 is faster beyond the intervals, the time Keras 2 spends in its op
  library's fused kernels beyond Keras 3's (kbench.breakdown.LIBRARY_FUSED) is at least `share_of_gap` of the
  profiled gap between them. Does not hold where Keras 3 is faster and that time is less.
- little_manual_optimisation: the gap between native PyTorch and Keras 3 is largest on `model` (Segment Anything,
  whose native code is its authors' own): that model's rows have the largest native / best Keras 3 ratio of all rows,
  and there the native column's extra profiled time lies mostly (`share_of_gap`) outside matrix products and
  convolutions (data movement, elementwise, waiting, other: the glue a hand-optimised implementation removes).
- host_overhead_at_small_batch: a small batch makes PyTorch look slower because Python's overhead grows: where a
  model and task ran at two or more batch sizes, the native column's waiting share (the host outside any op) is
  larger at the smallest batch than at the largest, and larger than the best Keras 3 column's at that batch.

And the compile's cost side of "out of the box" (config first_step.claim, on first_step_long.csv): pays_back_within.
"""
from __future__ import annotations

import pandas as pd

from kbench.report.verdicts import FAILS, HOLDS, NOT_MEASURED, table
from kbench.results import stats, tables

MATH = ("matmul_conv",)
GLUE = ("data_movement", "elementwise", "waiting", "other")


def _label(key) -> str:
    model, task, batch, precision = key
    return f"{model} {task} bs{batch} {precision}"


def _cells(long: pd.DataFrame) -> dict[tuple, dict[str, dict]]:
    """(row key) -> column -> {kind: ms/step, "window": profiled ms/step, "library_fused": ms/step}, closed ones."""
    found: dict[tuple, dict[str, dict]] = {}
    for key, group in long[long.closes.astype(bool)].groupby([*tables.ROW_KEYS, "framework"], sort=False):
        *row, framework = key
        figures = dict(zip(group.kind, group.ms_per_step))
        figures.update(window=float(group.window_ms_per_step.iloc[0]),
                       library_fused=float(group.library_fused_ms_per_step.iloc[0] or 0.0))
        found.setdefault(tuple(row), {})[framework] = figures
    return found


def _estimates(summary: pd.DataFrame) -> dict[tuple, dict[str, stats.Estimate]]:
    return {key: tables.estimates(summary, group) for key, group in summary.groupby(tables.ROW_KEYS, sort=False)}


def library_fused_ops(rule: dict, long: pd.DataFrame, summary: pd.DataFrame, keras3: list[str],
                      native: list[str]) -> tuple[str, str]:
    old, new, share = rule.get("keras2", "keras2"), rule.get("keras3", "keras3-tensorflow"), rule["share_of_gap"]
    cells, found = _cells(long), _estimates(summary)
    checked, rests_on = [], []
    for key, columns in cells.items():
        measured = found.get(key, {})
        if old not in columns or new not in columns or old not in measured or new not in measured:
            continue
        if not (measured[new].ms < measured[old].ms and stats.separate(measured[new], measured[old])):
            rests_on.append(f"{_label(key)}: Keras 3 not faster beyond the intervals")
            continue
        gap = columns[old]["window"] - columns[new]["window"]
        extra = columns[old]["library_fused"] - columns[new]["library_fused"]
        explains = gap > 0 and extra >= share * gap
        checked.append(explains)
        rests_on.append(f"{_label(key)}: profiled gap {gap:.2f} ms/step, {old}'s fused ops beyond {new}'s "
                        f"{extra:.2f} ms ({extra / gap:.0%} of it)" if gap > 0 else
                        f"{_label(key)}: no profiled gap ({gap:.2f} ms/step)")
    if not checked:
        return NOT_MEASURED, ("no row where both columns have a breakdown and Keras 3 is faster beyond the "
                              "intervals" + (": " + "; ".join(rests_on) if rests_on else ""))
    return (HOLDS if all(checked) else FAILS), "; ".join(rests_on)


def little_manual_optimisation(rule: dict, long: pd.DataFrame, summary: pd.DataFrame, keras3: list[str],
                               native: list[str]) -> tuple[str, str]:
    model, share = rule["model"], rule["share_of_gap"]
    cells, found = _cells(long), _estimates(summary)
    ratios = {}
    for key, measured in found.items():
        natives = [f for f in native if f in measured]
        kerases = [f for f in keras3 if f in measured]
        if natives and kerases:
            best_native = min(natives, key=lambda f: measured[f].ms)
            best_keras = min(kerases, key=lambda f: measured[f].ms)
            ratios[key] = (measured[best_native].ms / measured[best_keras].ms, best_native, best_keras)
    own = {k: v for k, v in ratios.items() if k[0] == model}
    if not own or len(ratios) == len(own):
        return NOT_MEASURED, f"needs {model} rows and other rows with a native and a Keras 3 column"
    largest_other = max(v[0] for k, v in ratios.items() if k[0] != model)
    rests_on = [f"largest ratio on another row: {largest_other:.2f}x"]
    verdicts = []
    for key, (ratio, best_native, best_keras) in own.items():
        columns = cells.get(key, {})
        if best_native not in columns or best_keras not in columns:
            rests_on.append(f"{_label(key)}: {ratio:.2f}x, no breakdown of {best_native} and {best_keras}")
            continue
        a, b = columns[best_native], columns[best_keras]
        gap = a["window"] - b["window"]
        glue = sum(a.get(k, 0) - b.get(k, 0) for k in GLUE)
        verdicts.append(ratio > largest_other and gap > 0 and glue >= share * gap)
        rests_on.append(f"{_label(key)}: {best_native} / {best_keras} {ratio:.2f}x; of the profiled gap "
                        f"{gap:.2f} ms/step, {glue:.2f} ms outside matrix products (data movement, elementwise, "
                        "waiting, other)")
    if not verdicts:
        return NOT_MEASURED, "; ".join(rests_on)
    return (HOLDS if all(verdicts) else FAILS), "; ".join(rests_on)


def host_overhead_at_small_batch(rule: dict, long: pd.DataFrame, summary: pd.DataFrame, keras3: list[str],
                                 native: list[str]) -> tuple[str, str]:
    cells = _cells(long)
    groups: dict[tuple, dict[int, dict[str, dict]]] = {}
    for (model, task, batch, precision), columns in cells.items():
        groups.setdefault((model, task, precision), {})[int(batch)] = columns
    verdicts, rests_on = [], []
    for (model, task, precision), by_batch in groups.items():
        if len(by_batch) < 2:
            continue
        small, large = min(by_batch), max(by_batch)
        for column in [f for f in native if f in by_batch[small] and f in by_batch[large]]:
            share_small = by_batch[small][column]["waiting"] / by_batch[small][column]["window"]
            share_large = by_batch[large][column]["waiting"] / by_batch[large][column]["window"]
            kerases = {f: c["waiting"] / c["window"] for f, c in by_batch[small].items() if f in keras3}
            keras_share = min(kerases.values()) if kerases else None
            verdicts.append(share_small > share_large and (keras_share is None or share_small > keras_share))
            rests_on.append(f"{model} {task} {precision} {column}: waiting {share_small:.0%} of the step at bs{small}, "
                            f"{share_large:.0%} at bs{large}"
                            + (f"; best Keras 3 at bs{small}: {keras_share:.0%}" if keras_share is not None else ""))
    if not verdicts:
        return NOT_MEASURED, "no native column with a breakdown at two or more batch sizes of one model and task"
    return (HOLDS if all(verdicts) else FAILS), "; ".join(rests_on)


def pays_back_within(claim: dict, long: pd.DataFrame) -> tuple[str, str]:
    """The compile's cost side of "out of the box": each compiled column with an eager twin must pay its longer wait
    to the first step back within claim["steps"] timed steps (the anchor's NUM_STEPS: what its ms/step averages over),
    cold and warm. Holds where every such cell does; not measured where no row has both columns."""
    checked, rests_on = [], []
    for _, entry in long[long.pays_back_after_steps.notna()].iterrows():
        text = entry["pays_back_after_steps"]
        within = text == "at once" or (text.isdigit() and int(text) <= claim["steps"])
        checked.append(within)
        rests_on.append(f"{entry['model']} {entry['task']} bs{entry['batch_size']} {entry['precision']} "
                        f"{entry['framework']} {entry['state']}: {entry['to_first_step_s']:.1f} s to its first step, "
                        f"pays back after {text}" + ("" if text.startswith(("never", "at once")) else " steps"))
    if not checked:
        return NOT_MEASURED, "no row with a compiled column and its eager twin (config first_step.eager_twin)"
    return (HOLDS if all(checked) else FAILS), "; ".join(rests_on)


RULES = {"library_fused_ops": library_fused_ops, "little_manual_optimisation": little_manual_optimisation,
         "host_overhead_at_small_batch": host_overhead_at_small_batch}


def verdicts(explanations: list[dict], long: pd.DataFrame, summary: pd.DataFrame, keras3: list[str],
             native: list[str], on_gpu: bool) -> pd.DataFrame:
    """One line per explanation: its words, the verdict (on a CPU: not measured here, with what the CPU rows read),
    the figures it rests on."""
    return table(explanations, lambda rule: RULES[rule["kind"]](rule, long, summary, keras3, native),
                 "the benchmark's explanation", on_gpu, "breakdowns")
