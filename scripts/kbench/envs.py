"""Stack environments for the host runtime: one uv venv per stack and accelerator, installed from its hash-pinned lock.

`python -m kbench.envs --stack S --accelerator A --lock L --prefix DIR --record R` builds or re-syncs DIR and writes the
environment record R that every cell of the stack depends on (a changed lock rebuilds it, and so reruns those cells).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kbench import records

PYTHON = "3.11"


def uv_binary() -> str:
    beside_python = Path(sys.executable).parent / "uv"     # the driver venv ships uv
    found = str(beside_python) if beside_python.exists() else shutil.which("uv")
    if not found:
        raise RuntimeError("uv not found: run scripts/bootstrap first")
    return found


def sha256_file(path: str | Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build(stack: str, accelerator: str, lock: Path, prefix: Path, record: Path) -> dict:
    uv = uv_binary()
    # The system CA store, so installs work behind TLS-inspecting proxies too.
    env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1")}
    python = prefix / "bin" / "python"
    subprocess.run([uv, "venv", "--quiet", "--allow-existing", "--python", PYTHON, str(prefix)], check=True, env=env)
    subprocess.run([uv, "pip", "sync", "--require-hashes", "--python", str(python), str(lock)], check=True, env=env)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    environment = {"stack": stack, "accelerator": accelerator, "kind": "venv", "lock": str(lock),
                   "lock_sha256": sha256_file(lock), "prefix": str(prefix.resolve()), "python": version}
    records.write(record, environment)
    return environment


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("stack", "accelerator", "lock", "prefix", "record"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args(argv)
    build(args.stack, args.accelerator, Path(args.lock), Path(args.prefix), Path(args.record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
