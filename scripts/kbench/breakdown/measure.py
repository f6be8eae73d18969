"""In the cell, after its timed window: `steps` more steps under the framework's own profiler, broken down by kind
(kbench.breakdown.trace), the XLA programs' contents read from the profiler's XSpace (kbench.breakdown.compiled), and
the trace kept beside the record with those contents inside it, so that it reads the same later, and the XSpace
beside it, which XProf and TensorBoard open."""
from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from kbench.contract import cell
from kbench.instruments import timing
from kbench.breakdown import compiled, trace

TRACE_NAME = "result.trace.json.gz"     # beside the cell's record (the launcher moves result.* out of its staging)
# The profiler's own XSpace where it wrote one (JAX, TensorFlow: what XProf and TensorBoard open; 0.7-3.2 MB for the
# tiny BERT cells), kept beside the trace; a second one, where a profiler wrote several, is result.xplane.1.pb.gz
XPLANE_NAME = "result.xplane.pb.gz"
# What a cell keeps of its profile with the run, compressed, at most this, the trace and the XSpaces together: a tiny
# cell's trace is 10-200 KB, an eager LLM generate's 20-30 MB; a trace over it keeps its first whole steps and says
# how many, and the XSpaces are kept in what the trace left, or not at all, saying why
TRACE_CAP_BYTES = 8 * 2**20
# XLA turns its command buffers (CUDA graphs) off while a profiler runs unless this flag is set: the profiled steps
# then launch every kernel, which the timed window did not
XLA_PROFILING_FLAG = "--xla_enable_command_buffers_during_profiling"


def measure(step, sync, steps: int, trace_hook, device: str, window_ms_per_step: float, keep_in: Path | None,
            clock=time.perf_counter) -> dict:
    """`steps` more steps of the cell under its framework's profiler (trace_hook: kbench.adapters.Backend.trace; one
    synced step first, its events discarded or outside the window), broken down by kind; the profiled steps' own
    ms/step beside the window's (profiler_overhead), and the trace kept in keep_in (compressed, size-capped). Never
    fails the cell: a breakdown that cannot be made or does not close says why."""
    calls = timing.ProfiledSteps(step, sync, steps, clock)
    folder = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="kbench-trace-", dir=keep_in))
        path = trace_hook(calls.warm, calls.run, folder)
        profiled = calls.wall_ms[0] / steps
        programs = {}
        xspaces = sorted(folder.rglob("*.xplane.pb"))
        for xspace in xspaces:
            programs.update(compiled.contents(xspace))
        raw = _load(path)
        events = trace.events_of(raw["traceEvents"])
        used = {(e.args.get("hlo_module"), e.args.get("hlo_op")) for e in events if "hlo_op" in e.args}
        used_ops, used_modules = {op for _, op in used}, {module for module, _ in used}
        raw[trace.PROGRAMS_KEY] = {program: {inst: content for inst, content in by_inst.items() if inst in used_ops}
                                   for program, by_inst in compiled.as_json(programs).items()
                                   if program in used_modules}
        raw[trace.WARNINGS_KEY] = [m for x in xspaces for m in compiled.messages(x.read_bytes())]
        record = {"steps": steps, "profiled_ms_per_step": profiled, "timed_ms_per_step": window_ms_per_step,
                  "profiler_overhead": profiled / window_ms_per_step if window_ms_per_step > 0 else None,
                  "programs_read": len({p for p in raw[trace.PROGRAMS_KEY]}),
                  **({"profiler_warnings": raw[trace.WARNINGS_KEY]} if raw[trace.WARNINGS_KEY] else {}),
                  "trace": keep(raw, keep_in, steps, {_layout(x, folder): x for x in xspaces})}
        try:
            found = trace.breakdown(trace.Trace(events, compiled.from_json(raw[trace.PROGRAMS_KEY]),
                                                tuple(raw[trace.WARNINGS_KEY])), steps, device, window_ms_per_step)
            return {**record, **found, **_command_buffers(device, used, found), "closes": True}
        except trace.NotClosed as error:
            return {**record, "closes": False, "why": str(error)}
    except Exception as error:      # the profiler, its export or the trace: the window's figures stand
        return {"steps": steps, "closes": False, "why": f"no breakdown: {type(error).__name__}: {str(error)[:300]}"}
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _load(path: Path) -> dict:
    data = Path(path).read_bytes()
    raw = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return raw if isinstance(raw, dict) else {"traceEvents": raw}


def _command_buffers(device: str, used: set, found: dict) -> dict:
    """On a GPU, whether an XLA cell's profiled steps ran its kernels from CUDA graphs (XLA's command buffers), as the
    kernels show it (graph_launched_share), beside what XLA_FLAGS asked: XLA turns them off under a profiler unless
    XLA_PROFILING_FLAG keeps them on, so a profiled step that launched each kernel says so."""
    if device == "cpu" or not used:
        return {}
    seen = found.get("graph_launched_share") or 0.0
    asked = f"{XLA_PROFILING_FLAG}=true" in os.environ.get("XLA_FLAGS", "")
    if seen:
        return {"xla_command_buffers": f"{seen:.0%} of the device's time ran from CUDA graphs while profiling"}
    return {"xla_command_buffers": "none seen while profiling: every kernel launched on its own" + (
        f" though XLA_FLAGS asked for them ({XLA_PROFILING_FLAG}=true)" if asked else
        f" (XLA's default under a profiler, {XLA_PROFILING_FLAG}=false), which the timed window may have run in "
        "CUDA graphs")}


