"""The cell process: `python -m kbench.run.runner --out RESULT.json < payload.json`.

payload = {"spec": <resolved cell config>, "context": <launcher facts: runtime, environment record, git commit>}.
Runs in the stack's environment (venv or image). Writes exactly one result JSON, whatever happens inside the framework.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kbench.contract.spec import CellSpec, JobSpec, spec_of
from kbench.contract import cell
from kbench.instruments import compile_cache, numerics, timing
from kbench.breakdown import measure
from kbench.gpu import cuda, nvml
from kbench.stacks import lockcheck


class LoRANotApplied(Exception):
    """A LoRA fit whose model has no trainable parameters (or only trainable ones): it would time a step that
    trains nothing (Keras 2's enable_lora does this silently) or a full fine-tune."""


class NothingToTrain(Exception):
    """A fit whose model has no trainable parameters."""


class LockUnchecked(Exception):
    """A cell whose environment names no lock to check its packages against (KBENCH_LOCK unset: an image built
    without it, a venv record without its lock): its number could come from any versions."""


class PrecisionMismatch(Exception):
    """A cell whose steps ran in other dtypes than its precision names (an autocast that did nothing, a dtype
    policy that was dropped, a framework that falls back to float32 where it has no half-precision kernels): its time
    would stand under the wrong precision's label."""


class DeviceMismatch(Exception):
    """A GPU cell whose framework runs on another device than the one the launcher leased it: an exported
    CUDA_VISIBLE_DEVICES index read in another order than the lease's, a MIG-enabled GPU leased as a whole (CUDA
    then runs on one of its MIG instances). Its number, its memory and its MFU would be another device's."""


class NonFiniteLoss(Exception):
    """A fit whose loss at the first or last timed step is inf or nan (an fp16 overflow, a diverged run): its time
    is that of broken arithmetic, so the cell is failed and can never win a table."""


def check_workload(spec: CellSpec, workload) -> None:
    """Refuse to time a fit that does not train what the task says, before any step runs."""
    if spec.task != "fit":
        return
    total, trainable = workload.params_total, workload.params_trainable
    if "lora_rank" in spec.task_options and not 0 < trainable < total:
        raise LoRANotApplied(f"LoRA rank {spec.task_options['lora_rank']} left {trainable:,} of {total:,} "
                             "parameters trainable; a LoRA fit trains only its adapter factors")
    if trainable == 0:
        raise NothingToTrain(f"none of {total:,} parameters is trainable")


def timed_losses(spec: CellSpec, steps: timing.StepTimes) -> dict | None:
    """A fit step returns its loss: read it at the first and last timed step (after the timed window)."""
    if spec.task != "fit":
        return None
    return {"first_timed_step": float(steps.first_output), "last_timed_step": float(steps.last_output)}


def check_losses(losses: dict | None) -> None:
    if losses and not all(math.isfinite(value) for value in losses.values()):
        raise NonFiniteLoss("non-finite loss: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in losses.items()))


def check_dtypes(spec: CellSpec, observed: dict[str, str]) -> None:
    """The dtypes the steps ran in, as the workload observed them, must be those the precision names."""
    expected = {kind: getattr(spec.dtypes, kind) for kind in ("weights", "compute")}
    if observed != expected:
        raise PrecisionMismatch(f"precision {spec.precision} names weights {expected['weights']} and compute "
                                f"{expected['compute']}, but the steps ran in weights {observed.get('weights')} and "
                                f"compute {observed.get('compute')}")


def check_lock() -> dict:
    """KBENCH_LOCK is set by the launcher (venv, preinstalled) or the image: the lock this environment was built from.
    A cell with none to check is failed: the record must say which lock its packages are."""
    if not os.environ.get("KBENCH_LOCK"):
        raise LockUnchecked("KBENCH_LOCK is not set: no lock to check this environment's packages against (images "
                            "set it in containers/Containerfile; a venv record names its lock)")
    return lockcheck.verify(os.environ["KBENCH_LOCK"], os.environ.get("KBENCH_LOCK_MODE", "fail"))


class Window:
    """What is read just outside the timed window (kbench.instruments.timing's on_window): the framework's compile counters
    before and after it, and the GPU's energy, clocks, temperature and slowdowns during it (kbench.gpu.nvml)."""

    def __init__(self, backend):
        self.backend, self.monitor = backend, nvml.WindowMonitor()
        self.before, self.in_window = {}, {}

    def __call__(self, phase: str) -> None:
        if phase == "start":
            self.before = self.backend.compile_counters()
            self.monitor.start()
        else:
            self.monitor.stop()
            after = self.backend.compile_counters()
            self.in_window = {key: after[key] - self.before.get(key, 0) for key in after}

    def evidence(self) -> dict:
        """Compiles in the window (a recompile there timed compilation, not the compiled step) and CUDA-graph
        skips; {} where the framework exposes no counters."""
        return {"compiles": {"before_window": self.before, "in_window": self.in_window}} if self.before else {}


def step_returns(output) -> str:
    """Where a step's output is: "host" (Python or NumPy values: the step read its result back, a device sync, as
    train_on_batch does with its loss) or "device" (arrays the framework still holds)."""
    if isinstance(output, dict):
        leaves = list(output.values())
    elif isinstance(output, (list, tuple)):
        leaves = list(output)
    else:
        leaves = [output]
    host = (int, float, np.ndarray, np.generic)
    return "host" if all(isinstance(leaf, host) for leaf in leaves) else "device"


def duration(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1e3 else f"{ms / 1e3:.1f} s"


def use_compile_cache(framework_def, own_env, context: dict) -> dict | None:
    """Point the framework at the compile cache folder the launcher handed this process (context compile_cache,
    kbench.run.launch.seed_cache), before the framework is imported; what the record says of it, or None."""
    cache = context.get("compile_cache")
    if not cache:
        return None
    variables = compile_cache.env(framework_def, own_env, cache["folder"])
    os.environ.update(variables)
    return {**cache, "variables": sorted(variables)}


def compiles_with_xla(spec: CellSpec) -> bool:
    """Whether the column's steps are compiled by XLA: JAX's always (jit, and op by op where Keras runs eagerly),
    TensorFlow's under jit_compile."""
    found = compile_cache.compiler(spec.framework_def, spec.env)
    return found == "jax" or (found == "tensorflow" and bool(spec.settings.get("jit_compile")))


def xla_compile(spec: CellSpec, facts: dict) -> dict | None:
    """Where the column compiles with XLA on a GPU: the driver's CUDA version (NVML's) against that of XLA's ptxas
    (kbench.gpu.cuda.ptxas_cuda), and whether XLA compiles serially (a driver older than its ptxas:
    kbench.gpu.cuda.xla_serial_compile; None where either is unknown), which slows a cold first step by the host's
    driver alone. None for any other cell."""
    if facts.get("kind") != "gpu" or not compiles_with_xla(spec):
        return None
    driver = (facts.get("nvml") or {}).get("cuda_driver_version")
    ptxas, ptxas_from = cuda.ptxas_cuda() or (None, None)
    return {"driver_cuda": driver, "ptxas_cuda": ptxas, "ptxas_from": ptxas_from,
            "serial_compile": cuda.xla_serial_compile(driver, ptxas) if driver and ptxas else None}


class FirstStep:
    """Time to the first useful step, in its parts: the framework's import (with its device found), its libraries'
    start-up (probe_s: the numerics probe's float32 matmul and convolution, the first the framework runs on its
    device: cuBLAS's and cuDNN's handles, JAX's first XLA compile; set_and_probe_numerics), the model's build, the
    first step (its warm-up step 1) with what the framework itself reports of it (kbench.adapters.Backend
    compile_times), the programs compiled by its end and those compiled after it (recompiles: the rest of the warm-up
    and the window), graph breaks, the persistent compile cache it started from (cold or warm) with its hits, and
    where the column compiles with XLA on a GPU, its ptxas's CUDA against the driver's (xla_compile)."""

    def __init__(self, backend, cache: dict | None, import_s: float):
        self.backend, self.cache, self.import_s, self.probe_s, self.build_s = backend, cache, import_s, None, None
        self.first_counters, self.first_times, self.last_counters, self.built_times = {}, {}, {}, {}
        self.xla = None         # where the column compiles with XLA on a GPU: its ptxas against the driver (xla_compile)

    def before_steps(self) -> None:
        """After the build: what the framework had compiled by then (Keras traces some functions as it builds)."""
        self.built_times = self.backend.compile_times()

    def after_step(self, done: int) -> None:
        if done == 1:
            self.first_counters, self.first_times = self.backend.compile_counters(), self.backend.compile_times()

    def first_step_parts(self) -> dict | None:
        """The framework's own times within the first step (since the build; counts of hits and misses: by its end)."""
        if not self.first_times:
            return None
        return {key: value - self.built_times.get(key, 0.0) if key.endswith("_s") else value
                for key, value in self.first_times.items()}

    def after_window(self) -> None:
        self.last_counters = self.backend.compile_counters()

    def record(self) -> dict:
        programs = lambda counters: sum(counters.get(k, 0) for k in cell.PROGRAMS) if counters else None  # noqa: E731
        first, last = programs(self.first_counters), programs(self.last_counters)
        cache = None
        if self.cache:
            cache = {**self.cache, "entries_after": compile_cache.entries(self.cache["folder"]),
                     **{k: self.first_times.get(k) for k in ("cache_hits", "cache_misses")}}
        return {"import_s": self.import_s, "probe_s": self.probe_s, "build_s": self.build_s,
                "parts": self.first_step_parts(),   # what the framework reports of it (None: nothing)
                "programs": first, "recompiles": None if first is None or last is None else last - first,
                "graph_breaks": (self.last_counters.get("graph_breaks", 0) + self.last_counters.get("unsupported", 0))
                if "graph_breaks" in self.last_counters else None,
                "cache": cache, "xla_compile": self.xla}


class Progress:
    """What the cell is doing, a line each on stderr (the cell's log under results/logs/cells/): a cell that takes
    minutes is seen to move, and its launcher's heartbeat (kbench.heartbeat) puts the last line on the terminal every
    25 s. A line per warm-up step, one as the window opens (how long it should take) and one as it closes, one before
    the profiled steps after it. Nothing is written inside the timed window: every moment of it is measured."""

    def __init__(self, spec: CellSpec):
        self.spec, self.start, self.last_warmup_ms = spec, time.monotonic(), None

    def __call__(self, message: str) -> None:
        print(f"[kbench {time.monotonic() - self.start:7.1f} s] {message}", file=sys.stderr, flush=True)

    def warmup_step(self, done: int, ms: float) -> None:
        self.last_warmup_ms = ms
        self(f"warm-up step {done}/{self.spec.steps.warmup}: {duration(ms)}")

    def window(self, phase: str) -> None:
        if phase != "start":
            return
        steps = self.spec.steps
        pace = (f", about {duration(self.last_warmup_ms * steps.timed)} at the last warm-up step's pace"
                if self.last_warmup_ms is not None else "")
        self(f"timed window: {steps.timed} steps in {len(timing.block_sizes(steps.timed, steps.blocks))} "
             f"synced blocks{pace}; the next line when it closes")

    def after_window(self, backend) -> None:
        """What runs after the window, where a profiled step of a large model can take minutes: one line before it."""
        steps = self.spec.steps
        parts = ([f"the device-busy share ({min(BUSY_STEPS, steps.timed)} steps under the device profiler)"]
                 if backend.activities is not None else []) \
            + ([f"the breakdown by kind ({steps.breakdown} profiled steps, then their trace read)"]
               if steps.breakdown and backend.trace is not None else [])
        if parts:
            self("after the window: " + ", then ".join(parts))


class CountedSync:
    """The backend's sync as the timer calls it, counted: the record shows the calls reached the timer."""

    def __init__(self, sync):
        self.sync, self.calls = sync, 0

    def __call__(self, output) -> None:
        self.calls += 1
        self.sync(output)


class Measured(NamedTuple):
    """What the steps gave: the timer's record, the counted sync, the window's monitor, after it the device-busy share
    and the breakdown by kind."""
    steps: timing.StepTimes
    sync: CountedSync
    window: Window
    busy: dict | None
    split: dict | None


class CellRun:
    """One cell, phase by phase: open (the packages against the lock, the framework imported, the device checked,
    the numerics set and probed), build (the model), measure (warm-up, the timed window and its checks, then what
    runs after it). Each phase keeps what it finds here as it goes, so a cell that fails in one still records what
    the phases before found: its device, its model's counts, its losses, its numerics."""

    def __init__(self, spec: CellSpec, context: dict, out: Path | None, adapters, cache: dict | None):
        self.spec, self.context, self.out, self.adapters, self.cache = spec, context, out, adapters, cache
        self.provenance = {**context, "started_utc": cell.utc_now(), "python": sys.version.split()[0],
                           "platform": platform.platform(), "hostname": socket.gethostname(),
                           "environment_variables": measurement_environment()}
        self.backend = self.workload = self.losses = self.numerics = self.first = None
        self.memory = {}
        self.progress = Progress(spec)

    def open(self):
        """The adapter, after the lock check, with its backend on the device the cell asked for (and leased) and its
        numerics set and checked by the float32 probe."""
        spec, provenance, adapters = self.spec, self.provenance, self.adapters
        provenance["lock_check"] = check_lock()
        clock = time.perf_counter()
        adapter = adapters.load(spec.adapter)
        self.backend = backend = adapter.backend()
        self.first = FirstStep(backend, self.cache, import_s=time.perf_counter() - clock)
        provenance["device_facts"] = {**backend.device(), "nvml": nvml.facts()}
        self.first.xla = xla_compile(spec, provenance["device_facts"])
        check_device(spec, backend)
        identity = check_device_identity(spec, backend.name, provenance["device_facts"], self.context)
        if identity is not None:            # a GPU cell's: the device it ran on is the one it leased
            provenance["device_identity"] = identity
        adapters.refuse(adapter, spec)
        clock = time.perf_counter()
        self.numerics = set_and_probe_numerics(spec, backend)
        self.first.probe_s = time.perf_counter() - clock
        numerics.check(self.numerics["probe"], spec.settings["tf32"], spec.dtypes.compute, backend.device()["kind"])
        return adapter

    def build(self, adapter) -> None:
        spec, backend, device = self.spec, self.backend, self.provenance["device_facts"]
        self.progress(f"{backend.name} on {device['kind']} ({device['name']}); building the model")
        clock = time.perf_counter()
        self.workload = workload = self.adapters.build(adapter, spec)
        if spec.steps.breakdown:     # names its attention cores before the first trace (kbench.adapters._scopes)
            workload.attention_scopes = self.adapters.mark_attention(workload, backend.name)
        self.first.build_s = time.perf_counter() - clock
        check_workload(spec, workload)
        self.progress(f"model built: {workload.params_total:,} parameters ({workload.params_trainable:,} trainable); "
                      f"{spec.steps.warmup} warm-up steps (a compiling column compiles in the first)")

    def measure(self) -> Measured:
        spec, backend, workload, first, progress = self.spec, self.backend, self.workload, self.first, self.progress
        self.memory.update(peak_device_reset_after_build=backend.reset_peak_device_memory(),
                           nvml_used_bytes_before_steps=nvml.used_bytes())
        sync, window = CountedSync(backend.sync), Window(backend)
        first.before_steps()

        def on_window(phase):
            progress.window(phase)
            window(phase)

        def on_warmup_step(done, ms):
            progress.warmup_step(done, ms)
            first.after_step(done)
        steps = timing.measure(workload.step, sync, spec.steps.warmup, spec.steps.timed,
                               keep=workload.keep, blocks=spec.steps.blocks, on_window=on_window,
                               on_warmup_step=on_warmup_step)
        first.after_window()
        progress(f"timed window closed after {duration(steps.window_ms)}: {steps.summary()['mean_ms']:.2f} ms/step")
        # the host's peak before the device profiler runs: it imports its own modules (on torch, dynamo's and
        # Inductor's too) and parses its events, which an eager cell's steps never needed
        self.memory.update(nvml_used_bytes_after_steps=nvml.used_bytes(), nvml_processes_after_steps=nvml.processes(),
                           peak_host_rss_bytes=peak_rss_bytes(), peak_host_rss_read="after the timed window, before "
                                                                                    "the device profiler")
        self.losses = timed_losses(spec, steps)
        check_losses(self.losses)
        check_dtypes(spec, workload.dtypes())
        progress.after_window(backend)
        # after the window, with the backend's own sync: the counted one is the timer's record of its calls
        step_ms = steps.window_ms / len(steps.step_ms)
        return Measured(steps, sync, window, device_busy(spec, backend, workload, backend.sync, step_ms),
                        step_breakdown(spec, backend, workload, backend.sync, step_ms, self.out))

    def ok(self, measured: Measured) -> cell.CellResult:
        steps, workload = measured.steps, self.workload
        result = cell.new_result(self.spec, self.provenance, "ok")
        result.timing = {**timed_result(steps, workload), "device_busy": measured.busy}
        result.breakdown = measured.split
        result.first_step = self.first.record()
        # what the cell did of its settings (compared with them by the departure tests): the TF32 mode it applied,
        # the warm-up steps it ran, and what the adapter observed of its objects
        result.evidence = {"tf32": self.numerics["tf32"], "warmup": len(steps.warmup_ms),
                           "sync_blocks": len(steps.block_ms), "sync_calls": measured.sync.calls,
                           "step_returns": step_returns(steps.last_output), **measured.window.evidence(),
                           **workload.evidence()}
        result.energy = measured.window.monitor.record
        return result

    def failed(self, exc: Exception) -> cell.CellResult:
        """A benchmark cell reports its failure instead of taking the run down (NotSupported: unsupported)."""
        if isinstance(exc, self.adapters.NotSupported):
            return cell.new_result(self.spec, self.provenance, "unsupported",
                                   cell.error_info("NotSupported", str(exc)))
        return cell.new_result(self.spec, self.provenance, "oom" if out_of_memory(exc) else "failed",
                               cell.error_info(type(exc).__name__, str(exc)[:2000], traceback.format_exc()[-8000:]))

    def record(self, result: cell.CellResult) -> cell.CellResult:
        """What every cell's record carries, whatever its status: what the phases found before it ended."""
        backend, workload, provenance = self.backend, self.workload, self.provenance
        self.progress(result.status + (f": {result.error['type']}: {result.error['message'][:300]}"
                                       if result.error else ""))
        result.numerics = self.numerics
        if workload:      # also for a failed cell whose model was built: parity checks and LoRA failures need counts
            result.params = {"total": workload.params_total, "trainable": workload.params_trainable}
            result.numerics = {**(self.numerics or {}),
                               **{f"{kind}_dtype": name for kind, name in workload.dtypes().items()}}
        result.loss = self.losses     # kept for a NonFiniteLoss cell too: it shows what went wrong
        result.memory = {"peak_host_rss_bytes": peak_rss_bytes(), "peak_host_rss_read": "at the cell's end",
                         "peak_device_bytes": backend.peak_device_memory_bytes() if backend else None,
                         **self.memory}        # an ok cell's host peak: read before the device profiler (measure)
        if backend:
            result.provenance.update(backend=backend.name, device=(provenance.get("device_facts") or {}).get("name"),
                                     sync=backend.sync_name, memory_policy=backend.memory_policy,
                                     memory_view=backend.memory_view, packages=backend.package_versions())
        # what this process ran of the repository (rule cell's inputs must hold every one: kbench.plan.sources)
        # (this module runs as __main__ under `python -m`: its spec keeps its name)
        result.provenance["kbench_modules"] = sorted({m for m in sys.modules if m.split(".")[0] == "kbench"}
                                                     | {__spec__.name if __spec__ else __name__})
        result.provenance["finished_utc"] = cell.utc_now()
        result.repeat = int(self.context.get("repeat", 1))
        return result


def run(spec, context: dict, out: Path | None = None) -> cell.CellResult:
    """One cell: spec is a CellSpec (or its JSON form, the payload's); out: where its record goes (its breakdown's
    trace is kept beside it). Its phases: CellRun's."""
    spec = CellSpec.of(spec)
    # Backend selection (KERAS_BACKEND, ...) and numerics (NVIDIA_TF32_OVERRIDE) must be in place before the
    # framework is first imported.
    os.environ.update(spec.env)
    cache = use_compile_cache(spec.framework_def, spec.env, context)
    from kbench import adapters

    cell_run = CellRun(spec, context, out, adapters, cache)
    cell_run.progress(f"{spec.cell_id}: {spec.framework} in {context.get('runtime', '?')}; checking the packages "
                      "against the lock")
    try:
        cell_run.build(cell_run.open())
        measured = cell_run.measure()
    except Exception as exc:
        result = cell_run.failed(exc)
    else:
        result = cell_run.ok(measured)
    return cell_run.record(result)


# How each framework says a batch did not fit: torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), TF's and
# Paddle's ResourceExhaustedError, XLA's RESOURCE_EXHAUSTED status (jaxlib's XlaRuntimeError), the host's MemoryError.
OOM_TYPES = ("OutOfMemoryError", "ResourceExhaustedError", "MemoryError")
# cuBLAS and cuDNN say it with their own status when a workspace does not fit (torch raises it as a RuntimeError)
OOM_TEXT = ("RESOURCE_EXHAUSTED", "CUDA out of memory", "out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
            "CUDNN_STATUS_ALLOC_FAILED")


def out_of_memory(exc: BaseException) -> bool:
    """The exception, or one it was raised from (Keras re-raises the backend's), says the batch did not fit."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in OOM_TYPES or any(text in str(exc) for text in OOM_TEXT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# Variables that can change what a cell measures (threads, allocators, XLA and TF flags, devices, TF32, NCCL): the
# cell records every one it saw, whoever set it.
MEASUREMENT_ENV = ("CUDA_", "NVIDIA_", "XLA_", "TF_", "JAX_", "KERAS_", "OMP_", "MKL_", "OPENBLAS_", "TORCH",
                   "PYTORCH_", "NCCL_", "TRITON_", "CUBLAS", "CUDNN", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHASHSEED",
                   "SLURM_JOB_ID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def measurement_environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(MEASUREMENT_ENV)}


def check_device(spec: CellSpec | JobSpec | dict, backend) -> None:
    """A GPU cell must run on a GPU, decided before the model is built: a framework that fell back to the CPU (no
    driver, a CUDA too new for it, a runtime that did not pass the GPU) would otherwise time the CPU. So must a job
    that claims one (spec: a job's, typed or as its JSON: the equivalence check, JAX against NumPy), whose numbers
    would otherwise be the CPU's under a GPU's name too."""
    spec = spec_of(spec)
    device = backend.device()
    if spec.on_gpu and device["kind"] != "gpu":
        from kbench.adapters import NoAccelerator
        asker = "job" if isinstance(spec, JobSpec) else "cell"
        raise NoAccelerator(f"the {asker} asks for a GPU ({spec.accelerator}), but {backend.name} runs on "
                            f"{device['kind']} ({device['name']}); see docs/gpu-hosts.md")


def uuid_key(name) -> str | None:
    """A device UUID as every view of it can be compared: NVML's "GPU-8f4c..." or "MIG-8f4c...", torch's bare
    "8f4c..." -> "8f4c..." (lower case); None for an index (podman's CDI names, a SLURM job's numbers) or nothing."""
    text = str(name or "").strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text if re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", text) else None


def is_mig(name) -> bool:
    return str(name or "").strip().upper().startswith("MIG-")


def check_device_identity(spec: CellSpec, framework: str, facts: dict, context: dict) -> dict | None:
    """The device the framework runs on must be the one the launcher leased: its UUID as the framework reports it
    (torch: the device's properties), else as NVML names the device the cell's CUDA_VISIBLE_DEVICES points to (in PCI
    order, CUDA's too with CUDA_DEVICE_ORDER=PCI_BUS_ID; JAX, TensorFlow, Paddle), against the leased GPU's UUID as
    the launcher knew it (context.launcher.gpu_uuids, however the runtime named the GPU: podman by index), else the
    lease's own name where that is a UUID. Never against the cell's own view of itself: a lease by index whose UUID
    the launcher did not know is not checked, and says so. DeviceMismatch names both. A leased GPU in MIG mode is a
    mismatch too (CUDA runs on one of its MIG instances, not on the whole GPU); a MIG instance leased by its own UUID
    passes and is named MIG (mig: no peak, so no MFU: kbench.gpu.peaks has whole chips only). In a container handed a
    MIG instance (no CUDA_VISIBLE_DEVICES) NVML names the MIG device it shows under the visible GPU (kbench.gpu.nvml);
    where it shows several, CUDA runs on one of them, and a lease among them is not checked (and says so), one outside
    them is a mismatch. None for a CPU cell; checked False, with why, where nothing to compare with is known."""
    if not spec.on_gpu or facts.get("kind") != "gpu":
        return None
    nvml_facts = facts.get("nvml") or {}
    launcher = context.get("launcher") or {}
    leased = list(launcher.get("gpus_allocated") or [])
    own_reported = bool(uuid_key(facts.get("uuid")))
    seen = [] if own_reported else list(nvml_facts.get("mig_instances_seen") or [])
    own, own_from = ((facts.get("uuid"), f"{framework}'s own device properties") if own_reported
                     else (nvml_facts.get("uuid"), "NVML, the MIG device under the visible GPU") if seen
                     else (nvml_facts.get("uuid"), "NVML, by the visible device in PCI order"))
    known = [u for u in launcher.get("gpu_uuids") or [] if uuid_key(u)]
    leased_uuid = known[0] if known else leased[0] if leased and uuid_key(leased[0]) else None
    expected, expected_from = leased_uuid, "the launcher leased"
    mig = (any(is_mig(name) for name in (own, *leased)) or nvml_facts.get("mig_mode") is True
           or "MIG" in str(facts.get("name") or "").split())
    record = {"leased": leased, "uuid": own, "uuid_from": own_from, "expected": expected, "mig": mig,
              "checked": bool(uuid_key(own) and uuid_key(expected))}
    if nvml_facts.get("mig_mode") is True and leased_uuid and not is_mig(leased_uuid):
        raise DeviceMismatch(f"the launcher leased {leased_uuid}, a GPU in MIG mode: CUDA runs on one of its MIG "
                             f"instances ({framework} reports {own}), not on the whole GPU; run on a GPU without MIG "
                             "(nvidia-smi -i <index> -mig 0, by an admin), or lease a MIG instance: its MIG- UUID "
                             "(nvidia-smi -L) in CUDA_VISIBLE_DEVICES")
    if len(seen) > 1 and leased_uuid:       # CUDA runs on one of the instances NVML shows: which, nothing says
        if uuid_key(leased_uuid) not in {uuid_key(u) for u in seen}:
            raise DeviceMismatch(f"{framework} runs on one of the MIG instances NVML shows ({', '.join(seen)}), but "
                                 f"{expected_from} {leased_uuid}: the cell would time another device than its lease")
        record.update(checked=False, reason=f"NVML shows {len(seen)} MIG instances, the leased {leased_uuid} among "
                                            f"them, and {framework} reports no UUID of the one CUDA runs on")
        return record
    if not record["checked"]:
        record["reason"] = ("no lease to compare with (a cell run outside the launcher)" if not leased
                            else f"the lease names GPU {leased[0]} and the launcher knew no UUID for it"
                            if not leased_uuid else "no device UUID from the framework or NVML")
        return record
    if uuid_key(own) != uuid_key(expected):
        raise DeviceMismatch(f"{framework} runs on {own} ({facts.get('name')}; from {own_from}), but {expected_from} "
                             f"{expected}: the cell would time another device than its lease")
    return record


def set_and_probe_numerics(spec: CellSpec, backend) -> dict:
    """The framework's own float32 switches as the spec's tf32 setting says (given its compute dtype and task), then
    the probes of what a float32 matmul and, where the backend has one, a float32 convolution really get on this
    device (numerics.check fails a float32 cell meant to be float32 that is not). The first matmul and convolution
    the framework runs on the device: their libraries start here, and the runner times it as the first step's
    probe_s (FirstStep)."""
    switches = backend.set_tf32(spec.settings["tf32"], spec.dtypes.compute, spec.task)
    return {"tf32": spec.settings["tf32"], "precision_switches": switches,
            "probe": numerics.probe(backend.matmul, getattr(backend, "conv", None))}


BUSY_STEPS = 10


def device_busy(spec: CellSpec, backend, workload, sync, window_ms_per_step: float) -> dict:
    """The device-busy share (kbench.instruments.timing.device_busy): the device-busy time per step of a few steps profiled after
    the window (one warm profiled step first, discarded) over the window's own, unprofiled ms/step: a direct measure
    of the host's part of a step beside the batch study's fixed cost. Never fails the cell: its time is already
    measured."""
    kind = backend.device()["kind"]
    if backend.activities is None:
        return {"share": None, "reason": f"{backend.name} on {kind}: no device profiler here"
                + (" (a CPU step is host work throughout)" if kind == "cpu" else "")}
    try:
        return timing.device_busy(workload.step, sync, min(BUSY_STEPS, spec.steps.timed), backend.activities,
                                  window_ms_per_step)
    except Exception as exc:     # the profiler, not the step: the window's figures stand
        return {"share": None, "reason": f"the device profiler failed: {type(exc).__name__}: {str(exc)[:300]}"}


def step_breakdown(spec: CellSpec, backend, workload, sync, window_ms_per_step: float, out: Path | None) -> dict | None:
    """The profiled steps after the window broken down by kind of work (kbench.breakdown.measure), where the cell's
    spec asks for them (steps.breakdown); None where it does not."""
    if not spec.steps.breakdown:
        return None
    if backend.trace is None:
        return {"steps": spec.steps.breakdown, "closes": False, "why": f"{backend.name}: no profiler hook here"}
    found = measure.measure(workload.step, sync, spec.steps.breakdown, backend.trace, backend.device()["kind"],
                            window_ms_per_step, out.parent if out else None)
    return {**found, "attention_scopes": workload.attention_scopes}


def timed_result(steps: timing.StepTimes, workload) -> dict:
    stats = steps.summary()
    per_second = 1e3 / stats["mean_ms"]
    return {
        **stats,
        "first_step_ms": steps.warmup_ms[0] if steps.warmup_ms else None,
        "warmup_ms": steps.warmup_ms,
        "step_ms": steps.step_ms,
        "window_ms": steps.window_ms,
        "block_ms": steps.block_ms,
        "block_steps": steps.block_steps,
        "examples_per_s": workload.examples_per_step * per_second,
        **generated(steps, workload, per_second),
    }


def generated(steps: timing.StepTimes, workload, per_second: float) -> dict:
    """Generate cells: the new tokens the last timed step's output holds, and tokens/s from that count."""
    if workload.generated_tokens is None:
        return {"generated_tokens_per_step": None, "tokens_per_s": None}
    tokens = workload.generated_tokens(steps.last_output)
    return {"generated_tokens_per_step": tokens, "tokens_per_s": tokens * per_second}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux reports KiB


def job_run(job: dict, context: dict, body) -> cell.CellResult:
    """A job that is not a cell (the equivalence check, JAX against NumPy): its environment checked against its lock,
    then body(provenance), which fills in what it found; the record is ok, or failed with the exception that stopped
    body (the job reports its failure instead of taking the run down)."""
    os.environ.update(job["env"])
    cache = use_compile_cache(job["framework_def"], job["env"], context)
    provenance = {**context, "started_utc": cell.utc_now(), "environment_variables": measurement_environment()}
    try:
        provenance["lock_check"] = check_lock()
        body(provenance)
    except Exception as exc:
        result = cell.new_result(job, provenance, "failed",
                                 cell.error_info(type(exc).__name__, str(exc)[:2000], traceback.format_exc()[-8000:]))
    else:
        result = cell.new_result(job, provenance, "ok")
    if cache:
        result.provenance["compile_cache"] = {**cache, "entries_after": compile_cache.entries(cache["folder"])}
    result.provenance["finished_utc"] = cell.utc_now()
    return result


def job_main(job, doc: str, argv=None, with_out: bool = False) -> int:
    """A job process's entry (python -m <module> --out R < payload, as kbench.run.launch starts it): job(spec, context)
    -> its CellResult, written to R (with_out: job(spec, context, R), for a job that writes files beside R)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True, help="result JSON path")
    args = parser.parse_args(argv)
    payload = json.load(sys.stdin)
    out = Path(args.out)
    (job(payload["spec"], payload["context"], out) if with_out else job(payload["spec"], payload["context"])).write(out)
    return 0


def main(argv=None) -> int:
    return job_main(run, __doc__, argv, with_out=True)


if __name__ == "__main__":
    sys.exit(main())
