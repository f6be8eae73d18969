"""The report's first page: the answer first. Per row of this run the fastest column (and every column not shown to
differ from it), with the row's flags; what changed since the previous comparable run (kbench.lifecycle.history); the
published findings re-tested on this run, each with the rows it rests on; the batch study's verdict per row (where
it ran); and the published A100 table with each
number's implied TFLOP/s, which shows what those numbers can and cannot have been.

    python -m kbench.report.first_page --suite S --tables DIR --history DIR --config-json JSON --out first_page.html

The page is an HTML fragment: report/workflow.rst includes it as the Snakemake report's landing text, and the same
content is written as Markdown beside it.
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

import pandas as pd

from kbench.contract import spec
from kbench.gpu import peaks
from kbench.lifecycle import history
from kbench.plan import matrix
from kbench.report import explanations, verdicts
from kbench.report.verdicts import FAILS, HOLDS, NOT_MEASURED
from kbench.results import first_step_tables, flat, flops, stats, tables



# ---------------------------------------------------------------- this run

def headline(summary: pd.DataFrame, frameworks: list[str], flags: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per row: the fastest column, its ms/step, the columns whose intervals overlap its own (not shown to differ:
    a tie, not a loss), and the row's parity, network and equivalence flags from ms_per_step."""
    rows = []
    for key, group in summary.groupby(flat.ROW_KEYS, sort=False):
        found = tables.estimates(summary, group)
        if not found:
            rows.append({**dict(zip(flat.ROW_KEYS, key)), "fastest": _none_ok(group), "ms/step": "",
                         "columns ok": f"0 of {len(group)}"})
            continue
        best = min(found, key=lambda f: found[f].ms)
        tied = [f for f in frameworks if f in found and f != best and not stats.separate(found[f], found[best])]
        row = {**dict(zip(flat.ROW_KEYS, key)), "fastest": best,
               "ms/step": tables.estimate_text(found[best]), "not shown to differ from it": ", ".join(tied),
               "columns ok": f"{len(found)} of {len(group)}"}
        if flags is not None and key in flags.index:
            row["flags"] = "; ".join(f"{name}: {flags.at[key, name]}" for name in flags.columns
                                     if isinstance(flags.at[key, name], str) and flags.at[key, name])
        rows.append(row)
    return pd.DataFrame(rows)


def _none_ok(group: pd.DataFrame) -> str:
    """Why a row has no fastest column: a limit every column shares (n/a, with its one reason: tf32 on a CPU) reads
    apart from cells that failed, which a reader must look at."""
    statuses = group.status.value_counts()
    if set(statuses.index) == {"unsupported"} and group.text.nunique() == 1:
        return f"n/a in every column ({group.text.iloc[0].removeprefix('n/a: ')})"
    return "no column ok: " + ", ".join(f"{n} {status}" for status, n in statuses.items())


def best_keras3(found: dict[str, stats.Estimate], keras3: list[str]) -> str | None:
    candidates = [f for f in found if f in keras3]
    return min(candidates, key=lambda f: found[f].ms) if candidates else None


def _row_estimates(summary: pd.DataFrame):
    for key, group in summary.groupby(flat.ROW_KEYS, sort=False):
        yield dict(zip(flat.ROW_KEYS, key)), tables.estimates(summary, group)


def _label(row: dict) -> str:
    return f"{row['model']} {row['task']} bs{row['batch_size']} {row['precision']}"


def finding_verdicts(findings: list[dict], summary: pd.DataFrame, keras3: list[str], claims: list[dict],
                     baseline: str, on_gpu: bool) -> pd.DataFrame:
    """Each published finding as a verdict on this run: holds / does not hold / not measured here, with the rows it
    rests on. A run without a GPU reads "not measured here" (the findings are about an A100) and says what its own
    rows would give, which checks the rule, not the frameworks."""
    return verdicts.table(findings, lambda f: RULES[f["kind"]](f, summary, keras3, claims, baseline),
                          "published finding", on_gpu, "rows")


def _no_single_fastest(finding, summary, keras3, claims, baseline):
    """Holds when two rows have different Keras 3 backends fastest beyond their intervals; does not hold when one
    backend is fastest (or not shown to differ from the fastest) in every row with two or more backends."""
    winners, rests_on = {}, []
    for row, found in _row_estimates(summary):
        backends = {f: e for f, e in found.items() if f in keras3}
        if len(backends) < 2:
            continue
        best = min(backends, key=lambda f: backends[f].ms)
        tied = [f for f in backends if f != best and not stats.separate(backends[f], backends[best])]
        winners[_label(row)] = {best, *tied}
        rests_on.append(f"{_label(row)}: {best}" + (f" (not shown to differ: {', '.join(tied)})" if tied else ""))
    if len(winners) < 2:
        return NOT_MEASURED, "fewer than two rows with two or more Keras 3 backends"
    sole = {next(iter(w)) for w in winners.values() if len(w) == 1}
    always = set.intersection(*winners.values())
    verdict = FAILS if always else HOLDS if len(sole) >= 2 else NOT_MEASURED
    if verdict == NOT_MEASURED:
        rests_on.append("ties leave fewer than two rows with one fastest backend")
    return verdict, "; ".join(rests_on)


