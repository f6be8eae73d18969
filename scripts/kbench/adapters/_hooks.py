"""Backend hooks shared by the adapters, one set per compute backend (jax, tensorflow, torch): device sync, the device
the framework really runs on, the float32 precision switches, a float32 matmul and convolution on the cell's device
(the numerics probes), peak device memory and its reset, and installed package versions. An adapter picks the hooks
of the compute backend it runs on."""
from __future__ import annotations

import importlib.metadata

import numpy as np

from kbench.instruments import numerics, timing
from kbench.breakdown.trace import MARKER, STEP_MARKER
from kbench.adapters import NoAccelerator, _scopes


def package_versions(names) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def hide_gpus_from_tensorflow() -> bool:
    """Keras 3 on jax or torch still imports TensorFlow (keras-hub needs tensorflow-text): keep it off the GPUs, so it
    never takes device memory from the framework being measured. True when TensorFlow was there to hide from."""
    try:
        import tensorflow as tf
    except ImportError:
        return False
    tf.config.set_visible_devices([], "GPU")
    return True


def jax_hooks() -> dict:
    import jax
    try:
        dev = jax.devices()[0]          # GPU cells run with JAX_PLATFORMS=cuda: no silent fall-back to the CPU
    except (RuntimeError, AssertionError) as error:     # AssertionError: a second call after Keras's import failed
        raise NoAccelerator(f"JAX has no usable device: {type(error).__name__}: {error}") from error
    on_gpu = dev.platform != "cpu"

    def peak():
        stats = dev.memory_stats() if on_gpu else None
        return stats.get("peak_bytes_in_use") if stats else None

    def set_tf32(mode: str, compute_dtype: str = "float32", task: str | None = None) -> dict:
        """JAX's default matmul precision as kbench.instruments.numerics.jax_matmul_precision says (float32-compute cells only;
        "off": "highest", which reaches convolutions too, or for generate the F32_F32_F32 dot preset)."""
        if mode != "library-default":      # XLA's own GEMM fusions follow it too
            # another compute dtype gets the default back: one process may run several precisions (the
            # equivalence job), and a float32 cell's setting must not reach the next one's half-precision dots
            jax.config.update("jax_default_matmul_precision", numerics.jax_matmul_precision(mode, compute_dtype, task))
        return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}

    def matmul(a, b):
        return np.asarray(jax.numpy.matmul(jax.device_put(a, dev), jax.device_put(b, dev)))

    def conv(x, w):         # precision=None: the default matmul precision set above, as a Keras conv gets it
        return np.asarray(jax.lax.conv_general_dilated(jax.device_put(x, dev), jax.device_put(w, dev), (1, 1), "VALID",
                                                       dimension_numbers=("NHWC", "HWIO", "NHWC")))

    compiled = {"backend_compiles": 0, "cache_hits": 0, "cache_misses": 0, **dict.fromkeys(JAX_DURATIONS.values(), 0.0)}

    def on_duration(event, duration, **metadata):          # jax.monitoring passes metadata as keywords
        if event in JAX_DURATIONS:
            compiled[JAX_DURATIONS[event]] += duration
        if event == "/jax/core/compile/backend_compile_duration":     # fires on persistent-cache hits too
            compiled["backend_compiles"] += 1

    def on_event(event, **metadata):
        if event == "/jax/compilation_cache/cache_hits":
            compiled["cache_hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            compiled["cache_misses"] += 1
    monitoring = getattr(jax, "monitoring", None)
    if monitoring is not None:
        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)

    def compile_counters() -> dict:
        return {"xla_compiles": compiled["backend_compiles"] - compiled["cache_hits"]} if monitoring else {}

    def compile_times() -> dict:
        if monitoring is None:
            return {}
        return {"reported_by": "jax.monitoring", **{k: compiled[k] for k in JAX_DURATIONS.values()},
                "cache_hits": compiled["cache_hits"], "cache_misses": compiled["cache_misses"]}

    def device():
        backend = jax.extend.backend.get_backend() if hasattr(jax, "extend") else None
        return {"kind": "gpu" if on_gpu else "cpu", "name": dev.device_kind if on_gpu else "cpu",
                "count": jax.device_count(), "platform_version": getattr(backend, "platform_version", None)}
    return {"sync": jax.block_until_ready,   # non-array leaves (python floats from train_on_batch) pass through
            "sync_name": "jax.block_until_ready",
            "device": device, "set_tf32": set_tf32, "matmul": matmul, "conv": conv, "trace": jax_trace,
            "peak_device_memory_bytes": peak,
            "reset_peak_device_memory": lambda: False,       # JAX keeps one peak per process: no reset
            "memory_view": "jax peak_bytes_in_use: the whole process's peak, model build included (no reset)",
            "compile_counters": compile_counters, "compile_times": compile_times}


