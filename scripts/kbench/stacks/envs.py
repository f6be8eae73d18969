"""Stack environments outside containers, and their records (what every cell of the stack depends on):

  venv          `python -m kbench.stacks.envs venv --stack S --accelerator A --lock L --prefix DIR --record R`: one uv venv
                per stack and accelerator, installed from its hash-pinned lock (runtime host); a changed lock rebuilds
                it, and so reruns those cells.
  preinstalled  `python -m kbench.stacks.envs preinstalled --stack S --accelerator A --lock L --python P --record R`: an
                interpreter the host already has (an HPC module, a vendor image; runtime preinstalled), recorded as
                found: its packages, their digest, and how they differ from the stack's lock. Nothing is installed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kbench.machine import environment_records
from kbench.stacks import lockcheck

PYTHON = "3.11"


def uv_binary() -> str:
    beside_python = Path(sys.executable).parent / "uv"     # the driver venv ships uv
    found = str(beside_python) if beside_python.exists() else shutil.which("uv")
    if not found:
        raise RuntimeError("uv not found: run scripts/bootstrap first")
    return found


def sha256_file(path: str | Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build(stack: str, accelerator: str, lock: Path, prefix: Path, record: Path,
          find_links: tuple[str, ...] = ()) -> dict:
    """find_links: folders of wheels the lock's packages may come from besides the index (kbench.lifecycle.bisect's, for
    packages resolved with --find-links); the hashes are checked all the same."""
    uv = uv_binary()
    # The system CA store, so installs work behind TLS-inspecting proxies too.
    env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1"),
           "PYC_INVALIDATION_MODE": "CHECKED_HASH"}    # .pyc files valid whatever the sources' times
    python = prefix / "bin" / "python"
    subprocess.run([uv, "venv", "--quiet", "--allow-existing", "--python", PYTHON, str(prefix)], check=True, env=env)
    links = [a for folder in find_links for a in ("--find-links", str(folder))]
    # bytecode compiled once here, not at every cell's start (the image recipe does the same)
    subprocess.run([uv, "pip", "sync", "--require-hashes", "--compile-bytecode", "--python", str(python), *links,
                    str(lock)], check=True, env=env)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    environment = {"stack": stack, "accelerator": accelerator, "kind": "venv", "lock": str(lock),
                   "lock_sha256": sha256_file(lock), "prefix": str(prefix.resolve()), "python": version}
    if "paddlepaddle-gpu" in lockcheck.pinned(lock.read_text()):
        environment["library_path"] = str(cuda_links(prefix, prefix / "cuda-links").resolve())
    environment_records.write(record, environment)
    return environment


def cuda_links(prefix: Path, target: Path) -> Path:
    """A folder of unversioned names (libcublas.so -> .../nvidia/cublas/lib/libcublas.so.11) for the CUDA libraries of
    the venv's nvidia-* wheels: paddlepaddle-gpu dlopens them by unversioned names, which the wheels do not ship. The
    launcher puts it first on a cell's LD_LIBRARY_PATH (containers/Containerfile makes the same folder in an image)."""
    target.mkdir(parents=True, exist_ok=True)
    for library in sorted(prefix.glob("lib/python3*/site-packages/nvidia/*/lib/lib*.so.*")):
        link = target / (library.name.split(".so.")[0] + ".so")
        if not link.exists():
            link.symlink_to(library.resolve())
    return target


_LIST_PACKAGES = ("import importlib.metadata as m, json, platform; print(json.dumps({'python': "
                  "platform.python_version(), 'packages': {d.metadata['Name']: d.version for d in m.distributions() "
                  "if d.metadata['Name']}}))")     # (a dist-info without a Name is no package)


def record_preinstalled(stack: str, accelerator: str, lock: Path, python: str, record: Path) -> dict:
    found = json.loads(subprocess.run([python, "-c", _LIST_PACKAGES], capture_output=True, text=True,
                                      check=True).stdout)
    installed = {lockcheck.normalize(name): version for name, version in found["packages"].items()}
    listing = "".join(f"{name}=={version}\n" for name, version in sorted(installed.items()))
    environment = {"stack": stack, "accelerator": accelerator, "kind": "preinstalled", "python": python,
                   "python_version": found["python"], "packages": installed,
                   "packages_sha256": "sha256:" + hashlib.sha256(listing.encode()).hexdigest(),
                   "lock": str(lock), "lock_sha256": sha256_file(lock),
                   "drift": lockcheck.differences(lockcheck.pinned(lock.read_text()), installed)}
    environment_records.write(record, environment)
    return environment


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    venv, pre = commands.add_parser("venv"), commands.add_parser("preinstalled")
    for p in (venv, pre):
        for name in ("stack", "accelerator", "lock", "record"):
            p.add_argument(f"--{name}", required=True)
    venv.add_argument("--prefix", required=True)
    pre.add_argument("--python", required=True)
    args = parser.parse_args(argv)
    if args.command == "venv":
        build(args.stack, args.accelerator, Path(args.lock), Path(args.prefix), Path(args.record))
    else:
        record_preinstalled(args.stack, args.accelerator, Path(args.lock), args.python, Path(args.record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
