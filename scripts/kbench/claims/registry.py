"""The one registry of the published claims' kinds: each kind is the rule that decides a claim of that kind (config
`kind`: kbench.plan.claims loads every claim the config quotes), the tables' files it reads (names the table
registry lists: kbench.results.registry) and the section of the first page it stands in. A claim stands on a run's
page where the run's tables make every file its kind reads (a profile's, or the suite's), so a claim of a study that
did not run is absent, not "not measured".

One signature: decide(claim, evidence) -> its lines on the page, each a verdict with what it rests on. A claim
decided as a whole is one line (stated: its words, its verdict as this run may state it, what it rests on); a claim a
study decides per row is that study's rows. A new published claim is one rule, one line in KINDS, its quote in the
config and a test (ADDING.md, "A new published claim").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from kbench.claims import explanations, findings, studies
from kbench.claims.evidence import Evidence
from kbench.plan import claims as plan_claims
from kbench.results import batch, first_step_tables, jax_numpy_tables, tuning
from kbench.results.verdicts import Verdict, device_note, on_this_run


@dataclass(frozen=True)
class Section:
    """Where claims stand on the first page, in SECTIONS' order (a profile's before the suite's)."""
    title: str                      # "{profile}": the run's profile
    heading: str | None = None      # the column of each claim's words (its one line); None: the claim's rows
    text: str = ""                  # "{quote}": its claim's words; the run's device note follows
    verdict: str = "verdict"        # the verdict column's name on the page


@dataclass(frozen=True)
class Kind:
    name: str                                               # config `kind`
    decide: Callable[[dict, Evidence], pd.DataFrame]        # (claim, evidence) -> its lines
    reads: tuple[str, ...]                                  # the tables' files it reads (kbench.results.registry)
    section: Section


def stated(rule: Callable[[dict, Evidence], Verdict], reading: str) -> Callable[[dict, Evidence], pd.DataFrame]:
    """A claim decided as a whole: its one line, the verdict as this run may state it (the CPU rule, saying what its
    CPU `reading` read: rows, breakdowns)."""
    def decide(claim: dict, evidence: Evidence) -> pd.DataFrame:
        said, rests_on = rule(claim, evidence)
        return pd.DataFrame([{"claim": claim["quote"], "verdict": on_this_run(said, evidence.run.on_gpu, reading),
                              "rests on": rests_on}])
    return decide


FINDINGS = Section("The published findings, re-tested on this run (profile {profile})", "published finding")
EXPLANATIONS = Section(
    "The benchmark's explanations, tested on this run's breakdowns by kind (profile {profile})",
    "the benchmark's explanation",
    "Each cell's steps after its timed window, profiled by its own framework (time_by_kind; docs/breakdown.md): each "
    "figure with its 95% interval, a kind's time its share of the profiled step times the timed ms/step. 'Does not "
    "hold' only where the intervals separate against the claim as its source states it. ")
FIRST_STEP = Section(
    "What the compile costs a user: time to the first step (profile {profile})", "the cost side of out of the box",
    "Seconds to the first step's return (import, build, first step), cold and warm (its framework's persistent "
    "compile cache filled), against the eager column of its framework (first_step; docs/first-step.md). ")
BATCH = Section(
    "The batch study's rows: a step's fixed cost against its cost per example (profile {profile})", None,
    "The claim (\u201c{quote}\u201d) has its one verdict above, with the explanations (the eager native column's "
    "waiting share along this ladder). These are the rows' fits behind it: a row reads in the claim's favour where "
    "the native column's fixed cost per step (a in ms/step = a + c x batch) is larger than the best Keras 3 "
    "column's, intervals apart, and its gap to that column shrinks as the batch grows (batch_fit, batch_curves; "
    "docs/batch-study.md). ", verdict="this row's fit reads")
TUNING = Section(
    "Out of the box against tuned: Keras 3 strict, native PyTorch tuned", None,
    "The finding: {quote}. It holds for a row where the best Keras 3 column in strict is not shown slower than the "
    "best native column tuned (its framework's documented settings, config `tuning`), and native's tuning gain is "
    "larger than that Keras 3 column's, intervals apart (tuning_gain; docs/profiles.md). ")
JAX_NUMPY = Section(
    "JAX against NumPy: the claim per workload", None,
    "The claim (\u201c{quote}\u201d), per workload: it holds where at some size NumPy's ms per call over JAX's clears "
    "the claimed speedup beyond both intervals, with outputs that agree (jax_numpy; docs/jax-numpy.md). ")
SECTIONS = (FINDINGS, EXPLANATIONS, FIRST_STEP, BATCH, TUNING, JAX_NUMPY)

KINDS = {kind.name: kind for kind in (
    Kind("no_single_fastest_keras3", stated(findings.no_single_fastest_keras3, "rows"), findings.READS, FINDINGS),
    Kind("keras3_beats", stated(findings.keras3_beats, "rows"), findings.READS, FINDINGS),
    Kind("precision_claims", stated(findings.precision_claims, "rows"), findings.READS, FINDINGS),
    Kind("library_fused_ops", stated(explanations.library_fused_ops, "breakdowns"), explanations.READS,
         EXPLANATIONS),
    Kind("little_manual_optimisation", stated(explanations.little_manual_optimisation, "breakdowns"),
         explanations.READS, EXPLANATIONS),
    Kind("host_overhead_at_small_batch", stated(explanations.host_overhead_at_small_batch, "breakdowns"),
         explanations.READS, EXPLANATIONS),
    Kind("pays_back_within", stated(studies.pays_back_within, "rows"), (first_step_tables.LONG,), FIRST_STEP),
    Kind("native_fixed_cost", studies.native_fixed_cost, (batch.VERDICTS,), BATCH),
    Kind("keras3_out_of_the_box", studies.keras3_out_of_the_box, (tuning.VERDICTS,), TUNING),
    Kind("jax_speeds_numpy", studies.jax_speeds_numpy, (jax_numpy_tables.CLAIM,), JAX_NUMPY),
)}


def quoted(config: dict) -> tuple[dict, ...]:
    """Every claim the config quotes (kbench.plan.claims, the one loader), each of a kind this registry holds: one of
    another is refused here, naming its place."""
    found = plan_claims.load(config)
    for claim in found:
        kind_of(claim)
    return found


def kind_of(claim: dict) -> Kind:
    if claim.get("kind") not in KINDS:
        raise ValueError(f"{claim.get('place', 'a claim')}: no claim kind {claim.get('kind')!r}; the kinds: "
                         f"{', '.join(KINDS)} (kbench.claims.registry)")
    return KINDS[claim["kind"]]


def on_page(claims: tuple[dict, ...], evidence: Evidence) -> list[tuple[str, pd.DataFrame, str]]:
    """The sections of one run (a profile's, or the suite's) with the claims that stand on it, in SECTIONS' order:
    (title, the claims' lines, text)."""
    found = []
    for section in SECTIONS:
        standing = [c for c in claims if kind_of(c).section is section and evidence.makes(kind_of(c).reads)]
        if not standing:
            continue
        lines = pd.concat([kind_of(c).decide(c, evidence) for c in standing], ignore_index=True)
        lines = lines.rename(columns={**({"claim": section.heading} if section.heading else {}),
                                      "verdict": section.verdict})
        text = section.text and section.text.format(quote=standing[0]["quote"]) + device_note(evidence.run.on_gpu)
        found.append((section.title.format(profile=evidence.run.profile), lines, text))
    return found