# jax.monitoring's durations of a compile (each jit's first call: trace to a jaxpr, lower to StableHLO, XLA's compile,
# which on a persistent-cache hit is the entry's load)
JAX_DURATIONS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
                 "/jax/core/compile/backend_compile_duration": "compile_s"}


def tf_hooks() -> dict:
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:        # the device starts here, in the import part of the first step (else: in the numerics probe)
        with tf.device("/GPU:0"):
            tf.constant(0.0).numpy()
    # GPU kernels run asynchronously; on a CPU eager execution is synchronous unless switched off.
    if gpus or not tf.config.experimental.get_synchronous_execution():
        sync, sync_name = (lambda _: tf.test.experimental.sync_devices()), "tf.test.experimental.sync_devices"
    else:
        sync, sync_name = (lambda _: None), "none: TensorFlow runs synchronously on this CPU"

    def set_tf32(mode: str, compute_dtype: str = "float32", task: str | None = None) -> dict:
        if mode != "library-default":       # float32 products only (convolutions too): half precision is untouched
            tf.config.experimental.enable_tensor_float_32_execution(mode == "on")
        return {"tensor_float_32_execution": tf.config.experimental.tensor_float_32_execution_enabled()}

    def matmul(a, b):
        with tf.device("/GPU:0" if gpus else "/CPU:0"):
            return tf.linalg.matmul(tf.constant(a), tf.constant(b)).numpy()

    def conv(x, w):
        with tf.device("/GPU:0" if gpus else "/CPU:0"):
            return tf.nn.conv2d(tf.constant(x), tf.constant(w), strides=1, padding="VALID").numpy()

    def reset_peak():
        if gpus:
            tf.config.experimental.reset_memory_stats("GPU:0")
        return bool(gpus)

    def device():
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else "cpu"
        return {"kind": "gpu" if gpus else "cpu", "name": name, "count": len(gpus),
                "platform_version": tf.sysconfig.get_build_info().get("cuda_version")}
    return {"sync": sync, "sync_name": sync_name, "device": device, "set_tf32": set_tf32, "matmul": matmul,
            "conv": conv, "trace": tf_trace,
            "peak_device_memory_bytes": lambda: tf.config.experimental.get_memory_info("GPU:0")["peak"]
            if gpus else None,
            "reset_peak_device_memory": reset_peak,
            "memory_view": "tensorflow get_memory_info peak: its allocator's peak since the reset after build"}


