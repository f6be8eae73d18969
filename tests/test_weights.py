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
from test_launch import driver_environment, synthetic_spec  # noqa: F401 (a fixture)
from kbench.equivalence import check
from kbench.models import mappings, weights
from kbench.plan import matrix
from kbench.results import equivalence_tables

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
    assert check.tolerance(spec()) == pytest.approx(2 * 2.0 ** -24 * math.sqrt(256 * 15))


def row(rel, tolerance, **extra):
    return {"precision": "float32", "rel": rel, "tolerance": tolerance, "not_loaded": "", "design_difference": "",
            "variant": "as built", "first_divergent_token": None, "loss_last_rel": None, "steps": 0, **extra}


def test_the_verdict_at_the_tolerances_boundary():
    tol = check.tolerance(spec())
    assert equivalence_tables.equivalence_verdict(row(tol, tol), False) == "equivalent"
    assert equivalence_tables.equivalence_verdict(row(tol * (1 + 1e-9), tol), False).startswith("differs: rel ")


def test_verdicts_name_what_differs():
    verdict = equivalence_tables.equivalence_verdict
    assert verdict(row(1e-7, 1e-5, first_divergent_token=7), False).endswith("greedy tokens differ from position 7")
    assert verdict(row(0.4, 1e-5, design_difference="ResNet v1.5 vs v1"), False).startswith(
        "differs by design (rel 4.0e-01 > 1.0e-05): ResNet v1.5 vs v1")
    assert verdict(row(1e-7, 1e-5, not_loaded="53: conv1.bias, ..."), False).startswith("mapping incomplete")
    assert verdict(row(1e-7, 1e-5, loss_last_rel=2.4e-3, steps=3), False) == (
        "equivalent; training steps drift: loss rel 2.4e-03 after 3 steps")
    assert verdict(row(1e-7, 1e-5, loss_last_rel=2.4e-3, steps=3, design_difference="Adam"), False) == (
        "equivalent; training steps drift: loss rel 2.4e-03 after 3 steps (Adam)")
    assert verdict(row(5e-3, 1e-5, precision="mixed_bfloat16"), False) == "accuracy cost: rel 5.0e-03"


def test_a_named_difference_in_the_table_is_a_label_spelled_out_below_it():
    import pandas as pd
    adam = "Keras 3's Adam on TensorFlow moves an embedding row once per occurrence"
    long = pd.DataFrame([
        {**row(2.6e-7, 7e-6, loss_last_rel=2.4e-3, steps=3, design_difference=adam), "model": "bert", "task": "fit",
         "framework": "keras3-tensorflow", "reference column": False},
        {**row(3.2e-7, 7e-6), "model": "bert", "task": "fit", "framework": "native-torch-eager",
         "reference column": False}])
    long["verdict"] = [equivalence_tables.equivalence_verdict(r, False) for r in long.to_dict("records")]
    table = equivalence_tables.equivalence_table(long, ["native-torch-eager", "keras3-tensorflow"])
    cell_text = table.loc[("bert", "fit", "float32"), "keras3-tensorflow"]
    assert cell_text == "rel 2.6e-07 ✓; training steps drift: loss rel 2.4e-03 after 3 steps ([d1])"
    assert equivalence_tables.difference_notes(long) == f"\n[d1] {adam}\n"
    assert table.loc[("bert", "fit", "float32"), "native-torch-eager"] == "rel 3.2e-07 ✓"


def test_compare_reports_the_worst_output_and_the_first_divergent_token():
    ref = {"logits": np.array([[1.0, -2.0], [0.5, 3.0]]), "tokens": np.array([[4, 5, 6], [7, 8, 9]])}
    out = {"logits": ref["logits"] + [[0.0, 0.0], [0.0, 0.03]], "tokens": np.array([[4, 5, 6], [7, 1, 9]])}
    found = check.compare(out, ref)
    assert found["logits"]["max_abs"] == pytest.approx(0.03)
    assert found["logits"]["rel"] == pytest.approx(0.03 / np.linalg.norm(ref["logits"]))
    assert found["tokens"] == {"first_divergence": 1, "length": 3}
    assert check.worst(found) == found["logits"]["rel"]


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
    from kbench.run import runner
    spec = mlp_spec("mixed_float16")
    with pytest.raises(runner.PrecisionMismatch, match="compute float32"):
        check._check_ran_in(Ran("float32"), spec)
    ran = Ran("float16")
    check._check_ran_in(ran, spec)
    assert ran.steps == 1
    check._check_ran_in(Ran(None), spec)          # nothing observed: nothing to hold against it


