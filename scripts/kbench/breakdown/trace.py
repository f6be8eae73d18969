"""Where a step's time goes, by kind of work, read from a trace the framework's own profiler wrote after the timed
window (kbench.adapters._hooks: torch.profiler, jax.profiler, TensorFlow's profiler through XProf's converter,
paddle.profiler): every one as Chrome trace JSON, read here by one reader for every framework; the kinds are
kbench.breakdown.kinds'.

What counts, on the device the cell ran on:
- a GPU cell: every event on the device's lanes (kernels, copies, sets) but the profiler's annotations there and the
  lines XProf derives from the kernels (Steps, XLA Ops, TensorFlow Ops, ...). Each kernel is read with the host op
  that launched it (torch's External id, TensorFlow's tf_op, a correlation id shared with the launch call): an
  Inductor or XLA kernel by its own name or program, a library kernel whose name says nothing by its launcher, and
  every kernel launched inside a scope (an optimizer's step, an attention call) as the scope's work. Waiting is the
  timed window's ms/step less the device's busy time per step: what a user waits with the device idle.
- a CPU cell: the framework's op events (OPS: torch's cpu_op, XLA's HLO ops in JAX and TensorFlow, TensorFlow's own
  ops, Paddle's operators) and the scopes' own time between their ops; waiting is the rest of the profiled window,
  the host in the framework and Python between ops.
At each moment each lane's innermost op holds the time; ops on several lanes at once share it equally, so the kinds
add up to the time some op ran. The window is the host's MARKER annotation; each step inside it has its own
STEP_MARKER (ProfiledSteps syncs at each step's end), so every figure comes per step too (an interval across them).

Closure, which can fail: the kinds must add up to the union of the op intervals (computed apart); a GPU cell whose
device lanes recorded nothing does not close ("no device activity recorded"), and the share of the window held by
events on the op lanes that no rule reads as an op, a scope or the runtime's own wrapper is reported (unrecognised)
and fails closure past UNRECOGNISED_TOLERANCE: an op the reader misses shows there, never as waiting."""
from __future__ import annotations

import bisect
import gzip
import heapq
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kbench.breakdown import compiled, kinds

# The annotations around the profiled steps and around each of them, in every framework's trace
MARKER = "kbench.steps"
STEP_MARKER = "kbench.step"
CLOSURE_TOLERANCE = 1e-3        # relative to the window: rounding of microsecond timestamps, no more
UNRECOGNISED_TOLERANCE = 0.05   # of the window: events on the host read as nothing known
TOP_OPS = 5
PROGRAMS_KEY = "kbenchPrograms"     # where a kept trace carries its XLA programs' contents (kbench.breakdown.measure)
WARNINGS_KEY = "kbenchProfilerWarnings"     # and what the profiler said of its collection
DROPPED = re.compile(r"dropped", re.I)      # a profiler that says it dropped events: the trace is short of them

# Which events are ops (the rest are the profiler's, the runtime's or Python's own): by category, or by an argument
# the op events carry
OP_CATEGORIES = {"cpu_op",                                        # torch on the host
                 "Operator", "OperatorInner", "DygraphKernelLaunch",  # Paddle on the host, dygraph
                 "StaticKernelLaunch"}                                # and a static program's
OP_ARGS = ("hlo_op",        # XLA's ops: JAX, and TensorFlow under jit_compile
           "is_eager")      # TensorFlow's own ops (a graph's or eager)
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset",        # torch (Kineto)
                     "Kernel", "Memcpy", "Memset"}                # Paddle
# Events on a device's lanes that are no activity of the device: the profiler's annotations mirrored there
# (Kineto's gpu_user_annotation), its own overhead (Kineto's "overhead" category), a host's waits on the device
# (Kineto's cuda_sync: Stream Sync, Event Sync)
ANNOTATIONS = {"user_annotation", "gpu_user_annotation", "python_function", "Trace", "trace", "ProfileStep",
               "UserDefined", "PythonUserDefined", "ac2g",
               "Forward", "Backward"}      # Paddle's layers' forward calls and its backward pass, around their ops