def torch_hooks() -> dict:
    import torch
    cuda = torch.cuda.is_available()
    if cuda:        # the CUDA context starts here, in the import part of the first step (else: in the numerics probe)
        torch.cuda.init()
        torch.zeros(1, device="cuda")

    def set_tf32(mode: str, compute_dtype: str = "float32", task: str | None = None) -> dict:
        if mode != "library-default":       # float32 products only: a half-precision cell is untouched by it
            on = mode == "on"
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            torch.set_float32_matmul_precision("high" if on else "highest")
        return {"torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision()}

    def matmul(a, b):
        where = "cuda" if cuda else "cpu"
        return (torch.as_tensor(a, device=where) @ torch.as_tensor(b, device=where)).cpu().numpy()

    def conv(x, w):         # NHWC/HWIO in, NCHW/OIHW for torch (cuDNN's own TF32 switch: allow_tf32 above)
        where = "cuda" if cuda else "cpu"
        out = torch.nn.functional.conv2d(torch.as_tensor(x, device=where).permute(0, 3, 1, 2),
                                         torch.as_tensor(w, device=where).permute(3, 2, 0, 1))
        return out.permute(0, 2, 3, 1).cpu().numpy()

    def reset_peak():
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        return cuda

    def device():
        # the device's UUID as CUDA itself reports it (torch's form: no GPU-/MIG- prefix): the runner checks it is
        # the one the launcher leased
        props = torch.cuda.get_device_properties(0) if cuda else None
        return {"kind": "gpu" if cuda else "cpu", "name": torch.cuda.get_device_name(0) if cuda else "cpu",
                "count": torch.cuda.device_count(), "platform_version": torch.version.cuda,
                "uuid": str(props.uuid) if getattr(props, "uuid", None) is not None else None}
    return {"sync": (lambda _: torch.cuda.synchronize()) if cuda else (lambda _: None),
            "sync_name": "torch.cuda.synchronize" if cuda else "none: torch runs synchronously on a CPU",
            "device": device, "set_tf32": set_tf32, "matmul": matmul, "conv": conv,
            "peak_device_memory_bytes": lambda: torch.cuda.max_memory_allocated() if cuda else None,
            "reset_peak_device_memory": reset_peak,
            "memory_view": "torch max_memory_allocated: tensors' peak since the reset after build (the caching "
                           "allocator's reserve and the CUDA context are not in it)",
            "compile_counters": lambda: dynamo_counters(torch),
            "compile_times": dynamo_times,
            "activities": torch_activities if cuda else None,
            "trace": lambda warm, run, folder: torch_trace(warm, run, folder, cuda)}


def torch_activities(warm, run, activity: str = "CUDA") -> timing.Profiled:
    """The kernels and copies CUPTI saw while run() ran (torch.profiler with the CUDA activity alone: no host ops
    recorded), as (start_ms, end_ms). warm() runs first under the profiler as its schedule's warm-up step, whose
    activities torch discards (the profiler's start-up and the first profiled launches). Where torch has
    torch.autograd._is_kineto_stopped (2.13), a Kineto that stopped collecting while run() ran (its CUPTI buffer
    limit, reached without an error) is reported: the activities are then short of the steps. activity: the
    profiler's activity and the events' device type kept (CPU in the tests of the schedule on a CPU-only torch)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule
    is_stopped = getattr(torch.autograd, "_is_kineto_stopped", None)
    with profile(activities=[getattr(ProfilerActivity, activity)],
                 schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
        warm()
        prof.step()            # the warm-up step ends: recording starts
        run()
        stopped = bool(is_stopped and is_stopped())
        prof.step()            # the recorded step ends: the trace is collected
    kind = getattr(DeviceType, activity)
    intervals = [(e.time_range.start / 1e3, e.time_range.end / 1e3) for e in prof.events() if e.device_type == kind]
    why = ("Kineto stopped collecting device activities while the steps ran (torch.autograd._is_kineto_stopped(): "
           "its CUPTI buffer limit)")
    return timing.Profiled(intervals, why if stopped else None)


def torch_trace(warm, run, folder, cuda: bool):
    """torch.profiler over the host's ops and (on a GPU) the device's kernels and copies; warm() as the schedule's
    warm-up step, whose events torch discards."""
    from pathlib import Path
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    import torch
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    is_stopped = getattr(torch.autograd, "_is_kineto_stopped", None)
    _scopes.PROFILING = True        # the attention cores' scopes, recorded while the profiler runs only
    try:
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
            warm()
            prof.step()
            with record_function(MARKER):
                run(lambda: record_function(STEP_MARKER))
            stopped = bool(is_stopped and is_stopped())
            prof.step()
    finally:
        _scopes.PROFILING = False
    if stopped:     # as torch_activities: a trace short of its steps would read their missing kernels as waiting
        raise RuntimeError("Kineto stopped collecting while the steps ran (torch.autograd._is_kineto_stopped(): its "
                           "CUPTI buffer limit): the trace is short of the steps")
    path = Path(folder) / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def jax_trace(warm, run, folder):
    """jax.profiler's trace (XLA's ops on the host's threads or the device's streams), as the Perfetto JSON JAX writes
    beside its XSpace."""
    from pathlib import Path
    import jax
    logdir = Path(folder) / "jax-profile"
    with jax.profiler.trace(str(logdir), create_perfetto_trace=True):
        warm()
        with jax.profiler.TraceAnnotation(MARKER):
            run(lambda: jax.profiler.TraceAnnotation(STEP_MARKER))
    return next(logdir.rglob("perfetto_trace.json.gz"))


def tf_trace(warm, run, folder):
    """TensorFlow's profiler (its XSpace), converted to a Chrome trace by XProf's own converter, which TensorFlow
    ships (_pywrap_profiler_plugin.xspace_to_tools_data, tool trace_viewer@: the JSON one)."""
    from pathlib import Path
    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
    logdir = Path(folder) / "tf-profile"
    tf.profiler.experimental.start(str(logdir))
    try:
        warm()
        with tf.profiler.experimental.Trace(MARKER):
            run(lambda: tf.profiler.experimental.Trace(STEP_MARKER))
    finally:
        tf.profiler.experimental.stop()
    xspace = next(logdir.rglob("*.xplane.pb"))
    data, _ = _pywrap_profiler_plugin.xspace_to_tools_data([str(xspace)], "trace_viewer@", {})
    path = Path(folder) / "trace.json"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def paddle_trace(warm, run, folder, gpu: bool):
    """paddle.profiler over the host's ops and (on a GPU) the device's kernels, exported as its Chrome trace; warm()
    as the step before its scheduler's recorded one."""
    from pathlib import Path
    from paddle import profiler
    out = Path(folder) / "paddle-profile"
    targets = [profiler.ProfilerTarget.CPU, *([profiler.ProfilerTarget.GPU] if gpu else [])]
    prof = profiler.Profiler(targets=targets, scheduler=(1, 2), on_trace_ready=profiler.export_chrome_tracing(str(out)),
                             timer_only=False)
    prof.start()
    warm()
    prof.step()
    with profiler.RecordEvent(MARKER):
        run(lambda: profiler.RecordEvent(STEP_MARKER))
    prof.step()
    prof.stop()
    return next(out.glob("*.json"))