def _keras3_beats(finding, summary, keras3, claims, baseline):
    """Best Keras 3 of each row against one column: "beats by more than N%" where the other's mean is above the
    best's by more than N% and their intervals separate. Holds when the share of rows that do reaches the page's
    (in_rows of of_rows), or every row (in_rows: all)."""
    against, by_pct = finding["against"], finding.get("by_pct", 0)
    beaten, measured, rests_on = 0, 0, []
    for row, found in _row_estimates(summary):
        best = best_keras3(found, keras3)
        if best is None or against not in found or verdicts.left_out(row, finding.get("without", [])):
            continue
        measured += 1
        percent = (found[against].ms / found[best].ms - 1) * 100
        beats = percent > by_pct and stats.separate(found[against], found[best])
        beaten += beats
        rests_on.append(f"{_label(row)}: {best} {percent:+.0f}%{'' if beats else ' (not beyond)'}")
    if not measured:
        return NOT_MEASURED, f"no row has both a Keras 3 column and {against}"
    if finding.get("in_rows", "all") == "all":
        verdict = HOLDS if beaten == measured else FAILS
    else:
        verdict = HOLDS if beaten / measured >= finding["in_rows"] / finding["of_rows"] else FAILS
    return verdict, f"{beaten} of {measured} rows: " + "; ".join(rests_on)


def _precision_claims(finding, summary, keras3, claims, baseline):
    """Each configured claim (precision_study.claims): the baseline's ms over mixed_float16's, in every framework
    that ran both; holds when each ratio reaches the claim and their intervals separate."""
    verdicts, rests_on = [], []
    ok = summary[summary.status == "ok"]
    for claim in claims:
        cells = ok[(ok.model == claim["model"]) & (ok.task == claim["task"])]
        over = claim.get("baseline", baseline)
        for framework, group in cells.groupby("framework", sort=False):
            by_precision = {r.precision: tables.as_estimate(r) for r in group.itertuples()}
            if over not in by_precision or "mixed_float16" not in by_precision:
                continue
            a, b = by_precision[over], by_precision["mixed_float16"]
            ratio = a.ms / b.ms
            good = ratio >= claim["speedup"] and stats.separate(a, b)
            verdicts.append(good)
            rests_on.append(f"{claim['model']} {claim['task']} {framework}: {ratio:.2f}x (claimed {claim['speedup']}x)")
    if not verdicts:
        return NOT_MEASURED, "no framework ran the claims' models at both float32 and mixed_float16"
    return (HOLDS if all(verdicts) else FAILS), "; ".join(rests_on)


RULES = {"no_single_fastest_keras3": _no_single_fastest, "keras3_beats": _keras3_beats,
         "precision_claims": _precision_claims}


# ---------------------------------------------------------------- the published table

def published_table(config: dict, suite: str, anchor_summary: pd.DataFrame | None) -> pd.DataFrame:
    """The published A100 rows, each column's ms/step, and what it implies: TFLOP per step at the paper size
    (kbench.results.flops), the implied TFLOP/s of every column, and for the float32 rows whether a column ran above the
    device's FP32 peak (then it cannot have been FP32: TF32, as the A100 gives TensorFlow and JAX by default).
    Where this run is the paper suite with the anchor profile, its number for the same cell stands beside."""
    published = config["published"]
    peak = peaks.PEAKS.get(published["device"], {})
    frameworks = list(dict.fromkeys(f for r in published["rows"] for f in r["ms"]))     # the page's columns
    rows = []
    for entry in published["rows"]:
        row = {"row": _label(entry), **{f: entry["ms"].get(f) or "NA" for f in frameworks}}
        implied, above, per_step = {}, [], None
        for framework in [f for f in frameworks if entry["ms"].get(f)]:
            spec = matrix.spec(config, "paper", entry["model"], entry["task"], entry["batch_size"],
                               entry["precision"], framework, "anchor")
            per_step = flops.per_step(spec) if flops.known(entry["model"], entry["task"]) else None
            if per_step:
                implied[framework] = per_step / (entry["ms"][framework] / 1e3) / 1e12
                if entry["precision"] == "float32" and implied[framework] > peak.get("fp32", float("inf")):
                    above.append(framework)
        row["TFLOP/step"] = round(per_step / 1e12, 2) if per_step else None
        row["implied TFLOP/s"] = ", ".join(f"{f} {v:.1f}" for f, v in implied.items())
        if entry["precision"] == "float32":
            row["reading"] = (f"above the FP32 peak ({peak.get('fp32')} TFLOP/s): not FP32 in {', '.join(above)}"
                              if above else f"every column within the FP32 peak ({peak.get('fp32')} TFLOP/s)")
        else:
            row["reading"] = (f"{entry['precision']}: best column at "
                              f"{max(implied.values()) / peak.get('bf16', float('nan')):.1%} of the bf16 peak"
                              if implied and peak.get("bf16") else "")
        if anchor_summary is not None:
            row["this run (anchor profile)"] = _this_run(anchor_summary, entry)
        rows.append(row)
    return pd.DataFrame(rows)