NOT_ACTIVITY = {"overhead", "gpu_overhead", "cuda_sync"}
# A device's process: XProf's "/device:GPU:0", Paddle's "GPU 0"; Kineto names a GPU's process after the host's
# ("python3") and labels it "GPU 0" (libkineto GenericActivityProfiler: process_labels), so a process that holds a
# device's kernels or copies is the device's too
DEVICE_PROCESS = re.compile(r"/device:(gpu|cuda)|^gpu \d", re.I)
# The lines XProf derives from a device's kernels (tsl's xplane_schema line names) and the line tsl's CUPTI collector
# gives the profiler's own overhead: not activity of their own
DERIVED_LINES = re.compile(r"^(steps|tensorflow name scope|tensorflow ops|framework name scope|framework ops|"
                           r"xla modules|xla ops|async xla ops|launch stats|source code|_counters_|xla traceme|"
                           r"cupti overhead)", re.I)
# The runtime's own events on the host, which hold ops or wait on them, and Python's frames as XProf's python tracer
# writes them ("$file.py:120 run"): known, so not unrecognised. Each anchored at the name's start: an op whose
# name merely contains such a word is an op the reader missed
RUNTIME = re.compile(r"^(\$|profilerstep#|##|thunk|tfrtcpu|pjrt|pjit|executor|execute|xla(cpu|gpu)?(::|:| )|"
                     r"ncclkernel|kbench\.|end: |tfe_|<lambda>$|__inference_|eagerkernelexecute|eagerlocalexecute|"
                     r"eagerexecute|kernelanddevice|blockuntilready|deletetensorhandle|cuda[a-z]*(\(|$| )|"
                     r"cudalaunch|cudagraphlaunch|hiplaunch|threadpool|slinky|tf\.|convert_to_tensor|validateinput|"
                     r"functionrun|runfunction|run_graph|rungraph|session|torchdynamo|torch-compiled region|"
                     r"pregraph bytecode|aotdispatcher|## call compiledfxgraph|compiledfunction|"
                     r"[a-z_]*executable(::| )|localcomputation|pyjit|pmap|"
                     # JAX's dispatch and PJRT's buffers around an XLA program's run (jaxlib 0.10)
                     r"[a-z]*pjrt(client|buffer)::|handle inputs|handle input event recording|deviceput|parsearguments|"
                     r"allocateoutputbuffers|wait for (donation|usage) holds|pythonrefmanager::|"
                     # TensorFlow's eager runtime copying inputs to the device, tf.data's iterator feeding a step
                     r"eagercopytodevice|iterator(getnextop)?::|makeiterator::|_send_|_recv_)", re.I)
# torch.compile's runtime, which torch records as cpu_ops: dynamo's guard checks, the region around a compiled frame,
# AOTAutograd's wrappers (the compiled graph itself, "## Call CompiledFxGraph ... ##", stays an op)
RUNTIME_OPS = re.compile(r"^(torchdynamo cache lookup|torch-compiled region|pregraph bytecode|aotdispatcher|"
                         r"compiledfunction(backward)?$|autograd::engine::evaluate_function: compiledfunctionbackward$)",
                         re.I)
RUNTIME_ARGS = ("tf_function_call",)     # a tf.function's call, named after its Python function (one_step_on_data)
LINKS = ("External id", "correlation", "correlation_id", "correlation id")
# A kernel CUDA ran from a graph (a CUDA graph, XLA's command buffers): its launch is the graph's
GRAPH_ARGS = ("graph id", "graph_id", "graph node id",                        # Kineto
              "cuda_graph_id", "cuda_graph_exec_id", "cuda_graph_orig_id")      # tsl's stat names (XProf)
