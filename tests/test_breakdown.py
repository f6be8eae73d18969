"""The breakdown by kind of work (kbench.breakdown): a constructed trace whose breakdown is known exactly, the
closure check failing when an op is lost, the categoriser on real op and kernel names, and every framework's trace
reader on a small real trace its own profiler wrote (tests/data/traces, trimmed to the ops of the profiled steps)."""
import gzip
import json
from pathlib import Path

import pytest

from kbench import breakdown

TRACES = Path(__file__).parent / "data" / "traces"


def x(name, ts, dur, tid=1, cat="cpu_op", pid=1, **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "cat": cat, "args": args}


# Two steps in a 1000 us window on two threads. Thread 1: a linear (100 us) holding an addmm (80 us), a layer norm
# (50 us), an optimizer step (annotation, 100 us) holding a mul (60 us), an unknown op (40 us). Thread 2: a fusion
# (100 us) beside the linear's first 100 us (shared half and half), a copy (50 us) alone.
CONSTRUCTED = [
    x(breakdown.MARKER, 0, 1000, cat="user_annotation"),
    x("aten::linear", 100, 100), x("aten::addmm", 110, 80),
    x("aten::native_layer_norm", 300, 50),
    x("Optimizer.step#AdamW.step", 400, 100, cat="user_annotation"), x("aten::mul", 420, 60),
    x("frobnicate", 600, 40),
    x("loop_add_fusion.1", 100, 100, tid=2, cat=None, hlo_op="loop_add_fusion.1"),
    x("copy.3", 700, 50, tid=2, cat=None, hlo_op="copy.3"),
    x("python frame outside any op", 0, 900, tid=3, cat="python_function"),
]


def test_a_constructed_trace_breaks_down_exactly():
    found = breakdown.breakdown(breakdown.events_of(CONSTRUCTED), steps=2, device="cpu")
    per_step = {k: round(v * 2 * 1e3, 6) for k, v in found["ms_per_step"].items()}   # back to us over both steps
    # 100..200: linear (110..190 addmm) and the fusion share the time: 50 each
    assert per_step == {"matmul_conv": 50.0, "fused": 50.0, "normalization": 50.0, "optimizer": 60.0, "other": 40.0,
                        "data_movement": 50.0, "attention": 0.0, "elementwise": 0.0, "waiting": 700.0}
    assert found["window_ms_per_step"] == 0.5 and found["closure_gap"] < 1e-12
    assert found["ops_per_step"] == 3.0         # addmm, layer norm, mul, frobnicate, fusion, copy: 6 over 2 steps
    names = [op["name"] for op in found["top_ops"]]
    assert names[0] == "aten::mul" and set(names[1:4]) == {"loop_add_fusion.1", "aten::native_layer_norm", "copy.3"}
    assert found["fused_share"] == 50 / 1000 and found["library_fused_ms_per_step"] == 0


def test_a_librarys_fused_ops_are_told_from_a_compilers_fusions():
    events = [x(breakdown.MARKER, 0, 1000, cat="user_annotation"),
              x("_MklNativeFusedConv2D", 0, 300, cat=None, is_eager=0), x("FusedBatchNormV3", 300, 100, cat=None,
                                                                          is_eager=0),
              x("multiply_add_fusion.2", 400, 200, cat=None, hlo_op="f"), x("cpp_fused_add_0", 600, 100)]
    found = breakdown.breakdown(breakdown.events_of(events), steps=1, device="cpu")
    assert found["library_fused_ms_per_step"] == pytest.approx(0.4)       # TensorFlow's and oneDNN's, not XLA's
    assert found["fused_share"] == pytest.approx(0.3)                     # the compilers' fusions


def test_an_op_lost_by_the_attribution_fails_the_closure(monkeypatch):
    """The kinds are summed from the attribution, the busy time from the ops' union apart: an op the attribution
    drops leaves the kinds short, and the breakdown says it does not close."""
    shared = breakdown._shared

    def dropping(segments):
        return (piece for piece in shared(segments) if piece[2].name != "copy.3")
    monkeypatch.setattr(breakdown, "_shared", dropping)
    with pytest.raises(breakdown.NotClosed, match=r"the kinds add up to 0\.250 ms, the ops ran 0\.300 ms of a 1\.000 ms window"):
        breakdown.breakdown(breakdown.events_of(CONSTRUCTED), steps=2, device="cpu")


