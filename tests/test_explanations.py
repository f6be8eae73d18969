"""The benchmark's explanations as verdicts (kbench.claims.explanations), each rule on constructed breakdowns on
both sides of each condition it decides, its edges included: holds where the intervals separate in the claim's
favour, does not hold only where they separate against it, not measured where they overlap, each with the figures
that decided printed to the precision that tells them apart."""
import pandas as pd
import pytest

from conftest import CONFIG, run_context
from kbench.breakdown import kinds
from kbench.claims import explanations, registry
from kbench.claims.evidence import Evidence
from kbench.results import breakdown_tables, tables
from test_first_page import summary_of

KERAS3 = ["keras3-tensorflow", "keras3-jax", "keras3-torch"]
NATIVE = ["native-torch-eager", "native-torch-compiled"]
RULES = {rule["kind"]: rule for rule in CONFIG["published"]["explanations"]}
PUBLISHED = CONFIG["published"]["rows"]


def long_of(cells: list[dict]) -> pd.DataFrame:
    """time_by_kind_long rows from (row, framework, share per kind, with half-width `spread` across its steps;
    layer_fused share and the kinds it holds; xla_share; profiler overhead; closes)."""
    lines = []
    for c in cells:
        shares = {k: c.get(k, 0.0) for k in kinds.KIND_NAMES}
        spread = c.get("spread", 0.0)
        base = {"model": c["model"], "task": c["task"], "batch_size": c["batch_size"], "precision": "float32",
                "framework": c["framework"], "profile": "strict", "device": "cpu",
                "profiler_overhead": c.get("overhead", 1.0), "ops_per_step": 100, "fused_share": 0.0,
                "xla_share": c.get("xla", 0.0), "layer_fused_share": c.get("layer_fused", 0.0),
                "layer_fused_low": c.get("layer_fused", 0.0) - spread,
                "layer_fused_high": c.get("layer_fused", 0.0) + spread,
                "layer_fused_kinds": c.get("layer_fused_kinds"), "closes": c.get("closes", True), "why": None}
        lines += [{**base, "kind": k, "share": v, "share_low": v - spread, "share_high": v + spread}
                  for k, v in shares.items()]
    return pd.DataFrame(lines)


def evidence(long, summary, on_gpu=True) -> Evidence:
    """What an explanation reads: the breakdowns' long table and the cells' summary, on a GPU run unless not."""
    run = run_context(".", "strict", accelerator="gpu" if on_gpu else "cpu", keras3=tuple(KERAS3),
                      native=tuple(NATIVE), published={"rows": PUBLISHED})
    return Evidence.given(run, {breakdown_tables.LONG: long, tables.SUMMARY: summary})


def verdict(kind, long, summary, rule=None):
    return getattr(explanations, kind)(rule or RULES[kind], evidence(long, summary))


# ---------------------------------------------------------------- Keras 2's fused operations (finding 4)

def fused_case(k2_ms, k3_ms, k2_fused_share, spread=0.0, ms_spread=0.0, xla=0.0, k3_norm_share=0.0,
               fused_kinds="normalization", rows=(("sam", "predict", 4),)):
    """On each of `rows` (SAM predict): Keras 2 at k2_ms, Keras 3 on TensorFlow at k3_ms; the share of Keras 2's step
    in the fused ops its layers chose (FusedBatchNormV3: they hold `fused_kinds`, normalization; its steps'
    half-width `spread`), the rest matmul; Keras 3's share in normalization k3_norm_share, the rest matmul."""
    long, summary = [], []
    for model, task, batch in rows:
        row = {"model": model, "task": task, "batch_size": batch, "precision": "float32"}
        summary.append({**row, "ms": {"keras2": k2_ms, "keras3-tensorflow": k3_ms}})
        long += [{**row, "framework": "keras2", "matmul_conv": 1 - k2_fused_share, "normalization": k2_fused_share,
                  "layer_fused": k2_fused_share, "layer_fused_kinds": fused_kinds, "spread": spread, "xla": xla},
                 {**row, "framework": "keras3-tensorflow", "matmul_conv": 1.0 - k3_norm_share,
                  "normalization": k3_norm_share, "spread": spread}]
    return long_of(long), summary_of(summary, spread=ms_spread)


