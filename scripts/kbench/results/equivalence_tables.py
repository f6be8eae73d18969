"""The equivalence check's tables: the equivalence jobs' JSONs of a profile (kbench.equivalence.check) -> one row per
model / task / precision / column / variant with its errors and verdict (equivalence_long), the table of them per
column (equivalence), the per model/task flag that ms_per_step and speedup carry (equivalence_flags), and each
precision's accuracy cost beside its speedup (accuracy_costs). kbench.results.tables writes them with the other tables
of the profile.

equivalence      : rows model/task/precision, one column per framework: the relative error of its outputs against the
                   reference column's (as built, and aligned where a design difference is named) and the verdict;
                   the named differences as [d1], [d2], spelled out under the table
equivalence_long : every row the table reads, with the tolerance, the losses' errors, the first divergent generated
                   token and the weights the mapping did not load
"""
from __future__ import annotations

import pandas as pd

from kbench.contract import cell
from kbench.contract.spec import JobSpec
from kbench.plan import matrix
from kbench.plan.matrix import matches

# The column of ms_per_step and speedup that carries the check's flag, and the table's name.
EQUIVALENCE = "equivalence"
EQUIVALENCE_NOTE = ("\nEvery column loads the reference column's unit-scale weights and runs the row's outputs on the "
                    "cells' inputs (fit: also the losses of a few optimizer steps), in float32, compared with the "
                    "reference's: rel = the relative (Frobenius) error of its worst output; ✓ within, ✗ beyond the "
                    "tolerance 2 x 2^-24 x sqrt(K x D) (K: the longest contraction, D: the products in sequence). "
                    "Other precisions: their error against the column's own float32 (the accuracy cost). aligned: "
                    "the native column with a named design difference removed. 'training steps drift': the losses "
                    "after the steps left the reference's by more than 10 x steps x the tolerance. ms_per_step "
                    "and speedup flag every row whose outputs are not shown equivalent.\n")


def equivalence_long(jobs: list[cell.CellResult], differences: list[dict] = (),
                     departures: list[dict] = ()) -> pd.DataFrame:
    """One row per model / task / precision / column / variant of the equivalence jobs (kbench.equivalence.check): the
    worst relative error of its outputs against what it was compared with, the tolerance, the losses' errors, the
    first divergent generated token, weights the mapping did not load, the departures its profile keeps that apply
    to it (config departures: a column that differs because of one names it), and the verdict."""
    rows = []
    for job in jobs:
        spec, report = job.spec, job.equivalence or {}
        base = {"model": spec.model, "framework": spec.framework, "reference column": bool(
            report.get("reference"))}
        if job.status != "ok":
            rows.append({**base, "task": "", "precision": "", "variant": "", "verdict": job.text()})
            continue
        for entry in report.get("results", []):
            for variant, found in (entry.get("variants") or {"": {}}).items():
                row = {**base, "task": entry["task"], "precision": entry["precision"], "variant": variant,
                       "tolerance": entry.get("tolerance")}
                if "error" in entry:
                    rows.append({**row, "verdict": entry["error"].split(":", 1)[0] + ": " + entry["error"].split(
                        ": ", 2)[-1]})
                    continue
                compared = found.get("compared") or {}
                tokens = compared.get("tokens", {})
                loaded = found.get("loaded") or {}
                difference = [d["what"] for d in differences if matches(d.get("model"), spec.model)
                              and matches(d.get("task"), entry["task"]) and matches(d.get("framework"), spec.framework)]
                row.update(
                    against=found.get("against", "(the reference)"), rel=found.get("rel"),
                    max_abs=max((v.get("max_abs", 0.0) for v in compared.values()), default=None),
                    outputs=", ".join(f"{k} {v['rel']:.1e}" for k, v in compared.items() if "rel" in v),
                    loss_first_rel=(found.get("loss_rel") or [None])[0],
                    loss_last_rel=(found.get("loss_rel") or [None])[-1],
                    first_divergent_token=tokens.get("first_divergence"),
                    not_loaded=_names(loaded.get("missing", [])), not_in_column=_names(loaded.get("unexpected", [])),
                    skipped=_names(loaded.get("skipped", [])),       # left out by the mapping, on purpose
                    steps=len(found.get("losses") or []),
                    design_difference="; ".join(difference),
                    departure="; ".join(kept_departures(departures, spec, entry["task"])))
                row["verdict"] = equivalence_verdict(row, report.get("reference"))
                rows.append(row)
    return pd.DataFrame(rows)


def kept_departures(departures: list[dict], spec: JobSpec, task: str) -> list[str]:
    """The departures that change what a column computes (config departures, changes_outputs; TF32 on a GPU only),
    kept by the job's profile and applying to its column: why it may differ from the reference."""
    where = ("everywhere",) + (("on a GPU",) if spec.on_gpu else ())
    return [f"departure {d['id']} ({d['what']}, kept by the {spec.profile} profile)" for d in departures
            if d.get("changes_outputs") in where and spec.profile in d.get("kept_by", [])
            and any(matrix.applies(rule, spec.framework, spec.model, task) for rule in d.get("applies", []))]


