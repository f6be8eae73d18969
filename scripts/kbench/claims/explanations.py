"""The published benchmark's own explanations of its findings, as verdicts on this run's breakdowns by kind of work
(kbench.breakdown: kbench.results.breakdown_tables' time_by_kind_long.csv) and its ms/step (cells_summary.csv). Each
rule tests the sentence as its source states it (config published.explanations: its quote), and decides only what
the data can:

- Every figure carries a 95% interval: a cell's timed ms/step its estimate's (kbench.results.stats), a kind's time
  its share's interval across the profiled steps times that estimate (the profiler lengthens a step, not what it is
  made of: a share of the profiled step, in timed ms). A cell profiled at more than `max_profiler_overhead` times (or
  under its inverse) its timed ms/step decides nothing through its breakdown (its timed ms/step still counts).
- "holds" where the intervals separate in the claim's favour, "does not hold" only where they separate against it as
  the source states it; overlapping figures read "not measured here" with the figures that decided, printed to the
  precision that tells them apart.

The rules (one per kind of explanation):
- library_fused_ops (the page's finding 4): Keras 2 "in some cases directly uses more TensorFlow fused operations,
  which may not be optimal for XLA compilation". Its mechanism is visible only where Keras 2 runs without XLA (the
  anchor profile's keras2): a row where Keras 2's ops ran mostly in XLA programs reads "cannot be observed here: XLA
  compiles both". Counted: the fused ops Keras 2's layers choose from TensorFlow's library (FusedBatchNormV3 for its
  BatchNormalization and LayerNormalization, CudnnRNN; kbench.breakdown.kinds.LAYER_FUSED), not grappler's remapper
  fusions that every TensorFlow graph gets (_FusedMatMul, _FusedConv2D). Keras 2's time in them is set against
  Keras 3's time on the same work: its time in the kinds of work those ops hold (the record's layer_fused_kinds:
  FusedBatchNormV3 is normalization), however Keras 3 runs it. Holds where, on some row with Keras 3 faster beyond
  the intervals, Keras 2's extra time (its time in those ops less Keras 3's on the same work) is at least
  `share_of_gap` of the gap; does not hold where on every such row it is less. A row whose Keras 2 record names no
  kinds (one from before the field) while it has time in those ops is undecided.
- little_manual_optimisation (finding 3): the gap between native PyTorch and Keras 3 on `model` (Segment Anything,
  its authors' own code) is larger than on most (more than half) other models, among the published rows (config
  published.rows: their model, task, batch and precision; less the rows `without` leaves out, as the finding does),
  and mostly (`share_of_gap`) outside matrix products (the glue a hand-optimised implementation would fuse: every
  kind but matmul and conv, waiting included). The ratio is timed and always counts; the glue part is profiled, and
  a SAM cell profiled past `max_profiler_overhead` decides nothing through it.
- host_overhead_at_small_batch (the batch study's claim): "a batch that is too small also makes PyTorch look slower,
  because Python's overhead grows": on the batch study's ladder (and every row with two or more batches), eager
  native PyTorch's (`column`) waiting share, the host outside any op, is larger at the smallest batch than at the
  largest, and larger than the best Keras 3 column's at that batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kbench.claims import findings
from kbench.claims.evidence import Evidence
from kbench.results import breakdown_tables, flat, stats, tables
from kbench.results.verdicts import CANNOT_OBSERVE, FAILS, HOLDS, NOT_MEASURED_HERE, Verdict, left_out

READS = (breakdown_tables.LONG, tables.SUMMARY)
MATH = ("matmul_conv",)


@dataclass(frozen=True)
class Figure:
    """A value with its 95% interval (low and high None: none)."""
    value: float
    low: float | None
    high: float | None

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def __sub__(self, other: "Figure") -> "Figure":
        if not (self.bounded and other.bounded):
            return Figure(self.value - other.value, None, None)
        return Figure(self.value - other.value, self.low - other.high, self.high - other.low)

    def times(self, factor: float) -> "Figure":
        return Figure(self.value * factor, *((self.low * factor, self.high * factor) if self.bounded
                                            else (None, None)))


def decided(a: float, b: float, unit: str = "", percent: bool = False) -> tuple[str, str]:
    """Two figures printed to the precision that tells them apart (40.0% and 40.1%, 3.00x and 3.01x), at least the
    usual one."""
    scale = 100 if percent else 1
    for digits in range(1 if percent else 2, 6):
        if round(a * scale, digits) != round(b * scale, digits) or a == b:
            break
    suffix = "%" if percent else unit
    return f"{a * scale:.{digits}f}{suffix}", f"{b * scale:.{digits}f}{suffix}"


def _text(figure: Figure, unit: str = " ms", percent: bool = False) -> str:
    shown = (lambda v: decided(v, v, unit, percent)[0])
    if not figure.bounded:
        return shown(figure.value) + " (no interval)"
    return f"{shown(figure.value)} [{shown(figure.low)}, {shown(figure.high)}]"


def _label(key) -> str:
    return findings.label(dict(zip(flat.ROW_KEYS, key)))


def _timed(summary: pd.DataFrame) -> dict[tuple, dict[str, stats.Estimate]]:
    return {key: tables.estimates(summary, group) for key, group in summary.groupby(flat.ROW_KEYS, sort=False)}


def _breakdowns(long: pd.DataFrame) -> dict[tuple, dict[str, pd.DataFrame]]:
    """(row key) -> column -> its closed breakdown's lines, indexed by kind."""
    found: dict[tuple, dict[str, pd.DataFrame]] = {}
    if long.empty:
        return found
    for key, group in long[long.closes.astype(bool)].groupby([*flat.ROW_KEYS, "framework"], sort=False):
        *row, framework = key
        found.setdefault(tuple(row), {})[framework] = group.set_index("kind")
    return found