@pytest.mark.parametrize("k2_fused_share, spread, expected", [
    (0.30, 0.0, "holds"),              # 6 ms of the 10 ms gap
    (0.25, 0.0, "holds"),              # 5 ms: just at half of it
    (0.245, 0.0, "does not hold"),     # 4.9 ms: under half, the intervals apart
    (0.245, 0.01, "not measured here"),   # 4.9 ms, its steps spread over the line: undecided
])
def test_keras2s_layer_fused_ops_explain_the_gap_when_they_take_half_of_it_or_more(k2_fused_share, spread, expected):
    """Keras 2 at 20 ms, Keras 3 at 10 ms, both without XLA."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, k2_fused_share, spread))
    assert found == expected, rests_on
    assert "timed gap 10.00 ms" in rests_on


def test_the_fused_ops_rule_needs_keras3_faster_beyond_the_intervals_not_by_its_point_estimate():
    """Keras 3 at 10 ms against 10.5 ms, each ±10%: faster by the point estimates, not beyond the intervals; however
    much fused time Keras 2 has, nothing is decided."""
    found, rests_on = verdict("library_fused_ops", *fused_case(10.5, 10.0, 0.9, ms_spread=0.1))
    assert found == "not measured here" and "not faster beyond the intervals" in rests_on, rests_on
    long, summary = fused_case(20.0, 10.0, 0.3)
    long.loc[long.framework == "keras2", "closes"] = False
    assert verdict("library_fused_ops", long, summary)[0] == "not measured here"


def test_under_xla_the_fused_ops_mechanism_cannot_be_observed():
    """Keras 2 under XLA (the strict profile): its ops are XLA's, whatever its layers chose."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, 0.3, xla=0.97))
    assert found == "cannot be observed here" and "97% of keras2's op time ran in XLA programs" in rests_on


@pytest.mark.parametrize("overhead, expected", [
    (2.5, "not measured here"),       # profiled at 2.5x its timed step: past the 2x
    (1.99, "holds"),                  # just inside
    (0.49, "not measured here"),      # under half its timed step: past the inverse
    (0.51, "holds"),                  # just inside
])
def test_a_row_profiled_far_from_its_timed_step_decides_nothing(overhead, expected):
    long, summary = fused_case(20.0, 10.0, 0.3)
    long.loc[long.framework == "keras2", "profiler_overhead"] = overhead
    found, rests_on = verdict("library_fused_ops", long, summary)
    assert found == expected, rests_on
    assert (f"profiled / timed {overhead:.2f}" in rests_on) == (expected != "holds"), rests_on


@pytest.mark.parametrize("k3_norm_ms, expected", [
    (130.0, "does not hold"),   # 120 ms fused against 130 ms on the same work unfused: no extra; the gap is matmul
    (10.0, "holds"),            # Keras 3's normalization 10 ms: Keras 2's 110 ms extra, beyond half the 30 ms gap
])
def test_keras2s_fused_ops_are_set_against_keras3s_time_on_the_same_work(k3_norm_ms, expected):
    """Keras 2 at 400 ms spends 120 in FusedBatchNormV3 (normalization), Keras 3 at 370 ms spends k3_norm_ms on the
    same normalization unfused. Keras 3 has no time in Keras 2's fused ops whatever it does: counting that as zero
    would read 'holds' on a gap that lies wholly in the matrix products."""
    found, rests_on = verdict("library_fused_ops", *fused_case(400.0, 370.0, 0.3, k3_norm_share=k3_norm_ms / 370))
    assert found == expected, rests_on
    assert "keras2's layer-chosen fused ops 120.00 ms" in rests_on, rests_on
    assert f"keras3-tensorflow's time on the same work (normalization) {k3_norm_ms:.2f} ms" in rests_on, rests_on


