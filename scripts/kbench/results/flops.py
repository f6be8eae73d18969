"""FLOPs of one benchmark step of a cell, from its architecture (config.yaml model_defs) alone: the one place that
knows them. Each family's formula lives in its module (kbench/models/<family>.py, its `flops` fact); this
module is the one that asks them. Pure Python (no framework import), so any adapter, table or test can use it.

    per_step(spec) -> int              FLOPs of one step of the cell (its batch, its task)
    breakdown(spec) -> {part: FLOPs}   named parts that add up to per_step(spec)

`spec` is a kbench.contract.spec.CellSpec, or a StepShape (what a step computes: model, task, batch_size, arch, inputs,
task_options, adapter).

Convention: FLOPs = 2 x multiply-accumulates (MACs) of matrix products, einsums, convolutions (transposed ones too)
and attention, whose two products QK^T (scores) and AV (values) are counted explicitly over every (query, key) pair
the kernel computes: a causal or sliding-window mask does not halve them, as torch's scaled_dot_product_attention
computes the masked scores too. This is the convention of torch.utils.flop_counter.FlopCounterMode and of MFU
papers (model FLOPs: Kaplan et al. 2020 section 2.1, PaLM, Chowdhery et al. 2022 appendix B). Not counted:
elementwise ops, embedding lookups, norms, softmax, activations, pooling, losses, optimizer updates, the DDIM
scheduler step, and bias additions.

What a step is: the native-torch adapter's (scripts/kbench/adapters/native_torch.py), checked against
FlopCounterMode on every tiny model/task (tests/test_flops.py, exact). The Keras columns run the same architectures
and mostly the same products (keras-cv's SD predict calls the UNet twice on the batch: the same FLOPs), with two
known differences a FLOP rate for them must allow for: keras-hub's LoRA factors are per head (docs/choices.md, "Choices and
limits"), and keras-hub's generate prefills the whole prompt_length + new_tokens buffer and decodes against that
fixed-length cache.

- predict: one forward pass of what the step runs.
- fit: forward + backward as autograd runs it. The backward of a matrix product costs one product of the same size
  per operand that needs a gradient: 2x its forward for a trained linear/conv whose input needs a gradient (grad
  wrt input and wrt weight), 1x for a frozen layer above the lowest trained one (input gradient only) and for the
  lowest trained layer itself (weight gradient only: the data needs none), 0 below it. Attention backward: 2x its
  forward (dQ, dK from dScores; dV, dScores from dOut). Fused attention kernels (flash / memory-efficient SDPA)
  recompute QK^T in their backward (+0.5x the attention forward): that is rematerialisation, which model FLOPs
  leave out (PaLM appendix B), so it is not counted (torch's FlopCounterMode counts it for the GPU kernels).
- LoRA fit (peft on q_proj, v_proj, everything else frozen): the frozen model's input gradients from the LM head
  down to the first layer's LoRA factors, plus the LoRA factors' own products (forward, input and weight grads).
- generate: one greedy HF generate() call with P = prompt_length prompt tokens and exactly N = new_tokens new
  ones, with a KV cache (DynamicCache). Counted: a prefill forward over the P prompt tokens (attention P x P),
  whose LM head runs on the last position only (generate passes logits_to_keep=1) and yields the first new token;
  then N - 1 decode forwards of one token each, the j-th (j = 1 .. N-1) attending over the P + j tokens so far
  (Mistral's sliding-window cache: at most sliding_window of them), LM head on that one token. The N-th token is
  not fed back, so the last decode forward is the (N-1)-th. Prompt and new tokens are counted per sequence in the
  batch (no padding: every prompt has P tokens).
"""
from __future__ import annotations

from kbench.contract.spec import CellSpec, StepShape
from kbench.models import family
from kbench.models.tally import CONV, MATMUL, Tally, linear  # noqa: F401  (linear: the primitive tests count with)


def _tally(spec) -> Tally:
    if not known(spec.model, spec.task):
        raise ValueError(f"no FLOP formula for {spec.model} {spec.task}; the families' tasks: "
                         f"{sorted((f.name, t) for f in family.families().values() for t in f.tasks)}")
    tally = Tally(training=spec.task == "fit")
    family.of(spec.model).flops[spec.task](spec, tally)
    return tally


def breakdown(spec: CellSpec | StepShape) -> dict[str, int]:
    """FLOPs of one step of the cell by named part (forward parts, then "backward: <part>" in a fit); the values add
    up to per_step(spec)."""
    return _tally(spec).result()


def known(model: str, task: str) -> bool:
    return family.known(model, task)


def by_kind(spec: CellSpec | StepShape) -> dict[str, int]:
    """FLOPs of one step split by what runs them on a GPU: {"matmul": ..., "convolution": ...} (kbench.gpu.peaks takes
    each at the peak of its own arithmetic)."""
    tally = _tally(spec)
    totals = dict.fromkeys((MATMUL, CONV), 0)
    for part, count in tally.parts.items():
        totals[tally.kinds[part]] += count
    return totals


def per_step(spec: CellSpec | StepShape) -> int:
    """FLOPs of one benchmark step of the cell: its batch, its task (see the module docstring for the convention)."""
    return sum(breakdown(spec).values())