CALLS = {"call", "command-buffer", "conditional", "while", "async-start"}      # an XLA instruction that runs others
_PADDLE_DURATION = re.compile(r"\[[0-9.]+ [mun]?s\]$")       # Paddle appends each event's duration to its name


class NotClosed(Exception):
    """A breakdown whose kinds do not add up to the busy time, or that recorded nothing it can read."""


@dataclass(frozen=True)
class Event:
    name: str
    start: float            # microseconds
    end: float
    lane: tuple             # (process, thread)
    category: str | None = None
    args: dict = field(default_factory=dict, hash=False, compare=False)
    on_device: bool = False
    line: str = ""          # the thread's name, where the trace gives one


@dataclass(frozen=True)
class Trace:
    events: list
    programs: dict          # XLA programs' contents: kbench.breakdown.compiled
    warnings: tuple = ()    # what the profiler said of its own collection (its XSpace's errors and warnings)


def read_trace(path: str | Path) -> Trace:
    """The complete events (ph X) of a Chrome trace JSON file, gzip-compressed or not: a dict with traceEvents (torch,
    JAX, TensorFlow's converter, Paddle) or a bare list; with the XLA programs a kept trace carries."""
    path = Path(path)
    with (gzip.open(path, "rt") if path.read_bytes()[:2] == b"\x1f\x8b" else open(path)) as f:
        data = json.load(f)
    raw = data["traceEvents"] if isinstance(data, dict) else data
    kept = data if isinstance(data, dict) else {}
    return Trace(events_of(raw), compiled.from_json(kept.get(PROGRAMS_KEY, {})), tuple(kept.get(WARNINGS_KEY, ())))


def events_of(raw: list[dict]) -> list[Event]:
    names, device_pids = {}, set()
    for e in raw:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name", "process_labels"):
            args = e.get("args") or {}
            names[(e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None)] = \
                str(args.get("name", args.get("labels", "")))
        elif e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES:
            device_pids.add(e.get("pid"))
    device_pids |= {pid for (kind, pid, _), name in names.items()
                    if kind in ("process_name", "process_labels") and DEVICE_PROCESS.search(name)}
    found = []
    for e in raw:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category, start, pid = e.get("cat"), float(e["ts"]), e.get("pid")
        found.append(Event(_PADDLE_DURATION.sub("", str(e.get("name", ""))).strip(), start, start + float(e["dur"]),
                           (pid, e.get("tid")), category, e.get("args") or {}, pid in device_pids,
                           names.get(("thread_name", pid, e.get("tid")), "")))
    return found


def is_op(event: Event) -> bool:
    """A host op, or any activity on a device's lanes (its kernels, copies and sets). torch.compile's own wrappers
    are no op (RUNTIME_OPS): dynamo's guard checks and the calls around a compiled graph are the runtime's time."""
    if event.on_device:
        return event.category not in ANNOTATIONS and event.category not in NOT_ACTIVITY \
            and event.name not in (MARKER, STEP_MARKER) and not DERIVED_LINES.match(event.line)
    return (event.category in OP_CATEGORIES or any(arg in event.args for arg in OP_ARGS)) \
        and not RUNTIME_OPS.match(event.name)


def window(events: list[Event]) -> tuple[float, float]:
    """The profiled steps: the host's MARKER annotation (ValueError where the trace has none)."""
    marks = [e for e in events if e.name == MARKER and not e.on_device]
    if not marks:
        raise ValueError(f"the trace has no {MARKER} annotation around the profiled steps")
    return min(e.start for e in marks), max(e.end for e in marks)


def step_marks(events: list[Event], start: float, end: float) -> list[tuple[float, float]]:
    return sorted({(e.start, e.end) for e in events if e.name == STEP_MARKER and not e.on_device
                   and e.start >= start and e.end <= end})