def kept_trace(record: Path) -> Path:
    """Where a cell's record keeps its breakdown's trace: beside it (x.r1.json -> x.r1.trace.json.gz), as the
    launcher moves the cell's result.* out of its staging folder."""
    return cell.beside(record, TRACE_NAME)


def kept_files(record: Path) -> list[Path]:
    """The files a cell's breakdown kept beside its record: its trace and the profiler's XSpaces, those there."""
    record = Path(record)
    xspaces = glob.escape(cell.beside(record, XPLANE_NAME.removesuffix(".pb.gz")).name) + "*.pb.gz"
    return [path for path in [kept_trace(record), *sorted(record.parent.glob(xspaces))] if path.is_file()]


def keep(raw: dict, folder: Path | None, steps: int, xspaces: dict[str, Path] | None = None) -> dict:
    """The trace as TRACE_NAME in `folder` (_keep_trace), and where the profiler wrote XSpaces (xspaces: where each
    lies in a log folder -> the file), them in what the trace left of TRACE_CAP_BYTES (_keep_xspaces). What was kept,
    or why not."""
    if folder is None:
        return {"kept": False, "why": "no folder to keep it in"}
    found = _keep_trace(raw, folder, steps)
    if xspaces:
        found["xplane"] = _keep_xspaces(xspaces, folder, TRACE_CAP_BYTES - (found["bytes"] if found["kept"] else 0))
    return found


def _keep_trace(raw: dict, folder: Path, steps: int) -> dict:
    """The trace, gzip-compressed, as TRACE_NAME in `folder`; where it is over TRACE_CAP_BYTES, its first whole
    steps that fit (the events that end before the end of the last kept step's STEP_MARKER)."""
    packed = _pack(raw)
    whole = len(packed)
    kept_steps = steps
    if whole > TRACE_CAP_BYTES:
        # the host's step marks, not the device's mirror of them (Kineto writes each again on the GPU's stream)
        ends = sorted(e.end for e in trace.events_of(raw["traceEvents"])
                      if e.name == trace.STEP_MARKER and not e.on_device)
        kept_steps = min(len(ends), steps - 1)      # the most whole steps that fit (a profiled run has a few)
        while kept_steps > 0:
            cut = ends[kept_steps - 1]
            packed = _pack({**raw, "traceEvents": [e for e in raw["traceEvents"]
                                                   if e.get("ph") != "X" or e.get("name") == trace.MARKER
                                                   or e["ts"] + e.get("dur", 0) <= cut]})
            if len(packed) <= TRACE_CAP_BYTES:
                break
            kept_steps -= 1
        if kept_steps == 0:
            return {"kept": False, "bytes": whole, "why": f"{whole / 2**20:.1f} MiB compressed, and not one whole "
                                                          f"step fits the {TRACE_CAP_BYTES / 2**20:.0f} MiB cap"}
    (Path(folder) / TRACE_NAME).write_bytes(packed)
    found = {"kept": True, "bytes": len(packed)}
    if kept_steps < steps:
        found.update(steps_kept=kept_steps, why=f"{whole / 2**20:.1f} MiB compressed, over the "
                                                f"{TRACE_CAP_BYTES / 2**20:.0f} MiB cap: its first {kept_steps} of "
                                                f"{steps} steps kept")
    return found


def _keep_xspaces(xspaces: dict[str, Path], folder: Path, room: int) -> dict:
    """The profiler's XSpaces, gzip-compressed, as XPLANE_NAME (a second one result.xplane.1.pb.gz, ...) in `folder`,
    all of them where they fit in `room` bytes, else none: each named as it lies beside the record, with where XProf
    and TensorBoard look for it under a log folder (docs/breakdown.md)."""
    names = [XPLANE_NAME if i == 0 else XPLANE_NAME.replace(".pb.gz", f".{i}.pb.gz") for i in range(len(xspaces))]
    packed = {name: _pack(path.read_bytes()) for name, path in zip(names, xspaces.values())}
    size = sum(map(len, packed.values()))
    if size > room:
        return {"kept": False, "bytes": size, "why": f"{size / 2**20:.1f} MiB compressed, over the {room / 2**20:.1f} "
                                                     f"MiB the trace left of the {TRACE_CAP_BYTES / 2**20:.0f} MiB cap"}
    for name, data in packed.items():
        (Path(folder) / name).write_bytes(data)
    return {"kept": True, "bytes": size, "files": {name.removeprefix(cell.STAGED + "."): layout
                                                   for name, layout in zip(names, xspaces)}}


def _layout(xspace: Path, logdir: Path) -> str:
    """Where an XSpace lies under its profiler's log folder as XProf reads one: plugins/profile/<run>/<host>.xplane.pb
    (the folders above it, the hook's own, dropped; all of its path where it lies elsewhere)."""
    parts = xspace.relative_to(logdir).parts
    return "/".join(parts[parts.index("plugins"):] if "plugins" in parts else parts)


def _pack(raw: dict | bytes) -> bytes:
    data = raw if isinstance(raw, bytes) else json.dumps(raw, separators=(",", ":")).encode()
    return gzip.compress(data, compresslevel=6, mtime=0)