def share_of(lines: pd.DataFrame, kinds: tuple[str, ...] | list[str]) -> Figure:
    """The share of the step in `kinds`, with the interval their steps' shares give (summed bounds: conservative)."""
    chosen = lines.loc[[k for k in kinds if k in lines.index]]
    value = float(chosen["share"].sum())
    if "share_low" not in chosen or chosen["share_low"].isna().any():
        return Figure(value, None, None)
    return Figure(value, float(chosen["share_low"].sum()), float(chosen["share_high"].sum()))


def timed_figure(share: Figure, estimate: stats.Estimate) -> Figure:
    """A share of the step in timed ms/step: its interval from both the share's and the estimate's."""
    if not share.bounded or estimate.low is None:
        return Figure(share.value * estimate.ms, None, None)
    return Figure(share.value * estimate.ms, share.low * estimate.low, share.high * estimate.high)


def estimate_figure(estimate: stats.Estimate) -> Figure:
    return Figure(estimate.ms, estimate.low, estimate.high)


def overhead_problem(lines: pd.DataFrame, rule: dict) -> str | None:
    """Why a cell's breakdown cannot decide: its profiled steps ran too far from its timed ones."""
    limit = rule.get("max_profiler_overhead", 2.0)
    overhead = lines["profiler_overhead"].iloc[0]
    if pd.notna(overhead) and not (1 / limit <= float(overhead) <= limit):
        return f"profiled / timed {float(overhead):.2f}, past the {limit:g}x the rule allows"
    return None


def at_least(part: Figure, share: float, whole: Figure) -> str:
    """supports / against / undecided: is `part` at least `share` of `whole`, with both intervals?"""
    if not (part.bounded and whole.bounded):
        return "undecided"
    if part.low >= share * whole.high:
        return "supports"
    if part.high < share * whole.low:
        return "against"
    return "undecided"


def layer_fused_kinds(lines: pd.DataFrame) -> list[str] | None:
    """The kinds of work a Keras 2 cell's layer-chosen fused ops hold (time_by_kind_long's layer_fused_kinds:
    FusedBatchNormV3 is normalization); None where its record names none: one from before the field, or (a CSV reads
    an empty field as missing) one with no such ops, which the rule tells apart by their time."""
    value = lines["layer_fused_kinds"].iloc[0] if "layer_fused_kinds" in lines else None
    if value is None or pd.isna(value):
        return None
    return [kind for kind in str(value).split(",") if kind]


def _column_figure(lines: pd.DataFrame, names: tuple[str, str, str]) -> Figure | None:
    """A figure of a cell's first line (value, low, high columns); None where its value is missing."""
    values = [lines[c].iloc[0] if c in lines else None for c in names]
    if values[0] is None or pd.isna(values[0]):
        return None
    return Figure(*(float(v) if v is not None and pd.notna(v) else None for v in values))