def test_the_worst_output_decides_however_many_agree():
    """A model with several outputs (logits and a pooled vector, SAM's masks and IoU scores): one that is wrong is
    the row's error, whatever the others read."""
    ref = {"logits": np.ones((2, 3)), "pooled": np.arange(4.0) + 1, "scores": np.full(5, 2.0),
           "tokens": np.array([[1, 2]])}
    out = {**ref, "pooled": ref["pooled"] * 1.01, "tokens": np.array([[1, 2]])}
    found = check.compare(out, ref)
    assert [found[k]["rel"] for k in ("logits", "scores")] == [0.0, 0.0]
    assert check.worst(found) == pytest.approx(0.01)
    assert check.worst({"a": {"rel": 3e-3}, "b": {"rel": 1e-7}, "c": {"rel": 0.0}}) == 3e-3


def test_unit_scale_biases_and_shifts_are_drawn_off_zero():
    """A bias left at zero is invisible to the check: two biases swapped by a mapping, or one loaded into the wrong
    place, compute the same function as the reference."""
    rng = np.random.default_rng(0)
    for name in ("bias", "beta"):
        value = weights.unit_value(Layer(), name, (10000,), rng)
        assert value.std() == pytest.approx(0.1, rel=0.05) and np.count_nonzero(value) == value.size


# ---------------------------------------------------------------- the check's own path, on a NumPy stand-in
# kbench.equivalence.check._one as a job runs it (unit-scale weights made in the reference column, loaded into another,
# outputs compared, the verdict read from the record), on a Keras-like NumPy MLP: the e2e controls (a swapped GELU,
# one perturbed weight) in this process, without a framework.

class Variable:
    """What kbench.models.weights reads of a Keras variable: path (and name), shape, dtype, assign, numpy."""
    def __init__(self, path, shape):
        self.path = self.name = path
        self.value = np.zeros(shape, np.float32)

    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)

    def assign(self, value):
        self.value = np.array(value, np.float32)

    def numpy(self):
        return self.value


class Dense:
    def __init__(self, name, fan_in, fan_out):
        self.kernel, self.bias = Variable(f"{name}/kernel", (fan_in, fan_out)), Variable(f"{name}/bias", (fan_out,))
        self._trainable_variables = [self.kernel, self.bias]


GELU = {"tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
        "exact": lambda x: 0.5 * x * (1 + scipy_special().erf(x / np.sqrt(2)))}


def scipy_special():
    from scipy import special
    return special


class MLP:
    """Dense, GELU, Dense, GELU, Dense: BERT's feed-forward, where the columns' GELUs can differ."""
    def __init__(self, widths, gelu):
        self.layers = [Dense(f"dense_{i}", a, b) for i, (a, b) in enumerate(zip(widths, widths[1:]))]
        self.gelu = gelu

    def _flatten_layers(self, include_self=True, recursive=True):
        return [self, *self.layers]

    @property
    def weights(self):
        return [v for layer in self.layers for v in layer._trainable_variables]

    def __call__(self, x, dtype):
        x = x.astype(dtype)
        for i, layer in enumerate(self.layers):
            x = x @ layer.kernel.value.astype(dtype) + layer.bias.value.astype(dtype)
            x = GELU[self.gelu](x) if i + 1 < len(self.layers) else x
        return x.astype(np.float32)


def mlp_inputs(spec, rng):
    return {"x": rng.standard_normal((spec.batch_size, spec.arch["widths"][0])).astype(np.float32)}


@pytest.fixture(scope="module", autouse=True)
def mlp_family():
    """The MLP registered as a model family for these tests (every model a check runs has one)."""
    from kbench.models import family
    mlp = family.register(name="mlp", about="a NumPy MLP", tasks=("predict",), libraries={"numpy": dict},
                          inputs={"predict": mlp_inputs}, flops={"predict": lambda spec, t: None},
                          contraction_and_depth=lambda spec: (max(spec.arch["widths"]), len(spec.arch["widths"])),
                          example={"predict": "row"})
    family.families()["mlp"] = mlp
    yield
    del family.families()["mlp"]


def mlp_workload(spec, inputs):
    """settings.gelu: the column's GELU; settings.ran_in: the dtype its steps really ran in (an autocast that did
    nothing computes float32 under a float16 label)."""
    from kbench.adapters import Workload
    model = MLP(spec.arch["widths"], spec.settings["gelu"])
    x = inputs["x"]
    ran_in = spec.settings.get("ran_in") or spec.dtypes.compute
    return Workload(step=lambda: model(x, ran_in), params_total=1, params_trainable=1, examples_per_step=1,
                    dtypes=lambda: {"weights": "float32", "compute": ran_in}, model=model,
                    outputs=lambda: {"logits": model(x, ran_in)})


