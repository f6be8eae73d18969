"""What arithmetic a cell's float32 matrix products really get: a probe run on the cell's device before its model is
built, classified by error size against a float64 reference.

One 256 x 256 float32 matmul of fixed inputs. Relative Frobenius error: full float32 (23-bit mantissa) ~3e-7, TF32
(10-bit inputs, float32 accumulation; float16 looks the same) ~3e-4, bfloat16 (7-bit) ~2e-3 (measured on these
inputs; tests/test_numerics.py rounds the inputs to those widths and checks each class). A float32 cell whose
precision switches turned TF32 off but whose probe still says tf32 is failed (ReducedPrecision): its "fp32" number
would be another column's TF32 number.
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


def probe(matmul) -> dict:
    """matmul(a, b) -> the product as NumPy, computed in float32 by the cell's framework on the cell's device."""
    a, b = probe_inputs()
    error = relative_error(matmul(a, b), a, b)
    return {"matmul_relative_error": error, "observed_class": classify(error)}


def check(probe_result: dict, tf32: str, compute_dtype: str = "float32", device_kind: str = "cpu") -> None:
    """tf32 "off": a float32-compute cell's float32 must be float32; "on", on a GPU, must be TF32 (a CPU has none).
    "library-default" (the anchor's setting) only records what it got; a half-precision cell's products are not
    float32 ones (it records the probe too)."""
    if compute_dtype in HALF:
        return
    observed, error = probe_result["observed_class"], probe_result["matmul_relative_error"]
    if tf32 == "off" and observed != "fp32":
        raise ReducedPrecision(f"float32 matmul probe says {observed} (relative error {error:.1e}) although TF32 "
                               "was switched off")
    if tf32 == "on" and device_kind == "gpu" and observed == "fp32":
        raise TF32NotApplied(f"float32 matmul probe says fp32 (relative error {error:.1e}) although TF32 was "
                             "switched on")
