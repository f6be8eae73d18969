"""The breakdown by kind of work (kbench.breakdown): a constructed trace whose breakdown is known exactly, the
closure failing where it must, the kinds on real op and kernel names, what a compiler says it put in (XLA's programs
from a real XSpace, Inductor's kernel names), a GPU trace as each of the four profilers writes one (constructed in
the shape its source writes: Kineto's, XProf's through JAX's Perfetto JSON and TensorFlow's converter, with and
without XLA, Paddle's), and every framework's trace reader on a small real trace its own profiler wrote
(tests/data/traces, trimmed to the ops of the profiled steps)."""
import gzip
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from kbench.breakdown import compiled, kinds, measure, trace

from conftest import run_context

TRACES = Path(__file__).parent / "data" / "traces"
MARKER, STEP = trace.MARKER, trace.STEP_MARKER


def x(name, ts, dur, tid=1, cat="cpu_op", pid=1, **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "cat": cat, "args": args}


def named(kind, pid, name, tid=None):
    return {"ph": "M", "name": kind, "pid": pid, **({"tid": tid} if tid is not None else {}), "args": {"name": name}}


def steps_of(window_start, step_us, n, **where):
    """The window and its steps' marks, as the runner writes them."""
    return [x(MARKER, window_start, step_us * n, cat="user_annotation", **where)] + [
        x(STEP, window_start + i * step_us, step_us, cat="user_annotation", **where) for i in range(n)]


# Two steps in a 1000 us window on two threads. Thread 1: a linear (100 us) holding an addmm (80 us), a layer norm
# (50 us), an optimizer step (annotation, 100 us) holding a mul (60 us), an unknown op (40 us). Thread 2: an XLA
# fusion of adds (100 us) beside the linear's first 100 us (shared half and half), a copy (50 us) alone.
CONSTRUCTED = [
    *steps_of(0, 500, 2),
    x("aten::linear", 100, 100), x("aten::addmm", 110, 80),
    x("aten::native_layer_norm", 300, 50),
    x("Optimizer.step#AdamW.step", 400, 100, cat="user_annotation"), x("aten::mul", 420, 60),
    x("frobnicate", 600, 40),
    x("loop_add_fusion.1", 100, 100, tid=2, cat=None, hlo_op="loop_add_fusion.1"),
    x("copy.3", 700, 50, tid=2, cat=None, hlo_op="copy.3"),
    x("python frame outside any op", 0, 900, tid=3, cat="python_function"),
]


def test_a_constructed_trace_breaks_down_exactly():
    """The optimizer's scope holds its own time between its ops (its 40 us beside the mul), not waiting."""
    found = trace.breakdown(trace.events_of(CONSTRUCTED), steps=2, device="cpu")
    per_step = {k: round(v * 2 * 1e3, 6) for k, v in found["ms_per_step"].items()}   # back to us over both steps
    assert per_step == {"matmul_conv": 50.0, "elementwise": 50.0, "normalization": 50.0, "optimizer": 100.0,
                        "other": 40.0, "data_movement": 50.0, "attention": 0.0, "random": 0.0,
                        "fusion_unread": 0.0, "waiting": 660.0}
    assert found["window_ms_per_step"] == 0.5 and found["closure_gap"] < 1e-12
    assert found["ops_per_step"] == 3.0         # addmm, layer norm, mul, frobnicate, fusion, copy: 6 over 2 steps
    assert found["fused_share"] == 50 / 1000    # the XLA fusion's share, a property beside the kinds
    # each step's figures: the first step holds the linear, the norm and the optimizer, the second the rest
    assert [round(v, 6) for v in found["per_step"]["optimizer"]] == [0.1, 0.0]
    assert [round(v, 6) for v in found["per_step"]["data_movement"]] == [0.0, 0.05]
    assert found["per_step"]["step_ms"] == [0.5, 0.5]


def test_an_op_lost_by_the_attribution_fails_the_closure(monkeypatch):
    """The kinds are summed from the attribution, the busy time from the ops' union apart: an op the attribution
    drops leaves the kinds short, and the breakdown says it does not close."""
    shared = trace._shared

    def dropping(segments):
        return (piece for piece in shared(segments) if piece[2].name != "copy.3")
    monkeypatch.setattr(trace, "_shared", dropping)
    with pytest.raises(trace.NotClosed, match=r"the kinds add up to 0\.290 ms, the ops ran 0\.340 ms of a 1\.000 ms"):
        trace.breakdown(trace.events_of(CONSTRUCTED), steps=2, device="cpu")


@pytest.mark.parametrize("stranger_us, closes", [(40, True), (50, True), (60, False)])
def test_events_on_the_host_read_as_nothing_known_fail_the_closure_past_five_percent(stranger_us, closes):
    """An op whose category the reader does not know (a framework renamed it) is not waiting: its time is "other"
    and reported as unrecognised, and past 5% of the window (not at it) the breakdown does not close. It sits on a
    lane of its own: the host's every lane is read, not only those that hold an op the reader knows."""
    events = [*steps_of(0, 500, 2), x("aten::mm", 0, 100), x("SomeNewOp", 200, stranger_us, tid=9, cat="new_op")]
    if closes:
        found = trace.breakdown(trace.events_of(events), 2, "cpu")
        assert found["unrecognised_share"] == pytest.approx(stranger_us / 1000)
        assert found["ms_per_step"]["other"] * 2e3 == pytest.approx(stranger_us)           # never waiting
        assert found["ms_per_step"]["waiting"] * 2e3 == pytest.approx(1000 - 100 - stranger_us)
    else:
        with pytest.raises(trace.NotClosed, match=r"6\.0% of the window is in events on the host"):
            trace.breakdown(trace.events_of(events), 2, "cpu")