def innermost_segments(lane_events: list[Event]) -> list[tuple[float, float, Event]]:
    """One lane's time, each moment given to its innermost event: (start, end, event)."""
    segments, stack = [], []
    ordered = sorted(lane_events, key=lambda e: (e.start, -e.end))
    points = sorted({t for e in ordered for t in (e.start, e.end)})
    starts: dict[float, list[Event]] = {}
    for e in ordered:
        starts.setdefault(e.start, []).append(e)
    for a, b in zip(points, points[1:]):
        stack = [e for e in stack if e.end > a]
        stack.extend(starts.get(a, []))
        stack.sort(key=lambda e: (e.start, -e.end))
        live = [e for e in stack if e.start <= a and e.end >= b]
        if live:
            segments.append((a, b, live[-1]))
    return segments


def leaf_count(lane_events: list[Event]) -> int:
    """The ops of one lane with no op inside them: those launched, not their wrappers."""
    stack, parents = [], set()
    ordered = sorted(lane_events, key=lambda e: (e.start, -e.end))
    for i, e in enumerate(ordered):
        while stack and ordered[stack[-1]].end <= e.start:
            stack.pop()
        if stack:
            parents.add(stack[-1])
        stack.append(i)
    return len(ordered) - len(parents)


def union_length(intervals) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


class _Host:
    """The host's lanes, for a device kernel's launcher and the scope around an op: the innermost op at a moment of
    a lane (by bisection) and each host event's innermost scope (one sweep a lane: no search per op)."""

    def __init__(self, events: list[Event]):
        self.by_link: dict[tuple, Event] = {}
        lanes: dict[tuple, list[Event]] = {}
        for e in events:
            if e.on_device:
                continue
            lanes.setdefault(e.lane, []).append(e)
            for link in LINKS:
                if link in e.args and (is_op(e) or (link, e.args[link]) not in self.by_link):
                    self.by_link[(link, e.args[link])] = e
        self.ops = {lane: innermost_segments([e for e in found if is_op(e)]) for lane, found in lanes.items()}
        self.starts = {lane: [s[0] for s in segments] for lane, segments in self.ops.items()}
        self.kind_of_scope, self.scope_around = scoped(lanes)

    def op_at(self, lane, moment: float) -> Event | None:
        segments = self.ops.get(lane, [])
        i = bisect.bisect_right(self.starts.get(lane, []), moment) - 1
        return segments[i][2] if i >= 0 and segments[i][1] >= moment else None

    def scope_of(self, event: Event) -> str | None:
        """The kind of the innermost scope around a host event, itself included (None: none)."""
        return self.kind_of_scope.get(id(event)) or self.scope_around.get(id(event))

    def launcher(self, kernel: Event) -> Event | None:
        """The host op that launched a device kernel: the op its link names, or the op running around the launch
        call its link names (cudaLaunchKernel, Paddle's and XProf's correlation ids)."""
        for link in LINKS:
            if link in kernel.args:
                found = self.by_link.get((link, kernel.args[link]))
                if found is not None:
                    return found if is_op(found) else (self.op_at(found.lane, found.start) or found)
        return None


def _innermost(lanes: dict[tuple, list[Event]], kind_of: dict[int, str]) -> dict[int, str]:
    """Each host event's innermost scope's kind (by id), a sweep a lane over its events in start order with the
    open scopes on a stack (a lane's events nest: a call stack)."""
    found: dict[int, str] = {}
    for lane_events in lanes.values():
        if not any(id(e) in kind_of for e in lane_events):
            continue
        stack: list[Event] = []
        for e in sorted(lane_events, key=lambda e: (e.start, -e.end)):
            while stack and stack[-1].end <= e.start:
                stack.pop()
            around = next((s for s in reversed(stack) if s.start <= e.start and s.end >= e.end), None)
            if around is not None:
                found[id(e)] = kind_of[id(around)]
            if id(e) in kind_of:
                stack.append(e)
    return found