def test_a_keras2_record_that_names_no_kinds_leaves_its_row_undecided():
    """A record from before layer_fused_kinds (the long table reads it empty): Keras 3's time on the same work is
    unknown, so the row decides nothing; with no time in those ops, Keras 2 has no extra whatever they hold."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, 0.3, fused_kinds=None))
    assert found == "not measured here" and "names no kinds of work they hold" in rests_on, rests_on
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, 0.0, fused_kinds=None))
    assert found == "does not hold" and "keras2's extra 0.00 ms" in rests_on, rests_on


def test_one_row_against_and_others_undecided_is_not_measured():
    """"In some cases": a row against and a row whose intervals overlap the line decide nothing between them; every
    decided row against does not hold."""
    sam = fused_case(20.0, 10.0, 0.245)                                      # 4.9 of 10 ms: against
    bert = fused_case(20.0, 10.0, 0.245, spread=0.01, rows=(("bert", "predict", 256),))      # overlapping
    found, rests_on = verdict("library_fused_ops", pd.concat([sam[0], bert[0]]), pd.concat([sam[1], bert[1]]))
    assert found == "not measured here" and "(against 50% of the gap)" in rests_on, rests_on
    bert = fused_case(20.0, 10.0, 0.2, rows=(("bert", "predict", 256),))     # 4 of 10 ms: against
    found, _ = verdict("library_fused_ops", pd.concat([sam[0], bert[0]]), pd.concat([sam[1], bert[1]]))
    assert found == "does not hold"


def test_an_xla_row_does_not_hide_the_rows_that_decided():
    """One row under XLA cannot observe the mechanism; another row without it still decides the finding."""
    sam = fused_case(20.0, 10.0, 0.3)                                                           # holds
    bert = fused_case(20.0, 10.0, 0.3, xla=0.97, rows=(("bert", "predict", 256),))
    found, rests_on = verdict("library_fused_ops", pd.concat([sam[0], bert[0]]), pd.concat([sam[1], bert[1]]))
    assert found == "holds" and "97% of keras2's op time ran in XLA programs" in rests_on, rests_on


@pytest.mark.parametrize("ms_spread, expected", [
    (0.0, "holds"),                 # gap exactly 10 ms: 5.2 ms of fused time at least half of it
    (0.02, "not measured here"),    # each ms/step +-2%: gap up to 10.6 ms, its half 5.3 above the fused time's low end
])
def test_the_fused_share_must_reach_its_part_of_the_gaps_high_end(ms_spread, expected):
    """Keras 2 at 20 ms with 26% of it in its layers' fused ops (5.2 ms), Keras 3 at 10 ms: at least half the gap
    where the gap is exact; with the timed intervals, 5.2 ms against half of a gap of [9.4, 10.6] ms is undecided."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, 0.26, ms_spread=ms_spread))
    assert found == expected, rests_on