def dynamo_counters(torch) -> dict:
    """torch.compile's own counters (torch._dynamo.utils.counters): graphs compiled (a recompile is one more),
    graph breaks, the unsupported constructs that end a graph without being counted as a break (data-dependent
    branches), and Inductor's CUDA-graph skips."""
    import sys
    keys = ("graphs", "graph_breaks", "unsupported", "cudagraph_skips")
    if "torch._dynamo.utils" not in sys.modules:    # nothing was compiled (and importing it now, after TensorFlow,
        return dict.fromkeys(keys, 0)               # would load Triton after TF: a segfault in Keras's process)
    counters = sys.modules["torch._dynamo.utils"].counters
    return dict(zip(keys, (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()),
                           sum(counters["unimplemented"].values()), counters["inductor"]["cudagraph_skips"])))


def dynamo_times() -> dict:
    """What torch.compile reports of its compiles so far (torch._dynamo.utils.compilation_time_metrics, seconds):
    dynamo's whole compile of each frame, its bytecode tracing, the backend (Inductor, with AOTAutograd) within it;
    the caches' hits and misses (Inductor's FX graph cache; AOTAutograd's, which on a hit loads Inductor's entry)."""
    import sys
    if "torch._dynamo.utils" not in sys.modules:      # nothing compiled (see dynamo_counters)
        return {}
    utils = sys.modules["torch._dynamo.utils"]
    spent = {name: sum(times) for name, times in utils.compilation_time_metrics.items()}
    if "_compile.compile_inner" not in spent:         # dynamo imported (an eager cell's), nothing compiled
        return {}
    inductor, aot = utils.counters["inductor"], utils.counters["aot_autograd"]
    return {"reported_by": "torch._dynamo.utils.compilation_time_metrics",
            "compile_s": spent.get("_compile.compile_inner", 0.0), "trace_s": spent.get("bytecode_tracing", 0.0),
            "backend_s": spent.get("OutputGraph.call_user_compiler", 0.0),
            "cache_hits": inductor["fxgraph_cache_hit"], "cache_misses": inductor["fxgraph_cache_miss"],
            "aot_autograd_cache_hits": aot["autograd_cache_hit"], "aot_autograd_cache_misses": aot["autograd_cache_miss"]}


