"""The float32 probe's classifier on products computed in lower precision (inputs rounded as a TF32 or bfloat16 unit
rounds them), and a cell whose probe says TF32 although TF32 was switched off; (e2e) what a float32 JAX cell's setting
lowers a convolution to, in the keras3-jax image."""
import textwrap
import types

import numpy as np
import pytest

from conftest import image_record, python_in_image
from kbench.instruments import numerics


def product(bits=None, output_bits=None):
    a, b = numerics.probe_inputs()
    if bits:
        a, b = numerics.round_mantissa(a, bits), numerics.round_mantissa(b, bits)
    c = a.astype(np.float64) @ b.astype(np.float64)           # float64 accumulation: only the input width counts
    return numerics.round_mantissa(c.astype(np.float32), output_bits) if output_bits else c.astype(np.float32)


@pytest.mark.parametrize("bits, output_bits, expected", [
    (None, None, "fp32"), (10, None, "tf32"), (7, None, "bf16"), (None, 7, "bf16"), (7, 7, "bf16")])
def test_the_classifier_names_the_width_the_product_was_computed_in(bits, output_bits, expected):
    a, b = numerics.probe_inputs()
    assert numerics.classify(numerics.relative_error(product(bits, output_bits), a, b)) == expected


def test_float16_inputs_read_as_tf32_width():
    """float16 has TF32's 10-bit mantissa: the probe tells precision width, not the format's range."""
    a, b = numerics.probe_inputs()
    c = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    assert numerics.classify(numerics.relative_error(c, a, b)) == "tf32"


def test_round_mantissa_keeps_exactly_the_asked_bits():
    x = np.array([1 + 2**-10 + 2**-12, 1 + 2**-8, 1 + 3 * 2**-8], np.float32)
    assert numerics.round_mantissa(x, 10).tolist() == [1 + 2**-10, 1 + 2**-8, 1 + 3 * 2**-8]
    assert numerics.round_mantissa(x, 7).tolist() == [1.0, 1.0, 1 + 2**-6]     # halfway: to the even neighbour


def test_a_float32_cell_must_be_float32_only_where_tf32_was_switched_off():
    tf32 = numerics.probe(lambda a, b: product(10))
    assert tf32["observed_class"] == "tf32"
    with pytest.raises(numerics.ReducedPrecision, match="float32 matmul probe says tf32"):
        numerics.check(tf32, "off")
    numerics.check(tf32, "library-default")      # the anchor's setting: recorded, not refused
    numerics.check(numerics.probe(lambda a, b: a @ b), "off")


def test_only_a_float32_compute_cell_is_refused_for_a_reduced_precision_probe():
    """The probe is a float32 matmul; a bf16 or fp16 cell computes none, and on JAX gets no matmul precision (its
    probe then reads the default, TF32 on a GPU): recorded, not refused."""
    tf32 = {"matmul_relative_error": 3e-4, "observed_class": "tf32"}
    with pytest.raises(numerics.ReducedPrecision):
        numerics.check(tf32, "off", "float32")
    numerics.check(tf32, "off", "bfloat16")
    numerics.check(tf32, "off", "float16")


def test_a_cell_that_asked_for_tf32_on_a_gpu_and_got_fp32_is_refused():
    fp32 = numerics.probe(lambda a, b: a @ b)
    with pytest.raises(numerics.TF32NotApplied, match="although TF32 was switched on"):
        numerics.check(fp32, "on", "float32", "gpu")
    numerics.check(fp32, "on", "float32", "cpu")          # a CPU has no TF32: the anchor's "on" cells run there
    numerics.check(numerics.probe(lambda a, b: product(10)), "on", "float32", "gpu")


@pytest.mark.parametrize("compute", ["float32", "bfloat16", "float16"])
def test_the_framework_switches_are_set_for_the_cells_compute_dtype(compute):
    """The runner hands the backend the cell's compute dtype and task with its tf32 mode: JAX's default matmul
    precision is for float32-compute cells only, and a generate cell's differs (kbench.instruments.numerics.jax_matmul_precision),
    which the backend can tell only from these arguments. A backend without a convolution probe records none."""
    from kbench.run import runner
    seen = []
    backend = types.SimpleNamespace(set_tf32=lambda mode, compute_dtype, task: seen.append((mode, compute_dtype, task))
                                    or {}, matmul=lambda a, b: a @ b)
    spec = types.SimpleNamespace(settings={"tf32": "off"}, task="fit",
                                 dtypes=types.SimpleNamespace(weights="float32", compute=compute))
    found = runner.set_and_probe_numerics(spec, backend)
    assert seen == [("off", compute, "fit")] and found["tf32"] == "off"
    assert found["probe"]["conv_class"] is None


def conv(bits=None):
    """A float32 convolution whose inputs a reduced-precision unit rounded to `bits` mantissa bits."""
    def run(x, w):
        if bits:
            x, w = numerics.round_mantissa(x, bits), numerics.round_mantissa(w, bits)
        return numerics.conv_reference(x, w).astype(np.float32)
    return run


@pytest.mark.parametrize("bits, expected", [(None, "fp32"), (10, "tf32"), (7, "bf16")])
def test_the_convolution_probe_names_the_width_its_products_were_computed_in(bits, expected):
    found = numerics.probe(lambda a, b: a @ b, conv(bits))
    assert found["conv_class"] == expected and found["observed_class"] == "fp32"


