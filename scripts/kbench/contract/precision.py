"""The one table of precisions: what each name means for weights, compute and loss scaling.

Names are Keras dtype-policy names. matrix.spec resolves a cell's precision into `spec.dtypes` from here, and
every adapter reads those fields, never the name; the config checks, the cell-path pattern and the table labels
come from here too.
"""
from __future__ import annotations

from dataclasses import dataclass

from kbench.contract.spec import Dtypes


@dataclass(frozen=True)
class Precision:
    weights: str         # dtype the parameters are stored and updated in
    compute: str         # dtype of the matrix products (autocast / the dtype policy's compute dtype)
    loss_scaling: bool   # dynamic loss scaling of fit gradients (float16's narrow range needs it)
    label: str           # short name in table headers
    tf32: str | None = None     # the cell's TF32 setting, whatever its profile's (tf32: float32 with TF32 on)
    gpu_only: str | None = None     # why a CPU has no such arithmetic (its cells there are n/a)
    baseline: bool = False      # the precision study also takes ratios against it


PRECISIONS = {
    "float32": Precision("float32", "float32", False, "fp32", baseline=True),
    # float32 tensors, products in TF32 on an NVIDIA GPU: the float32 most users get on Ampere and later, so the
    # half-precision ratios are given against it as well as against true FP32 (19.5 vs 156 TFLOP/s on an A100)
    "tf32": Precision("float32", "float32", False, "tf32", tf32="on", baseline=True,
                      gpu_only="TF32 is a tensor-core arithmetic of NVIDIA GPUs (Ampere and later): a CPU has none"),
    "bfloat16": Precision("bfloat16", "bfloat16", False, "pure bf16"),      # the anchor's LLMs: weights and compute
    "mixed_float16": Precision("float32", "float16", True, "fp16"),
    "mixed_bfloat16": Precision("float32", "bfloat16", False, "bf16"),
}


def dtypes(name: str) -> Dtypes:
    """What a cell's spec carries of its precision: weights, compute, loss_scaling."""
    entry = PRECISIONS[name]
    return Dtypes(weights=entry.weights, compute=entry.compute, loss_scaling=entry.loss_scaling)


def baselines(first: str) -> list[str]:
    """The study's denominators: the configured baseline first, then every other baseline precision."""
    return [first] + [name for name, entry in PRECISIONS.items() if entry.baseline and name != first]


def keras_policy(dtypes) -> str:
    """The Keras dtype-policy name of resolved dtypes: "float32", "bfloat16", "mixed_float16", ..."""
    return dtypes.compute if dtypes.weights == dtypes.compute else f"mixed_{dtypes.compute}"


def label(name: str) -> str:
    return PRECISIONS[name].label


def pattern() -> str:
    """A regular expression matching every precision name (the cell-path wildcard)."""
    return "|".join(PRECISIONS)
