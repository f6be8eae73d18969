"""The equivalence check's weights and verdicts, without a framework: the mappings of the reference's Keras weights
onto the native modules (checked against the real layouts of the tiny models, dumped once from the images into
tests/fixtures/tiny_weight_layouts.json) and back, the tolerance at its boundary, and unit-scale values."""
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import CONFIG
from kbench import equivalence, mappings, matrix, tables, weights

LAYOUTS = json.loads((Path(__file__).parent / "fixtures" / "tiny_weight_layouts.json").read_text())


def reference(model_task):
    rng = np.random.default_rng(0)
    return [(path, rng.standard_normal(shape).astype(np.float32)) for path, shape in LAYOUTS["keras3"][model_task]]


@pytest.mark.parametrize("model, task", [("bert", "fit"), ("resnet50", "fit")])
def test_the_mapping_names_every_native_weight_with_its_shape_and_round_trips(model, task):
    arrays = reference(f"{model}/{task}")
    mapping = mappings.mapping(model, task)
    state = mapping.to_torch(arrays)
    native = {name: tuple(shape) for name, shape in LAYOUTS["native"][f"{model}/{task}"]}
    added = {name for name in state if name not in native}       # what the check's aligned network adds: conv biases
    conv_bias = r"(conv1|layer\d\.\d+\.(conv\d|downsample\.0))\.bias"
    assert (added and all(re.fullmatch(conv_bias, n) for n in added)) if model == "resnet50" else not added
    for name, value in state.items():
        if name in native:
            assert value.shape == native[name], name
    unloaded = [n for n in native if n not in state and not mappings.derived(model, n)]
    assert unloaded == []                                        # every native weight comes from the reference
    back = mapping.to_keras(state, arrays)
    assert [p for p, _ in back] == [p for p, _ in arrays]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(back, arrays))


def test_a_reference_weight_no_rule_knows_is_refused():
    with pytest.raises(ValueError, match="no mapping rule for the reference weight bogus/kernel"):
        mappings.mapping("bert", "fit").to_torch([("bogus/kernel", np.zeros((2, 2)))])


def test_einsum_attention_kernels_become_linear_weights():
    kernel = np.arange(64 * 2 * 32, dtype=np.float32).reshape(64, 2, 32)     # (hidden, heads, head_dim)
    state = mappings.mapping("bert", "fit").to_torch([("transformer_layer_0/self_attention_layer/query/kernel",
                                                       kernel)])
    weight = state["bert.encoder.layer.0.attention.self.query.weight"]
    assert weight.shape == (64, 64) and weight[2 * 32 - 1, 5] == kernel[5, 1, 31]    # [out = head*hd + d, in]


def spec(model="bert", task="predict", batch=256):
    return matrix.spec({**CONFIG, "accelerator": "cpu"}, "tiny", model, task, batch, "float32", "keras3-jax")


def test_the_tolerance_comes_from_the_models_contractions_and_depth():
    """Tiny BERT: K = max(hidden 64, intermediate 256, sequence 128) = 256, D = 6 x 2 layers + 3 = 15."""
    assert equivalence.tolerance(spec()) == pytest.approx(2 * 2.0 ** -24 * math.sqrt(256 * 15))


def row(rel, tolerance, **extra):
    return {"precision": "float32", "rel": rel, "tolerance": tolerance, "not_loaded": "", "design_difference": "",
            "variant": "as built", "first_divergent_token": None, "loss_last_rel": None, "steps": 0, **extra}


def test_the_verdict_at_the_tolerances_boundary():
    tol = equivalence.tolerance(spec())
    assert tables.equivalence_verdict(row(tol, tol), False) == "equivalent"
    assert tables.equivalence_verdict(row(tol * (1 + 1e-9), tol), False).startswith("differs: rel ")


def test_verdicts_name_what_differs():
    assert tables.equivalence_verdict(row(1e-7, 1e-5, first_divergent_token=7), False).endswith(
        "greedy tokens differ from position 7")
    assert tables.equivalence_verdict(row(0.4, 1e-5, design_difference="ResNet v1.5 vs v1"), False).startswith(
        "differs by design (rel 4.0e-01 > 1.0e-05): ResNet v1.5 vs v1")
    assert tables.equivalence_verdict(row(1e-7, 1e-5, not_loaded="53: conv1.bias, ..."), False).startswith(
        "mapping incomplete")
    assert tables.equivalence_verdict(row(1e-7, 1e-5, loss_last_rel=2.4e-3, steps=3), False) == (
        "equivalent; training steps drift: loss rel 2.4e-03 after 3 steps")
    assert tables.equivalence_verdict(row(1e-7, 1e-5, loss_last_rel=2.4e-3, steps=3, design_difference="Adam"),
                                      False) == "equivalent; training steps drift: loss rel 2.4e-03 after 3 steps (Adam)"
    assert tables.equivalence_verdict(row(5e-3, 1e-5, precision="mixed_bfloat16"), False) == \
        "accuracy cost: rel 5.0e-03"