def scoped(lanes: dict[tuple, list[Event]]) -> tuple[dict[int, str], dict[int, str]]:
    """Every host event that scopes the ops inside it, with its kind (by id), and each host event's innermost scope:
    a scope by its name (kinds.SCOPES), or an autograd node whose forward op ran inside such a scope (torch's
    "Sequence number" links the two): attention's backward pass is attention's work, though autograd runs it outside
    the forward's scope."""
    kind_of = {id(e): kinds.of_scope(e.name) for found in lanes.values() for e in found if kinds.of_scope(e.name)}
    around = _innermost(lanes, kind_of)
    forward = {e.args["Sequence number"]: around[id(e)] for found in lanes.values() for e in found
               if "Sequence number" in e.args and "backward" not in e.name.lower() and id(e) in around}
    backward = {id(e): forward[e.args["Sequence number"]] for found in lanes.values() for e in found
                if "backward" in e.name.lower() and e.args.get("Sequence number") in forward}
    if backward:
        kind_of.update(backward)
        around = _innermost(lanes, kind_of)
    return kind_of, around


def _program(programs: dict, op: Event):
    """The compiled content of an XLA op: looked up by its program's id where the trace gives one (two programs of
    one module name differ), else by its module's name."""
    module, instruction = str(op.args.get("hlo_module", "")), str(op.args.get("hlo_op"))
    program_id = op.args.get("program_id")
    keys = ([f"{module}({program_id})", f"{module}.{program_id}"] if program_id is not None else []) + [
        module, re.sub(r"[.(]\d+\)?$", "", module)]
    by_instruction = next((programs[k] for k in keys if k in programs), None)
    return by_instruction.get(instruction) if by_instruction else None


def _framework_name(op: Event, launcher: Event | None) -> str:
    """The framework's own name of an op (a TensorFlow op's scoped name: its GPU kernel's tf_op "name:type", or the
    host op's long name), where the trace gives one."""
    for found in (op, launcher):
        if found is not None:
            for arg in ("tf_op", "long_name"):
                if found.args.get(arg):
                    return str(found.args[arg]).rsplit(":", 1)[0]
    return ""


def classify(op: Event, programs: dict, host: _Host | None, launcher: Event | None = None,
             from_graph: bool = False) -> tuple[str, str, bool]:
    """An op's (kind, what it was read from, whether a compiler fused it); launcher: the host op that launched a
    device kernel (_Host.launcher), where there is one. An attention core's scope decides first (its dropout mask
    and softmax are the core's), then random numbers, then what the compiler or the op's name says. A kernel run
    from a CUDA graph (XLA's command buffers) carries the graph's call as its hlo_op: read by its own name."""
    around = op if not op.on_device else launcher
    scope = host.scope_of(around) if host is not None and around is not None else None
    fused = kinds.is_compiler_fusion(op.name)
    if scope == "attention" or kinds.in_attention_core(_framework_name(op, launcher)):
        return "attention", "scope", fused
    own = kinds.of_name(op.name)
    if own == "random":
        return "random", "name", False
    instruction = op.args.get("hlo_op")
    if instruction:
        content = _program(programs, op)
        if content is not None and from_graph and not content.fusion and content.opcodes & CALLS:
            return kinds.of_inductor(op.name) or kinds.of_name(op.name), "kernel name", fused
        if content is not None:
            return scope or kinds.of_hlo(set(content.opcodes), list(content.op_names)), "program", content.fusion
        kind, said = kinds.of_xla_name(str(instruction))
        return scope or kind, "fusion name" if said else "unread", fused or kinds.XLA_FUSION.match(
            str(instruction).lower()) is not None
    if scope:
        return scope, "scope", fused
    inductor = kinds.of_inductor(op.name)
    if inductor:
        return inductor, "kernel name", True
    if kinds.INDUCTOR_GRAPH.search(op.name.lower()):
        return "fusion_unread", "unread", True
    tf_op = str(op.args.get("tf_op", ""))
    if own == "other" and (launcher is not None or tf_op):
        return kinds.of_name(tf_op.rsplit(":", 1)[-1] if tf_op else launcher.name), "launcher", fused
    return own, "name", fused


