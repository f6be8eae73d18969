"""adapters: one adapter per framework family (a new column's framework is a file here). An adapter answers one
question: how does this framework build this model and run one step of this task. It never times and never writes files (kbench.instruments.timing and kbench.run.runner do).

An adapter module provides:
  backend() -> Backend                  the framework's hooks (sync, device, memory, versions)
  prepare(spec) -> dict                 process-wide set-up for the cell (seeds, dtype policy), and the keyword
                                        arguments every builder of the adapter takes (e.g. the torch device)
  MODELS: {model: {task: builder}}      builder(spec, inputs, **prepared) -> Workload
  refuse(spec) (optional)               raises NotSupported where this device cannot run the framework at all (a GPU
                                        its wheel has no kernels for): called before anything runs on the device
build(adapter, spec) is the one dispatch; the inputs are drawn there by the model's family (kbench.models.family:
its `inputs` fact, in the Keras layout), so every column runs on the same numbers from the cell's seed; a builder
converts layouts (channels_first), never draws its own. What a model is (constructor arguments, FLOPs) is its
family's; a builder holds only how this framework builds and steps it.

The adapters: native_torch, keras2, keras3, paddle, synthetic (NumPy only: the pipeline's own tests); what they share:
_keras (both Keras adapters), _keras_sd (Keras's Stable Diffusion), _hooks (the backends' hooks), _packages (each
adapter's packages and their modules; imports nothing), _scopes (the attention cores' name scope, for the breakdown).

May import: ground, models, gpu (and its framework, inside the functions that need it).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kbench.models import family
from kbench.contract.spec import CellSpec


class NotSupported(Exception):
    """The framework cannot run this model/task; the cell is reported as 'unsupported' with this reason."""


class NoAccelerator(Exception):
    """The cell asks for a GPU and its framework has none: it would time the CPU under a GPU's name."""


@dataclass
class Workload:
    step: Callable[[], Any]            # one benchmark step (train step, forward pass, generate call, denoising step);
    #                                    a train step returns its loss as a scalar that float() reads
    params_total: int
    params_trainable: int
    examples_per_step: int             # batch size as seen by the step
    # The dtypes the step really runs in, read from the model, its autocast context or its dtype policy after the
    # steps ran (never copied from the spec): {"weights": "float32", "compute": "bfloat16"}.
    dtypes: Callable[[], dict[str, str]]
    # Generate tasks: how many new tokens a step's output holds (counted in the output, not taken from config).
    generated_tokens: Callable[[Any], int] | None = None
    # What the timer keeps of a step's output until the window closes: a copy where the framework reuses the
    # output's memory (a CUDA-graph replay overwrites the tensors the previous replay returned).
    keep: Callable[[Any], Any] = lambda output: output
    # What the cell observes of its own settings, read from the objects it built after the steps ran (whether and
    # where it compiled, metrics, LoRA dtype): compared with the settings its profile asked for.
    evidence: Callable[[], dict] = dict
    # For the equivalence check (kbench.equivalence.check): the framework model whose weights it loads, and its outputs on
    # the cell's inputs in inference mode, as {name: NumPy array} in the model's own layout.
    model: Any = None
    outputs: Callable[[], dict] | None = None
    # The attention cores named for the breakdown (kbench.adapters._scopes.mark): None where none were looked for
    attention_scopes: int | None = None


