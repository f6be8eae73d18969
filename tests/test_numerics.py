"""The float32 probe's classifier on products computed in lower precision (inputs rounded as a TF32 or bfloat16 unit
rounds them), and a cell whose probe says TF32 although TF32 was switched off."""
import types

import numpy as np
import pytest

from kbench import numerics


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
    """The runner hands the backend the cell's compute dtype with its tf32 mode: JAX's default matmul precision is
    for float32-compute cells only (kbench.adapters._hooks), which the backend can tell only from this argument."""
    from kbench.run import runner
    seen = []
    backend = types.SimpleNamespace(set_tf32=lambda mode, compute_dtype: seen.append((mode, compute_dtype)) or {},
                                    matmul=lambda a, b: a @ b)
    spec = types.SimpleNamespace(settings={"tf32": "off"}, dtypes=types.SimpleNamespace(weights="float32", compute=compute))
    found = runner.set_and_probe_numerics(spec, backend)
    assert seen == [("off", compute)] and found["tf32"] == "off"


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