@dataclass
class _Read:
    """What the reader made of one op: its kind, what that was read from, whether a compiler fused it, whether it
    is one of TensorFlow's library fusions ("layer", "graph" or None), whether it ran from a CUDA graph."""
    kind: str
    source: str
    compiler_fused: bool
    library: str | None = None
    from_graph: bool = False


@dataclass
class _Tally:
    """The attribution's sums over the window (microseconds) and per step."""
    steps: list
    by_kind: dict = field(default_factory=lambda: dict.fromkeys(kinds.KIND_NAMES, 0.0))
    by_op: dict = field(default_factory=dict)
    kind_of_op: dict = field(default_factory=dict)
    by_source: dict = field(default_factory=dict)
    fused: float = 0.0
    xla: float = 0.0
    library: dict = field(default_factory=lambda: {"layer": 0.0, "graph": 0.0})
    layer_kinds: dict = field(default_factory=dict)
    graph_launched: float = 0.0
    by_step: dict = field(default_factory=dict)
    layer_by_step: list = field(default_factory=list)

    def __post_init__(self):
        self.by_step = {k: [0.0] * len(self.steps) for k in kinds.KIND_NAMES}
        self.layer_by_step = [0.0] * len(self.steps)

    def add(self, a: float, b: float, op: Event, share: float, read: _Read) -> None:
        spent = (b - a) * share
        self.by_kind[read.kind] += spent
        self.by_op[op.name] = self.by_op.get(op.name, 0.0) + spent
        self.kind_of_op.setdefault(op.name, read.kind)
        self.by_source[read.source] = self.by_source.get(read.source, 0.0) + spent
        self.fused += spent if read.compiler_fused else 0.0
        self.xla += spent if "hlo_op" in op.args else 0.0
        self.graph_launched += spent if read.from_graph else 0.0
        if read.library:
            self.library[read.library] += spent
        if read.library == "layer":
            self.layer_kinds[read.kind] = self.layer_kinds.get(read.kind, 0.0) + spent
        for i, (m0, m1) in enumerate(self.steps):
            overlap = max(0.0, min(b, m1) - max(a, m0)) * share
            if overlap:
                self.by_step[read.kind][i] += overlap
                self.layer_by_step[i] += overlap if read.library == "layer" else 0.0


def breakdown(trace: Trace | list[Event], steps: int, device: str, timed_ms_per_step: float | None = None) -> dict:
    """The profiled steps' time per step by kind (ms), the waiting time, ops per step, the top ops, the compiler-fused
    share, the op library's fused ops' time, and each step's figures; device: "gpu" (the device's lanes count) or
    "cpu" (the host's ops). NotClosed where the kinds do not add up to the busy time, the trace recorded no op on
    the device it claims, or too much of the window is in events read as nothing."""
    trace = trace if isinstance(trace, Trace) else Trace(trace, {})
    dropped = [w for w in trace.warnings if DROPPED.search(w)]
    if dropped:
        raise NotClosed(f"the profiler dropped events, so the trace is short of them: {dropped[0][:300]}")
    start, end = window(trace.events)
    on_device = device != "cpu"
    inside = [Event(e.name, max(e.start, start), min(e.end, end), e.lane, e.category, e.args, e.on_device, e.line)
              for e in trace.events if e.end > start and e.start < end]
    ops, scopes, strangers = _what_counts(inside, on_device)
    host = _Host(trace.events if on_device else inside)
    read = _read_all(ops, scopes, strangers, trace.programs, host, on_device)
    lanes: dict[tuple, list[Event]] = {}
    for e in ops + scopes + strangers:
        lanes.setdefault(e.lane, []).append(e)
    marks = step_marks(trace.events, start, end)
    tally = _Tally(marks if len(marks) == steps else [])
    for a, b, op, share in _shared([s for lane_events in lanes.values() for s in innermost_segments(lane_events)]):
        tally.add(a, b, op, share, read[id(op)])
    busy = union_length([(e.start, e.end) for e in ops + scopes + strangers])
    wall = end - start
    gap = _close(tally, busy, wall, ops, on_device)
    counted = {id(e) for e in scopes + strangers}
    leaves = sum(leaf_count([e for e in lane_events if id(e) not in counted]) for lane_events in lanes.values())
    return {**_figures(tally, steps, device, wall, busy, leaves, timed_ms_per_step if on_device else None),
            "closure_gap": gap / wall}


