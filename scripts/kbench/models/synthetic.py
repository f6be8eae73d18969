"""The harness's own workload (kbench.adapters.synthetic): one N x N NumPy matmul per step, no framework; it checks
launch, timing and failure paths, never a framework."""
from __future__ import annotations

from kbench.models import family
from kbench.models.tally import Tally, linear


def numpy_kwargs(arch: dict) -> dict:
    return {"matrix_size": arch["matrix_size"]}


def inputs(spec, rng) -> dict:
    """The two N x N operands, standard normal in float64 (the adapter casts them to the dtype the cell asks)."""
    n = spec.arch["matrix_size"]
    return {"a": rng.standard_normal((n, n)), "b": rng.standard_normal((n, n))}


def flops(spec, t: Tally) -> None:
    """a @ b; fit's mean square of the product is elementwise (not counted)."""
    n = spec.arch["matrix_size"]
    t.add("matmul", linear(n, n, n))


FAMILY = family.register(
    name="synthetic", about="one N x N matmul per step (NumPy): the harness's check, not a model",
    tasks=("fit", "predict"), libraries={"numpy": numpy_kwargs},
    inputs={"fit": inputs, "predict": inputs}, flops={"fit": flops, "predict": flops},
    contraction_and_depth=lambda spec: (spec.arch["matrix_size"], 1),
    example={"fit": "batch element", "predict": "batch element"})