def test_a_trace_without_the_window_annotation_is_refused():
    with pytest.raises(ValueError, match="no kbench.steps annotation"):
        breakdown.breakdown(breakdown.events_of(CONSTRUCTED[1:]), steps=2, device="cpu")


def test_a_gpu_cell_counts_the_devices_kernels_and_the_host_ops_not():
    """On a GPU the device's kernels are the work and the host's ops are not: waiting is the device idle."""
    events = [x(breakdown.MARKER, 0, 1000, cat="user_annotation"), x("aten::mm", 0, 900),
              x("sm90_xmma_gemm_bf16bf16_bf16f32", 100, 300, tid=7, cat="kernel", pid=0),
              x("void at::native::vectorized_elementwise_kernel<4>", 500, 100, tid=7, cat="kernel", pid=0)]
    found = breakdown.breakdown(breakdown.events_of(events), steps=1, device="gpu")
    assert found["ms_per_step"]["matmul_conv"] == pytest.approx(0.3)
    assert found["ms_per_step"]["elementwise"] == pytest.approx(0.1)
    assert found["ms_per_step"]["waiting"] == pytest.approx(0.6)


# ---------------------------------------------------------------- the categoriser's rules

NAMES = {   # real names: CPU ops from the committed traces, GPU kernels as CUDA libraries, Inductor and XLA name them
    "matmul_conv": ["aten::mm", "aten::addmm", "aten::bmm", "AddmmBackward0", "dot.47", "MatMul_1.74",
                    "_MklBatchMatMulV2", "_MklNativeFusedConv2D", "matmul kernel launch", "convolution.3",
                    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "ampere_sgemm_128x64_nn",
                    "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
                    "triton_tem_fused_mm_0", "gemm_fusion_dot.2", "void cudnn::cnn::conv2d_grouped_direct_kernel"],
    "attention": ["aten::scaled_dot_product_attention", "aten::_safe_softmax", "_MklSoftmax",
                  "flash_fwd_kernel", "fmha_cutlassF_f32_aligned_64x64_rf_sm80", "softmax kernel launch"],
    "normalization": ["aten::native_layer_norm", "aten::native_layer_norm_backward", "layer_norm kernel launch",
                      "FusedBatchNormV3", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel"],
    "fused": ["multiply_tanh_fusion.1", "ynn_fusion.62", "concatenate_bitcast_fusion.6", "cpp_fused_add_0",
              "triton_poi_fused_add_mul_0", "## Call CompiledFxGraph fx7 ##", "Torch-Compiled Region: 0/0"],
    "elementwise": ["aten::mul", "aten::add_", "aten::gelu", "aten::dropout", "BiasAdd", "AddV2", "Mul",
                    "aten::sqrt", "aten::all", "aten::cross_entropy_loss", "aten::lerp_", "Sin", "Cos",
                    "dropout kernel launch", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>",
                    "wrapped_reduce-window.37", "full kernel launch"],
    "data_movement": ["aten::copy_", "aten::transpose", "aten::view", "copy.268", "transpose_copy_fusion.1",
                      "_MklTranspose", "ReadVariableOp", "aten::t", "aten::embedding", "aten::item", "Unpack",
                      "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"],
    "optimizer": ["Optimizer.step#AdamW.step", "aten::_foreach_mul_", "adamw kernel launch", "ResourceApplyAdam",
                  "Optimization Step"],
    "other": ["while.199", "call.6", "aten::empty_strided", "frobnicate", "ThisNameIsUnknown"],
}


@pytest.mark.parametrize("kind", list(NAMES))
def test_each_kind_takes_its_real_names_and_an_unknown_one_is_other(kind):
    """Where the transpose_copy_fusion is fused's, not data movement's: a fusion is named as fused; a name no rule
    knows is "other", never dropped."""
    expected = {name: kind for name in NAMES[kind]}
    expected.update({"transpose_copy_fusion.1": "fused"} if kind == "data_movement" else {})
    assert {name: breakdown.kind_of(name) for name in expected} == expected


def test_every_kind_but_waiting_has_names_here():
    assert set(NAMES) == set(breakdown.KIND_NAMES) - {"waiting"}


# ---------------------------------------------------------------- each framework's real trace

# (trace file, the device, the steps, the largest kind, kinds that must be there)
REAL = {
    "native-torch-eager-bert-fit": ("cpu", 3, "matmul_conv", {"attention", "normalization", "optimizer"}),
    "native-torch-compiled-bert-predict": ("cpu", 3, None, {"fused"}),
    "keras3-torch-bert-predict": ("cpu", 3, None, {"matmul_conv"}),
    "keras3-jax-bert-fit": ("cpu", 3, "fused", {"matmul_conv", "data_movement"}),
    "keras3-tensorflow-bert-fit": ("cpu", 3, None, {"fused", "matmul_conv"}),
    "keras2-sam-predict": ("cpu", 3, "matmul_conv", {"attention", "data_movement"}),
    "paddle-dygraph-bert-fit": ("cpu", 3, "matmul_conv", {"optimizer", "normalization"}),
}


@pytest.mark.parametrize("name", list(REAL))
def test_each_frameworks_own_trace_reads_and_closes(name):
    device, steps, largest, present = REAL[name]
    found = breakdown.breakdown(breakdown.read_trace(TRACES / f"{name}.trace.json.gz"), steps, device)
    kinds = {k: v for k, v in found["ms_per_step"].items() if k != "waiting"}
    assert found["closure_gap"] < breakdown.CLOSURE_TOLERANCE and found["ops_per_step"] > 10, found
    assert all(kinds[k] > 0 for k in present), kinds
    assert largest is None or max(kinds, key=kinds.get) == largest, kinds
    assert sum(found["ms_per_step"].values()) == pytest.approx(found["window_ms_per_step"], rel=1e-6)


def test_a_trace_is_read_gzipped_or_plain_and_as_a_bare_list(tmp_path):
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps(CONSTRUCTED))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(json.dumps({"traceEvents": CONSTRUCTED}).encode()))
    assert breakdown.read_trace(plain) == breakdown.read_trace(packed)


