"""The published page's findings (config published.findings), each decided on this run's rows: the cells' summary
(kbench.results.tables' cells_summary.csv), every estimate with its 95% interval. "Beats by N%" counts only where the
intervals separate. Applied to the published page's own numbers the rules give the page's findings
(tests/test_first_page.py).

- no_single_fastest_keras3: "no single Keras 3 backend is fastest everywhere";
- keras3_beats: the best Keras 3 column of each row against one column, by more than N%, in a share of the rows;
- precision_claims: the mixed-precision speedups (config precision_study.claims) in every framework.
"""
from __future__ import annotations

import pandas as pd

from kbench.claims.evidence import Evidence
from kbench.results import flat, stats, tables
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED_HERE, Verdict, left_out

READS = (tables.SUMMARY,)


def best_keras3(found: dict[str, stats.Estimate], keras3: list[str]) -> str | None:
    candidates = [f for f in found if f in keras3]
    return min(candidates, key=lambda f: found[f].ms) if candidates else None


def _row_estimates(summary: pd.DataFrame):
    for key, group in summary.groupby(flat.ROW_KEYS, sort=False):
        yield dict(zip(flat.ROW_KEYS, key)), tables.estimates(summary, group)


def label(row: dict) -> str:
    return f"{row['model']} {row['task']} bs{row['batch_size']} {row['precision']}"


def no_single_fastest_keras3(finding: dict, evidence: Evidence) -> Verdict:
    """Holds when two rows have different Keras 3 backends fastest beyond their intervals; does not hold when one
    backend is fastest (or not shown to differ from the fastest) in every row with two or more backends."""
    keras3 = evidence.run.keras3
    winners, rests_on = {}, []
    for row, found in _row_estimates(evidence.table(tables.SUMMARY)):
        backends = {f: e for f, e in found.items() if f in keras3}
        if len(backends) < 2:
            continue
        best = min(backends, key=lambda f: backends[f].ms)
        tied = [f for f in backends if f != best and not stats.separate(backends[f], backends[best])]
        winners[label(row)] = {best, *tied}
        rests_on.append(f"{label(row)}: {best}" + (f" (not shown to differ: {', '.join(tied)})" if tied else ""))
    if len(winners) < 2:
        return Verdict(NOT_MEASURED_HERE, "fewer than two rows with two or more Keras 3 backends")
    sole = {next(iter(w)) for w in winners.values() if len(w) == 1}
    always = set.intersection(*winners.values())
    verdict = FAILS if always else HOLDS if len(sole) >= 2 else NOT_MEASURED_HERE
    if verdict == NOT_MEASURED_HERE:
        rests_on.append("ties leave fewer than two rows with one fastest backend")
    return Verdict(verdict, "; ".join(rests_on))


def keras3_beats(finding: dict, evidence: Evidence) -> Verdict:
    """Best Keras 3 of each row against one column: "beats by more than N%" where the other's mean is above the
    best's by more than N% and their intervals separate. Holds when the share of rows that do reaches the page's
    (in_rows of of_rows), or every row (in_rows: all)."""
    against, by_pct = finding["against"], finding.get("by_pct", 0)
    beaten, measured, rests_on = 0, 0, []
    for row, found in _row_estimates(evidence.table(tables.SUMMARY)):
        best = best_keras3(found, list(evidence.run.keras3))
        if best is None or against not in found or left_out(row, finding.get("without", [])):
            continue
        measured += 1
        percent = (found[against].ms / found[best].ms - 1) * 100
        beats = percent > by_pct and stats.separate(found[against], found[best])
        beaten += beats
        rests_on.append(f"{label(row)}: {best} {percent:+.0f}%{'' if beats else ' (not beyond)'}")
    if not measured:
        return Verdict(NOT_MEASURED_HERE, f"no row has both a Keras 3 column and {against}")
    if finding.get("in_rows", "all") == "all":
        verdict = HOLDS if beaten == measured else FAILS
    else:
        verdict = HOLDS if beaten / measured >= finding["in_rows"] / finding["of_rows"] else FAILS
    return Verdict(verdict, f"{beaten} of {measured} rows: " + "; ".join(rests_on))


def precision_claims(finding: dict, evidence: Evidence) -> Verdict:
    """Each configured claim (precision_study.claims, the run's precision_claims): the baseline's ms over
    mixed_float16's, in every framework that ran both; holds when each ratio reaches the claim and their intervals
    separate."""
    summary, baseline = evidence.table(tables.SUMMARY), evidence.run.precision_baseline
    decided, rests_on = [], []
    ok = summary[summary.status == "ok"]
    for claim in evidence.run.precision_claims:
        cells = ok[(ok.model == claim["model"]) & (ok.task == claim["task"])]
        over = claim.get("baseline", baseline)
        for framework, group in cells.groupby("framework", sort=False):
            by_precision = {r.precision: tables.as_estimate(r) for r in group.itertuples()}
            if over not in by_precision or "mixed_float16" not in by_precision:
                continue
            a, b = by_precision[over], by_precision["mixed_float16"]
            ratio = a.ms / b.ms
            good = ratio >= claim["speedup"] and stats.separate(a, b)
            decided.append(good)
            rests_on.append(f"{claim['model']} {claim['task']} {framework}: {ratio:.2f}x (claimed {claim['speedup']}x)")
    if not decided:
        return Verdict(NOT_MEASURED_HERE, "no framework ran the claims' models at both float32 and mixed_float16")
    return Verdict(HOLDS if all(decided) else FAILS, "; ".join(rests_on))
