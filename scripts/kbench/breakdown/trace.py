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
UNRECOGNISED_TOLERANCE = 0.05   # of the window: events on op lanes read as nothing known
TOP_OPS = 5
PROGRAMS_KEY = "kbenchPrograms"     # where a kept trace carries its XLA programs' contents (kbench.breakdown.measure)

# Which events are ops (the rest are the profiler's, the runtime's or Python's own): by category, or by an argument
# the op events carry
OP_CATEGORIES = {"cpu_op",                                        # torch on the host
                 "Operator", "OperatorInner", "DygraphKernelLaunch"}  # Paddle on the host
OP_ARGS = ("hlo_op",        # XLA's ops: JAX, and TensorFlow under jit_compile
           "is_eager")      # TensorFlow's own ops (a graph's or eager)
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset",        # torch (Kineto)
                     "Kernel", "Memcpy", "Memset"}                # Paddle
ANNOTATIONS = {"user_annotation", "gpu_user_annotation", "python_function", "Trace", "trace", "ProfileStep",
               "UserDefined", "PythonUserDefined", "ac2g"}
DEVICE_PROCESS = re.compile(r"/device:(gpu|cuda)|^gpu \d", re.I)
# The lines XProf derives from a device's kernels (tsl's xplane_schema line names): not activity of their own
DERIVED_LINES = re.compile(r"^(steps|tensorflow name scope|tensorflow ops|framework name scope|framework ops|"
                           r"xla modules|xla ops|async xla ops|launch stats|source code|_counters_|xla traceme)", re.I)
# The runtime's own events on the op lanes, which hold ops, and Python's frames as XProf's python tracer writes them
# ("$file.py:120 run"): known, so not unrecognised
RUNTIME = re.compile(r"^(\$|profilerstep#|##|thunk|tfrtcpu|pjrt|pjit|executor|execute|.*executable|xla(cpu|gpu)?:?"
                     r".*run|ncclkernel|kbench\.|end: |tfe_|<lambda>$|__inference_)|run_?graph|session|function|eager"
                     r"|kernelanddevice|blockuntilready|deletetensorhandle|cuda|hip|launch|threadpool|slinky"
                     r"|^tf\.|convert_to_tensor|validateinput", re.I)
RUNTIME_ARGS = ("tf_function_call",)     # a tf.function's call, named after its Python function (one_step_on_data)
LINKS = ("External id", "correlation", "correlation_id", "correlation id")
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


def read_trace(path: str | Path) -> Trace:
    """The complete events (ph X) of a Chrome trace JSON file, gzip-compressed or not: a dict with traceEvents (torch,
    JAX, TensorFlow's converter, Paddle) or a bare list; with the XLA programs a kept trace carries."""
    path = Path(path)
    with (gzip.open(path, "rt") if path.read_bytes()[:2] == b"\x1f\x8b" else open(path)) as f:
        data = json.load(f)
    raw = data["traceEvents"] if isinstance(data, dict) else data
    kept = data.get(PROGRAMS_KEY, {}) if isinstance(data, dict) else {}
    return Trace(events_of(raw), compiled.from_json(kept))


def events_of(raw: list[dict]) -> list[Event]:
    names = {}
    for e in raw:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None)] = \
                str((e.get("args") or {}).get("name", ""))
    found = []
    for e in raw:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category, start, pid = e.get("cat"), float(e["ts"]), e.get("pid")
        device = category in DEVICE_CATEGORIES or bool(DEVICE_PROCESS.search(names.get(("process_name", pid, None),
                                                                                         "")))
        found.append(Event(_PADDLE_DURATION.sub("", str(e.get("name", ""))).strip(), start, start + float(e["dur"]),
                           (pid, e.get("tid")), category, e.get("args") or {}, device,
                           names.get(("thread_name", pid, e.get("tid")), "")))
    return found


def is_op(event: Event) -> bool:
    """A host op, or any activity on a device's lanes (its kernels, copies and sets)."""
    if event.on_device:
        return event.category not in ANNOTATIONS and event.name not in (MARKER, STEP_MARKER) \
            and not DERIVED_LINES.match(event.line)
    return event.category in OP_CATEGORIES or any(arg in event.args for arg in OP_ARGS)


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
    """The host's lanes, for a device kernel's launcher and the scope around an op: the innermost host event at a
    moment of a lane, found by bisection."""

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
        self.kind_of_scope = scoped(events)
        self.scopes = {lane: sorted((e for e in found if id(e) in self.kind_of_scope), key=lambda e: e.start)
                       for lane, found in lanes.items()}
        self.starts = {lane: [s[0] for s in segments] for lane, segments in self.ops.items()}

    def op_at(self, lane, moment: float) -> Event | None:
        segments = self.ops.get(lane, [])
        i = bisect.bisect_right(self.starts.get(lane, []), moment) - 1
        return segments[i][2] if i >= 0 and segments[i][1] >= moment else None

    def scope_of(self, event: Event) -> str | None:
        around = [s for s in self.scopes.get(event.lane, ()) if s.start <= event.start and s.end >= event.end]
        return self.kind_of_scope[id(around[-1])] if around else None

    def launcher(self, kernel: Event) -> Event | None:
        for link in LINKS:
            if link in kernel.args:
                found = self.by_link.get((link, kernel.args[link]))
                if found is not None:
                    return found if is_op(found) else (self.op_at(found.lane, found.start) or found)
        return None