def _names(names: list[str]) -> str:
    return "" if not names else f"{len(names)}: " + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def equivalence_verdict(row: dict, is_reference: bool) -> str:
    """equivalent | differs (what and by how much) | differs by design (named in config) | mapping incomplete."""
    if is_reference and row["precision"] == "float32":
        return "reference"
    if row["not_loaded"]:
        return f"mapping incomplete: not loaded from the reference: {row['not_loaded']}"
    if row.get("rel") is None:
        return "not compared"
    token = row.get("first_divergent_token")
    if row["precision"] != "float32":       # a precision's cost against the column's float32: measured, not judged
        return f"accuracy cost: rel {row['rel']:.1e}" + _tokens(token) + _losses(row)
    first = row.get("loss_first_rel")
    if row["rel"] <= row["tolerance"] and token is None:
        # a named difference whose outputs agree (the LLMs' LoRA factorisations, the same function at the start)
        # excuses the later steps' losses (_drift), never the first's
        if row["design_difference"] and row["variant"] != "aligned" and first is not None and not pd.isna(first) \
                and first > row["tolerance"]:
            return f"differs: the first step's loss rel {first:.1e} > {row['tolerance']:.1e}"
        return "equivalent" + _drift(row)
    what = f"rel {row['rel']:.1e} > {row['tolerance']:.1e}" + _tokens(token)
    if row["design_difference"] and row["variant"] != "aligned":
        return f"differs by design ({what}): {row['design_difference']}"
    if row.get("departure"):
        return f"differs by a departure ({what}): {row['departure']}"
    return f"differs: {what}" + _drift(row)


def _tokens(token) -> str:
    return "" if token is None or pd.isna(token) else f", greedy tokens differ from position {int(token)}"


def _losses(row: dict) -> str:
    first, last = row.get("loss_first_rel"), row.get("loss_last_rel")
    if first is None or pd.isna(first):
        return ""
    return f", loss rel {first:.1e} at the first step, {last:.1e} after {row.get('steps') or 1}"


def _drift(row: dict) -> str:
    """The fit's losses after its steps, where they left the reference's by more than 10 x steps x the tolerance:
    each step carries the forward's and backward's rounding into the weights, and an adaptive optimizer can scale a
    gradient's relative error up to the update's size; more than that is another training step (batch-norm
    statistics over a tiny batch are ill-conditioned enough to reach it too). Where a design difference is named
    for the row (the LLMs' LoRA factorisations: the same function at the start, other factors trained), the steps
    after the first are that difference, and the first step's loss is the one that must agree."""
    last, steps = row.get("loss_last_rel"), row.get("steps") or 1
    if last is None or pd.isna(last) or last <= 10 * steps * row["tolerance"]:
        return ""
    # the cause named where config names one (Keras 3's TF Adam on repeated tokens, the LLMs' LoRA factors)
    cause = f" ({row['design_difference']})" if row.get("design_difference") else ""
    return f"; training steps drift: loss rel {last:.1e} after {steps} steps{cause}"


def equivalence_table(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Rows model/task/precision, a column per framework: the relative error of its outputs (as built, and aligned
    where a design difference is named) and the verdict."""
    if long.empty or "rel" not in long:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["model", "task", "precision"]))

    labels = difference_labels(long)

    def text(group: pd.DataFrame) -> str:
        parts = []
        for r in group.itertuples():
            label = "aligned: " if r.variant == "aligned" else ""
            r = r._replace(verdict=_labelled(r.verdict, labels))
            if pd.isna(r.rel):
                parts.append(f"{label}{r.verdict}")
            elif r.verdict.startswith("accuracy cost"):
                parts.append(r.verdict.removeprefix("accuracy cost: "))
            elif r.verdict.startswith("equivalent"):
                parts.append(f"{label}rel {r.rel:.1e} ✓{r.verdict.removeprefix('equivalent')}")
            else:
                parts.append(f"{label}rel {r.rel:.1e} ✗ ({r.verdict})")
        return "; ".join(parts)
    shown = long[(long.task != "") & ~long["reference column"]]
    table = shown.groupby(["model", "task", "precision", "framework"], sort=False).apply(
        text, include_groups=False).unstack("framework")
    return table.reindex(columns=[f for f in frameworks if f in table.columns]).fillna("")


def difference_labels(long: pd.DataFrame) -> dict[str, str]:
    """Each named design difference that reaches a verdict -> a short label ([d1], [d2]): the table's cells name it,
    the note under the table spells it out (a paragraph per cell buries the numbers)."""
    named = [] if long.empty or "design_difference" not in long else long.design_difference.dropna()
    unique = [d for d in dict.fromkeys(named) if d]
    return {d: f"[d{i}]" for i, d in enumerate(unique, 1)}


def _labelled(verdict: str, labels: dict[str, str]) -> str:
    for difference, label in labels.items():
        verdict = verdict.replace(difference, label)
    return verdict


def difference_notes(long: pd.DataFrame) -> str:
    labels = difference_labels(long)
    return "".join(f"\n{label} {difference}\n" for difference, label in labels.items())


def equivalence_flags(long: pd.DataFrame) -> pd.Series:
    """Per model/task (float32, as built): the columns whose outputs are not shown to be the reference's, and why:
    the flag ms_per_step and speedup carry, as params_parity does."""
    if long.empty or "verdict" not in long:
        return pd.Series(dtype=str)
    rows = long[(long.precision == "float32") & (long.variant == "as built")
                & ~long.verdict.str.startswith(("equivalent", "reference"))]
    return rows.groupby(["model", "task"], sort=False).apply(
        lambda g: "; ".join(f"{r.framework}: {r.verdict}" for r in g.itertuples()), include_groups=False)


def accuracy_costs(long: pd.DataFrame) -> dict:
    """(model, task, framework, precision) -> the relative error of that precision's outputs against the column's own
    float32 outputs on the same weights and inputs (and its loss after the fit steps against float32's)."""
    if long.empty or "rel" not in long:
        return {}
    costs = long[(long.precision != "float32") & long.rel.notna()]
    return {(r.model, r.task, r.framework, r.precision): (r.rel, r.loss_last_rel) for r in costs.itertuples()}
