"""The report's first page: the answer first, a loop over the run's context and its claims. Per profile: each row's
fastest column (and every column not shown to differ from it), with the row's flags; what changed since the previous
comparable run (kbench.lifecycle.history); every published claim that stands on the profile's tables, re-tested
(kbench.claims.registry: the findings, the explanations, the compile's cost, the batch study's rows). Then the
claims of the suite's tables (the tuning finding, JAX against NumPy), and the published A100 table with each
number's implied TFLOP/s, which shows what those numbers can and cannot have been.

    python -m kbench.report.first_page --suite S --tables DIR --history DIR --config-json JSON --out first_page.html

The page is an HTML fragment: report/workflow.rst includes it as the Snakemake report's landing text, and the same
content is written as Markdown beside it. Its one reader of the config is Page.of: the run contexts
(kbench.results.context), the files the run's tables make (kbench.results.registry), the claims (kbench.claims).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kbench.claims import registry as claims
from kbench.claims.evidence import Evidence
from kbench.claims.findings import label
from kbench.gpu import peaks
from kbench.lifecycle import history
from kbench.results import flat, registry, stats, tables
from kbench.results.context import RunContext, published_flops
from kbench.results.verdicts import device_note


@dataclass(frozen=True)
class Page:
    """What the first page reads: per profile and for the suite, its run context and the files its tables make; the
    claims the config quotes; the published rows' model FLOPs per step; the history."""
    suite: str
    profiles: tuple[Evidence, ...]
    whole: Evidence                             # the suite's tables
    claims: tuple[dict, ...]
    published_flops: tuple[dict, ...]
    paper: bool                                 # the suite is the paper size: its anchor numbers stand beside
    store: Path

    @classmethod
    def of(cls, config: dict, suite: str, tables_root: Path, store: Path) -> Page:
        def evidence(profile):
            return Evidence(RunContext.of(config, suite, profile, tables_root), registry.made(config, suite, profile))
        return cls(suite, tuple(evidence(p) for p in config["profiles"]), evidence(None), claims.quoted(config),
                   published_flops(config), config["suites"][suite]["size"] == "paper", store)


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


# ---------------------------------------------------------------- the published table

def published_table(published: dict, per_step_flops: tuple[dict, ...],
                    anchor_summary: pd.DataFrame | None) -> pd.DataFrame:
    """The published A100 rows, each column's ms/step, and what it implies: TFLOP per step at the paper size
    (per_step_flops: kbench.results.context.published_flops), the implied TFLOP/s of every column, and for the float32
    rows whether a column ran above the device's FP32 peak (then it cannot have been FP32: TF32, as the A100 gives
    TensorFlow and JAX by default). Where this run is the paper suite with the anchor profile, its number for the
    same cell stands beside."""
    peak = peaks.PEAKS.get(published["device"], {})
    frameworks = list(dict.fromkeys(f for r in published["rows"] for f in r["ms"]))     # the page's columns
    rows = []
    for entry, counted in zip(published["rows"], per_step_flops):
        row = {"row": label(entry), **{f: entry["ms"].get(f) or "NA" for f in frameworks}}
        implied, above, per_step = {}, [], None
        for framework in [f for f in frameworks if entry["ms"].get(f)]:
            per_step = counted[framework]
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


# A token longer than this in a cell (an image digest in a failed job's reason) gets places to break: unbroken it
# widens its table past the pane and slides the page under the report's navigation
LONGEST_TOKEN = 32


def _breakable(value):
    if not isinstance(value, str):
        return value
    return re.sub(r"\S{%d,}" % (LONGEST_TOKEN + 1),
                  lambda m: "\u200b".join(m[0][i:i + LONGEST_TOKEN // 2] for i in range(0, len(m[0]),
                                                                                      LONGEST_TOKEN // 2)), value)


def _html_table(frame: pd.DataFrame) -> str:
    return frame.astype(object).where(frame.notna(), "").map(_breakable).to_html(index=False, border=1, escape=True)


# A part of the page: its title, its table (None: none) and its text (kbench.claims.registry.on_page's too).
Part = tuple[str, "pd.DataFrame | None", str]


def headline_part(evidence: Evidence) -> Part:
    """A profile's headline: its rows' fastest columns, with ms/step's flags."""
    run, summary = evidence.run, evidence.table(tables.SUMMARY)
    ms_table = evidence.table(tables.MS_PER_STEP).set_index(flat.ROW_KEYS)
    flags = ms_table[[c for c in ("params_parity", tables.NETWORKS, tables.FLAGS, tables.EQUIVALENCE)
                      if c in ms_table.columns]]
    return (f"Headline, profile {run.profile}: the fastest column of each row",
            headline(summary, list(run.frameworks), flags),
            " ".join(filter(None, [device_note(run.on_gpu), "ms/step: mean ± half-width of its 95% interval (* one "
                                   "repeat). 'Not shown to differ': their intervals overlap the fastest's (a tie, not "
                                   "a loss). A flagged row compares different functions or networks."])))


def changes_part(page: Page, evidence: Evidence) -> Part:
    moved, said = latest_changes(page.store, page.suite, evidence.run.profile)
    return f"What changed since the previous run, profile {evidence.run.profile}", moved, said


def published_part(page: Page) -> Part:
    """The published A100 table, beside the anchor profile's numbers where this run is the paper size."""
    given = page.whole.run.published
    anchor = next((e.table(tables.SUMMARY) for e in page.profiles if e.run.profile == "anchor"), None) \
        if page.paper else None
    return ("The published A100 table, and what its numbers imply",
            published_table(given, page.published_flops, anchor),
            f"{given['source']}, on {given['device']}. Implied TFLOP/s = model FLOPs per step (kbench.results.flops, "
            "paper size) / published ms. The anchor profile re-runs what that code did where today's libraries allow; "
            "the departures page lists every difference and which ones no profile can keep."
            + ("" if anchor is not None else
               f" This run (suite {page.suite}) is not the paper size: no number of it stands beside these."))


def build(page: Page) -> tuple[str, str]:
    """(HTML fragment, Markdown) of the first page: per profile its headline, its changes and the claims that stand
    on its tables; then the claims of the suite's tables, and the published table."""
    parts = []
    for evidence in page.profiles:
        parts += [headline_part(evidence), changes_part(page, evidence),
                     *claims.on_page(page.claims, evidence)]
    parts += [*claims.on_page(page.claims, page.whole), published_part(page)]
    return render(parts)


def render(parts: list[Part]) -> tuple[str, str]:
    """Each part as HTML (its title, its text, its table) and as Markdown."""
    def shown(frame):
        return frame is not None and len(frame)
    return ("\n".join(f"<h3>{html.escape(title)}</h3>" + (f"<p>{html.escape(text)}</p>" if text else "")
                      + (_html_table(frame) if shown(frame) else "") for title, frame, text in parts),
            "\n".join(f"### {title}\n\n" + (f"{text}\n\n" if text else "")
                      + (frame.astype(object).where(frame.notna(), "").to_markdown(index=False) + "\n\n"
                         if shown(frame) else "") for title, frame, text in parts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True)
    parser.add_argument("--tables", required=True, type=Path, help="results/tables/<suite>")
    parser.add_argument("--history", required=True, type=Path, help="the history's folder")
    parser.add_argument("--config-json", required=True, type=json.loads)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    fragment, text = build(Page.of(args.config_json, args.suite, args.tables, args.history))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"<div class=\"kbench-first-page\">\n{LAYOUT}\n{fragment}\n</div>\n")
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
