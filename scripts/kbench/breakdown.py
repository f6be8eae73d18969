"""Where a step's time goes, by kind of work, read from a trace the framework's own profiler wrote after the timed
window (kbench.adapters._hooks: torch.profiler, jax.profiler, TensorFlow's profiler through XProf's converter,
paddle.profiler): every one as Chrome trace JSON, read here by one reader and one categoriser for every framework.

What counts, on the device the cell ran on (a GPU cell: the device's kernels and copies; a CPU cell: the host's ops):
the framework's op events (OPS: torch's cpu_op and kernel events, XLA's HLO ops in JAX and TensorFlow, TensorFlow's
own ops, Paddle's operators), inside the annotation kbench.breakdown.MARKER the runner puts around the profiled
steps. At each moment each thread's innermost op holds the time; ops on several threads at once share it equally, so
the kinds add up to the time some op ran. An op inside a scope (an optimizer's step, a fused attention call) is of the
scope's kind. The rest of the window is waiting: on a GPU the device idle while the host prepares work, on a CPU the
host in the framework and Python between ops.

Kinds (KINDS: name patterns, first match wins, rules as data): matrix multiply and convolution, attention,
normalization, fused (a kernel the framework fused that is not a matmul: XLA fusions, Inductor's cpp_fused/triton
kernels, torch.compile's regions whose kernels the profiler does not name), elementwise and reductions, data
movement, optimizer update, other (a name no rule knows: counted, never dropped).

Closure: the kinds and the waiting time must add up to the profiled window, the kinds alone to the union of the op
intervals (computed apart); a breakdown that does not close within CLOSURE_TOLERANCE says so and gives no table row."""
from __future__ import annotations

import gzip
import heapq
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kbench import cell, timing

# The annotation around the profiled steps, in every framework's trace: the breakdown's window
MARKER = "kbench.steps"
CLOSURE_TOLERANCE = 1e-3        # relative to the profiled window: rounding of microsecond timestamps, no more
TOP_OPS = 5

KIND_NAMES = {"matmul_conv": "matmul and conv", "attention": "attention", "normalization": "normalization",
              "fused": "fused", "elementwise": "elementwise and reductions", "data_movement": "data movement",
              "optimizer": "optimizer update", "other": "other", "waiting": "waiting"}

# (kind, pattern): searched in the op's lower-cased name, in this order. The patterns name real ops of every column's
# trace (tests/test_breakdown.py reads them from traces the columns' own profilers wrote).
KINDS = (
    # control flow and calls hold other ops (their own time is the runtime's)
    ("other", r"^(while|call|conditional|tuple|get-tuple-element|parameter)([._]|$)"),
    ("optimizer", r"optimizer|adamw?([^a-z]|$)|applyadam|fused_adam|_foreach_|optimization step|momentum"),
    ("attention", r"attention|sdpa|flash|fmha|(?<!log_)softmax"),
    ("matmul_conv", r"(^|[^a-z])(mm|bmm|addmm|baddbmm|addbmm|matmul|linear|einsum|dot|gemm|gemv)([^a-z]|$)"
                    r"|matmul|cublas|cutlass|gemm|xmma|cudnn|conv"),
    ("normalization", r"norm|moments"),
    ("fused", r"fusion|fused|triton_|cpp_fused|compiledfxgraph|compiled region|compiledfunction|xla_launch"),
    ("data_movement", r"copy|transpose|permute|reshape|view|contiguous|concat|(^|::)cat$|slice|gather|scatter"
                      r"|index|pad|memcpy|memset|clone|expand|broadcast|stack|split|bitcast|tile|embedding|flip"
                      r"|unfold|as_strided|squeeze|roll|identity|readvariableop|assignvariableop|dynamic-update"
                      r"|(^|::)t$|item|local_scalar_dense|(^|[^a-z])(un)?pack"),
    ("elementwise", r"add|sub|mul|div|relu|gelu|tanh|sigmoid|silu|swish|exp|log|sqrt|pow|neg|where|select|maximum"
                    r"|minimum|erf|dropout|bias|clamp|clip|fill|full|zero|ones|rand|bernoulli|cast|convert|compare"
                    r"|equal|less|greater|logical|bitwise|isnan|isinf|isfinite|sum|mean|reduce|max|min|cumsum|argmax"
                    r"|sort|topk|sign|square|reciprocal|round|floor|ceil|iota|arange|constant|lerp|loss|nll|entropy"
                    r"|scale|(^|[^a-z])(abs|all|any|sin|cos|sine|cosine)([^a-z]|$)|elementwise|vectorized"),
)
_KIND_RES = tuple((kind, re.compile(pattern)) for kind, pattern in KINDS)
# Scopes: a host event whose name says what every op inside it does (an optimizer's step; an attention call whose
# math path runs plain bmm and softmax)
SCOPES = (("optimizer", re.compile(r"^optimizer\.step|optimization step|optimizer\.zero_grad")),
          ("attention", re.compile(r"scaled_dot_product_attention|_scaled_dot_product")))