def _what_counts(inside: list[Event], on_device: bool) -> tuple[list[Event], list[Event], list[Event]]:
    """The window's ops (the device's activity on a GPU, the host's ops on a CPU), the scopes whose own time is
    their kind's (a CPU cell's), and the events on the host that no rule reads as anything (a CPU cell's)."""
    ops = [e for e in inside if is_op(e) and e.on_device == on_device]
    if on_device:
        return ops, [], []
    scopes = [e for e in inside if not e.on_device and not is_op(e) and kinds.of_scope(e.name)]
    strangers = [e for e in inside if not e.on_device and not is_op(e) and e.category not in ANNOTATIONS
                 and e.category not in NOT_ACTIVITY and not kinds.of_scope(e.name) and not RUNTIME.search(e.name)
                 and not RUNTIME_OPS.match(e.name)
                 and not any(arg in e.args for arg in RUNTIME_ARGS) and e.name not in (MARKER, STEP_MARKER)]
    return ops, scopes, strangers


def _read_all(ops, scopes, strangers, programs, host, on_device) -> dict[int, _Read]:
    """Each op read once (a kernel's launcher looked up once, for its kind and its library test); a scope's own
    time is its kind's; a stranger's is "other" (an op the reader missed: never waiting)."""
    read = {id(e): _Read(kinds.of_scope(e.name), "scope", False) for e in scopes}
    read.update({id(e): _Read("other", "unrecognised", False) for e in strangers})
    for e in ops:
        launcher = host.launcher(e) if on_device else None
        from_graph = on_device and _from_graph(e, launcher)
        read[id(e)] = _Read(*classify(e, programs, host, launcher, from_graph), _library_fused(e, launcher),
                            from_graph)
    return read


def _close(tally: _Tally, busy: float, wall: float, ops, on_device: bool) -> float:
    """The closure, which can fail: an op recorded on the device the cell claims, the kinds adding up to the busy
    time, and little of the window in events read as nothing. The gap between the kinds and the busy time."""
    if not ops:
        where = "the trace's device lanes hold no kernel, copy or set" if on_device else \
            "the trace's host lanes hold no event any rule reads as an op"
        raise NotClosed(f"no {'device activity' if on_device else 'op'} recorded: {where} in the profiled steps")
    counted = sum(v for k, v in tally.by_kind.items() if k != "waiting")
    gap = abs(counted - busy)
    if wall <= 0 or gap > CLOSURE_TOLERANCE * wall:
        raise NotClosed(f"the kinds add up to {counted / 1e3:.3f} ms, the ops ran {busy / 1e3:.3f} ms of a "
                        f"{wall / 1e3:.3f} ms window")
    unrecognised = tally.by_source.get("unrecognised", 0.0) / wall
    if unrecognised > UNRECOGNISED_TOLERANCE:
        raise NotClosed(f"{unrecognised:.1%} of the window is in events on the host that no rule reads as an op, "
                        f"a scope or the runtime (over {UNRECOGNISED_TOLERANCE:.0%}): an op the reader misses")
    return gap