def library_fused_ops(rule: dict, evidence: Evidence) -> Verdict:
    """Keras 2's time in the fused ops its layers chose against Keras 3's time on the same work (its time in the
    kinds of work those ops hold, however it runs them), both in timed ms: Keras 2's extra must be at least
    `share_of_gap` of the timed gap. A row whose Keras 2 record names no such kinds (one from before the field) and
    has time in those ops is undecided; one with no time in them has no extra."""
    old, new, share = rule.get("keras2", "keras2"), rule.get("keras3", "keras3-tensorflow"), rule["share_of_gap"]
    cells, timed = _breakdowns(evidence.table(breakdown_tables.LONG)), _timed(evidence.table(tables.SUMMARY))
    outcomes, rests_on = [], []
    for key, columns in cells.items():
        measured = timed.get(key, {})
        if old not in columns or new not in columns or old not in measured or new not in measured:
            continue
        xla = float(columns[old]["xla_share"].iloc[0] or 0.0)
        if xla >= 0.5:
            outcomes.append("xla")
            rests_on.append(f"{_label(key)}: {xla:.0%} of {old}'s op time ran in XLA programs")
            continue
        problem = overhead_problem(columns[old], rule) or overhead_problem(columns[new], rule)
        gap = estimate_figure(measured[old]) - estimate_figure(measured[new])
        if not gap.bounded or gap.low <= 0:
            outcomes.append("undecided")
            rests_on.append(f"{_label(key)}: Keras 3 not faster beyond the intervals (gap {_text(gap)})")
            continue
        share_in = _column_figure(columns[old], ("layer_fused_share", "layer_fused_low", "layer_fused_high"))
        if share_in is None:
            outcomes.append("undecided")
            rests_on.append(f"{_label(key)}: {old}'s record has no time in layer-chosen fused ops (one from before "
                            "that figure)")
            continue
        fused = timed_figure(share_in, measured[old])
        held = layer_fused_kinds(columns[old])
        if held is None and not (fused.value == 0 and (not fused.bounded or fused.high == 0)):
            outcomes.append("undecided")
            rests_on.append(f"{_label(key)}: {old}'s layer-chosen fused ops {_text(fused)}/step, but its record "
                            f"names no kinds of work they hold (one from before layer_fused_kinds): {new}'s time on "
                            "the same work is unknown")
            continue
        same = timed_figure(share_of(columns[new], held or []), measured[new])
        extra = fused - same
        outcome = "undecided" if problem else at_least(extra, share, gap)
        outcomes.append(outcome)
        rests_on.append(f"{_label(key)}: timed gap {_text(gap)}/step; {old}'s layer-chosen fused ops "
                        f"{_text(fused)}, {new}'s time on the same work ({', '.join(held or []) or 'none'}) "
                        f"{_text(same)}: {old}'s extra {_text(extra)} ({outcome} {share:.0%} of the gap"
                        + (f"; {problem}" if problem else "") + ")")
    if outcomes and all(o == "xla" for o in outcomes):
        return Verdict(CANNOT_OBSERVE, f"XLA compiles both: {'; '.join(rests_on)}")
    if "supports" in outcomes:
        return Verdict(HOLDS, "; ".join(rests_on))
    decided_rows = [o for o in outcomes if o != "xla"]
    if decided_rows and all(o == "against" for o in decided_rows):
        return Verdict(FAILS, "; ".join(rests_on))
    why = ("no row where both columns have a breakdown and Keras 3 is faster beyond the intervals" if not decided_rows
           else "no row decides it")
    return Verdict(NOT_MEASURED_HERE, why + (": " + "; ".join(rests_on) if rests_on else ""))


def _published_keys(published: list, without: list[dict]) -> set[tuple]:
    """The published rows as this run's row keys: model, task, batch and precision (a batch-study rung of the same
    model and task is no published row), less the rows the rule leaves out."""
    return {(row["model"], row["task"], int(row["batch_size"]), row["precision"]) for row in published
            if not left_out(row, without)}


