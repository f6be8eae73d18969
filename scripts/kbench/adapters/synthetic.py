"""A framework-free workload (a NumPy matmul) for checking the harness itself: launch, timing, failure paths.

spec.arch: {"matrix_size": N}; spec.task_options:
  fault: None | "raise" | "exit" | "killed" (SIGKILL, as the OOM killer sends it) | "oom" (allocates until a memory
         limit stops it; gives up at 16 GiB) | "device-oom" (raises OutOfMemoryError, as torch does when a batch does
         not fit on the GPU) | "segv" (a native crash) | "hang" | "hang-child" (hangs after starting a
         child process that ignores SIGTERM and would outlive it) (all while building) | "step" (every step raises) | "overflow" (a fit
         whose float16 loss overflows to inf, as an fp16 run without loss scaling can); or the environment variable
         KBENCH_SYNTHETIC_FAULT (a framework's env: one column per fault)
  KBENCH_SYNTHETIC_FAIL_ONCE=<folder>: the cell raises unless <folder> holds a marker of its earlier attempt (a
         transient failure: the retry succeeds)
  build_s: seconds the build takes (or KBENCH_SYNTHETIC_BUILD_S): a cell that is surely running when a test
         interrupts the run
  trainable: how many of the 2*N*N parameters to report trainable (default all)
  dtype: the dtype its matrices and products are in, whatever the spec's precision says (default: the precision's
         compute dtype): a workload that ran in another dtype than it was asked for
  reuse_output: a fit whose steps return one buffer, overwritten by each step with a falling loss (as CUDA-graph
         replays reuse their output memory); the workload keeps a copy of the first
  compile_ms: a compiled cell's (settings jit_compile) first step also "compiles" for this long, unless the
         persistent cache (KBENCH_SYNTHETIC_CACHE_DIR, kbench.instruments.compile_cache) holds its program, which it then loads
         in a tenth of that; or KBENCH_SYNTHETIC_COMPILE_MS
  device_ms: each step also queues this many milliseconds of work on a simulated asynchronous device (a worker
         thread) and returns at once, as a GPU step does; only the backend's sync waits for that work. A harness that
         timed without the backend's sync would report the dispatch time, not the work. Or KBENCH_SYNTHETIC_DEVICE_MS:
         what an installed package can set at interpreter start (a .pth file), a version bump that slows every step
         (tests/test_bisect.py plants one)
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from kbench.contract.spec import CellSpec
from kbench.instruments import numerics
from kbench.adapters import Backend, Workload, dtype_name, for_tasks


class AsyncDevice:
    """A device queue: submit() returns at once, sync() blocks until every submitted job has run."""

    def __init__(self):
        self.jobs: queue.Queue[float] = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self):
        while True:
            seconds = self.jobs.get()
            time.sleep(seconds)
            self.jobs.task_done()

    def submit(self, seconds: float) -> None:
        self.jobs.put(seconds)

    def sync(self, _output=None) -> None:
        self.jobs.join()


DEVICE = AsyncDevice()


class Recorder:
    """The synthetic stack's profiler: while on, each op of a step is one complete event (name, start, end in
    microseconds, thread), written out as a Chrome trace like a framework's (kbench.breakdown reads it)."""

    def __init__(self):
        self.events: list[dict] | None = None

    def op(self, name: str, run):
        if self.events is None:
            return run()
        start = time.perf_counter()
        out = run()
        self.add(name, start, time.perf_counter(), "cpu_op")
        return out

    def add(self, name: str, start: float, end: float, category: str) -> None:
        self.events.append({"ph": "X", "name": name, "cat": category, "pid": os.getpid(),
                            "tid": threading.get_ident(), "ts": start * 1e6, "dur": (end - start) * 1e6})

    @contextlib.contextmanager
    def annotation(self, name: str):
        start = time.perf_counter()
        yield
        self.add(name, start, time.perf_counter(), "user_annotation")

    def trace(self, warm, run, folder):
        from kbench.breakdown.trace import MARKER, STEP_MARKER
        warm()
        self.events = []
        try:
            start = time.perf_counter()
            run(lambda: self.annotation(STEP_MARKER))
            self.add(MARKER, start, time.perf_counter(), "user_annotation")
            path = Path(folder) / "trace.json"
            path.write_text(json.dumps({"traceEvents": self.events}))
            return path
        finally:
            self.events = None


RECORDER = Recorder()


class Compiler:
    """A compiled cell's first call of each program: compile_ms of work, or a tenth of it where the persistent cache
    folder holds the program (a file per program), counted as a framework's cache counts its hits and misses."""

    def __init__(self):
        self.compiles, self.hits, self.misses, self.seconds = 0, 0, 0, 0.0
        self.done: set[str] = set()

    def first_call(self, program: str, compile_ms: float) -> None:
        if program in self.done or not compile_ms:
            return
        self.done.add(program)
        folder = os.environ.get("KBENCH_SYNTHETIC_CACHE_DIR")
        entry = Path(folder) / f"{program}.compiled" if folder else None
        hit = entry is not None and entry.exists()
        seconds = compile_ms / 1e3 / (10 if hit else 1)
        time.sleep(seconds)
        self.compiles, self.seconds = self.compiles + 1, self.seconds + seconds
        if entry is not None:
            self.hits, self.misses = self.hits + hit, self.misses + (not hit)
            entry.write_text(program)

    def counters(self) -> dict:
        return {"graphs": self.compiles}

    def times(self) -> dict:
        return {"reported_by": "synthetic", "compile_s": self.seconds, "cache_hits": self.hits,
                "cache_misses": self.misses}


