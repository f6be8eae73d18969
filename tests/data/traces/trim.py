"""How the traces here were made smaller: a trace a tiny cell's breakdown kept (results/cells/...trace.json.gz, or one
its framework's profiler wrote), cut to what kbench.breakdown reads (the process names, the kbench.steps annotation,
the ops and the scopes inside it), gzip-compressed without a timestamp.

    PYTHONPATH=scripts .venv/bin/python tests/data/traces/trim.py TRACE OUT.trace.json.gz
"""
import gzip
import json
import sys
from pathlib import Path

from kbench import breakdown

source, out = Path(sys.argv[1]), Path(sys.argv[2])
with (gzip.open(source, "rt") if source.read_bytes()[:2] == b"\x1f\x8b" else open(source)) as f:
    data = json.load(f)
raw = data["traceEvents"] if isinstance(data, dict) else data
start, end = breakdown.window(breakdown.events_of(raw))
kept = []
for event, read in zip([e for e in raw if e.get("ph") == "X" and "dur" in e], breakdown.events_of(raw)):
    inside = read.end > start and read.start < end
    if read.name == breakdown.MARKER or (inside and (breakdown.is_op(read) or breakdown.scope_of(read.name))):
        kept.append({k: event[k] for k in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args") if k in event})
names = [e for e in raw if e.get("ph") == "M" and e.get("name") == "process_name"]
out.write_bytes(gzip.compress(json.dumps({"traceEvents": names + kept}, separators=(",", ":")).encode(), mtime=0))
print(f"{out}: {len(kept)} of {len(raw)} events, {out.stat().st_size} bytes")