def _this_run(summary: pd.DataFrame, entry: dict) -> str:
    cells = summary[(summary.model == entry["model"]) & (summary.task == entry["task"])
                    & (summary.batch_size == entry["batch_size"]) & (summary.precision == entry["precision"])]
    return "; ".join(f"{r.framework} {r.text}" for r in cells.itertuples()) or "not in this run"


# ---------------------------------------------------------------- the page

def latest_changes(store: Path, suite: str, profile: str) -> tuple[pd.DataFrame | None, str]:
    """The cells that moved between this run and the previous comparable one, and what to say when none did."""
    if not (store / history.DATABASE).exists():
        return None, "No history yet: this is the first run ingested (results/history)."
    with history.connect(store, read_only=True) as con:
        table = history.changes(con, suite, profile)
    if table.empty:
        return None, "No earlier comparable run (same suite, profile and device) in the history."
    newest = table[table["new run"] == table["new run"].iloc[0]]
    moved = history.moved(newest)
    said = (f"Between runs {newest['old run'].iloc[0]} and {newest['new run'].iloc[0]} ({newest.device.iloc[0]}): "
            f"{len(newest)} cells measured anew, {len(moved)} moved.")
    return (moved if len(moved) else None), said + ("" if len(moved) else " No significant change.")


# The report's landing page centres its description in a full-height flex box of a 32rem text column (Snakemake
# 9's report: "flex items-center ... h-screen overflow-auto" around "prose max-w-lg"): a first page taller than the
# window opened mid-page with its top out of reach, and wide tables wrapped into cells a dozen lines tall. The page
# starts at its top and takes the room the window has (tests/test_lifecycle.py reads it from a 1366x768 screenshot).
LAYOUT = ("<style>div.overflow-auto:has(> div .kbench-first-page) { align-items: flex-start; } "
          ".prose:has(.kbench-first-page) { max-width: 72rem; }</style>")


def _html_table(frame: pd.DataFrame) -> str:
    return frame.astype(object).where(frame.notna(), "").to_html(index=False, border=1, escape=True)