def numpy_adapter(load=lambda arrays: arrays):
    """An adapter module's surface (kbench.adapters): load reads the reference's (path, array) list as the column's
    mapping would (a wrong mapping: swapped arrays)."""
    from types import SimpleNamespace

    def load_reference(workload, arrays, spec):
        weights.assign_in_order(workload.model, load(arrays))
        return {}
    return SimpleNamespace(__name__="kbench.adapters.numpy_mlp", MODELS={"mlp": {"predict": mlp_workload}},
                           prepare=lambda spec: {}, load_reference=load_reference)


def mlp_spec(precision="float32", **settings):
    from kbench.contract.spec import CellSpec
    compute = {"float32": "float32", "mixed_float16": "float16"}[precision]
    return CellSpec.from_dict({
        "cell_id": f"t/strict/mlp/predict/bs8/{precision}/numpy", "suite": "t", "profile": "strict", "size": "tiny",
        "accelerator": "cpu", "model": "mlp", "task": "predict", "precision": precision, "batch_size": 8, "seed": 0,
        "framework": "numpy", "framework_def": {"adapter": "numpy_mlp", "stack": "driver"}, "env": {},
        "arch": {"widths": [16, 32, 32, 4]}, "inputs": {}, "task_options": {},
        "settings": {"tf32": "off", "gelu": "tanh", **settings}, "steps": {"warmup": 1, "timed": 1, "blocks": 1},
        "dtypes": {"weights": "float32", "compute": compute, "loss_scaling": False}})


def run_column(specs, reference=None, adapter=None):
    """_one over a column's specs, float32 first, as check.run does: (its entries, the reference's arrays)."""
    from types import SimpleNamespace
    from kbench import adapters
    job = {"framework": "numpy", "fit_steps": 0, "differences": [], "reference": reference and "reference"}
    backend = SimpleNamespace(set_tf32=lambda mode, compute, task: {})
    arrays, own = {}, {}
    entries = [check._one(adapters, adapter or numpy_adapter(), backend, job, spec, reference, arrays, own)
               for spec in specs]
    return entries, arrays


def check_job(framework, entries, is_reference=False):
    from kbench.contract import cell
    job = cell.new_result({"cell_id": f"t/strict/equivalence/mlp/{framework}", "job": "equivalence", "model": "mlp",
                           "framework": framework}, {}, "ok")
    job.equivalence = {"reference": is_reference, "results": entries}
    return job


def verdicts(job):
    return list(equivalence_tables.equivalence_long([job]).verdict)


@pytest.fixture(scope="module")
def mlp_reference():
    entries, arrays = run_column([mlp_spec()])
    assert verdicts(check_job("reference", entries, True)) == ["reference"]
    return arrays


def test_a_column_on_the_references_weights_and_function_is_equivalent(mlp_reference):
    entries, _ = run_column([mlp_spec()], mlp_reference)
    assert entries[0]["variants"]["as built"]["rel"] == 0.0
    assert verdicts(check_job("same", entries)) == ["equivalent"]


def test_the_check_sees_a_swapped_gelu_in_one_column_in_process(mlp_reference):
    """The exact GELU where the reference ran the tanh one: at unit-scale weights the outputs leave the tolerance
    (at 0.02-std weights they would not)."""
    entries, _ = run_column([mlp_spec(gelu="exact")], mlp_reference)
    found = entries[0]["variants"]["as built"]
    assert found["rel"] > 3 * entries[0]["tolerance"], found
    assert verdicts(check_job("exact-gelu", entries))[0].startswith("differs: rel ")


def test_the_check_sees_one_perturbed_weight_in_process(mlp_reference):
    """One element of one reference weight moved by 1% of its scale, for this column only: flagged."""
    perturbed = dict(mlp_reference)
    key = next(k for k in sorted(perturbed) if k.startswith("w|predict|") and k.endswith("dense_1/kernel"))
    perturbed[key] = perturbed[key].copy()
    perturbed[key][3, 5] += 0.01 * np.abs(perturbed[key]).max()
    entries, _ = run_column([mlp_spec()], perturbed)
    assert verdicts(check_job("perturbed", entries))[0].startswith("differs: rel ")


def test_the_check_sees_two_biases_swapped_by_a_mapping(mlp_reference):
    """dense_0 and dense_1 have biases of one shape: a mapping that swaps them is only seen because the reference's
    biases are drawn off zero (unit_scale)."""
    def swap(arrays):
        arrays = list(arrays)
        first, second = (next(i for i, (p, _) in enumerate(arrays) if p == f"dense_{n}/bias") for n in (0, 1))
        arrays[first], arrays[second] = (arrays[first][0], arrays[second][1]), (arrays[second][0], arrays[first][1])
        return arrays
    entries, _ = run_column([mlp_spec()], mlp_reference, numpy_adapter(swap))
    assert verdicts(check_job("swapped-biases", entries))[0].startswith("differs: rel ")