# Which events are ops (the rest are the profiler's, the runtime's or Python's own): by category, or by an argument
# the op events carry
OP_CATEGORIES = {"cpu_op",                                        # torch on the host
                 "kernel", "gpu_memcpy", "gpu_memset",            # torch (Kineto) on a GPU
                 "Operator", "OperatorInner", "DygraphKernelLaunch",  # Paddle on the host
                 "Kernel", "Memcpy", "Memset"}                    # Paddle on a GPU
OP_ARGS = ("hlo_op",        # XLA's ops: JAX, and TensorFlow under jit_compile
           "is_eager")      # TensorFlow's own ops (a graph's or eager)
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
DEVICE_PROCESS = re.compile(r"/device:(gpu|cuda)", re.I)
# An op the framework's own library fused (TensorFlow's _FusedMatMul, FusedBatchNormV3, oneDNN's _MklNativeFusedConv2D,
# torch's fused optimizers), as against a fusion a compiler made (XLA's *_fusion, Inductor's cpp_fused_/triton_)
LIBRARY_FUSED = re.compile(r"fused(?!_?[a-z]*fusion)", re.I)
COMPILER_FUSED = re.compile(r"fusion|cpp_fused|triton_", re.I)
_PADDLE_DURATION = re.compile(r"\[[0-9.]+ [mun]?s\]$")       # Paddle appends each event's duration to its name


class NotClosed(Exception):
    """A breakdown whose kinds and waiting time do not add up to the profiled window."""


@dataclass(frozen=True)
class Event:
    name: str
    start: float            # microseconds
    end: float
    lane: tuple             # (process, thread)
    category: str | None = None
    args: dict = field(default_factory=dict, hash=False, compare=False)
    on_device: bool = False


def read_trace(path: str | Path) -> list[Event]:
    """The complete events (ph X) of a Chrome trace JSON file, gzip-compressed or not: a dict with traceEvents (torch,
    JAX, TensorFlow's converter, Paddle) or a bare list."""
    path = Path(path)
    with (gzip.open(path, "rt") if path.read_bytes()[:2] == b"\x1f\x8b" else open(path)) as f:
        data = json.load(f)
    return events_of(data["traceEvents"] if isinstance(data, dict) else data)


