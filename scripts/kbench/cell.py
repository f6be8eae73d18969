"""The cell contract: what one cell's result JSON holds, and how it reaches disk.

A result always has status ok | failed | unsupported. `failed` and `unsupported` carry an error (type, message) and no
timing, so the tables can show "failed: <type>" or "n/a: <reason>" without stopping the other cells. A fit cell records its
loss at the first and last timed step ("loss"), a cell that built its model its parameter counts ("params").
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

SCHEMA_VERSION = 3
STATUSES = ("ok", "failed", "unsupported")


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def spec_digest(spec: dict) -> str:
    """Digest of the resolved cell config: two cells with the same digest ran the same workload definition."""
    return "sha256:" + hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_result(spec: dict, context: dict, status: str, error: dict | None = None) -> dict:
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": spec["cell_id"],
        "status": status,
        "error": error,
        "spec": spec,
        "spec_digest": spec_digest(spec),
        "timing": None,
        "params": None,
        "loss": None,
        "numerics": None,
        "memory": None,
        "provenance": dict(context),
    }


def error_info(error_type: str, message: str, detail: str = "") -> dict:
    return {"type": error_type, "message": message, "detail": detail}


def write_atomic(path: str | os.PathLike, result: dict) -> None:
    """Write via a temp file and rename, so a killed cell never leaves half a JSON for the tables to read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)                       # mkstemp makes it private; results are for reading
    os.replace(tmp, path)


def read(path: str | os.PathLike) -> dict:
    with open(path) as f:
        return json.load(f)