def test_a_named_difference_in_the_table_is_a_label_spelled_out_below_it():
    import pandas as pd
    adam = "Keras 3's Adam on TensorFlow moves an embedding row once per occurrence"
    long = pd.DataFrame([
        {**row(2.6e-7, 7e-6, loss_last_rel=2.4e-3, steps=3, design_difference=adam), "model": "bert", "task": "fit",
         "framework": "keras3-tensorflow", "reference column": False},
        {**row(3.2e-7, 7e-6), "model": "bert", "task": "fit", "framework": "native-torch-eager",
         "reference column": False}])
    long["verdict"] = [tables.equivalence_verdict(r, False) for r in long.to_dict("records")]
    table = tables.equivalence_table(long, ["native-torch-eager", "keras3-tensorflow"])
    cell_text = table.loc[("bert", "fit", "float32"), "keras3-tensorflow"]
    assert cell_text == "rel 2.6e-07 ✓; training steps drift: loss rel 2.4e-03 after 3 steps ([d1])"
    assert tables.difference_notes(long) == f"\n[d1] {adam}\n"
    assert table.loc[("bert", "fit", "float32"), "native-torch-eager"] == "rel 3.2e-07 ✓"


def test_compare_reports_the_worst_output_and_the_first_divergent_token():
    ref = {"logits": np.array([[1.0, -2.0], [0.5, 3.0]]), "tokens": np.array([[4, 5, 6], [7, 8, 9]])}
    out = {"logits": ref["logits"] + [[0.0, 0.0], [0.0, 0.03]], "tokens": np.array([[4, 5, 6], [7, 1, 9]])}
    found = equivalence.compare(out, ref)
    assert found["logits"]["max_abs"] == pytest.approx(0.03)
    assert found["logits"]["rel"] == pytest.approx(0.03 / np.linalg.norm(ref["logits"]))
    assert found["tokens"] == {"first_divergence": 1, "length": 3}
    assert equivalence.worst(found) == found["logits"]["rel"]


class Layer:
    def __init__(self, equation=None):
        self.equation = equation


def test_unit_scale_kernels_have_unit_fan_in_variance_and_lora_b_starts_at_zero():
    rng = np.random.default_rng(0)
    dense = weights.unit_value(Layer(), "kernel", (512, 64), rng)
    assert dense.std() == pytest.approx(1 / math.sqrt(512), rel=0.05)
    query = weights.unit_value(Layer("abc,cde->abde"), "kernel", (256, 4, 16), rng)      # contracts c = hidden
    assert query.std() == pytest.approx(1 / math.sqrt(256), rel=0.05)
    output = weights.unit_value(Layer("abcd,cde->abe"), "kernel", (4, 16, 256), rng)     # contracts heads, head_dim
    assert output.std() == pytest.approx(1 / math.sqrt(64), rel=0.05)
    assert np.all(weights.unit_value(Layer(), "lora_kernel_b", (4, 8), rng) == 0)
    gamma = weights.unit_value(Layer(), "gamma", (10000,), rng)
    assert gamma.mean() == pytest.approx(1, abs=0.01) and gamma.std() == pytest.approx(0.2, rel=0.05)


class Ran:
    """A workload stand-in: the dtypes its steps observed, and how many steps it was asked for."""
    def __init__(self, compute):
        self.compute, self.steps = compute, 0

    def step(self):
        self.steps += 1

    def dtypes(self):
        return {"weights": "float32", "compute": self.compute}


def test_a_precision_whose_steps_ran_in_float32_has_no_accuracy_cost_to_show():
    """Paddle's auto_cast on a CPU computes float32: its mixed_float16 outputs equal its float32 ones (rel 0), which
    must read as a failed precision, not as a free one; a predict task runs one step so the dtypes are observed."""
    from kbench import runner
    spec = {"task": "predict", "precision": "mixed_float16",
            "dtypes": {"weights": "float32", "compute": "float16", "loss_scaling": True}}
    with pytest.raises(runner.PrecisionMismatch, match="compute float32"):
        equivalence._check_ran_in(Ran("float32"), spec)
    ran = Ran("float16")
    equivalence._check_ran_in(ran, spec)
    assert ran.steps == 1
    equivalence._check_ran_in(Ran(None), spec)          # nothing observed: nothing to hold against it
