"""The benchmark's explanations as verdicts (kbench.report.explanations), each rule on constructed breakdowns on
both sides of what it decides: holds, does not hold, not measured."""
import pandas as pd
import pytest

from conftest import CONFIG
from kbench import breakdown
from kbench.report import explanations
from test_first_page import summary_of

KERAS3 = ["keras3-tensorflow", "keras3-jax", "keras3-torch"]
NATIVE = ["native-torch-eager", "native-torch-compiled"]
RULES = {rule["kind"]: rule for rule in CONFIG["published"]["explanations"]}


def long_of(cells: list[dict]) -> pd.DataFrame:
    """time_by_kind_long rows from (row, framework, ms per kind; library_fused ms; closes): the window is the kinds'
    sum."""
    lines = []
    for c in cells:
        kinds = {k: c.get(k, 0.0) for k in breakdown.KIND_NAMES}
        window = sum(kinds.values())
        base = {"model": c["model"], "task": c["task"], "batch_size": c["batch_size"], "precision": "float32",
                "framework": c["framework"], "profile": "strict", "device": "cpu", "profiler_overhead": 1.0,
                "ops_per_step": 100, "fused_share": kinds["fused"] / window,
                "library_fused_ms_per_step": c.get("library_fused", 0.0), "window_ms_per_step": window,
                "closes": c.get("closes", True), "why": None}
        lines += [{**base, "kind": k, "ms_per_step": v, "share": v / window} for k, v in kinds.items()]
    return pd.DataFrame(lines)


def verdict(kind, long, summary):
    found, rests_on = explanations.RULES[kind](RULES[kind], long, summary, KERAS3, NATIVE)
    return found, rests_on


# ---------------------------------------------------------------- Keras 2's fused operations

def fused_case(k2_ms, k3_ms, k2_fused, k3_fused=0.0, model="sam", task="predict"):
    row = {"model": model, "task": task, "batch_size": 4, "precision": "float32"}
    summary = summary_of([{**row, "ms": {"keras2": k2_ms, "keras3-tensorflow": k3_ms}}])
    long = long_of([{**row, "framework": "keras2", "matmul_conv": k2_ms - k2_fused, "other": k2_fused,
                     "library_fused": k2_fused},
                    {**row, "framework": "keras3-tensorflow", "matmul_conv": k3_ms - k3_fused, "fused": k3_fused,
                     "library_fused": 0.0}])
    return long, summary


@pytest.mark.parametrize("k2_fused, expected", [(6.0, "holds"), (5.0, "holds"), (4.9, "does not hold")])
def test_keras2s_fused_ops_explain_the_gap_when_they_take_half_of_it_or_more(k2_fused, expected):
    """Keras 2 at 20 ms, Keras 3 at 10: its library's fused ops hold 6, 5 (just at half the gap) or 4.9 ms."""
    found, rests_on = verdict("library_fused_ops", *fused_case(20.0, 10.0, k2_fused))
    assert found == expected, rests_on
    assert "profiled gap 10.00 ms/step" in rests_on


def test_the_fused_ops_rule_is_not_measured_without_a_faster_keras3_or_a_breakdown():
    found, rests_on = verdict("library_fused_ops", *fused_case(10.0, 10.0, 5.0))      # a tie: nothing to explain
    assert found == "not measured here" and "not faster beyond the intervals" in rests_on
    long, summary = fused_case(20.0, 10.0, 6.0)
    long.loc[long.framework == "keras2", "closes"] = False
    assert verdict("library_fused_ops", long, summary)[0] == "not measured here"


# ---------------------------------------------------------------- SAM's native code