def scoped(events: list[Event]) -> dict[int, str]:
    """Every host event that scopes the ops inside it, with its kind (by id): by its name (kinds.SCOPES), or an
    autograd node whose forward op ran inside such a scope (torch's "Sequence number" links the two): attention's
    backward pass is attention's work, though autograd runs it outside the forward's scope."""
    found = {id(e): kinds.of_scope(e.name) for e in events if not e.on_device and kinds.of_scope(e.name)}
    by_lane: dict[tuple, list[Event]] = {}
    for e in events:
        if id(e) in found:
            by_lane.setdefault(e.lane, []).append(e)
    forward = {}
    for e in events:
        number = e.args.get("Sequence number")
        if number is None or e.on_device or "backward" in e.name.lower() or e.lane not in by_lane:
            continue
        around = [s for s in by_lane[e.lane] if s is not e and s.start <= e.start and s.end >= e.end]
        if around:
            forward[number] = found[id(around[-1])]
    for e in events:
        if not e.on_device and "backward" in e.name.lower() and e.args.get("Sequence number") in forward:
            found[id(e)] = forward[e.args["Sequence number"]]
    return found


def _program(programs: dict, module: str | None, instruction: str):
    by_instruction = programs.get(module or "") or programs.get(re.sub(r"[.(]\d+\)?$", "", module or ""))
    return by_instruction.get(instruction) if by_instruction else None


def classify(op: Event, programs: dict, host: _Host | None, launcher: Event | None = None) -> tuple[str, str, bool]:
    """An op's (kind, what it was read from, whether a compiler fused it); launcher: the host op that launched a
    device kernel (_Host.launcher), where there is one."""
    own = kinds.of_name(op.name)
    if own == "random":
        return "random", "name", False
    around = op if not op.on_device else launcher
    scope = host.scope_of(around) if host is not None and around is not None else None
    instruction = op.args.get("hlo_op")
    fused = kinds.is_compiler_fusion(op.name)
    if instruction:
        content = _program(programs, op.args.get("hlo_module"), str(instruction))
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
        by_launcher = kinds.of_name(tf_op.rsplit(":", 1)[-1] if tf_op else launcher.name)
        return by_launcher, "launcher", fused
    return own, "name", fused