def test_a_precision_whose_steps_ran_in_float32_fails_in_the_check_not_shows_zero_cost(mlp_reference):
    """The column's mixed_float16 outputs, computed in float32 (an autocast that did nothing), equal its float32
    ones: the check fails that precision instead of reading an accuracy cost of 0; one that ran float16 has a cost."""
    from kbench.run import runner
    with pytest.raises(runner.PrecisionMismatch, match="compute float32"):
        run_column([mlp_spec(), mlp_spec("mixed_float16", ran_in="float32")], mlp_reference)
    entries, _ = run_column([mlp_spec(), mlp_spec("mixed_float16")], mlp_reference)
    cost = entries[1]["variants"]["as built"]
    assert cost["against"] == "own float32" and cost["rel"] > 1e-4
    assert verdicts(check_job("fp16", entries))[1].startswith("accuracy cost: rel ")


def test_a_native_weight_the_reference_did_not_give_makes_the_mapping_incomplete():
    """What load_state_dict(strict=False) names missing (derived buffers aside) is reported, and the verdict says
    the mapping is incomplete whatever the outputs read (a missing weight keeps its random init, which can agree)."""
    arrays = reference("bert/fit")
    mapping = mappings.mapping("bert", "fit")
    missing = ["bert.embeddings.position_ids", "bert.pooler.dense.bias"]
    found = mappings.load_report("bert", mapping, arrays, missing, [])
    assert found == {"missing": ["bert.pooler.dense.bias"]}
    assert mappings.load_report("bert", mapping, arrays, missing[:1], ["extra.weight"]) == {
        "unexpected": ["extra.weight"]}
    verdict = verdicts(check_job("native", [{"task": "predict", "precision": "float32", "tolerance": 1e-5,
                                             "variants": {"as built": {"loaded": found, "rel": 1e-8, "compared": {}}}}]))
    assert verdict == ["mapping incomplete: not loaded from the reference: 1: bert.pooler.dense.bias"]


# ---------------------------------------------------------------- the job's device: the cells' own check

@pytest.mark.parametrize("accelerator, sees_gpu, refused", [
    ("gpu", False, True),           # TF, torch or Paddle failing to load CUDA: it would compare on the CPU
    ("gpu", True, False),
    ("cpu", False, False),
])
def test_an_equivalence_job_that_claims_a_gpu_its_framework_does_not_see_fails_before_it_compares(
        accelerator, sees_gpu, refused, driver_environment, monkeypatch):
    """In process, on the synthetic stand-in (a CPU; KBENCH_SYNTHETIC_GPU=1: a GPU): the job runs the cells' device
    check (kbench.run.runner.check_device) before its first build, so a GPU job on a framework that sees none fails
    with the cells' NoAccelerator and compares nothing; its record names the device it found."""
    monkeypatch.setenv("KBENCH_LOCK", json.loads(driver_environment.read_text())["lock"])
    if sees_gpu:
        monkeypatch.setenv("KBENCH_SYNTHETIC_GPU", "1")
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0")
    else:
        monkeypatch.delenv("KBENCH_SYNTHETIC_GPU", raising=False)
    spec = synthetic_spec(task="predict").replace(accelerator=accelerator)
    job = {"cell_id": f"t/strict/equivalence/synthetic/{accelerator}", "job": "equivalence", "suite": "t",
           "profile": "strict", "model": "synthetic", "framework": "synthetic", "accelerator": accelerator,
           "framework_def": spec.framework_def, "env": {}, "cells": [spec.to_dict()], "reference": None,
           "fit_steps": 0, "differences": [], "seed": 0}
    result, _ = check.run(job, {"runtime": "test"})
    assert result.provenance["device"] == ("synthetic GPU GPU-0" if sees_gpu else "cpu")
    if refused:
        assert result.status == "failed" and result.error["type"] == "NoAccelerator", result.error
        assert result.error["message"].startswith("the job asks for a GPU (gpu), but numpy runs on cpu (cpu)")
        assert result.equivalence["results"] == []
    else:
        assert result.status == "ok", result.error
        found = result.equivalence["results"]
        assert [(r["task"], r["precision"]) for r in found] == [("predict", "float32")]
        assert "has no outputs" in found[0]["error"]          # built: the stand-in has nothing to compare