def test_a_float32_cell_whose_convolutions_run_in_tf32_is_refused_though_its_matmuls_are_float32():
    """JAX's F32_F32_F32 dot preset reaches dots only: a float32 ResNet-50 whose convolutions ran in TF32 would pass
    a matmul probe. With TF32 off the convolution probe must say fp32 too; with TF32 on it is not held to TF32 (cuDNN
    may pick a float32 algorithm), and library-default records it."""
    partly = numerics.probe(lambda a, b: a @ b, conv(10))
    with pytest.raises(numerics.ReducedPrecision, match="float32 convolution probe says tf32"):
        numerics.check(partly, "off", "float32", "gpu")
    numerics.check(partly, "library-default", "float32", "gpu")
    numerics.check(partly, "off", "bfloat16", "gpu")
    numerics.check(numerics.probe(lambda a, b: product(10), conv(None)), "on", "float32", "gpu")
    numerics.check(numerics.probe(lambda a, b: a @ b, conv(None)), "off", "float32", "gpu")


@pytest.mark.parametrize("mode, compute, task, expected", [
    ("off", "float32", "fit", "highest"), ("off", "float32", "predict", "highest"), ("off", "float32", None, "highest"),
    ("off", "float32", "generate", "F32_F32_F32"), ("on", "float32", "fit", "tensorfloat32"),
    ("on", "float32", "generate", "tensorfloat32"), ("off", "bfloat16", "fit", None), ("off", "float16", "fit", None)])
def test_a_float32_jax_cell_gets_highest_so_its_convolutions_are_float32_too(mode, compute, task, expected):
    """The setting a JAX cell gets (jax_default_matmul_precision): "highest" reaches conv_general_dilated, where the
    F32_F32_F32 preset reaches dots only (the e2e test lowers a conv under it in the keras3-jax image); a generate cell
    keeps the preset, as XLA:GPU mishandles a non-default precision inside the while loop keras-hub's generate runs
    (jax issue 34917); a half-precision cell gets JAX's default."""
    assert numerics.jax_matmul_precision(mode, compute, task) == expected


@pytest.mark.parametrize("output, where", [
    (0.25, "host"), (np.float32(0.25), "host"), ({"loss": 0.25, "acc": 1.0}, "host"), (np.ones(3), "host"),
    (types.SimpleNamespace(), "device"), ({"loss": 0.25, "logits": types.SimpleNamespace()}, "device"),
    ((0.25, types.SimpleNamespace()), "device"),
])
def test_a_step_that_read_its_result_back_is_told_from_one_that_left_it_on_the_device(output, where):
    """evidence.step_returns: the same host work per fit step in every column (a loss read back, as
    train_on_batch does) is checked from what each step returned: a framework array (here any other object) is
    'device'."""
    from kbench.run import runner
    assert runner.step_returns(output) == where


# ---------------------------------------------------------------- e2e: a float32 cell's JAX setting, lowered

# Runs inside the keras3-jax image (CPU jaxlib): the cell's own hook sets the precision, then a bare
# conv_general_dilated, a Keras conv (keras.ops.conv: what a Conv2D layer calls) and a dot are lowered to StableHLO.
JAX_LOWERING = textwrap.dedent('''
    import json, os
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras
    from kbench.instruments import numerics
    from kbench.adapters import _hooks

    hooks = _hooks.jax_hooks()
    x, w = numerics.conv_inputs()

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def lowered(f, *args):
        return jax.jit(f).lower(*args).as_text()

    found = {}
    for task in ("fit", "generate"):
        switches = hooks["set_tf32"]("off", "float32", task)
        found[task] = {"switches": switches, "conv": lowered(conv, x, w), "keras_conv": lowered(keras.ops.conv, x, w),
                       "dot": lowered(lambda a, b: a @ b, x[0, 0], w[0, 0]),
                       "probe": numerics.probe(hooks["matmul"], hooks["conv"])}
    print("LOWERED " + json.dumps(found), flush=True)
''')


@pytest.fixture(scope="module")
def keras3_jax_image(tmp_path_factory, built):
    return image_record(tmp_path_factory, built, "keras3-jax")


def convolutions(hlo: str) -> list[str]:
    return [line for line in hlo.splitlines() if "stablehlo.convolution" in line]


@pytest.mark.e2e
def test_a_float32_jax_cells_setting_lowers_its_convolutions_at_precision_highest(keras3_jax_image):
    """The float32 fit cell's setting ("highest") reaches conv_general_dilated and a Keras conv: their StableHLO says
    precision HIGHEST, where the F32_F32_F32 dot preset (kept for generate, jax issue 34917) lowers a convolution at
    DEFAULT, which XLA:GPU may run in TF32. A CPU cannot show TF32 (both probes say fp32 here); what a GPU runs at
    HIGHEST is the GPU's: not yet run on a GPU."""
    found = python_in_image(keras3_jax_image, JAX_LOWERING, "LOWERED")
    fit, generate = found["fit"], found["generate"]
    assert fit["switches"] == {"jax_default_matmul_precision": "highest"}
    for hlo in (fit["conv"], fit["keras_conv"]):
        assert convolutions(hlo) and all("precision HIGHEST" in line for line in convolutions(hlo)), hlo[-2000:]
    assert "HIGHEST" in fit["dot"]
    assert fit["probe"]["conv_class"] == "fp32" and fit["probe"]["observed_class"] == "fp32"
    # the preset a generate cell keeps: dots get the F32 algorithm, a convolution DEFAULT (none generates through one)
    assert generate["switches"] == {"jax_default_matmul_precision": "F32_F32_F32"}
    assert "lhs_precision_type = f32" in generate["dot"]
    assert all("precision DEFAULT" in line for line in convolutions(generate["conv"]))