def breakdown(trace: Trace | list[Event], steps: int, device: str, timed_ms_per_step: float | None = None) -> dict:
    """The profiled steps' time per step by kind (ms), the waiting time, ops per step, the top ops, the compiler-fused
    share, the op library's fused ops' time, and each step's figures; device: "gpu" (the device's lanes count) or
    "cpu" (the host's ops). NotClosed where the kinds do not add up to the busy time, a GPU trace recorded no device
    activity, or too much of the window is in events read as nothing."""
    trace = trace if isinstance(trace, Trace) else Trace(trace, {})
    events = trace.events
    start, end = window(events)
    wall = end - start
    on_device = device != "cpu"
    inside = [Event(e.name, max(e.start, start), min(e.end, end), e.lane, e.category, e.args, e.on_device, e.line)
              for e in events if e.end > start and e.start < end]
    ops = [e for e in inside if is_op(e) and e.on_device == on_device]
    if on_device and not ops:
        raise NotClosed("no device activity recorded: the trace's device lanes hold no kernel, copy or set in the "
                        "profiled steps")
    host = _Host(events) if on_device else None
    scopes = [] if on_device else [e for e in inside if not e.on_device and kinds.of_scope(e.name)
                                   and not is_op(e)]
    lanes: dict[tuple, list[Event]] = {}
    for e in ops + scopes:
        lanes.setdefault(e.lane, []).append(e)
    reader = host if on_device else _Host(inside)
    scope_ids = {id(e) for e in scopes}
    read: dict[int, tuple[str, str, bool, str | None]] = {}
    for e in ops + scopes:
        if id(e) in scope_ids:
            read[id(e)] = (kinds.of_scope(e.name), "scope", False, None)
        else:
            launcher = host.launcher(e) if on_device else None       # found once: a lookup per kernel
            read[id(e)] = (*classify(e, trace.programs, reader, launcher), _library_fused(e, launcher))
    segments = [s for lane_events in lanes.values() for s in innermost_segments(lane_events)]
    marks = step_marks(events, start, end)
    per_step_marks = marks if len(marks) == steps else []
    by_kind = dict.fromkeys(kinds.KIND_NAMES, 0.0)
    by_step = {k: [0.0] * len(per_step_marks) for k in kinds.KIND_NAMES}
    by_op: dict[str, float] = {}
    kind_of_op: dict[str, str] = {}
    by_source: dict[str, float] = {}
    fused = xla = 0.0
    library = {"layer": 0.0, "graph": 0.0}
    library_by_step = [0.0] * len(per_step_marks)
    for a, b, op, share in _shared(segments):
        kind, source, compiler_fused, is_library = read[id(op)]
        spent = (b - a) * share
        by_kind[kind] += spent
        by_op[op.name] = by_op.get(op.name, 0.0) + spent
        kind_of_op.setdefault(op.name, kind)
        by_source[source] = by_source.get(source, 0.0) + spent
        fused += spent if compiler_fused else 0.0
        if is_library:
            library[is_library] += spent
        xla += spent if "hlo_op" in op.args else 0.0
        for i, (m0, m1) in enumerate(per_step_marks):
            overlap = max(0.0, min(b, m1) - max(a, m0)) * share
            if overlap:
                by_step[kind][i] += overlap
                library_by_step[i] += overlap if is_library == "layer" else 0.0
    busy = union_length([(e.start, e.end) for e in ops + scopes])
    counted = sum(v for k, v in by_kind.items() if k != "waiting")
    gap = abs(counted - busy)
    if wall <= 0 or gap > CLOSURE_TOLERANCE * wall:
        raise NotClosed(f"the kinds add up to {counted / 1e3:.3f} ms, the ops ran {busy / 1e3:.3f} ms of a "
                        f"{wall / 1e3:.3f} ms window")
    unrecognised = _unrecognised(inside, lanes, busy) / wall if not on_device else 0.0
    if unrecognised > UNRECOGNISED_TOLERANCE:
        raise NotClosed(f"{unrecognised:.1%} of the window is in events on the op lanes that no rule reads as an "
                        f"op, a scope or the runtime (over {UNRECOGNISED_TOLERANCE:.0%}): an op the reader misses")
    per_step = 1e-3 / steps          # microseconds over the steps -> ms per step
    ms = {k: v * per_step for k, v in by_kind.items()}
    step_ms = [(m1 - m0) / 1e3 for m0, m1 in per_step_marks]
    kinds_by_step = {k: [v / 1e3 for v in values] for k, values in by_step.items()}
    if on_device and timed_ms_per_step:
        # what a user waits: the timed step (no profiler on it) less the device's busy time
        ms["waiting"] = max(timed_ms_per_step - busy * per_step, 0.0)
        kinds_by_step["waiting"] = [max(timed_ms_per_step - sum(kinds_by_step[k][i] for k in kinds_by_step
                                                                if k != "waiting"), 0.0)
                                    for i in range(len(per_step_marks))]
        step_ms = [timed_ms_per_step] * len(per_step_marks)        # each step's shares are of the timed step
        basis = "timed"
    else:
        ms["waiting"] = (wall - busy) * per_step
        kinds_by_step["waiting"] = [step - sum(kinds_by_step[k][i] for k in kinds_by_step if k != "waiting")
                                    for i, step in enumerate(step_ms)]
        basis = "profiled"
    leaves = sum(leaf_count([e for e in lane_events if id(e) not in scope_ids]) for lane_events in lanes.values())
    top = sorted(by_op.items(), key=lambda item: -item[1])[:TOP_OPS]
    step_total = ms["waiting"] + busy * per_step if basis == "timed" else wall * per_step

    def share(us: float) -> float:
        return us * per_step / step_total if step_total else 0.0
    return {"steps": steps, "device": device, "window_ms_per_step": wall * per_step, "waiting_basis": basis,
            "step_ms_per_step": step_total,
            "ms_per_step": ms,
            "per_step": {"step_ms": step_ms, **kinds_by_step,
                         "layer_fused": [v / 1e3 for v in library_by_step]} if per_step_marks else None,
            "ops_per_step": leaves / steps,
            "top_ops": [{"name": name, "ms_per_step": v * per_step, "share": share(v),
                         "kind": kind_of_op[name]} for name, v in top],
            "read_from": {source: v / busy for source, v in sorted(by_source.items())} if busy else {},
            "fused_share": share(fused),
            "xla_share": xla / busy if busy else 0.0,
            "layer_fused_ms_per_step": library["layer"] * per_step,
            "graph_fused_ms_per_step": library["graph"] * per_step,
            "unrecognised_share": unrecognised,
            "closure_gap": gap / wall}


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


def _unrecognised(inside: list[Event], lanes: dict, busy: float) -> float:
    """The time on the op lanes held by events that are neither ops, scopes, annotations nor the runtime's own
    wrappers, outside every op."""
    counted = [(e.start, e.end) for lane_events in lanes.values() for e in lane_events]
    strangers = [(e.start, e.end) for e in inside if e.lane in lanes and not e.on_device and not is_op(e)
                 and e.category not in ANNOTATIONS and not kinds.of_scope(e.name) and not RUNTIME.search(e.name)
                 and not any(arg in e.args for arg in RUNTIME_ARGS)
                 and e.name not in (MARKER, STEP_MARKER)]
    return union_length(counted + strangers) - busy if strangers else 0.0


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