def events_of(raw: list[dict]) -> list[Event]:
    processes = {e.get("pid"): (e.get("args") or {}).get("name", "") for e in raw
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    found = []
    for e in raw:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category, start = e.get("cat"), float(e["ts"])
        found.append(Event(_PADDLE_DURATION.sub("", str(e.get("name", ""))).strip(), start, start + float(e["dur"]),
                           (e.get("pid"), e.get("tid")), category, e.get("args") or {},
                           category in DEVICE_CATEGORIES or bool(DEVICE_PROCESS.search(str(processes.get(e.get("pid"),
                                                                                                     ""))))))
    return found


def is_op(event: Event) -> bool:
    return event.category in OP_CATEGORIES or any(arg in event.args for arg in OP_ARGS)


def kind_of(name: str) -> str:
    lowered = re.sub(r"backward\d*", "", name.lower())      # an autograd node is of its forward op's kind
    return next((kind for kind, pattern in _KIND_RES if pattern.search(lowered)), "other")


def scope_of(name: str) -> str | None:
    lowered = name.lower()
    return next((kind for kind, pattern in SCOPES if pattern.search(lowered)), None)


def window(events: list[Event]) -> tuple[float, float]:
    """The profiled steps: the host's MARKER annotation (ValueError where the trace has none)."""
    marks = [e for e in events if e.name == MARKER and not e.on_device]
    if not marks:
        raise ValueError(f"the trace has no {MARKER} annotation around the profiled steps")
    return min(e.start for e in marks), max(e.end for e in marks)


def innermost_segments(lane_events: list[Event], scopes: list[Event]) -> list[tuple[float, float, Event, str]]:
    """One thread's time, each moment given to its innermost op: (start, end, op, kind); an op inside a scope is of
    the kind of the scope around it."""
    segments, stack = [], []
    ordered = sorted(lane_events, key=lambda e: (e.start, -e.end))
    points = sorted({t for e in ordered for t in (e.start, e.end)})
    starts = {}
    for e in ordered:
        starts.setdefault(e.start, []).append(e)
    for a, b in zip(points, points[1:]):
        stack = [e for e in stack if e.end > a]
        for e in starts.get(a, []):
            stack.append(e)
        stack.sort(key=lambda e: (e.start, -e.end))
        live = [e for e in stack if e.start <= a and e.end >= b]
        if live:
            op = live[-1]
            scope = next((s for s in scopes if s.start <= a and s.end >= b), None)
            segments.append((a, b, op, scope_of(scope.name) if scope else kind_of(op.name)))
    return segments


def leaf_count(lane_events: list[Event]) -> int:
    """The ops of one thread with no op inside them: those launched, not their wrappers."""
    stack, parents = [], set()
    ordered = sorted(lane_events, key=lambda e: (e.start, -e.end))
    for i, e in enumerate(ordered):
        while stack and ordered[stack[-1]].end <= e.start:
            stack.pop()
        if stack:
            parents.add(stack[-1])
        stack.append(i)
    return len(ordered) - len(parents)


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def breakdown(events: list[Event], steps: int, device: str) -> dict:
    """The profiled steps' time per step by kind (ms), the waiting time, ops per step, the top ops and the fused
    share, from a trace's events; device: "gpu" (the device's kernels count) or "cpu" (the host's ops). NotClosed
    where the kinds and the waiting time do not add up to the window."""
    start, end = window(events)
    wall = end - start
    on_device = device != "cpu"
    ops = [Event(e.name, max(e.start, start), min(e.end, end), e.lane, e.category, e.args, e.on_device)
           for e in events if is_op(e) and e.on_device == on_device and e.end > start and e.start < end]
    scopes = [e for e in events if not e.on_device and scope_of(e.name) and e.end > start and e.start < end]
    lanes: dict[tuple, list[Event]] = {}
    for op in ops:
        lanes.setdefault(op.lane, []).append(op)
    segments = [s for lane, lane_ops in lanes.items()
                for s in innermost_segments(lane_ops, [sc for sc in scopes if sc.lane == lane])]
    by_kind = dict.fromkeys(KIND_NAMES, 0.0)
    by_op: dict[str, float] = {}
    for a, b, op, kind, share in _shared(segments):
        by_kind[kind] += (b - a) * share
        by_op[op.name] = by_op.get(op.name, 0.0) + (b - a) * share
    busy = union_length([(op.start, op.end) for op in ops])
    by_kind["waiting"] = wall - busy
    counted = sum(v for k, v in by_kind.items() if k != "waiting")
    gap = max(abs(counted - busy), abs(counted + by_kind["waiting"] - wall))
    if wall <= 0 or gap > CLOSURE_TOLERANCE * wall:
        raise NotClosed(f"the kinds add up to {counted / 1e3:.3f} ms, the ops ran {busy / 1e3:.3f} ms of a "
                        f"{wall / 1e3:.3f} ms window")
    leaves = sum(leaf_count(lane_ops) for lane_ops in lanes.values())
    top = sorted(by_op.items(), key=lambda item: -item[1])[:TOP_OPS]
    per_step = 1e-3 / steps          # microseconds over the steps -> ms per step
    return {"steps": steps, "device": device, "window_ms_per_step": wall * per_step,
            "ms_per_step": {k: v * per_step for k, v in by_kind.items()},
            "ops_per_step": leaves / steps,
            "top_ops": [{"name": name, "ms_per_step": v * per_step, "share": v / wall} for name, v in top],
            "fused_share": by_kind["fused"] / wall,
            "library_fused_ms_per_step": sum(v for name, v in by_op.items()
                                             if LIBRARY_FUSED.search(name) and not COMPILER_FUSED.search(name))
            * per_step,
            "closure_gap": gap / wall}


def _shared(segments):
    """Each segment's pieces where several threads ran ops at once, with the share each gets: (a, b, op, kind,
    share). A sweep over the segments' start and end points."""
    points = sorted({t for a, b, _, _ in segments for t in (a, b)})
    by_start = sorted(segments, key=lambda s: s[0])
    active, i = [], 0
    for a, b in zip(points, points[1:]):
        while i < len(by_start) and by_start[i][0] <= a:
            heapq.heappush(active, (by_start[i][1], i, by_start[i]))
            i += 1
        while active and active[0][0] <= a:
            heapq.heappop(active)
        live = [s for _, _, s in active if s[0] <= a and s[1] >= b]
        for s in live:
            yield a, b, s[2], s[3], 1 / len(live)


# ---------------------------------------------------------------- in the cell, after its timed window

TRACE_NAME = "result.trace.json.gz"     # beside the cell's record (the launcher moves result.* out of its staging)
TRACE_CAP_BYTES = 8 * 2**20             # a trace kept with the run, compressed, at most this (else its size is said)


def measure(step, sync, steps: int, trace, device: str, window_ms_per_step: float, keep_in: Path | None,
            clock=time.perf_counter) -> dict:
    """`steps` more steps of the cell under its framework's profiler (trace: kbench.adapters.Backend.trace; one
    synced step first, its events discarded or outside the window), broken down by kind; the profiled steps' own
    ms/step beside the window's (profiler_overhead), and the trace kept in keep_in (compressed, size-capped). Never
    fails the cell: a breakdown that cannot be made or does not close says why."""
    calls = timing.ProfiledSteps(step, sync, steps, clock)
    folder = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="kbench-trace-", dir=keep_in))
        path = trace(calls.warm, calls.run, folder)
        profiled = calls.wall_ms[0] / steps
        record = {"steps": steps, "profiled_ms_per_step": profiled, "timed_ms_per_step": window_ms_per_step,
                  "profiler_overhead": profiled / window_ms_per_step if window_ms_per_step > 0 else None,
                  "trace": keep(path, keep_in)}
        try:
            return {**record, **breakdown(read_trace(path), steps, device), "closes": True}
        except NotClosed as error:
            return {**record, "closes": False, "why": str(error)}
    except Exception as error:      # the profiler, its export or the trace: the window's figures stand
        return {"steps": steps, "closes": False, "why": f"no breakdown: {type(error).__name__}: {str(error)[:300]}"}
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def kept_trace(record: Path) -> Path:
    """Where a cell's record keeps its breakdown's trace: beside it (x.r1.json -> x.r1.trace.json.gz), as the
    launcher moves the cell's result.* out of its staging folder."""
    return cell.beside(record, TRACE_NAME)


def keep(path: Path, folder: Path | None) -> dict:
    """The trace, gzip-compressed, as TRACE_NAME in `folder` where it fits TRACE_CAP_BYTES; what was kept or why
    not."""
    if folder is None:
        return {"kept": False, "why": "no folder to keep it in"}
    data = Path(path).read_bytes()
    packed = data if data[:2] == b"\x1f\x8b" else gzip.compress(data, compresslevel=6, mtime=0)
    if len(packed) > TRACE_CAP_BYTES:
        return {"kept": False, "bytes": len(packed), "why": f"{len(packed) / 2**20:.1f} MiB compressed, over the "
                                                            f"{TRACE_CAP_BYTES / 2**20:.0f} MiB cap"}
    (Path(folder) / TRACE_NAME).write_bytes(packed)
    return {"kept": True, "bytes": len(packed)}