COMPILER = Compiler()


def device() -> dict:
    """The CPU; with KBENCH_SYNTHETIC_GPU=1, a stand-in GPU named after the one device the launcher handed the cell
    (CUDA_VISIBLE_DEVICES), whose UUID is that name: the harness's GPU paths (the device identity check's too) run
    without a GPU."""
    if os.environ.get("KBENCH_SYNTHETIC_GPU") == "1":
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        return {"kind": "gpu", "name": f"synthetic GPU {','.join(visible)}", "count": len(visible),
                "uuid": visible[0] if visible else None, "platform_version": None}
    return {"kind": "cpu", "name": "cpu", "count": 1, "platform_version": None}


def backend() -> Backend:
    """A CPU backend. KBENCH_SYNTHETIC_MATMUL=tf32 makes its float32 matmul round its inputs to TF32's 10-bit
    mantissa, as a GPU with TF32 left on would (the numerics probe must see it); KBENCH_SYNTHETIC_CONV=tf32 does the
    same to its convolution alone (a framework whose TF32 switch reaches its matmuls but not its convolutions)."""
    def matmul(a, b):
        if os.environ.get("KBENCH_SYNTHETIC_MATMUL") == "tf32":
            a, b = numerics.round_mantissa(a, 10), numerics.round_mantissa(b, 10)
        return a @ b

    def conv(x, w):
        if os.environ.get("KBENCH_SYNTHETIC_CONV") == "tf32":
            x, w = numerics.round_mantissa(x, 10), numerics.round_mantissa(w, 10)
        return numerics.conv_reference(x, w).astype(np.float32)
    return Backend(name="numpy", sync=DEVICE.sync, sync_name="synthetic device queue join",
                   device=device, conv=conv,
                   set_tf32=lambda mode, compute_dtype="float32", task=None: {}, matmul=matmul,
                   peak_device_memory_bytes=lambda: None,
                   reset_peak_device_memory=lambda: False, package_versions=lambda: {"numpy": np.__version__},
                   trace=RECORDER.trace, compile_counters=COMPILER.counters, compile_times=COMPILER.times)


def prepare(spec: CellSpec) -> dict:
    return {}


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError's name and words, without torch."""


def _matmul(spec: CellSpec, inputs) -> Workload:
    options = spec.task_options
    fault = options.get("fault") or os.environ.get("KBENCH_SYNTHETIC_FAULT")
    once = os.environ.get("KBENCH_SYNTHETIC_FAIL_ONCE")
    if once:
        marker = Path(once) / spec.cell_id.replace("/", "_")
        if not marker.exists():
            marker.touch()
            raise RuntimeError("injected transient failure")
    if fault == "segv":         # a real invalid read, as a native crash does
        ctypes.string_at(0)
    if fault == "hang-child":      # argv[0] names it, so a test can look for it after the cell is gone
        # the child ignores SIGTERM: only the SIGKILL to the whole group after the grace period ends it
        subprocess.Popen(["bash", "-c", "trap '' TERM; exec -a kbench-synthetic-child sleep 3600"])
        time.sleep(3600)
    if fault == "raise":
        raise RuntimeError("injected failure")
    if fault == "exit":
        os._exit(3)
    if fault == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "oom":
        hoard = [np.ones(2**24) for _ in range(128)]        # 128 MiB at a time, every page touched
        raise RuntimeError(f"no memory limit stopped an allocation of {len(hoard) // 8} GiB")
    if fault == "device-oom":
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a stand-in)")
    if fault == "hang":
        time.sleep(3600)
    time.sleep(float(options.get("build_s") or os.environ.get("KBENCH_SYNTHETIC_BUILD_S") or 0))
    n = spec.arch["matrix_size"]
    dtype = np.dtype(options.get("dtype") or spec.dtypes.compute)
    a, b = inputs["a"].astype(dtype), inputs["b"].astype(dtype)
    trainable = options.get("trainable", 2 * n * n)
    scale = 1e6 if fault == "overflow" else 1.0     # float16's largest finite value is 65504
    device_seconds = float(options.get("device_ms") or os.environ.get("KBENCH_SYNTHETIC_DEVICE_MS") or 0) / 1e3
    compile_ms = float(options.get("compile_ms") or os.environ.get("KBENCH_SYNTHETIC_COMPILE_MS") or 0) \
        if spec.settings.get("jit_compile") else 0.0

    def predict_step():
        if fault == "step":
            raise RuntimeError("injected failure in a step")
        COMPILER.first_call(f"{spec.task}-{n}-{dtype}", compile_ms)
        if device_seconds:
            DEVICE.submit(device_seconds)
        return RECORDER.op("synthetic::matmul", lambda: a @ b)

    def fit_step():     # a "loss" in float16, as a half-precision forward pass computes it
        product = predict_step()
        return RECORDER.op("synthetic::mean", lambda: np.float16(np.square(product).mean() * scale))

    buffer, steps = np.zeros((), np.float32), iter(range(1 << 30))

    def overwriting_fit_step():
        buffer[...] = fit_step() / (1 + next(steps))
        return buffer
    step = {"fit": overwriting_fit_step if options.get("reuse_output") else fit_step}.get(spec.task, predict_step)
    return Workload(step=step, params_total=2 * n * n, params_trainable=trainable,
                    examples_per_step=spec.batch_size, keep=np.copy,
                    dtypes=lambda: {"weights": dtype_name(a.dtype), "compute": dtype_name((a @ b).dtype)})


MODELS = {"synthetic": for_tasks(_matmul, "fit", "predict")}