# ---------------------------------------------------------------- in the cell: measure, keep

def test_measure_profiles_after_the_window_keeps_the_trace_and_never_fails_the_cell(tmp_path, monkeypatch):
    """The synthetic stack's recorder as the profiler: the breakdown closes and its trace is kept beside the record;
    a profiler that raises gives a breakdown that says why; a trace over the cap is not kept, its size said."""
    import numpy as np
    from kbench.adapters import synthetic
    a = np.ones((64, 64), np.float32)

    def step():
        return synthetic.RECORDER.op("synthetic::matmul", lambda: a @ a)
    found = breakdown.measure(step, lambda out: None, 3, synthetic.RECORDER.trace, "cpu", 1.0, tmp_path)
    assert found["closes"] and found["steps"] == 3 and found["ms_per_step"]["matmul_conv"] > 0, found
    assert found["trace"]["kept"] and (tmp_path / breakdown.TRACE_NAME).is_file()
    assert found["profiler_overhead"] == pytest.approx(found["profiled_ms_per_step"] / 1.0)
    assert not [p for p in tmp_path.iterdir() if p.name != breakdown.TRACE_NAME]      # its scratch folder is gone

    def broken(warm, run, folder):
        raise RuntimeError("the profiler could not start")
    assert breakdown.measure(step, lambda out: None, 3, broken, "cpu", 1.0, tmp_path) == {
        "steps": 3, "closes": False, "why": "no breakdown: RuntimeError: the profiler could not start"}
    monkeypatch.setattr(breakdown, "TRACE_CAP_BYTES", 10)
    (tmp_path / "x").mkdir()
    capped = breakdown.measure(step, lambda out: None, 3, synthetic.RECORDER.trace, "cpu", 1.0, tmp_path / "x")
    assert capped["trace"]["kept"] is False and "over the 0 MiB cap" in capped["trace"]["why"], capped


def test_a_records_trace_lies_beside_it():
    assert breakdown.kept_trace(Path("cells/tiny/strict/bert/fit/bs8/float32/keras3-jax.r2.json")) == Path(
        "cells/tiny/strict/bert/fit/bs8/float32/keras3-jax.r2.trace.json.gz")


def test_a_run_without_breakdowns_writes_empty_tables_and_an_empty_picture(tmp_path):
    """A run whose cells have no breakdown (config breakdown.steps 0, or cells that failed): every output is there."""
    from kbench.results import breakdown_tables
    breakdown_tables.build([], ["keras3-jax"], "strict", tmp_path / "tables", tmp_path / "plots")
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == sorted(breakdown_tables.OUTPUTS)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(breakdown_tables.PLOTS)