@dataclass
class Backend:
    """Framework-level hooks shared by every model of a family (kbench.adapters._hooks builds them)."""
    name: str                          # the compute backend as results name it: jax, tensorflow, torch, numpy
    sync: Callable[[Any], None]        # block until the device finished the work behind a step's output
    sync_name: str                     # what sync calls, as the cell records it (e.g. "jax.block_until_ready")
    device: Callable[[], dict]         # the device the framework really runs on: kind (gpu | cpu), name, count, ...
    set_tf32: Callable[..., dict]      # (mode, compute_dtype, task): the framework's own TF32 switches for off |
    #                                    on | library-default, given the cell's compute dtype and task; returns their
    #                                    values afterwards
    matmul: Callable[[Any, Any], Any]  # float32 a @ b on the cell's device, back as NumPy (kbench.instruments.numerics probe)
    peak_device_memory_bytes: Callable[[], int | None]
    reset_peak_device_memory: Callable[[], bool]      # False where the framework cannot reset its peak
    package_versions: Callable[[], dict[str, str]]
    memory_policy: dict = field(default_factory=dict)     # what the adapter did so frameworks share no GPU
    # What the framework's peak device memory counts (its allocator's view, and whether it was reset after build).
    memory_view: str = ""
    # The framework's own compile counters now (graphs compiled, graph breaks, CUDA-graph skips, XLA compiles): the
    # runner reads them before and after the timed window; {} where the framework exposes none.
    compile_counters: Callable[[], dict] = dict
    # What the framework itself reports of its compiles so far, in seconds, and its persistent cache's hits and misses
    # (kbench.run.runner reads it after the first step): {} where it reports none (TensorFlow, Paddle)
    compile_times: Callable[[], dict] = dict
    # activities(warm, run): warm() then run() under the framework's device profiler, warm's activities discarded;
    # run's (start_ms, end_ms) as a kbench.instruments.timing.Profiled, with why the profiler stopped early where it did
    # (kbench.instruments.timing.device_busy); None where it has none here (a CPU has no device apart from the host).
    activities: Callable[[Callable[[], None], Callable[[], None]], Any] | None = None
    # conv(x, w): a float32 convolution on the cell's device (NHWC input, HWIO kernel, stride 1, no padding), back
    # as NumPy (kbench.instruments.numerics probe); None where the backend has no such probe
    conv: Callable[[Any, Any], Any] | None = None
    # trace(warm, run, folder): warm() then run() under the framework's own profiler, host and device, run() inside
    # an annotation named kbench.breakdown.MARKER; the Chrome trace JSON it wrote under folder (kbench.breakdown
    # reads it). None where the framework has no profiler here.
    trace: Callable[[Callable[[], None], Callable[[], None], Any], Any] | None = None


def dtype_name(dtype) -> str:
    """torch.bfloat16, tf.float32, np.dtype('float16'), "float32" -> "bfloat16", "float32", "float16"."""
    return str(getattr(dtype, "name", dtype)).removeprefix("torch.")


def backward_and_step(loss, optimizer, scaler=None) -> None:
    """The backward pass and optimizer step of a fit, through the loss scaler where the precision scales (torch's
    torch.amp.GradScaler and paddle.amp.GradScaler share this API)."""
    if scaler:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()


def load(adapter_name: str):
    """Import kbench.adapters.<name> (see the module docstring for what it provides)."""
    return importlib.import_module(f"kbench.adapters.{adapter_name.replace('-', '_')}")


def supports(adapter, model: str, task: str) -> bool:
    return task in adapter.MODELS.get(model, {})


def refuse(adapter, spec: CellSpec) -> None:
    """NotSupported, before the first operation on the device, where the adapter knows this device cannot run it:
    the reason is the cell's, not the error of whatever ran first (the runner's float32 matmul probe)."""
    if hasattr(adapter, "refuse"):
        adapter.refuse(spec)


def build(adapter, spec: CellSpec) -> Workload:
    """The adapter's workload for the cell, or NotSupported naming what the adapter does run."""
    if not supports(adapter, spec.model, spec.task):
        runs = "; ".join(f"{model} {'/'.join(tasks)}" for model, tasks in adapter.MODELS.items())
        raise NotSupported(f"{adapter.__name__.rsplit('.', 1)[-1]} adapter has no {spec.model} {spec.task} "
                           f"(it runs: {runs})")
    prepared = adapter.prepare(spec)
    inputs = family.of(spec.model).draw(spec, np.random.default_rng(spec.seed))   # the same in every column
    return adapter.MODELS[spec.model][spec.task](spec, inputs, **prepared)


def mark_attention(workload: Workload, framework: str) -> int:
    """The model's attention cores in the breakdown's attention scope (kbench.adapters._scopes): how many."""
    from kbench.adapters import _scopes
    return _scopes.mark(workload.model, framework)


def channels_first(images: np.ndarray) -> np.ndarray:
    """NHWC (the drawn inputs' layout) -> NCHW (torch's and paddle's convolution layout), contiguous."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


def for_tasks(builder, *tasks: str) -> dict:
    """MODELS entry of a builder that serves several tasks (it reads spec.task)."""
    return dict.fromkeys(tasks, builder)