def build(config: dict, suite: str, tables_dir: Path, store: Path) -> tuple[str, str]:
    """(HTML fragment, Markdown) of the first page."""
    frameworks, keras3 = config["frameworks"], matrix.keras3_frameworks(config)
    on_gpu = spec.on_gpu(config["accelerator"])       # gpu-cuda12 too
    parts_html, parts_md = [], []

    def section(title: str, frame: pd.DataFrame | None, text: str = "") -> None:
        parts_html.append(f"<h3>{html.escape(title)}</h3>" + (f"<p>{html.escape(text)}</p>" if text else "")
                          + (_html_table(frame) if frame is not None and len(frame) else ""))
        parts_md.append(f"### {title}\n\n" + (f"{text}\n\n" if text else "")
                        + (frame.astype(object).where(frame.notna(), "").to_markdown(index=False) + "\n\n"
                           if frame is not None and len(frame) else ""))

    device_note = ("" if on_gpu else "This run is on a CPU: its timings check the pipeline, not the frameworks, and "
                   "say nothing about GPU throughput.")
    summaries = {}
    for profile in config["profiles"]:
        summary = pd.read_csv(tables_dir / profile / "cells_summary.csv")
        summaries[profile] = summary
        ms_table = pd.read_csv(tables_dir / profile / "ms_per_step.csv", index_col=list(range(len(flat.ROW_KEYS))))
        flags = ms_table[[c for c in ("params_parity", tables.NETWORKS, tables.FLAGS, tables.EQUIVALENCE)
                          if c in ms_table.columns]]
        section(f"Headline, profile {profile}: the fastest column of each row", headline(summary, frameworks, flags),
                " ".join(filter(None, [device_note, "ms/step: mean ± half-width of its 95% interval (* one repeat). "
                                       "'Not shown to differ': their intervals overlap the fastest's (a tie, "
                                       "not a loss). A flagged row compares different functions or networks."])))
        moved, said = latest_changes(store, suite, profile)
        section(f"What changed since the previous run, profile {profile}", moved, said)
        section(f"The published findings, re-tested on this run (profile {profile})",
                finding_verdicts(config["published"]["findings"], summary, keras3,
                                 config["precision_study"]["claims"], config["precision_study"]["baseline"], on_gpu))
        section(f"The benchmark's explanations, tested on this run's breakdowns by kind (profile {profile})",
                explanations.verdicts(config["published"]["explanations"], explanations.Evidence(
                    pd.read_csv(tables_dir / profile / "time_by_kind_long.csv"), summary, keras3,
                    matrix.native_torch_frameworks(config), config["published"]["rows"]), on_gpu),
                "Each cell's steps after its timed window, profiled by its own framework (time_by_kind; "
                "docs/breakdown.md): each figure with its 95% interval, a kind's time its share of the profiled step "
                "times the timed ms/step. 'Does not hold' only where the intervals separate against the claim as its "
                "source states it. " + device_note)
        first_step = tables_dir / profile / first_step_tables.LONG
        if "first_step" in config and first_step.exists():
            long = pd.read_csv(first_step, dtype={"pays_back_after_steps": object})
            section(f"What the compile costs a user: time to the first step (profile {profile})",
                    verdicts.table([config["first_step"]["claim"]],
                                   lambda claim: explanations.pays_back_within(claim, long),
                                   "the cost side of out of the box", on_gpu, "rows"),
                    "Seconds to the first step's return (import, build, first step), cold and warm (its framework's "
                    "persistent compile cache filled), against the eager column of its framework (first_step; "
                    "docs/first-step.md). " + device_note)
        if profile in matrix.ladder_profiles(config) and matrix.batch_cells(config, suite):
            section(f"The batch study's rows: a step's fixed cost against its cost per example (profile {profile})",
                    pd.read_csv(tables_dir / profile / "batch_verdicts.csv").rename(
                        columns={"verdict": "this row's fit reads"}),
                    f"The claim (\u201c{config['batch_study']['claim']['quote']}\u201d) has its one verdict above, "
                    "with the explanations (the eager native column's waiting share along this ladder). These are the "
                    "rows' fits behind it: a row reads in the claim's favour where the native column's fixed cost per "
                    "step (a in ms/step = a + c x batch) is larger than the best Keras 3 column's, intervals apart, "
                    "and its gap to that column shrinks as the batch grows (batch_fit, batch_curves; "
                    "docs/batch-study.md). " + device_note)
    if matrix.tuned_profile(config):
        section("Out of the box against tuned: Keras 3 strict, native PyTorch tuned",
                pd.read_csv(tables_dir / "tuning_verdicts.csv"),
                "The finding: Keras 3 gives the best out-of-the-box performance, while native PyTorch usually needs "
                "its user's tuning. It holds for a row where the best Keras 3 column in strict is not shown slower "
                "than the best native column tuned (its framework's documented settings, config `tuning`), and "
                "native's tuning gain is larger than that Keras 3 column's, intervals apart (tuning_gain; "
                "docs/profiles.md). " + device_note)
    anchor = summaries.get("anchor") if config["suites"][suite]["size"] == "paper" else None
    section("The published A100 table, and what its numbers imply", published_table(config, suite, anchor),
            f"{config['published']['source']}, on {config['published']['device']}. Implied TFLOP/s = model FLOPs "
            "per step (kbench.results.flops, paper size) / published ms. The anchor profile re-runs what that code did "
            "where today's libraries allow; the departures page lists every difference and which ones no profile "
            "can keep." + ("" if anchor is not None else
                           f" This run (suite {suite}) is not the paper size: no number of it stands beside these."))
    return "\n".join(parts_html), "\n".join(parts_md)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True)
    parser.add_argument("--tables", required=True, type=Path, help="results/tables/<suite>")
    parser.add_argument("--history", required=True, type=Path, help="the history's folder")
    parser.add_argument("--config-json", required=True, type=json.loads)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    fragment, text = build(args.config_json, args.suite, args.tables, args.history)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"<div class=\"kbench-first-page\">\n{LAYOUT}\n{fragment}\n</div>\n")
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