def little_manual_optimisation(rule: dict, evidence: Evidence) -> Verdict:
    """Each SAM row's native / best Keras 3 ratio larger than more than half of the other published rows' (less
    those `without` leaves out), intervals apart; and at least `share_of_gap` of its timed gap outside matrix
    products. The ratio is timed and always counts; the glue part is profiled and decides nothing where either
    column's breakdown ran past `max_profiler_overhead`."""
    model, share = rule["model"], rule["share_of_gap"]
    cells, timed = _breakdowns(evidence.table(breakdown_tables.LONG)), _timed(evidence.table(tables.SUMMARY))
    rows = _published_keys(evidence.run.published.get("rows", ()), rule.get("without", []))
    ratios = {}
    for key, measured in timed.items():
        if (key[0], key[1], int(key[2]), key[3]) not in rows:
            continue
        natives = [f for f in evidence.run.native if f in measured]
        kerases = [f for f in evidence.run.keras3 if f in measured]
        if natives and kerases:
            best_native = min(natives, key=lambda f: measured[f].ms)
            best_keras = min(kerases, key=lambda f: measured[f].ms)
            n, k = measured[best_native], measured[best_keras]
            bounded = n.low is not None and k.low is not None and k.low > 0
            ratios[key] = (Figure(n.ms / k.ms, n.low / k.high if bounded else None,
                                  n.high / k.low if bounded else None), best_native, best_keras)
    own = {k: v for k, v in ratios.items() if k[0] == model}
    others = {k: v for k, v in ratios.items() if k[0] != model}
    if not own or not others:
        return Verdict(NOT_MEASURED_HERE, f"needs {model} rows and other published rows with a native and a Keras 3 "
                                          "column")
    outcomes, rests_on = [], []
    for key, (ratio, best_native, best_keras) in own.items():
        beats = sum(1 for o, _, _ in others.values() if ratio.bounded and o.bounded and ratio.low > o.high)
        loses = sum(1 for o, _, _ in others.values() if ratio.bounded and o.bounded and ratio.high < o.low)
        larger = "supports" if beats > len(others) / 2 else "against" if loses >= len(others) / 2 else "undecided"
        ratio_text = (f"{_label(key)}: {best_native} / {best_keras} {_text(ratio, 'x')}, larger than {beats} and "
                      f"smaller than {loses} of {len(others)} other published rows")
        columns = cells.get(key, {})
        if best_native not in columns or best_keras not in columns:
            outcomes.append("against" if larger == "against" else "undecided")
            rests_on.append(f"{ratio_text}; no breakdown of {best_native} and {best_keras}")
            continue
        problem = overhead_problem(columns[best_native], rule) or overhead_problem(columns[best_keras], rule)
        gap = estimate_figure(timed[key][best_native]) - estimate_figure(timed[key][best_keras])
        glue = (timed_figure(share_of(columns[best_native], [k for k in columns[best_native].index
                                                             if k not in MATH]), timed[key][best_native])
                - timed_figure(share_of(columns[best_keras], [k for k in columns[best_keras].index if k not in MATH]),
                               timed[key][best_keras]))
        outside = ("undecided" if problem or not (gap.bounded and gap.low > 0) else at_least(glue, share, gap))
        outcomes.append("against" if "against" in (larger, outside) else
                        "supports" if larger == outside == "supports" else "undecided")
        rests_on.append(f"{ratio_text}; of the timed gap {_text(gap)}/step, {_text(glue)} outside matrix products ("
                        + (f"undecided: the breakdown's {problem}" if problem else f"{outside} {share:.0%} of it")
                        + ")")
    verdict = (FAILS if "against" in outcomes else HOLDS if all(o == "supports" for o in outcomes)
               else NOT_MEASURED_HERE)
    return Verdict(verdict, "; ".join(rests_on))


def host_overhead_at_small_batch(rule: dict, evidence: Evidence) -> Verdict:
    column = rule.get("column", "native-torch-eager")
    cells = _breakdowns(evidence.table(breakdown_tables.LONG))
    groups: dict[tuple, dict[int, dict[str, pd.DataFrame]]] = {}
    for (model, task, batch, precision), columns in cells.items():
        groups.setdefault((model, task, precision), {})[int(batch)] = columns
    outcomes, rests_on = [], []
    for (model, task, precision), by_batch in groups.items():
        batches = sorted(b for b in by_batch if column in by_batch[b])
        if len(batches) < 2:
            continue
        small, large = batches[0], batches[-1]
        problem = overhead_problem(by_batch[small][column], rule) or overhead_problem(by_batch[large][column], rule)
        at_small, at_large = (share_of(by_batch[b][column], ["waiting"]) for b in (small, large))
        grows = _above(at_small, at_large)
        kerases = {f: share_of(c, ["waiting"]) for f, c in by_batch[small].items() if f in evidence.run.keras3}
        best = min(kerases.items(), key=lambda item: item[1].value) if kerases else None
        above_keras = _above(at_small, best[1]) if best else "undecided"
        outcome = ("undecided" if problem else "against" if "against" in (grows, above_keras)
                   else "supports" if grows == above_keras == "supports" else "undecided")
        outcomes.append(outcome)
        small_text, large_text = decided(at_small.value, at_large.value, percent=True)
        text = (f"{model} {task} {precision} {column}: waiting {small_text} "
                f"{_interval_text(at_small)} of the step at bs{small}, {large_text} {_interval_text(at_large)} at "
                f"bs{large} ({grows})")
        if best:
            mine, theirs = decided(at_small.value, best[1].value, percent=True)
            text += f"; {best[0]} at bs{small}: {theirs} {_interval_text(best[1])} against its {mine} ({above_keras})"
        rests_on.append(text + (f"; {problem}" if problem else ""))
    if not outcomes:
        return Verdict(NOT_MEASURED_HERE, f"no {column} breakdown at two or more batch sizes of one model and task")
    if "supports" in outcomes and "against" not in outcomes:
        return Verdict(HOLDS, "; ".join(rests_on))
    if "against" in outcomes and "supports" not in outcomes:
        return Verdict(FAILS, "; ".join(rests_on))
    return Verdict(NOT_MEASURED_HERE, "; ".join(rests_on))


def _above(a: Figure, b: Figure) -> str:
    if not (a.bounded and b.bounded):
        return "undecided"
    return "supports" if a.low > b.high else "against" if a.high < b.low else "undecided"


def _interval_text(figure: Figure) -> str:
    if not figure.bounded:
        return "(no interval)"
    low, high = decided(figure.low, figure.high, percent=True)
    return f"[{low}, {high}]"
