"""What arithmetic a cell's float32 matrix products really get: a probe run on the cell's device before its model is
built, classified by error size against a float64 reference.

One 256 x 256 float32 matmul of fixed inputs. Relative Frobenius error: full float32 (23-bit mantissa) ~3e-7, TF32
(10-bit inputs, float32 accumulation; float16 looks the same) ~3e-4, bfloat16 (7-bit) ~2e-3 (measured on these
inputs; tests/test_numerics.py rounds the inputs to those widths and checks each class). A float32 cell whose
precision switches turned TF32 off but whose probe still says tf32 is failed (ReducedPrecision): its "fp32" number
would be another column's TF32 number.

Beside it, where the backend has one, a float32 convolution (a 3 x 3 kernel over 64 channels, 576 products per
output, NHWC/HWIO, stride 1, no padding), classified the same way: a framework's switch for its matmuls need not reach
its convolutions (JAX's F32_F32_F32 dot preset leaves conv_general_dilated at precision DEFAULT, which XLA:GPU may
run in TF32). A CPU has no TF32: there both probes say fp32 whatever the switches; only a GPU can show the difference.
"""
from __future__ import annotations

import numpy as np

PROBE_SIZE = 256
HALF = ("bfloat16", "float16")
# class -> the largest relative error it admits (the next class starts above it)
CLASSES = (("fp32", 1e-5), ("tf32", 1e-3), ("bf16", float("inf")))


class ReducedPrecision(Exception):
    """A float32 cell whose matrix products run in less than float32, although TF32 was switched off."""


class TF32NotApplied(Exception):
    """A cell that asked for TF32 (precision tf32, or TF32 switched on) on a GPU whose float32 products stayed
    full float32: its number would be another precision's."""


def round_mantissa(x: np.ndarray, bits: int) -> np.ndarray:
    """float32 rounded to nearest-even at `bits` mantissa bits (TF32: 10, bfloat16: 7), still stored as float32:
    what a reduced-precision matmul unit does to its inputs."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    rounded = (u + ((u >> drop) & 1) + (1 << (drop - 1)) - 1) >> drop << drop
    return rounded.astype(np.uint32).view(np.float32)


def probe_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20241)
    shape = (PROBE_SIZE, PROBE_SIZE)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def relative_error(result: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(np.asarray(result, np.float64) - reference) / np.linalg.norm(reference))


def classify(error: float) -> str:
    return next(name for name, limit in CLASSES if error <= limit)


CONV_SHAPES = ((1, 16, 16, 64), (3, 3, 64, 64))      # NHWC input, HWIO kernel


def conv_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20242)
    return tuple(rng.standard_normal(shape).astype(np.float32) for shape in CONV_SHAPES)


def conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The float64 convolution (cross-correlation, as every framework's conv is): stride 1, no padding."""
    kh, kw = w.shape[:2]
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    return sum(np.einsum("nhwc,co->nhwo", x64[:, i:i + ho, j:j + wo, :], w64[i, j])
               for i in range(kh) for j in range(kw))


def conv_relative_error(result: np.ndarray, x: np.ndarray, w: np.ndarray) -> float:
    reference = conv_reference(x, w)
    return float(np.linalg.norm(np.asarray(result, np.float64) - reference) / np.linalg.norm(reference))


def probe(matmul, conv=None) -> dict:
    """matmul(a, b) -> the product as NumPy, computed in float32 by the cell's framework on the cell's device;
    conv(x, w) -> the convolution as NumPy (NHWC input, HWIO kernel, stride 1, no padding), or None where the backend
    has no convolution probe (conv_class None)."""
    a, b = probe_inputs()
    error = relative_error(matmul(a, b), a, b)
    found = {"matmul_relative_error": error, "observed_class": classify(error),
             "conv_relative_error": None, "conv_class": None}
    if conv is not None:
        x, w = conv_inputs()
        conv_error = conv_relative_error(conv(x, w), x, w)
        found.update(conv_relative_error=conv_error, conv_class=classify(conv_error))
    return found


def jax_matmul_precision(mode: str, compute_dtype: str, task: str | None = None) -> str | None:
    """The value of JAX's jax_default_matmul_precision for a cell whose tf32 setting is mode ("off" or "on";
    "library-default" leaves it untouched), which reaches dots and conv_general_dilated alike, except an algorithm
    preset: that reaches dots only, and a convolution lowers with precision DEFAULT.

    Only a float32-compute cell gets one: the setting is attached to every dot, bf16 ones too, where a non-default
    precision forbids XLA:GPU's Triton GEMM fusions (None: JAX's default, for a half-precision cell that may follow a
    float32 one in the same process, the equivalence job). "on": "tensorfloat32". "off": "highest", so convolutions
    are float32 too; a generate cell gets the F32_F32_F32 dot preset instead, since XLA:GPU mishandles a non-default
    precision_config inside while loops (jax issue 34917, fixed by PR 35091 after jax 0.10.2), which keras-hub's
    generate runs (no model here generates through a convolution)."""
    if compute_dtype != "float32":
        return None
    if mode == "on":
        return "tensorfloat32"
    return "F32_F32_F32" if task == "generate" else "highest"


def check(probe_result: dict, tf32: str, compute_dtype: str = "float32", device_kind: str = "cpu") -> None:
    """tf32 "off": a float32-compute cell's float32 must be float32, its matmuls and (where probed) its convolutions;
    "on", on a GPU, its matmuls must be TF32 (a CPU has none; cuDNN may pick a float32 algorithm for a convolution
    with TF32 allowed, so the convolution probe is not held to it). "library-default" (the anchor's setting) only
    records what it got; a half-precision cell's products are not float32 ones (it records the probe too)."""
    if compute_dtype in HALF:
        return
    observed, error = probe_result["observed_class"], probe_result["matmul_relative_error"]
    if tf32 == "off" and observed != "fp32":
        raise ReducedPrecision(f"float32 matmul probe says {observed} (relative error {error:.1e}) although TF32 "
                               "was switched off")
    conv = probe_result.get("conv_class")
    if tf32 == "off" and conv not in (None, "fp32"):
        raise ReducedPrecision(f"float32 convolution probe says {conv} (relative error "
                               f"{probe_result['conv_relative_error']:.1e}) although TF32 was switched off")
    if tf32 == "on" and device_kind == "gpu" and observed == "fp32":
        raise TF32NotApplied(f"float32 matmul probe says fp32 (relative error {error:.1e}) although TF32 was "
                             "switched on")