def sam_case(sam_native, glue, other_ratio=2.0):
    """SAM predict: native at sam_native ms against Keras 3's 10 ms, `glue` ms of native's extra time outside
    matmuls; BERT fit: native at other_ratio x Keras 3."""
    sam = {"model": "sam", "task": "predict", "batch_size": 4, "precision": "float32"}
    bert = {"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32"}
    summary = summary_of([{**sam, "ms": {"native-torch-eager": sam_native, "keras3-jax": 10.0}},
                          {**bert, "ms": {"native-torch-eager": 10.0 * other_ratio, "keras3-jax": 10.0}}])
    long = long_of([{**sam, "framework": "native-torch-eager", "matmul_conv": sam_native - glue,
                     "data_movement": glue},
                    {**sam, "framework": "keras3-jax", "matmul_conv": 10.0}])
    return long, summary


@pytest.mark.parametrize("sam_native, glue, expected", [
    (40.0, 20.0, "holds"),             # 4x, the largest; 20 of the 30 ms gap outside matmuls
    (40.0, 10.0, "does not hold"),     # 4x, but the gap is in the matmuls
    (15.0, 5.0, "does not hold"),      # 1.5x: BERT's 2x gap is larger
])
def test_sams_gap_is_the_largest_and_lies_outside_the_matrix_products(sam_native, glue, expected):
    found, rests_on = verdict("little_manual_optimisation", *sam_case(sam_native, glue))
    assert found == expected, rests_on
    assert "largest ratio on another row: 2.00x" in rests_on


def test_the_sam_rule_is_not_measured_without_other_rows_or_a_breakdown():
    long, summary = sam_case(40.0, 20.0)
    assert verdict("little_manual_optimisation", long, summary[summary.model == "sam"])[0] == "not measured here"
    found, rests_on = verdict("little_manual_optimisation", long[long.framework == "keras3-jax"], summary)
    assert found == "not measured here" and "no breakdown of native-torch-eager and keras3-jax" in rests_on


# ---------------------------------------------------------------- host overhead at a small batch

def batch_case(small_wait, large_wait, keras_wait):
    cells = []
    for batch, wait, keras in ((1, small_wait, keras_wait), (32, large_wait, 0.1)):
        row = {"model": "gemma", "task": "generate", "batch_size": batch, "precision": "float32"}
        cells += [{**row, "framework": "native-torch-eager", "matmul_conv": 1.0 - wait, "waiting": wait},
                  {**row, "framework": "keras3-jax", "matmul_conv": 1.0 - keras, "waiting": keras}]
    return long_of(cells), summary_of([])


@pytest.mark.parametrize("small, large, keras, expected", [
    (0.6, 0.2, 0.3, "holds"),            # native's wait grows as the batch shrinks, above Keras 3's
    (0.2, 0.6, 0.1, "does not hold"),    # it shrinks
    (0.6, 0.2, 0.7, "does not hold"),    # it grows, but Keras 3 waits more at the small batch
])
def test_natives_waiting_share_grows_at_the_small_batch_and_exceeds_keras3s(small, large, keras, expected):
    found, rests_on = verdict("host_overhead_at_small_batch", *batch_case(small, large, keras))
    assert found == expected, rests_on
    assert f"waiting {small:.0%} of the step at bs1, {large:.0%} at bs32" in rests_on


def test_the_batch_rule_is_not_measured_with_one_batch_size():
    long, summary = batch_case(0.6, 0.2, 0.3)
    found, _ = verdict("host_overhead_at_small_batch", long[long.batch_size == 1], summary)
    assert found == "not measured here"


def test_on_a_cpu_each_verdict_says_what_its_cpu_breakdowns_read():
    long, summary = fused_case(20.0, 10.0, 6.0)
    table = explanations.verdicts([RULES["library_fused_ops"]], long, summary, KERAS3, NATIVE, on_gpu=False)
    assert table.verdict.iloc[0] == "not measured here (no GPU in this run; its CPU breakdowns read: holds)"
    table = explanations.verdicts([RULES["library_fused_ops"]], long, summary, KERAS3, NATIVE, on_gpu=True)
    assert table.verdict.iloc[0] == "holds"