def test_an_unknown_event_around_known_ops_counts_only_its_own_time():
    """A wrapper the reader does not know, around ops it does: its time outside them (30 of its 130 us) is
    unrecognised, not the ops' time inside it, so a wrapper alone does not fail the closure."""
    events = [*steps_of(0, 1000, 1), x("SomeNewWrapper", 0, 130, cat="new_op"), x("aten::mm", 10, 100)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")
    assert found["unrecognised_share"] == pytest.approx(0.03) and found["ms_per_step"]["matmul_conv"] == 0.1


@pytest.mark.parametrize("events, why", [
    ([*steps_of(0, 1000, 1), x("$trainer.py:749 train_on_batch", 0, 900, cat=None)], "no op recorded"),
    # a jaxlib that renamed hlo_op: its XLA ops are events no rule reads as ops
    ([*steps_of(0, 1000, 1), *(x(f"ynn_fusion.{i}", 100 * i, 90, cat=None, hlo_operation=f"ynn_fusion.{i}")
                               for i in range(9))], "no op recorded"),
])
def test_a_cpu_trace_with_no_op_recognised_does_not_close(events, why):
    """Every op event dropped, or renamed past the reader's rules, used to read 100% waiting and close."""
    with pytest.raises(trace.NotClosed, match=why):
        trace.breakdown(trace.events_of(events), 1, "cpu")


def test_a_missed_op_whose_name_holds_a_runtime_word_is_still_unrecognised():
    """The runtime's own names are matched from the start of a name: an op called MyLaunchFunctionSession (no rule's
    op) is an op the reader missed, not the runtime's wrapper."""
    events = [*steps_of(0, 1000, 1), x("aten::mm", 0, 100), x("MyLaunchFunctionSession", 200, 60, tid=2, cat=None)]
    with pytest.raises(trace.NotClosed, match="6.0% of the window"):
        trace.breakdown(trace.events_of(events), 1, "cpu")


def test_the_runtimes_own_wrappers_on_the_op_lanes_are_known_not_unrecognised():
    """TensorFlow's eager and tf.function wrappers and Python's frames as XProf's tracer writes them hold ops or wait
    on them: the runtime's own time, counted as waiting, never as an op the reader missed."""
    names = ["EagerKernelExecute", "KernelAndDeviceFunc::Run", "TFE_Py_ExecuteCancelable", "BlockUntilReady",
             "EagerLocalExecute: __inference_<lambda>_810", "__inference_<lambda>_810:__inference_<lambda>_810",
             "<lambda>", "TFE_DeleteTensorHandle", "$trainer.py:749 train_on_batch", "ThunkExecutor::Execute",
             "ThreadpoolListener::StartRegion"]
    events = [*steps_of(0, 1000, 1), x("MatMul", 0, 100, cat=None, is_eager=0)]
    events += [x(name, 100 + 70 * i, 60, cat=None) for i, name in enumerate(names)]
    events.append(x("one_step_on_data", 900, 90, cat=None, tf_function_call="notTraced-nonXla", tracing_count=1))
    assert trace.breakdown(trace.events_of(events), 1, "cpu")["unrecognised_share"] == 0.0


def test_a_trace_without_the_window_annotation_is_refused():
    with pytest.raises(ValueError, match="no kbench.steps annotation"):
        trace.breakdown(trace.events_of(CONSTRUCTED[1:]), steps=2, device="cpu")


def test_dropouts_mask_inside_an_attention_core_is_the_cores_and_outside_it_random_numbers():
    """SDPA's math path with dropout: its bernoulli is the core's work, as a flash kernel that cannot be split does
    it; a hidden layer's dropout mask outside any core is random numbers."""
    events = [*steps_of(0, 1000, 1), x("aten::scaled_dot_product_attention", 0, 600), x("aten::bmm", 10, 200),
              x("aten::bernoulli_", 300, 250), x("aten::bernoulli_", 700, 100)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")["ms_per_step"]
    assert found["attention"] == pytest.approx(0.6) and found["random"] == pytest.approx(0.1)


def test_an_attention_cores_scope_holds_its_ops_and_a_projection_inside_it_is_read_for_itself():
    """The scope the adapters put around an attention core that is no single op (Keras's _compute_attention, an
    innermost attention module; kbench.adapters._scopes), as they write it on torch: a record_function event, closed
    around a projection the core calls and opened again after it. Its bmm, softmax and dropout are attention, the
    projection's addmm a matrix product and its own Python waiting, and the backward pass of each op follows its
    forward's scope (torch's Sequence number)."""
    events = [*steps_of(0, 1000, 1),
              x(kinds.ATTENTION_SCOPE, 0, 10, cat="user_annotation"),
              x("aten::addmm", 20, 80, **{"Sequence number": 1}),
              x(kinds.ATTENTION_SCOPE, 110, 390, cat="user_annotation"),
              x("aten::bmm", 150, 100, **{"Sequence number": 2}), x("aten::softmax", 260, 100),
              x("aten::bernoulli_", 370, 50), x("aten::softmax", 600, 50),
              x("autograd::engine::evaluate_function: BmmBackward0", 700, 100, **{"Sequence number": 2}),
              x("autograd::engine::evaluate_function: AddmmBackward0", 850, 100, **{"Sequence number": 1})]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")["ms_per_step"]
    # the core's 400 us and its backward's 100; the projection's 80 and its backward's 100 (its 20 us of Python
    # between the two events is waiting); a softmax outside a core is a reduction
    assert found["attention"] == pytest.approx(0.5) and found["matmul_conv"] == pytest.approx(0.18)
    assert found["elementwise"] == pytest.approx(0.05)


def test_an_xla_projection_inside_an_attention_cores_name_scope_is_read_for_itself():
    """Under JAX and TensorFlow the scopes are names, nested: a projection's instructions carry the core's scope and
    the projection's after it (kinds.in_attention_core)."""
    assert kinds.in_attention_core(f"jit(f)/sam/attn/{kinds.ATTENTION_SCOPE}/mul")
    assert not kinds.in_attention_core(f"jit(f)/sam/attn/{kinds.ATTENTION_SCOPE}/{kinds.PROJECTION_SCOPE}/qkv/dot")
    assert kinds.in_attention_core(f"jit(f)/a/{kinds.ATTENTION_SCOPE}/{kinds.PROJECTION_SCOPE}/q/"
                                   f"{kinds.ATTENTION_SCOPE}/mul")         # a core inside a projection's own layer
    assert not kinds.in_attention_core("jit(f)/self_attention_layer/softmax/exp")


def test_attentions_backward_pass_is_attention_though_autograd_runs_it_outside_the_scope():
    """torch's autograd node for a bmm run inside SDPA's math path carries the forward op's Sequence number: its
    backward is attention's work; a bmm's backward from outside any scope stays a matrix product."""
    events = [*steps_of(0, 1000, 1), x("aten::scaled_dot_product_attention", 0, 300, **{"Sequence number": 7}),
              x("aten::bmm", 10, 200, **{"Sequence number": 8}), x("aten::mm", 400, 100, **{"Sequence number": 9}),
              x("autograd::engine::evaluate_function: BmmBackward0", 600, 150, **{"Sequence number": 8}),
              x("aten::bmm", 610, 120),
              x("autograd::engine::evaluate_function: MmBackward0", 800, 100, **{"Sequence number": 9}),
              x("aten::mm", 810, 80)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")["ms_per_step"]
    assert found["attention"] == pytest.approx(0.45) and found["matmul_conv"] == pytest.approx(0.2)


# ---------------------------------------------------------------- the kinds' rules

NAMES = {   # real names: CPU ops from the committed traces, GPU kernels as CUDA libraries, Inductor and XLA name them
    "matmul_conv": ["aten::mm", "aten::addmm", "aten::bmm", "AddmmBackward0", "dot.47", "MatMul_1.74",
                    "_MklBatchMatMulV2", "_MklNativeFusedConv2D", "matmul kernel launch", "convolution.3",
                    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "ampere_sgemm_128x64_nn",
                    "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
                    "triton_tem_fused_mm_0", "gemm_fusion_dot.2", "void cudnn::cnn::conv2d_grouped_direct_kernel",
                    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"],
    "attention": ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
                  "flash_fwd_kernel", "fmha_cutlassF_f32_aligned_64x64_rf_sm80", "__cudnn$fmhaSoftmax",
                  "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>"],
    "normalization": ["aten::native_layer_norm", "aten::native_layer_norm_backward", "layer_norm kernel launch",
                      "FusedBatchNormV3", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel",
                      "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>",
                      "triton_red_fused_native_layer_norm_0", "add_rsqrt_fusion"],
    "random": ["aten::bernoulli_", "aten::rand", "RandomUniform", "StatelessRandomUniformV2", "rng-bit-generator.2",
               "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>",
               "triton_poi_fused_bernoulli_0", "xor_xor_fusion.3"],
    "elementwise": ["aten::mul", "aten::add_", "aten::gelu", "aten::dropout", "BiasAdd", "AddV2", "Mul",
                    "aten::sqrt", "aten::all", "aten::cross_entropy_loss", "aten::lerp_", "Sin", "Cos",
                    "dropout kernel launch", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>",
                    "void at::native::unrolled_elementwise_kernel<at::native::MulFunctor<float>>",
                    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>",
                    "aten::_log_softmax", "wrapped_reduce-window.37", "full kernel launch", "cpp_fused_add_mul_0",
                    # a softmax alone is no attention core (the loss's, a classifier's): a reduction
                    "aten::_safe_softmax", "_MklSoftmax", "triton_per_fused__softmax_1", "softmax kernel launch",
                    "triton_poi_fused_addmm_gelu_0", "multiply_tanh_fusion.1", "convert_element_type"],
    "data_movement": ["aten::copy_", "aten::transpose", "aten::view", "copy.268", "transpose_copy_fusion.1",
                      "_MklTranspose", "ReadVariableOp", "aten::t", "aten::embedding", "aten::item", "Unpack",
                      "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "triton_poi_fused_clone_0",
                      "concatenate_bitcast_fusion.6", "loop_broadcast_fusion", "input_concatenate_fusion.2",
                      "dynamic-update-slice-fusion.1"],
    "optimizer": ["Optimizer.step#AdamW.step", "aten::_foreach_mul_", "adamw kernel launch", "ResourceApplyAdam",
                  "Optimization Step"],
    "fusion_unread": ["ynn_fusion.62", "fusion.12", "loop_fusion.3"],
    "other": ["while.199", "call.6", "aten::empty_strided", "frobnicate", "ThisNameIsUnknown"],
}


def kind_by_name(name: str) -> str:
    """The kind the rules give a name alone (no program, no launcher): an XLA fusion by its stems, an Inductor
    kernel by its ops, anything else by NAME_RULES."""
    if kinds.XLA_FUSION.match(name.lower()):
        return kinds.of_xla_name(name)[0]
    return kinds.of_inductor(name) or kinds.of_name(name)


@pytest.mark.parametrize("kind", list(NAMES))
def test_each_kind_takes_its_real_names_and_an_unknown_one_is_other(kind):
    """Where a name looks like two kinds (convert is no convolution, unrolled no roll, cuDNN's batch norm no
    matmul, the loss's log-softmax no attention, an Inductor epilogue of addmm no matmul), the work decides."""
    assert {name: kind_by_name(name) for name in NAMES[kind]} == dict.fromkeys(NAMES[kind], kind)


def test_every_kind_but_waiting_has_names_here():
    assert set(NAMES) == set(kinds.KIND_NAMES) - {"waiting"}


@pytest.mark.parametrize("opcodes, op_names, kind", [
    ({"fusion", "dot", "add", "exponential", "reduce"}, [], "matmul_conv"),      # a dot decides over a softmax
    ({"fusion", "convolution", "add"}, [], "matmul_conv"),
    ({"custom-call:__cublas$lt$matmul", "bitcast"}, [], "matmul_conv"),
    ({"custom-call:__cudnn$fmhasoftmax"}, [], "attention"),
    ({"fusion", "exponential", "reduce", "divide", "maximum"}, [], "elementwise"),   # a softmax alone: a reduction
    # an attention core's scope (kbench.adapters._scopes), forward and backward, its products and dropout included;
    # a projection inside it is read for itself
    ({"fusion", "exponential", "reduce", "divide"}, [f"jit(forward)/bert/self_attention_layer/{kinds.ATTENTION_SCOPE}"
                                                     "/softmax/exp"], "attention"),
    ({"fusion", "dot"}, [f"jit(train_step)/transpose(jvp(bert))/layer_0/attn/{kinds.ATTENTION_SCOPE}/aecd,abcd->acbe/"
                         "dot_general"], "attention"),
    ({"fusion", "xor", "shift-right-logical"}, [f"jit(f)/attn/{kinds.ATTENTION_SCOPE}/dropout/jit(_bernoulli)/xor"],
     "attention"),
    ({"fusion", "dot"}, [f"jit(f)/attn/{kinds.ATTENTION_SCOPE}/{kinds.PROJECTION_SCOPE}/qkv/dot_general"],
     "matmul_conv"),
    ({"fusion", "add", "transpose"}, [f"jit(f)/attn/{kinds.ATTENTION_SCOPE}/mul", "jit(f)/attn/query/add"],
     "elementwise"),                                      # partly outside the core: by its content
    # threefry needs both its xor and its logical shift
    ({"fusion", "xor", "add"}, [], "elementwise"),
    ({"fusion", "shift-right-logical", "or"}, [], "elementwise"),
    ({"fusion", "exponential", "reduce", "log", "subtract"}, [], "elementwise"),  # log-softmax: the loss
    ({"fusion", "reduce", "rsqrt", "multiply"}, [], "normalization"),
    ({"fusion", "xor", "shift-right-logical", "add"}, [], "random"),
    ({"rng-bit-generator"}, [], "random"),
    ({"fusion", "transpose", "copy", "bitcast"}, [], "data_movement"),
    ({"fusion", "multiply", "add"}, [], "elementwise"),
    ({"fusion", "multiply", "sqrt", "divide"}, ["jit(step)/adamw/mul", "jit(step)/adamw/sqrt"], "optimizer"),
    ({"fusion", "multiply", "sqrt", "divide"}, ["jit(step)/adamw/mul", "jit(step)/dense/mul"], "elementwise"),
    # Keras 3's scopes, as its BERT fit's program names them
    ({"fusion", "multiply", "subtract"}, ["jit(train_step)/adam_w/mul", "jit(train_step)/adam_w/sub"], "optimizer"),
    ({"fusion", "add", "multiply"}, ["jit(train_step)/jvp(bert_backbone)/transformer_layer_0/"
                                     "self_attention_layer_norm/mul"], "normalization"),
    ({"fusion", "dot", "add"}, ["jit(train_step)/jvp(bert_backbone)/embeddings_layer_norm/dot_general"], "matmul_conv"),
    ({"fusion", "add", "compare", "select"}, ["jit(train_step)/jvp(classifier_dropout)/jit(_bernoulli)/jit(_uniform)/"
                                              "lt"], "random"),
])
def test_an_xla_instruction_is_of_the_kind_of_what_it_holds(opcodes, op_names, kind):
    assert kinds.of_hlo(opcodes, op_names) == kind


@pytest.mark.parametrize("name, fused", [
    ("loop_add_fusion.1", True), ("cpp_fused_add_mul_0", True), ("triton_poi_fused_gelu_0", True),
    ("input_reduce_fusion", True),
    # a library's own fused kernels and ops are no compiler's fusion
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", False), ("FusedBatchNormV3", False),
    ("_FusedConv2D", False), ("_MklNativeFusedMatMul", False), ("aten::_fused_dropout", False)])
def test_a_compiler_fusion_is_told_from_a_librarys_fused_kernel(name, fused):
    assert kinds.is_compiler_fusion(name) is fused


def test_the_wire_reader_reads_every_wire_type_a_message_holds():
    """A float field (fixed32, wire type 5) and a double (fixed64, 1) beside a string and a varint: all read."""
    message = (bytes([(1 << 3) | 5]) + b"\x00\x00\x80\x3f" + bytes([(2 << 3) | 1]) + b"\x00" * 8
               + bytes([(3 << 3) | 2, 2]) + b"hi" + bytes([(4 << 3) | 0, 150, 1]))
    assert list(compiled.fields(message)) == [(1, b"\x00\x00\x80\x3f"), (2, b"\x00" * 8), (3, b"hi"), (4, 150)]
    with pytest.raises(ValueError, match="wire type 3"):
        list(compiled.fields(bytes([(1 << 3) | 3])))


def test_a_kept_trace_keeps_a_single_ops_content_too():
    """A cuBLAS custom call or a bare dot is no fusion: its content is kept all the same, so the kept trace reads it
    from the program, not by its name (cublas-gemm.1 would read matmul by name; dot.3 would not say it is one)."""
    found = {"jit_f": {"custom-call.7": compiled.Content(frozenset({"custom-call:__cublas$lt$matmul"}), (), False),
                       "bitcast.2": compiled.Content(frozenset({"bitcast"}), (), False),
                       "parameter.0": compiled.Content(frozenset({"parameter"}), (), False)}}
    kept = compiled.from_json(json.loads(json.dumps(compiled.as_json(found))))
    assert set(kept["jit_f"]) == {"custom-call.7", "bitcast.2"}
    assert kinds.of_hlo(set(kept["jit_f"]["custom-call.7"].opcodes)) == "matmul_conv"


def test_two_programs_of_one_module_name_are_told_apart_by_their_program_id():
    """XLA compiles one jitted function again for new shapes: two programs of one module name, each kernel naming
    its own by program_id (tsl's program_id stat)."""
    programs = {"jit_step(1)": {"fusion.1": compiled.Content(frozenset({"fusion", "dot"}), (), True)},
                "jit_step(2)": {"fusion.1": compiled.Content(frozenset({"fusion", "transpose", "copy"}), (), True)},
                "jit_step": {"fusion.1": compiled.Content(frozenset({"fusion", "dot"}), (), True)}}
    events = [*steps_of(0, 1000, 1),
              x("fusion.1", 0, 100, cat=None, hlo_module="jit_step", hlo_op="fusion.1", program_id=2),
              x("fusion.1", 200, 50, cat=None, hlo_module="jit_step", hlo_op="fusion.1", program_id=1)]
    found = trace.breakdown(trace.Trace(trace.events_of(events), programs), 1, "cpu")["ms_per_step"]
    assert found["data_movement"] == pytest.approx(0.1) and found["matmul_conv"] == pytest.approx(0.05)


def test_a_real_xspace_says_what_each_fusion_holds():
    """An XSpace jax.profiler wrote (XLA:CPU, jax 0.10.2) for tanh(x @ w) * 2 + 1 under a softmax: its ynn_fusion.2
    holds the dot, so it is a matrix product, read from the program, not from its silent name."""
    found = compiled.contents(TRACES / "jax-softmax-matmul.xplane.pb")
    assert {"jit_f", "jit_f(4)", "jit_f.4"} <= set(found)
    fusion = found["jit_f"]["ynn_fusion.2"]
    assert fusion.fusion and {"dot", "tanh", "exponential", "reduce"} <= fusion.opcodes
    assert kinds.of_hlo(set(fusion.opcodes)) == "matmul_conv"
    assert kinds.of_xla_name("ynn_fusion.2") == ("fusion_unread", False)
    assert kinds.of_hlo(set(found["jit_f"]["broadcast_divide_fusion"].opcodes)) == "elementwise"
    kept = compiled.from_json(json.loads(json.dumps(compiled.as_json(found))))      # as a kept trace carries it
    assert {name: kinds.of_hlo(set(c.opcodes), list(c.op_names)) for name, c in kept["jit_f"].items()} == {
        name: kinds.of_hlo(set(c.opcodes), list(c.op_names)) for name, c in found["jit_f"].items() if name in kept["jit_f"]}
    assert kept["jit_f"]["ynn_fusion.2"].opcodes == fusion.opcodes


# ---------------------------------------------------------------- GPU traces, shaped as each profiler writes them

def kineto_gpu():
    """torch.profiler's Chrome trace on a GPU as Kineto writes it (libkineto GenericActivityProfiler.cpp, output_json.cpp):
    the GPU's process is the device index (pid 0) named after the host process ("python3") with the label "GPU 0"
    (process_labels); host cpu_ops and their cudaLaunchKernel with the External id and correlation their kernel
    carries; the kernels on the stream's thread; every user annotation mirrored on the device as a
    gpu_user_annotation (the steps' marks too: no activity, no second mark); a Stream Sync (cuda_sync) on the device
    and the CUPTI Overhead process (pid -1, category overhead): no activity either. 2 steps of 1000 us, a timed step
    of 800 us."""
    host = dict(pid=4242, tid=4242)
    dev = dict(pid=0, tid=7)
    mirrored = [x(MARKER, 39, 1312, cat="gpu_user_annotation", **dev),
                x(STEP, 39, 302, cat="gpu_user_annotation", **dev), x(STEP, 1039, 312, cat="gpu_user_annotation", **dev)]
    return [named("process_name", 4242, "python3"), {"ph": "M", "name": "process_labels", "pid": 4242, "tid": 0,
                                                     "args": {"labels": "CPU"}},
            named("process_name", 0, "python3"), {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0,
                                                  "args": {"labels": "GPU 0"}},
            named("process_name", -1, "CUPTI Overhead"), named("thread_name", 0, "stream 7", 7),
            *steps_of(0, 1000, 2, **host), *mirrored,
            x("aten::addmm", 10, 50, **host, **{"External id": 11}),
            x("cudaLaunchKernel", 20, 10, cat="cuda_runtime", **host, **{"External id": 11, "correlation": 501}),
            x("Optimizer.step#AdamW.step", 100, 300, cat="user_annotation", **host, **{"External id": 20}),
            x("aten::_foreach_mul_", 110, 40, **host, **{"External id": 21}),
            x("cudaLaunchKernel", 120, 10, cat="cuda_runtime", **host, **{"External id": 21, "correlation": 502}),
            x("aten::scaled_dot_product_attention", 1000, 200, **host, **{"External id": 30}),
            x("aten::bmm", 1010, 50, **host, **{"External id": 31}),
            x("cudaLaunchKernel", 1020, 10, cat="cuda_runtime", **host, **{"External id": 31, "correlation": 503}),
            x("aten::bernoulli_", 1100, 50, **host, **{"External id": 32}),
            x("cudaLaunchKernel", 1110, 10, cat="cuda_runtime", **host, **{"External id": 32, "correlation": 504}),
            x("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", 40, 200, cat="kernel", **dev,
              **{"External id": 11, "correlation": 501, "stream": 7}),
            x("Optimizer.step#AdamW.step", 240, 200, cat="gpu_user_annotation", **dev, **{"External id": 20}),
            x("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>>", 240, 100,
              cat="kernel", **dev, **{"External id": 21, "correlation": 502}),
            x("ampere_sgemm_64x64_nn", 1040, 100, cat="kernel", **dev, **{"External id": 31, "correlation": 503}),
            x("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>", 1150,
              50, cat="kernel", **dev, **{"External id": 32, "correlation": 504}),
            x("Memcpy HtoD (Pageable -> Device)", 1300, 50, cat="gpu_memcpy", **dev),
            x("Stream Sync", 400, 500, cat="cuda_sync", pid=0, tid=7 + (1 << 20)),
            x("CUPTI Overhead", 600, 100, cat="overhead", pid=-1, tid=0)]


def xprof_gpu(xla: bool):
    """XProf's trace viewer JSON of a GPU run (TensorFlow's converter; JAX's Perfetto JSON comes from the same
    XSpace): the device a process "/device:GPU:0", its kernels on "Stream #N(Compute)" lines, and lines XProf
    derives from them ("TensorFlow Ops", "XLA Ops", "Steps") that are no activity of their own. Without XLA a kernel
    carries tf_op (name:type) and correlation_id; under XLA hlo_module and hlo_op. One step of 1000 us."""
    dev, host = 1, 701
    meta = [named("process_name", dev, "/device:GPU:0"), named("process_name", host, "/host:CPU"),
            named("thread_name", dev, "Stream #14(Compute)", 14), named("thread_name", dev, "TensorFlow Ops", 2),
            named("thread_name", dev, "XLA Ops", 3), named("thread_name", dev, "Steps", 1),
            named("thread_name", dev, "CUPTI overhead", 15)]     # tsl's cupti_collector.cc GetDeviceXLineName
    if not xla:
        return meta + [*steps_of(0, 1000, 1, pid=host, tid=5),
                       x("MatMul", 10, 30, pid=host, tid=5, cat=None, is_eager=0, correlation_id=77),
                       x("volta_sgemm_128x64_nn", 50, 300, pid=dev, tid=14, cat=None,
                         tf_op="model/dense/MatMul:MatMul", correlation_id=77),
                       x("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", 400, 100,
                         pid=dev, tid=14, cat=None, tf_op="model/bn/FusedBatchNormV3:FusedBatchNormV3"),
                       x("void tensorflow::BiasNHWCKernel<float>", 500, 50, pid=dev, tid=14, cat=None,
                         tf_op="model/conv/BiasAdd:_FusedConv2D"),
                       x("MatMul", 50, 300, pid=dev, tid=2, cat=None),          # derived: TensorFlow Ops
                       x("1", 0, 1000, pid=dev, tid=1, cat=None)]               # derived: Steps
    return meta + [*steps_of(0, 1000, 1, pid=host, tid=5),
                   x("fusion.3", 50, 300, pid=dev, tid=14, cat=None, hlo_module="jit_train_step", hlo_op="fusion.3",
                     correlation_id=12),
                   x("cublas-gemm.1", 400, 100, pid=dev, tid=14, cat=None, hlo_module="jit_train_step",
                     hlo_op="cublas-gemm.1"),
                   x("input_reduce_fusion", 600, 50, pid=dev, tid=14, cat=None, hlo_module="jit_train_step",
                     hlo_op="input_reduce_fusion"),
                   x("fusion.3", 50, 300, pid=dev, tid=3, cat=None, hlo_op="fusion.3"),   # derived: XLA Ops
                   x("CUPTI overhead", 700, 200, pid=dev, tid=15, cat=None)]


XLA_PROGRAMS = {"jit_train_step": {
    "fusion.3": compiled.Content(frozenset({"fusion", "exponential", "reduce", "divide"}),
                                 (f"jit(train_step)/attention/{kinds.ATTENTION_SCOPE}/softmax/exp",), True),
    "cublas-gemm.1": compiled.Content(frozenset({"custom-call:__cublas$gemm"}), (), False)}}


def paddle_gpu():
    """paddle.profiler's Chrome trace on a GPU: host Operators and CudaRuntime launches, device Kernels and
    Memcpys, linked by "correlation id"; Paddle appends each event's duration to its name. One step of 1000 us."""
    return [*steps_of(0, 1000, 1, pid=9, tid=9),
            x("matmul_v2 dygraph [0.05 ms]", 10, 60, pid=9, tid=9, cat="Operator"),
            x("cudaLaunchKernel [0.01 ms]", 20, 10, pid=9, tid=9, cat="CudaRuntime", **{"correlation id": 5}),
            x("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4>", 80, 400, pid=0, tid=3,
              cat="Kernel", **{"correlation id": 5}),
            x("void phi::funcs::VectorizedElementwiseKernel<float, phi::funcs::AddFunctor<float>>", 500, 100, pid=0,
              tid=3, cat="Kernel", **{"correlation id": 6}),
            x("Memcpy DtoD", 700, 100, pid=0, tid=3, cat="Memcpy")]


GPU_CASES = {   # (trace, programs, steps, timed ms/step, expected timed kinds in us/step, layer-fused, graph-fused us)
    "kineto": (kineto_gpu, {}, 2, 0.8,
               {"matmul_conv": 100, "optimizer": 50, "attention": 75, "data_movement": 25}, 0, 0),
    "tensorflow without XLA": (lambda: xprof_gpu(False), {}, 1, 1.0,
                               {"matmul_conv": 300, "normalization": 100, "elementwise": 50}, 100, 50),
    "XLA (JAX or TensorFlow)": (lambda: xprof_gpu(True), XLA_PROGRAMS, 1, 1.0,
                                {"attention": 300, "matmul_conv": 100, "elementwise": 50}, 0, 0),
    "paddle": (paddle_gpu, {}, 1, 1.0, {"matmul_conv": 400, "elementwise": 100, "data_movement": 100}, 0, 0),
}


@pytest.mark.parametrize("case", list(GPU_CASES))
def test_a_gpu_trace_reads_as_constructed(case):
    """Every device-lane event but the annotations and XProf's derived lines counts; each kernel is of the kind of
    its work (by its name, its program, or its launcher where its name says nothing), a kernel launched in a scope
    of the scope's kind, random numbers of their own; waiting is the timed step less the device's busy time; the
    fused ops TensorFlow's layers chose are told from the remapper's."""
    make, programs, steps, timed, expected, layer_us, graph_us = GPU_CASES[case]
    found = trace.breakdown(trace.Trace(trace.events_of(make()), programs), steps, "gpu", timed_ms_per_step=timed)
    got = {k: round(v * 1e3, 6) for k, v in found["ms_per_step"].items() if v and k != "waiting"}
    assert got == expected
    busy = sum(expected.values()) / 1e3
    assert found["ms_per_step"]["waiting"] == pytest.approx(timed - busy)
    assert found["waiting_basis"] == "timed" and found["step_ms_per_step"] == pytest.approx(timed)
    assert found["layer_fused_ms_per_step"] * 1e3 == pytest.approx(layer_us)
    assert found["graph_fused_ms_per_step"] * 1e3 == pytest.approx(graph_us)
    # one host mark a step (a device's mirrored marks are no second one): every step has its figures
    assert len(found["per_step"]["step_ms"]) == steps and len(found["per_step"]["matmul_conv"]) == steps


def test_a_kineto_trace_has_one_step_mark_a_step_and_its_figures():
    """Kineto mirrors each kbench.step onto the GPU stream: read as a device's annotation, never as a second mark."""
    events = trace.events_of(kineto_gpu())
    start, end = trace.window(events)
    assert trace.step_marks(events, start, end) == [(0.0, 1000.0), (1000.0, 2000.0)]
    assert all(e.on_device for e in events if e.lane[0] == 0)          # the "python3" process labelled GPU 0


@pytest.mark.parametrize("marks, per_step", [(2, True), (1, False), (3, False)])
def test_per_step_figures_only_where_the_trace_holds_a_mark_for_each_step(marks, per_step):
    """A trace with a step's mark missing or one too many gets no per-step figures (so no interval), not figures
    cut at the wrong places."""
    events = [x(MARKER, 0, 1000, cat="user_annotation"), *(x(STEP, i * 300, 300, cat="user_annotation")
                                                           for i in range(marks)), x("aten::mm", 10, 100)]
    found = trace.breakdown(trace.events_of(events), 2, "cpu")
    assert (found["per_step"] is not None) is per_step


def test_a_steps_kinds_share_the_time_of_ops_on_concurrent_lanes():
    """Two lanes' ops at once share the moment: each step's kinds add up to at most its mark, not twice it."""
    events = [*steps_of(0, 500, 2), x("aten::mm", 0, 400), x("aten::add", 0, 400, tid=2),
              x("aten::mm", 500, 100)]
    found = trace.breakdown(trace.events_of(events), 2, "cpu")["per_step"]
    assert found["matmul_conv"] == pytest.approx([0.2, 0.1]) and found["elementwise"] == pytest.approx([0.2, 0.0])
    assert found["waiting"] == pytest.approx([0.1, 0.4])


def test_a_steps_layer_fused_time_is_the_layers_choice_alone_not_graplers():
    """Per step, the fused ops a layer chose (FusedBatchNormV3) count, the remapper's (_FusedMatMul) do not: finding
    4's interval covers the ops it is about."""
    events = [*steps_of(0, 1000, 1), x("FusedBatchNormV3", 0, 100, cat=None, is_eager=0),
              x("_FusedMatMul", 200, 300, cat=None, is_eager=0)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")
    assert found["per_step"]["layer_fused"] == pytest.approx([0.1]) and found["layer_fused_ms_per_step"] == 0.1
    assert found["graph_fused_ms_per_step"] == pytest.approx(0.3)
    assert found["layer_fused_kinds"] == {"normalization": pytest.approx(0.1)}


def test_a_cpu_cells_waiting_is_its_profiled_windows_host_time_outside_ops_whatever_its_timed_step():
    """On a CPU the timed step is not the basis: the profiled steps' ops against the unprofiled timed step would
    mix two runs; waiting is the window less the ops."""
    events = [*steps_of(0, 1000, 1), x("aten::mm", 0, 400)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu", timed_ms_per_step=0.5)
    assert found["ms_per_step"]["waiting"] == pytest.approx(0.6) and found["waiting_basis"] == "profiled"


def test_a_kernel_linked_to_its_launch_call_is_read_by_the_op_around_the_call():
    """Paddle's kernels carry the correlation id of their cudaLaunchKernel, not of the operator: a kernel whose name
    says nothing is read by the operator running around the launch call, not by the call's name."""
    events = [*steps_of(0, 1000, 1, pid=9, tid=9),
              x("layer_norm dygraph [0.05 ms]", 10, 60, pid=9, tid=9, cat="Operator"),
              x("cudaLaunchKernel [0.01 ms]", 20, 10, pid=9, tid=9, cat="CudaRuntime", **{"correlation id": 5}),
              x("void phi::funcs::SomeKernelOfItsOwn<float, 256>", 80, 400, pid=0, tid=3, cat="Kernel",
                **{"correlation id": 5})]
    found = trace.breakdown(trace.events_of(events), 1, "gpu", timed_ms_per_step=1.0)["ms_per_step"]
    assert found["normalization"] == pytest.approx(0.4)


def test_a_tensorflow_kernel_whose_name_says_nothing_reads_by_its_tf_op_without_a_link():
    """XProf gives every kernel TensorFlow launched its tf_op (name:type), linked or not."""
    events = [named("process_name", 1, "/device:GPU:0"), *steps_of(0, 1000, 1, pid=701, tid=5),
              x("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<float>, long>", 50, 300, pid=1, tid=14,
                cat=None, tf_op="model/dense/Relu:Relu")]
    found = trace.breakdown(trace.events_of(events), 1, "gpu", timed_ms_per_step=1.0)["ms_per_step"]
    assert found["elementwise"] == pytest.approx(0.3)


def test_a_tensorflow_kernel_whose_op_lies_in_an_attention_core_is_attention():
    """Without XLA, TensorFlow's op names carry the scope the adapters put around an attention core (tf.name_scope):
    its GPU kernels' tf_op says it, whatever the kernel; a projection called inside the core stays a product."""
    events = [named("process_name", 1, "/device:GPU:0"), *steps_of(0, 1000, 1, pid=701, tid=5),
              x("volta_sgemm_128x64_nn", 50, 300, pid=1, tid=14, cat=None,
                tf_op=f"model/mha/{kinds.ATTENTION_SCOPE}/einsum/Einsum:Einsum"),
              x("volta_sgemm_128x64_nn", 400, 100, pid=1, tid=14, cat=None,
                tf_op=f"model/mha/{kinds.ATTENTION_SCOPE}/{kinds.PROJECTION_SCOPE}/qkv/MatMul:MatMul")]
    found = trace.breakdown(trace.events_of(events), 1, "gpu", timed_ms_per_step=1.0)["ms_per_step"]
    assert found["attention"] == pytest.approx(0.3) and found["matmul_conv"] == pytest.approx(0.1)


def test_a_kernel_a_cuda_graph_ran_is_read_by_its_own_name_not_the_graphs_call():
    """XLA's command buffers run many kernels as one CUDA graph; a kernel whose hlo_op is the graph's call (its
    content: everything the call runs) is read by its own name, and the share run from graphs is observed."""
    programs = {"jit_f": {"command_buffer.1": compiled.Content(frozenset({"call", "dot", "exponential"}), (), False)}}
    events = [named("process_name", 1, "/device:GPU:0"), *steps_of(0, 1000, 1, pid=701, tid=5),
              x("loop_transpose_fusion", 50, 100, pid=1, tid=14, cat=None, hlo_module="jit_f",
                hlo_op="command_buffer.1", cuda_graph_exec_id=3),
              x("sm90_xmma_gemm_f32f32", 200, 300, pid=1, tid=14, cat=None, hlo_module="jit_f",
                hlo_op="command_buffer.1", cuda_graph_exec_id=3)]
    found = trace.breakdown(trace.Trace(trace.events_of(events), programs), 1, "gpu", timed_ms_per_step=1.0)
    assert found["ms_per_step"]["data_movement"] == pytest.approx(0.1)
    assert found["ms_per_step"]["matmul_conv"] == pytest.approx(0.3) and found["graph_launched_share"] == 1.0


def test_a_trace_whose_profiler_says_it_dropped_events_does_not_close():
    """tsl's CUPTI collector writes "Detected GPU events dropped on <host>: ..." into its XSpace's warnings (the
    kept trace carries them): the trace is short of those kernels, which would read as waiting."""
    warning = ("Detected GPU events dropped on node7: Profiler has collected 5 driver events and 9 device events. "
               "12 events dropped because total device(activity) events reaches max.")
    kept = trace.Trace(trace.events_of(xprof_gpu(False)), {}, (warning,))
    with pytest.raises(trace.NotClosed, match="dropped events"):
        trace.breakdown(kept, 1, "gpu", timed_ms_per_step=1.0)
    assert trace.breakdown(trace.Trace(kept.events, {}, ("some other remark",)), 1, "gpu", 1.0)


def test_a_gpu_trace_whose_device_lanes_recorded_nothing_does_not_close():
    """TensorFlow's kernels used to be read only by hlo_op or is_eager: a GPU step read 100% waiting and closed."""
    events = [e for e in xprof_gpu(False) if e.get("pid") != 1 or e.get("tid") not in (14,)]
    with pytest.raises(trace.NotClosed, match="no device activity recorded"):
        trace.breakdown(trace.events_of(events), 1, "gpu", timed_ms_per_step=1.0)


# ---------------------------------------------------------------- each framework's real trace

# (trace file, the device, the steps, the largest kind, kinds that must be there)
REAL = {
    "native-torch-eager-bert-fit": ("cpu", 3, "attention", {"attention", "normalization", "optimizer", "random"}),
    "native-torch-compiled-bert-predict": ("cpu", 3, None, {"attention", "fusion_unread", "matmul_conv"}),
    "keras3-torch-bert-predict": ("cpu", 3, None, {"attention", "matmul_conv"}),
    "keras3-jax-bert-fit": ("cpu", 3, None, {"attention", "normalization", "random", "optimizer", "data_movement"}),
    "keras3-jax-bert-predict": ("cpu", 3, "attention", {"attention", "normalization", "matmul_conv"}),
    "keras3-tensorflow-bert-fit": ("cpu", 3, None, {"attention", "matmul_conv", "random"}),
    "keras2-sam-predict": ("cpu", 3, None, {"attention", "matmul_conv", "normalization"}),
    "paddle-dygraph-bert-fit": ("cpu", 3, None, {"matmul_conv", "optimizer", "normalization"}),
}
@pytest.mark.parametrize("name", list(REAL))
def test_each_frameworks_own_trace_reads_and_closes(name):
    device, steps, largest, present = REAL[name]
    found = trace.breakdown(trace.read_trace(TRACES / f"{name}.trace.json.gz"), steps, device)
    kinds_found = {k: v for k, v in found["ms_per_step"].items() if k != "waiting"}
    assert found["closure_gap"] < trace.CLOSURE_TOLERANCE and found["ops_per_step"] > 10, found
    assert all(kinds_found[k] > 0 for k in present), kinds_found
    assert largest is None or max(kinds_found, key=kinds_found.get) == largest, kinds_found
    assert sum(found["ms_per_step"].values()) == pytest.approx(found["window_ms_per_step"], rel=1e-6)


@pytest.mark.parametrize("name, scopes", [("keras3-jax-bert-predict", "program"), ("keras3-jax-bert-fit", "program"),
                                          ("keras3-tensorflow-bert-fit", "program"), ("keras2-sam-predict", "program"),
                                          ("native-torch-eager-bert-fit", "scope"),
                                          ("keras3-torch-bert-predict", "scope")])
def test_every_columns_real_trace_finds_its_attention_core_and_only_there(name, scopes):
    """The same work, the same word, on the tiny cells' own traces: the attention core (the scope the runner put
    around it, kbench.adapters._scopes) read as attention in every column that has one (an XLA instruction's
    metadata, TensorFlow's op names under XLA, torch's record_function events and SDPA), and no softmax outside a
    core read as attention; Paddle, whose trace can show no core, reads none (the table says "not separated")."""
    found = trace.breakdown(trace.read_trace(TRACES / f"{name}.trace.json.gz"), 3, "cpu")
    assert found["ms_per_step"]["attention"] > 0.05 * found["step_ms_per_step"], found["ms_per_step"]
    if scopes == "program":
        assert found["read_from"]["program"] > 0.9, found["read_from"]
    paddle = trace.breakdown(trace.read_trace(TRACES / "paddle-dygraph-bert-fit.trace.json.gz"), 3, "cpu")
    assert paddle["ms_per_step"]["attention"] == 0.0


def test_keras3_on_tensorflow_keeps_the_programs_its_trace_names():
    """A kept trace of Keras 3 on TensorFlow under XLA carries the programs its ops name (an earlier trace carried
    none and read its fusions by name alone)."""
    kept = trace.read_trace(TRACES / "keras3-tensorflow-bert-fit.trace.json.gz")
    modules = {e.args.get("hlo_module") for e in kept.events if "hlo_op" in e.args}
    assert modules and all(trace._program(kept.programs, e) is not None for e in kept.events
                           if "hlo_op" in e.args and e.args["hlo_module"] in modules and e.name.endswith("fusion"))


@pytest.mark.parametrize("name", ["keras3-jax-bert-fit", "keras3-jax-bert-predict"])
def test_the_demos_keras3_jax_rows_name_their_matrix_products(name):
    """XLA:CPU puts BERT's dots, softmaxes and layer norms into ynn_fusion.N ops whose names say nothing: read from
    the programs the trace carries, a third of the step or more is matrix products, the projections' and the
    attention core's, and no fusion stays unread. Without the programs the same trace reads as it used to: mostly
    "fusion, content not read"."""
    kept = trace.read_trace(TRACES / f"{name}.trace.json.gz")
    found = trace.breakdown(kept, 3, "cpu")
    share = {k: v / found["step_ms_per_step"] for k, v in found["ms_per_step"].items()}
    assert share["matmul_conv"] >= 0.15 and share["matmul_conv"] + share["attention"] >= 0.33, share
    assert share["fusion_unread"] <= 0.2, share
    assert found["read_from"]["program"] > 0.99 and found["fused_share"] > 0.5       # fused: a property
    blind = trace.breakdown(trace.Trace(kept.events, {}), 3, "cpu")
    assert blind["ms_per_step"]["fusion_unread"] > 0.2 * blind["step_ms_per_step"], blind["ms_per_step"]


def test_a_trace_is_read_gzipped_or_plain_and_as_a_bare_list(tmp_path):
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps(CONSTRUCTED))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(json.dumps({"traceEvents": CONSTRUCTED}).encode()))
    assert trace.read_trace(plain) == trace.read_trace(packed)


# ---------------------------------------------------------------- in the cell: measure, keep

def test_measure_profiles_after_the_window_keeps_the_trace_and_never_fails_the_cell(tmp_path):
    """The synthetic stack's recorder as the profiler: the breakdown closes, with a figure per step, and its trace is
    kept beside the record; a profiler that raises gives a breakdown that says why."""
    import numpy as np
    from kbench.adapters import synthetic
    a = np.ones((64, 64), np.float32)

    def step():
        return synthetic.RECORDER.op("synthetic::matmul", lambda: a @ a)
    found = measure.measure(step, lambda out: None, 3, synthetic.RECORDER.trace, "cpu", 1.0, tmp_path)
    assert found["closes"] and found["steps"] == 3 and found["ms_per_step"]["matmul_conv"] > 0, found
    assert len(found["per_step"]["matmul_conv"]) == 3 and all(v > 0 for v in found["per_step"]["matmul_conv"])
    assert found["trace"]["kept"] and (tmp_path / measure.TRACE_NAME).is_file()
    assert found["profiler_overhead"] == pytest.approx(found["profiled_ms_per_step"] / 1.0)
    assert not [p for p in tmp_path.iterdir() if p.name != measure.TRACE_NAME]      # its scratch folder is gone

    def broken(warm, run, folder):
        raise RuntimeError("the profiler could not start")
    assert measure.measure(step, lambda out: None, 3, broken, "cpu", 1.0, tmp_path) == {
        "steps": 3, "closes": False, "why": "no breakdown: RuntimeError: the profiler could not start"}


def big_trace(steps: int, mib: float) -> dict:
    """A trace of `steps` steps whose op names do not compress: about `mib` MiB gzip-compressed."""
    rng = random.Random(0)
    per_step = int(mib * 2**20 / 260 / steps)          # about 260 compressed bytes an event
    events = [x(MARKER, 0, steps * 1000, cat="user_annotation")]
    for s in range(steps):
        events.append(x(STEP, s * 1000, 1000, cat="user_annotation"))
        events += [x("%0480x" % rng.getrandbits(1920), s * 1000 + i * 1000 / per_step, 0.5) for i in range(per_step)]
    return {"traceEvents": events}


def test_a_trace_over_the_cap_keeps_its_first_whole_steps_and_says_so(tmp_path, monkeypatch):
    """An eager LLM generate's trace is 20-30 MiB compressed, over the 8 MiB cap: it keeps what fits in whole steps
    (at a 1 MiB cap, to keep the test short: a 1.15 MiB trace of 4 steps keeps 3), its record saying how many; a
    small one is kept whole."""
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", 2**20)
    found = measure.keep(big_trace(4, 1.15), tmp_path, 4)
    assert found["kept"] and found["steps_kept"] == 3 and "first 3 of 4 steps kept" in found["why"], found
    assert found["bytes"] <= 2**20
    kept = gzip.decompress((tmp_path / measure.TRACE_NAME).read_bytes()).decode()
    assert kept.count(f'"name":"{STEP}"') == 3 and kept.count(f'"name":"{MARKER}"') == 1
    assert measure.keep(big_trace(2, 0.1), tmp_path, 2) == {"kept": True, "bytes": pytest.approx(0.1 * 2**20,
                                                                                                 rel=0.3)}


def test_a_records_trace_lies_beside_it():
    assert measure.kept_trace(Path("cells/tiny/strict/bert/fit/bs8/float32/keras3-jax.r2.json")) == Path(
        "cells/tiny/strict/bert/fit/bs8/float32/keras3-jax.r2.trace.json.gz")


def test_a_run_without_breakdowns_writes_empty_tables_and_an_empty_picture(tmp_path):
    """A run whose cells have no breakdown (config breakdown.steps 0, or cells that failed): every output is there."""
    from kbench.results import breakdown_tables
    from kbench.results.context import Records
    breakdown_tables.build(Records(), run_context(tmp_path / "tables", "strict", tmp_path / "plots",
                                                  frameworks=("keras3-jax",)))
    assert sorted(p.name for p in (tmp_path / "tables/strict").iterdir()) == sorted(breakdown_tables.OUTPUTS)
    assert sorted(p.name for p in (tmp_path / "plots/strict").iterdir()) == sorted(breakdown_tables.PLOTS)


def test_the_picture_stacks_timed_ms_in_the_legends_order_without_an_alarm_colour():
    """Each bar is its column's timed ms/step (each kind's share of the profiled step times it), its total written;
    the legend reads the stack from its top; no kind is drawn red; a CPU run says its figures check the pipeline."""
    import matplotlib.colors
    from kbench.results import breakdown_tables
    lines = []
    for framework, timed in (("native-torch-eager", 100.0), ("keras3-jax", 40.0)):
        for i, kind in enumerate(kinds.KIND_NAMES):
            lines.append({"model": "bert", "task": "fit", "batch_size": 8, "precision": "float32",
                          "framework": framework, "kind": kind, "timed_ms": timed / len(kinds.KIND_NAMES),
                          "closes": True, "device": "cpu"})
    fig = breakdown_tables.figure(pd.DataFrame(lines), ["native-torch-eager", "keras3-jax"])
    ax = fig.axes[0]
    tops = {}
    for patch in ax.patches:
        tops[round(patch.get_x() + patch.get_width() / 2)] = max(tops.get(round(patch.get_x() + patch.get_width() / 2),
                                                                       0), patch.get_y() + patch.get_height())
    assert tops == {0: pytest.approx(100.0), 1: pytest.approx(40.0)}
    assert [t.get_text() for t in ax.texts] == ["100 ms", "40 ms"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == list(kinds.KIND_NAMES.values())[::-1] and legend[0] == "waiting"
    for colour in breakdown_tables.COLOURS.values():
        r, g, b = matplotlib.colors.to_rgb(colour)
        assert not (r > 0.7 and g < 0.35 and b < 0.35), colour
    assert any("check the pipeline" in t.get_text() for t in fig.texts)


def test_a_record_of_the_earlier_reader_still_reads_its_fusions_as_unread():
    """Records kept from before the kinds said what a fusion holds (their "fused" kind, no per-step figures): the
    tables read them, their fusions as "fusion, content not read", never dropped."""
    from kbench.contract import cell
    from kbench.results import breakdown_tables
    from test_launch import synthetic_spec
    result = cell.new_result(synthetic_spec(), {"runtime": "host"}, "ok")
    result.timing = {"n": 10, "mean_ms": 10.0, "step_ms": [10.0] * 10}
    result.breakdown = {"steps": 3, "closes": True, "window_ms_per_step": 10.0, "timed_ms_per_step": 10.0,
                        "ms_per_step": {"matmul_conv": 4.0, "fused": 5.0, "waiting": 1.0},
                        "library_fused_ms_per_step": 0.0, "fused_share": 0.5}
    long = breakdown_tables.breakdown_long([result]).set_index("kind")
    assert long.at["fusion_unread", "share"] == 0.5 and long.at["matmul_conv", "share"] == 0.4
    assert long["share"].sum() == pytest.approx(1.0) and pd.isna(long["layer_fused_share"].iloc[0])


def test_a_shares_interval_across_few_steps_stays_within_zero_and_one():
    from kbench.results import breakdown_tables
    per_step = {"step_ms": [10.0, 10.0, 10.0], "waiting": [0.5, 9.0, 1.0], "matmul_conv": [2.0, 2.1, 1.9]}
    low, high = breakdown_tables.share_interval(per_step, "waiting")
    assert low == 0.0 and 0.3 < high <= 1.0
    assert breakdown_tables.share_interval(per_step, "matmul_conv") == pytest.approx((0.175, 0.225), abs=0.01)


def test_a_column_whose_trace_shows_no_attention_core_reads_not_separated_where_another_does():
    """Paddle's attention reads as matrix products (no scope ties its backward pass to it): beside a column that
    found the core, its 0 is no measurement. A row where no column has attention (ResNet-50) reads its zeros."""
    from kbench.results import breakdown_tables
    lines = []
    for model, framework, attention in (("bert", "native-torch-eager", 0.2), ("bert", "paddle-dygraph", 0.0),
                                        ("resnet50", "native-torch-eager", 0.0), ("resnet50", "paddle-dygraph", 0.0)):
        for kind in kinds.KIND_NAMES:
            share = attention if kind == "attention" else (1 - attention if kind == "matmul_conv" else 0.0)
            lines.append({"model": model, "task": "fit", "batch_size": 8, "precision": "float32",
                          "framework": framework, "kind": kind, "share": share, "timed_ms": 10 * share,
                          "ms_per_step": 10 * share, "share_low": None, "share_high": None, "closes": True,
                          "why": None, "ops_per_step": 10, "fused_share": 0.0, "program_share": None,
                          "profiler_overhead": 1.0})
    table = breakdown_tables.time_by_kind_table(pd.DataFrame(lines), ["native-torch-eager", "paddle-dygraph"])
    attention = dict(zip(zip(table.model, table.framework), table["attention"]))
    assert attention[("bert", "paddle-dygraph")] == breakdown_tables.NOT_SEPARATED
    assert attention[("bert", "native-torch-eager")] == "2.00 (20%)"
    assert attention[("resnet50", "paddle-dygraph")] == "0.00 (0%)"


def test_torch_compiles_own_wrappers_are_the_runtimes_time_and_its_compiled_graph_an_op():
    """dynamo's guard checks and the region around a compiled frame are torch's runtime (waiting, as JAX's dispatch
    is), recorded as cpu_ops; the compiled graph's call inside them is an op (on a CPU: fusion, content not read)."""
    events = [*steps_of(0, 1000, 1), x("TorchDynamo Cache Lookup", 0, 100), x("Torch-Compiled Region: 0/0", 100, 500),
              x("Pregraph bytecode", 110, 10), x("AOTDispatcher Runtime Wrapper Prologue", 130, 10),
              x("## Call CompiledFxGraph fabc ##", 200, 300), x("CompiledFunction", 650, 100)]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")
    assert found["ms_per_step"]["fusion_unread"] == pytest.approx(0.3)
    assert found["ms_per_step"]["waiting"] == pytest.approx(0.7) and found["unrecognised_share"] == 0.0


@pytest.mark.parametrize("name", ["CommonPjRtClient::CreateOutputs", "CommonPjRtBuffer::Await", "Handle inputs",
                                  "DevicePut", "ParseArguments", "AllocateOutputBuffersWithInputReuse",
                                  "Wait for donation holds", "PythonRefManager::CollectGarbage", "EagerCopyToDevice",
                                  "IteratorGetNextOp::DoCompute", "Iterator::Prefetch", "MakeIterator::RootDataset",
                                  "_send_Sink_0:_Send",
                                  "autograd::engine::evaluate_function: CompiledFunctionBackward"])
def test_jaxs_and_tensorflows_dispatch_on_the_host_is_the_runtimes_own(name):
    """As the tiny cells' JAX (jaxlib 0.10), TensorFlow (2.21: tf.data's iterator feeding Keras 2's fit) and torch
    (2.13: the compiled graph's backward node) traces write them on the host."""
    events = [*steps_of(0, 1000, 1), x("dot.1", 0, 100, tid=2, cat=None, hlo_op="dot.1"), x(name, 200, 300, cat=None)]
    assert trace.breakdown(trace.events_of(events), 1, "cpu")["unrecognised_share"] == 0.0


def test_paddles_layer_and_backward_scopes_are_annotations_and_a_static_programs_kernels_ops():
    events = [*steps_of(0, 1000, 1), x("BertModel", 0, 600, cat="Forward"), x("Gradient Backward", 600, 300,
                                                                             cat="Backward"),
              x("matmul kernel launch", 10, 100, cat="StaticKernelLaunch")]
    found = trace.breakdown(trace.events_of(events), 1, "cpu")
    assert found["ms_per_step"]["matmul_conv"] == pytest.approx(0.1) and found["unrecognised_share"] == 0.0
