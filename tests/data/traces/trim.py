"""How the traces here were made smaller: a trace a tiny cell's breakdown kept (results/cells/...trace.json.gz, or one
its framework's profiler wrote), cut to what kbench.breakdown reads (the process and thread names, the kbench.steps
and kbench.step annotations, the ops and the scopes inside the window, the XLA programs' contents the ops name),
gzip-compressed without a timestamp.

    PYTHONPATH=scripts .venv/bin/python tests/data/traces/trim.py TRACE OUT.trace.json.gz
"""
import gzip
import json
import sys
from pathlib import Path

from kbench.breakdown import kinds, trace

source, out = Path(sys.argv[1]), Path(sys.argv[2])
with (gzip.open(source, "rt") if source.read_bytes()[:2] == b"\x1f\x8b" else open(source)) as f:
    data = json.load(f)
raw = data["traceEvents"] if isinstance(data, dict) else data
start, end = trace.window(trace.events_of(raw))
kept, used = [], set()
for event, read in zip([e for e in raw if e.get("ph") == "X" and "dur" in e], trace.events_of(raw)):
    inside = read.end > start and read.start < end
    if read.name in (trace.MARKER, trace.STEP_MARKER) or (inside and (trace.is_op(read) or kinds.of_scope(read.name))):
        kept.append({k: event[k] for k in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args") if k in event})
        used.add((read.args.get("hlo_module"), read.args.get("hlo_op")))
names = [e for e in raw if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name")]
programs = {module: {op: content for op, content in by_op.items() if (module, op) in used}
            for module, by_op in (data.get(trace.PROGRAMS_KEY, {}) if isinstance(data, dict) else {}).items()}
found = {"traceEvents": names + kept, **({trace.PROGRAMS_KEY: programs} if programs else {})}
out.write_bytes(gzip.compress(json.dumps(found, separators=(",", ":")).encode(), mtime=0))
print(f"{out}: {len(kept)} of {len(raw)} events, {out.stat().st_size} bytes")
