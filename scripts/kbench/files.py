"""JSON files that are either whole or absent: every record the pipeline writes goes through here."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json(path: str | os.PathLike, obj) -> None:
    """Write via a temp file and rename, so a killed writer never leaves half a JSON for a reader."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o644)                   # mkstemp makes it private; results are for reading
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | os.PathLike):
    with open(path) as f:
        return json.load(f)