@pytest.mark.parametrize("ms_spread, expected", [
    (0.0, "holds"),                 # 5.2 ms against half of exactly 10 ms
    (0.01, "not measured here"),    # 5.2 ms [5.15, 5.25] against half of [9.7, 10.3] ms: 5.15 under 5.15 (5.148)
])
def test_a_kinds_timed_ms_carries_the_timed_estimates_interval(ms_spread, expected):
    """26% of Keras 2's 20 ms step in its layers' fused ops, no spread across its steps: in timed ms that is 26% of
    the timed estimate's interval, not of its point; a point 5.2 ms would pass half the gap's high end (5.15)."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, 0.26, ms_spread=ms_spread))
    assert found == expected, rests_on
    if ms_spread:
        assert "keras2's layer-chosen fused ops 5.20 ms [5.15 ms, 5.25 ms]" in rests_on, rests_on


# ---------------------------------------------------------------- SAM's native code (finding 3)

def sam_case(sam_native, glue_share, others=(2.0, 2.0, 2.0), sam_fit=None):
    """SAM predict (and fit, where sam_fit is given): native at sam_native ms against Keras 3's 10 ms, `glue_share`
    of native's step outside matrix products (Keras 3: none); other published rows at native / Keras 3 = others
    (up to four)."""
    rows = [("bert", "fit", 32), ("bert", "predict", 256), ("stable_diffusion", "fit", 8),
            ("stable_diffusion", "predict", 13)]
    entries, cells = [], []
    sams = [("predict", 4, sam_native)] + ([("fit", 1, sam_fit)] if sam_fit else [])
    for task, batch, native in sams:
        row = {"model": "sam", "task": task, "batch_size": batch, "precision": "float32"}
        entries.append({**row, "ms": {"native-torch-eager": native, "keras3-jax": 10.0}})
        cells += [{**row, "framework": "native-torch-eager", "matmul_conv": 1 - glue_share,
                   "data_movement": glue_share},
                  {**row, "framework": "keras3-jax", "matmul_conv": 1.0}]
    for (model, task, batch), ratio in zip(rows, others):
        entries.append({"model": model, "task": task, "batch_size": batch, "precision": "float32",
                        "ms": {"native-torch-eager": 10.0 * ratio, "keras3-jax": 10.0}})
    return long_of(cells), summary_of(entries, spread=0.0)


@pytest.mark.parametrize("sam_native, glue_share, expected", [
    (40.0, 0.5, "holds"),             # 4x, larger than the others' 2x; glue 20 - 0 ms = 20 of the 30 ms gap
    (40.0, 0.375, "holds"),           # glue 15 ms: exactly half the gap (at least half)
    (40.0, 0.25, "does not hold"),    # glue 10 ms: the gap is in the matmuls
    (15.0, 0.8, "does not hold"),     # 1.5x: smaller than every other published row's 2x
])
def test_sams_gap_is_larger_than_most_and_lies_outside_the_matrix_products(sam_native, glue_share, expected):
    found, rests_on = verdict("little_manual_optimisation", *sam_case(sam_native, glue_share))
    assert found == expected, rests_on


def test_sams_gap_needs_to_pass_most_other_rows_not_every_one():
    """3.00x against 2.00x, 2.00x and 3.01x: larger than two of three ("most"); the 3.01x row told apart from it."""
    found, rests_on = verdict("little_manual_optimisation", *sam_case(30.0, 0.6, others=(2.0, 2.0, 3.01)))
    assert found == "holds" and "3.00x [3.00x, 3.00x], larger than 2 and smaller than 1 of 3" in rests_on, rests_on
    found, _ = verdict("little_manual_optimisation", *sam_case(30.0, 0.6, others=(2.0, 3.01, 3.01)))
    assert found == "does not hold"


def test_a_batch_study_rung_is_no_published_row():
    """BERT fit at bs1 (a rung of the batch study's ladder, 5x) is not among the rows SAM's gap is set against: only
    the published rows, by model, task, batch and precision."""
    long, summary = sam_case(40.0, 0.5)
    rung = summary_of([{"model": "bert", "task": "fit", "batch_size": 1, "precision": "float32",
                        "ms": {"native-torch-eager": 50.0, "keras3-jax": 10.0}}], spread=0.0)
    found, rests_on = verdict("little_manual_optimisation", long, pd.concat([summary, rung]))
    assert found == "holds" and "larger than 3 and smaller than 0 of 3 other published rows" in rests_on, rests_on


@pytest.mark.parametrize("others, expected", [
    ((2.0, 2.0, 4.0, 4.0), "not measured here"),    # larger than 2 of 4, tied with 2: half is not most
    ((2.0, 2.0, 2.0, 4.0), "holds"),                # larger than 3 of 4
])
def test_most_is_more_than_half_of_the_other_rows(others, expected):
    """SAM at 4.00x against an even count of other rows: beating exactly half of them is not "most"."""
    found, rests_on = verdict("little_manual_optimisation", *sam_case(40.0, 0.5, others=others))
    assert found == expected, rests_on
    assert f"larger than {sum(o < 4.0 for o in others)} and smaller than 0 of 4 other published rows" in rests_on


@pytest.mark.parametrize("task, batch, counted", [("generate", 1, 3), ("generate", 32, 4)])
def test_sams_gap_is_set_against_the_rows_the_finding_counts(task, batch, counted):
    """The batch-1 generate rows are published but not among the finding's ten tasks (config: the explanation's
    `without`): Gemma generate at bs1 (8x, above SAM's 4x) is left out; at bs32 it is one of the rows."""
    long, summary = sam_case(40.0, 0.5)
    gemma = summary_of([{"model": "gemma", "task": task, "batch_size": batch, "precision": "bfloat16",
                         "ms": {"native-torch-eager": 80.0, "keras3-jax": 10.0}}], spread=0.0)
    found, rests_on = verdict("little_manual_optimisation", long, pd.concat([summary, gemma]))
    assert f"larger than 3 and smaller than {counted - 3} of {counted} other published rows" in rests_on, rests_on
    assert found == "holds", rests_on        # larger than 3 of 4 too: the count, not the verdict, tells them apart
    assert {"task": "generate", "batch_size": 1} in RULES["little_manual_optimisation"]["without"]


@pytest.mark.parametrize("column, overhead, sam_native, glue_share, expected", [
    ("native-torch-eager", 5.0, 40.0, 0.5, "not measured here"),   # profiled at 5x: its glue share would hold
    ("native-torch-eager", 5.0, 40.0, 0.25, "not measured here"),  # ... or not hold: neither is decided
    ("native-torch-eager", 5.0, 15.0, 0.8, "does not hold"),       # 1.5x, smaller than every other row: timed
    ("keras3-jax", 5.0, 40.0, 0.5, "not measured here"),           # either column's breakdown
    ("native-torch-eager", 0.45, 40.0, 0.5, "not measured here"),  # under half its timed step
    ("native-torch-eager", 0.55, 40.0, 0.5, "holds"),              # within [0.5, 2]
    ("native-torch-eager", 1.95, 40.0, 0.5, "holds"),
])
def test_a_sam_cell_profiled_far_from_its_timed_step_decides_nothing_through_its_glue_share(
        column, overhead, sam_native, glue_share, expected):
    """The glue share is profiled: a cell profiled past max_profiler_overhead (2x, or under half) decides nothing
    through it; the ratio of timed ms/step beside it still counts."""
    long, summary = sam_case(sam_native, glue_share)
    long.loc[(long.framework == column) & (long.model == "sam"), "profiler_overhead"] = overhead
    found, rests_on = verdict("little_manual_optimisation", long, summary)
    assert found == expected, rests_on
    past = not (0.5 <= overhead <= 2.0)
    assert (f"(undecided: the breakdown's profiled / timed {overhead:.2f}, past the 2x" in rests_on) == past, rests_on


def test_every_sam_row_must_hold_for_the_finding_to_hold():
    """SAM predict holds; SAM fit's 3.00x ties a 3.00x row and two 2.00x rows: not larger than most, not shown
    smaller: undecided, so the finding is not measured, not held."""
    found, rests_on = verdict("little_manual_optimisation",
                              *sam_case(40.0, 0.5, others=(3.0, 2.0, 4.0), sam_fit=30.0))
    assert found == "not measured here", rests_on


def test_the_sam_rule_is_not_measured_without_other_rows_or_a_breakdown():
    long, summary = sam_case(40.0, 0.5)
    assert verdict("little_manual_optimisation", long, summary[summary.model == "sam"])[0] == "not measured here"
    found, rests_on = verdict("little_manual_optimisation", long[long.framework == "keras3-jax"], summary)
    assert found == "not measured here" and "no breakdown of native-torch-eager and keras3-jax" in rests_on


# ---------------------------------------------------------------- host overhead at a small batch

def batch_case(small_wait, large_wait, keras_wait, spread=0.0, middle_wait=None, more_keras=None):
    """BERT predict at bs1 and bs32 (and bs8, where middle_wait is given): native eager waiting small_wait, middle_wait
    and large_wait of its step; Keras 3 on JAX keras_wait at bs1, 10% at the others (more_keras: further Keras 3
    columns' waiting shares at bs1)."""
    cells = []
    rungs = [(1, small_wait, keras_wait), (32, large_wait, 0.1)] + ([(8, middle_wait, 0.1)] if middle_wait else [])
    for batch, wait, keras in rungs:
        row = {"model": "bert", "task": "predict", "batch_size": batch, "precision": "float32"}
        cells += [{**row, "framework": "native-torch-eager", "matmul_conv": 1.0 - wait, "waiting": wait,
                   "spread": spread},
                  {**row, "framework": "keras3-jax", "matmul_conv": 1.0 - keras, "waiting": keras, "spread": spread}]
        if batch == 1:
            cells += [{**row, "framework": framework, "matmul_conv": 1.0 - w, "waiting": w, "spread": spread}
                      for framework, w in (more_keras or {}).items()]
    return long_of(cells), summary_of([])


@pytest.mark.parametrize("small, large, keras, spread, expected", [
    (0.6, 0.2, 0.3, 0.0, "holds"),            # native's wait grows as the batch shrinks, above Keras 3's
    (0.2, 0.6, 0.1, 0.0, "does not hold"),    # it shrinks
    (0.6, 0.2, 0.7, 0.0, "does not hold"),    # it grows, but Keras 3 waits more at the small batch
    (0.401, 0.4, 0.3, 0.0, "holds"),          # 40.1% against 40.0%: apart, and printed so
    (0.401, 0.4, 0.3, 0.01, "not measured here"),   # the same, each ±1 point across its steps: overlapping
    (0.6, 0.2, 0.59, 0.02, "not measured here"),    # above Keras 3's only within the intervals
])
def test_natives_waiting_share_grows_at_the_small_batch_and_exceeds_keras3s(small, large, keras, spread, expected):
    found, rests_on = verdict("host_overhead_at_small_batch", *batch_case(small, large, keras, spread))
    assert found == expected, rests_on
    small_text, large_text = explanations.decided(small, large, percent=True)
    assert f"waiting {small_text} " in rests_on and f"of the step at bs1, {large_text} " in rests_on


def test_the_python_overhead_rule_reads_the_eager_column_alone():
    """A compiled native column (CUDA-graph decoding in strict) does not veto eager PyTorch's reading."""
    long, summary = batch_case(0.6, 0.2, 0.3)
    compiled = long[long.framework == "native-torch-eager"].assign(framework="native-torch-compiled")
    compiled.loc[(compiled.kind == "waiting") & (compiled.batch_size == 1), ["share", "share_low", "share_high"]] = 0.0
    assert verdict("host_overhead_at_small_batch", pd.concat([long, compiled]), summary)[0] == "holds"


@pytest.mark.parametrize("middle, expected", [(0.7, "holds"), (0.3, "holds")])
def test_the_python_overhead_rule_reads_the_smallest_batch_against_the_largest(middle, expected):
    """bs1, bs8 and bs32: native waits 60% at bs1 and 20% at bs32; at bs8 more (70%) or less (30%) than at bs1, which
    the rule does not read: it is neither end of the ladder."""
    found, rests_on = verdict("host_overhead_at_small_batch", *batch_case(0.6, 0.2, 0.3, middle_wait=middle))
    assert found == expected, rests_on
    assert "of the step at bs1, 20.0% [20.0%, 20.0%] at bs32" in rests_on, rests_on


def test_native_eager_must_wait_more_than_the_keras3_column_that_waits_least():
    """At bs1 Keras 3 on JAX waits 30% and on torch 70%: native's 60% is set against the 30%, Keras 3's best; against
    Keras 3 on JAX alone at 65% it does not hold."""
    found, rests_on = verdict("host_overhead_at_small_batch",
                              *batch_case(0.6, 0.2, 0.3, more_keras={"keras3-torch": 0.7}))
    assert found == "holds" and "keras3-jax at bs1: 30.0%" in rests_on, rests_on
    found, rests_on = verdict("host_overhead_at_small_batch", *batch_case(0.6, 0.2, 0.65))
    assert found == "does not hold", rests_on


def test_without_a_keras3_breakdown_at_the_small_batch_the_growth_alone_decides_nothing():
    long, summary = batch_case(0.6, 0.2, 0.3)
    alone = long[~((long.framework == "keras3-jax") & (long.batch_size == 1))]
    found, rests_on = verdict("host_overhead_at_small_batch", alone, summary)
    assert found == "not measured here" and "(supports)" in rests_on and "keras3" not in rests_on, rests_on
    assert verdict("host_overhead_at_small_batch", long, summary)[0] == "holds"


def test_the_batch_rule_is_not_measured_with_one_batch_size():
    long, summary = batch_case(0.6, 0.2, 0.3)
    found, _ = verdict("host_overhead_at_small_batch", long[long.batch_size == 1], summary)
    assert found == "not measured here"


def test_figures_print_to_the_precision_that_tells_them_apart():
    assert explanations.decided(0.400, 0.401, percent=True) == ("40.0%", "40.1%")
    assert explanations.decided(0.4000, 0.4001, percent=True) == ("40.00%", "40.01%")
    assert explanations.decided(3.00, 3.01, "x") == ("3.00x", "3.01x")
    assert explanations.decided(3.000, 3.004, "x") == ("3.000x", "3.004x")


def test_on_a_cpu_each_verdict_says_what_its_cpu_breakdowns_read():
    decide = registry.KINDS["library_fused_ops"].decide
    table = decide(RULES["library_fused_ops"], evidence(*fused_case(20.0, 10.0, 0.3), on_gpu=False))
    assert table.verdict.iloc[0] == "not measured here (no GPU in this run; its CPU breakdowns read: holds)"
    table = decide(RULES["library_fused_ops"], evidence(*fused_case(20.0, 10.0, 0.3), on_gpu=True))
    assert table.verdict.iloc[0] == "holds"


# ---------------------------------------------------------------- what the rules read: time_by_kind_long.csv

def record(model, task, batch, framework, ms: dict, timed_ms=None, **fields):
    """A cell's record with a breakdown over three identical profiled steps (each kind `ms` of a step, in ms):
    timed at the profiled ms/step unless timed_ms is given."""
    from kbench.contract import cell
    from test_launch import synthetic_spec
    spec = synthetic_spec().replace(model=model, task=task, batch_size=batch, framework=framework,
                                    cell_id=f"test/{model}/{task}/bs{batch}/float32/{framework}")
    result = cell.new_result(spec, {"runtime": "host"}, "ok")
    step = sum(ms.values())
    result.timing = {"n": 10, "mean_ms": timed_ms or step, "step_ms": [timed_ms or step] * 10}
    result.breakdown = {"steps": 3, "closes": True, "step_ms_per_step": step, "window_ms_per_step": step,
                        "timed_ms_per_step": timed_ms or step, "profiler_overhead": step / (timed_ms or step),
                        "ms_per_step": ms, "xla_share": 0.0,
                        "per_step": {"step_ms": [step] * 3, **{k: [v] * 3 for k, v in ms.items()},
                                     "layer_fused": [fields.get("layer_fused_ms_per_step", 0.0)] * 3},
                        **fields}
    return result


def built_long(tmp_path, cells=(), ladder=()) -> pd.DataFrame:
    """time_by_kind_long.csv as the workflow writes it from these records, read back as the first page reads it."""
    from conftest import run_context
    from kbench.results import breakdown_tables
    from kbench.results.context import Records
    breakdown_tables.build(Records(cells=tuple(cells), ladder=tuple(ladder)),
                           run_context(tmp_path, "strict", frameworks=("keras2", "keras3-tensorflow")))
    return pd.read_csv(tmp_path / "strict" / breakdown_tables.LONG)


@pytest.mark.parametrize("fields, expected", [
    ({"layer_fused_kinds": {"normalization": 12.0}}, "normalization"),
    ({"layer_fused_kinds": {"normalization": 12.0, "other": 1.0}}, "normalization,other"),
    ({"layer_fused_kinds": {}}, ""),          # a record that names none
    ({}, None),                               # a record from before the field: not measured
])
def test_the_long_table_names_the_kinds_keras2s_layer_fused_ops_hold(fields, expected):
    from kbench.results import breakdown_tables
    long = breakdown_tables.breakdown_long([record("sam", "predict", 4, "keras2", {"matmul_conv": 28.0,
                                                                                   "normalization": 12.0},
                                                   layer_fused_ms_per_step=12.0, **fields)])
    assert "layer_fused_kinds" in long.columns
    assert set(long["layer_fused_kinds"]) == {expected}


@pytest.mark.parametrize("k3_norm_ms, expected", [(130.0, "does not hold"), (10.0, "holds")])
def test_the_fused_ops_verdict_reads_the_kinds_from_the_written_table(tmp_path, k3_norm_ms, expected):
    """The issue's case from records to the written table to the verdict: Keras 2 at 400 ms with 120 ms in
    FusedBatchNormV3, Keras 3 at 370 ms with k3_norm_ms on the same normalization unfused."""
    cells = [record("sam", "predict", 4, "keras2", {"matmul_conv": 280.0, "normalization": 120.0},
                    layer_fused_ms_per_step=120.0, layer_fused_kinds={"normalization": 120.0}),
             record("sam", "predict", 4, "keras3-tensorflow", {"matmul_conv": 370.0 - k3_norm_ms,
                                                               "normalization": k3_norm_ms})]
    summary = summary_of([{"model": "sam", "task": "predict", "batch_size": 4, "precision": "float32",
                           "ms": {"keras2": 400.0, "keras3-tensorflow": 370.0}}], spread=0.0)
    found, rests_on = verdict("library_fused_ops", built_long(tmp_path, cells), summary)
    assert found == expected, rests_on


def test_the_python_overhead_verdict_reads_the_batch_studys_rungs_in_the_table(tmp_path):
    """The cells run BERT predict at bs32 only; the batch study's ladder runs bs1: the table holds both, and the
    verdict reads them as one row at two batches."""
    def at(batch, native_wait, keras_wait):
        return [record("bert", "predict", batch, "native-torch-eager", {"matmul_conv": 10 - native_wait,
                                                                         "waiting": native_wait}),
                record("bert", "predict", batch, "keras3-jax", {"matmul_conv": 10 - keras_wait,
                                                                 "waiting": keras_wait})]
    long = built_long(tmp_path, cells=at(32, 2.0, 1.0), ladder=at(1, 6.0, 3.0))
    assert sorted(set(long.batch_size)) == [1, 32]
    found, rests_on = verdict("host_overhead_at_small_batch", long, summary_of([]))
    assert found == "holds" and "waiting 60.0% [60.0%, 60.0%] of the step at bs1, 20.0%" in rests_on, rests_on