def _figures(tally: _Tally, steps: int, device: str, wall: float, busy: float, leaves: int,
             timed_ms_per_step: float | None) -> dict:
    """The breakdown's record: per step (ms), on the timed basis on a device (waiting: the timed step less the
    device's busy time), on the profiled window's on a CPU (waiting: the host outside any op)."""
    per_step = 1e-3 / steps          # microseconds over the steps -> ms per step
    ms = {k: v * per_step for k, v in tally.by_kind.items()}
    step_ms = [(m1 - m0) / 1e3 for m0, m1 in tally.steps]
    kinds_by_step = {k: [v / 1e3 for v in values] for k, values in tally.by_step.items()}
    if timed_ms_per_step:
        ms["waiting"] = max(timed_ms_per_step - busy * per_step, 0.0)
        kinds_by_step["waiting"] = [max(timed_ms_per_step - sum(kinds_by_step[k][i] for k in kinds_by_step
                                                                if k != "waiting"), 0.0)
                                    for i in range(len(tally.steps))]
        step_ms = [timed_ms_per_step] * len(tally.steps)        # each step's shares are of the timed step
        basis, step_total = "timed", ms["waiting"] + busy * per_step
    else:
        ms["waiting"] = (wall - busy) * per_step
        kinds_by_step["waiting"] = [step - sum(kinds_by_step[k][i] for k in kinds_by_step if k != "waiting")
                                    for i, step in enumerate(step_ms)]
        basis, step_total = "profiled", wall * per_step
    top = sorted(tally.by_op.items(), key=lambda item: -item[1])[:TOP_OPS]

    def share(us: float) -> float:
        return us * per_step / step_total if step_total else 0.0
    return {"steps": steps, "device": device, "window_ms_per_step": wall * per_step, "waiting_basis": basis,
            "step_ms_per_step": step_total,
            "ms_per_step": ms,
            "per_step": {"step_ms": step_ms, **kinds_by_step,
                         "layer_fused": [v / 1e3 for v in tally.layer_by_step]} if tally.steps else None,
            "ops_per_step": leaves / steps,
            "top_ops": [{"name": name, "ms_per_step": v * per_step, "share": share(v),
                         "kind": tally.kind_of_op[name]} for name, v in top],
            "read_from": {source: v / busy for source, v in sorted(tally.by_source.items())} if busy else {},
            "fused_share": share(tally.fused),
            "xla_share": tally.xla / busy if busy else 0.0,
            "layer_fused_ms_per_step": tally.library["layer"] * per_step,
            "layer_fused_kinds": {k: v * per_step for k, v in sorted(tally.layer_kinds.items())},
            "graph_fused_ms_per_step": tally.library["graph"] * per_step,
            "graph_launched_share": tally.graph_launched / busy if busy else 0.0,
            "unrecognised_share": tally.by_source.get("unrecognised", 0.0) / wall if wall else 0.0}


def _library_fused(op: Event, launcher: Event | None) -> str | None:
    """"layer" for an op of TensorFlow's library a layer chose fused (kinds.LAYER_FUSED), "graph" for one grappler's
    remapper fused (kinds.GRAPH_FUSED), by its type: its name, a GPU kernel's tf_op (name:type) or launcher."""
    names = [op.name, str(op.args.get("tf_op", "")).rsplit(":", 1)[-1], launcher.name if launcher else ""]
    for name in filter(None, names):
        if kinds.LAYER_FUSED.search(name):
            return "layer"
        if kinds.GRAPH_FUSED.search(name):
            return "graph"
    return None


def _from_graph(kernel: Event, launcher: Event | None) -> bool:
    """Whether a device kernel ran from a CUDA graph (XLA's command buffers, torch's CUDA graphs): the kernel says
    so, or its launch call was a graph's."""
    return any(arg in kernel.args for arg in GRAPH_ARGS) or (
        launcher is not None and "graphlaunch" in launcher.name.lower())


def _shared(segments):
    """Each segment's pieces where several lanes ran ops at once, with the share each gets: (a, b, op, share). A
    sweep over the segments' start and end points."""
    points = sorted({t for a, b, _ in segments for t in (a, b)})
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
            yield a, b, s[2], 1 / len(live)