def paddle_hooks() -> dict:
    """PaddlePaddle. paddle.device.synchronize() raises a TypeError on a CPU place (in CPU and CUDA builds alike):
    it is called on a GPU only; CPU kernels run synchronously. TF32: the CUDA build's FLAGS_allow_tf32_cublas and
    FLAGS_allow_tf32_cudnn (a CPU build has neither, and no TF32). Compile counters: SOT's frame translations
    (paddle.jit.to_static(full_graph=False) translates a frame on each cache miss: a recompile is one more) and its
    graph breaks (kbench.adapters._hooks.paddle_graph_breaks)."""
    import paddle
    gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    if gpu:
        paddle.device.set_device("gpu:0")
        paddle.zeros([1]).numpy()       # the device starts here, in the import part of the first step
    flags = ("FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn")

    def set_tf32(mode: str, compute_dtype: str = "float32", task: str | None = None) -> dict:
        if not gpu:
            return {}                       # a CPU has no TF32, and a CPU build no switch for it
        if mode != "library-default":
            paddle.set_flags(dict.fromkeys(flags, mode == "on"))
        return paddle.get_flags(list(flags))

    def matmul(a, b):
        return paddle.matmul(paddle.to_tensor(a), paddle.to_tensor(b)).numpy()

    def conv(x, w):         # NHWC/HWIO in, NCHW/OIHW for paddle, on its device (cuDNN's TF32: FLAGS_allow_tf32_cudnn)
        out = paddle.nn.functional.conv2d(paddle.to_tensor(x).transpose([0, 3, 1, 2]),
                                          paddle.to_tensor(w).transpose([3, 2, 0, 1]))
        return out.transpose([0, 2, 3, 1]).numpy()

    def reset_peak():
        if gpu:
            paddle.device.cuda.reset_max_memory_allocated()
        return gpu

    def device():
        return {"kind": "gpu" if gpu else "cpu", "name": paddle.device.cuda.get_device_name(0) if gpu else "cpu",
                "count": paddle.device.cuda.device_count() if gpu else 0,
                "platform_version": paddle.version.cuda() if gpu else None}
    breaks = paddle_graph_breaks()

    def compile_counters() -> dict:
        return {"graphs": _sot_translations(), "graph_breaks": sum(breaks.values())}
    return {"sync": (lambda _: paddle.device.synchronize()) if gpu else (lambda _: None),
            "sync_name": "paddle.device.synchronize" if gpu else "none: paddle runs synchronously on a CPU",
            "device": device, "set_tf32": set_tf32, "matmul": matmul, "conv": conv,
            "peak_device_memory_bytes": lambda: paddle.device.cuda.max_memory_allocated() if gpu else None,
            "reset_peak_device_memory": reset_peak,
            "memory_view": "paddle max_memory_allocated: tensors' peak since the reset after build (the allocator's "
                           "reserve and the CUDA context are not in it)",
            "compile_counters": compile_counters,
            "trace": lambda warm, run, folder: paddle_trace(warm, run, folder, gpu)}


_PADDLE_BREAKS: dict | None = None


def paddle_graph_breaks() -> dict:
    """SOT's graph breaks in this process, by reason: every BreakGraphError raised, counted by its reason's class,
    except BreakGraphInlineCallBreak (the same break re-raised at each inlined call level above it). Counted from
    BreakGraphError's constructor, the one place every break passes (paddle 2.6 and 3.x; 3.x's InfoCollector needs
    SOT_COLLECT_INFO set before the first translation and prints a report at exit)."""
    global _PADDLE_BREAKS
    if _PADDLE_BREAKS is None:
        from paddle.jit.sot.utils import exceptions
        _PADDLE_BREAKS = {}
        original = exceptions.BreakGraphError.__init__

        def counted(self, *args, **kwargs):
            original(self, *args, **kwargs)
            reason = type(getattr(self, "reason", None) or self).__name__
            if reason != "BreakGraphInlineCallBreak":
                _PADDLE_BREAKS[reason] = _PADDLE_BREAKS.get(reason, 0) + 1
        exceptions.BreakGraphError.__init__ = counted
    return _PADDLE_BREAKS


def _sot_translations() -> int:
    try:
        from paddle.jit.sot.opcode_translator.executor.executor_cache import OpcodeExecutorCache
    except ImportError:
        return 0
    return getattr(OpcodeExecutorCache(), "translate_count", 0)
