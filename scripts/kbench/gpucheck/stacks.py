"""The GPU stacks, checked on a host without a GPU: for each GPU lock (envs/<stack>.gpu.lock, .gpu-cuda12.lock), its
image built from the lock as a real run builds it, every framework of the stack imported in it, every CUDA library
its nvidia-* wheels ship loaded (and the libraries the frameworks' own extension modules link, by ldd), and one tiny
cell of each of the stack's columns run on the CPU inside the GPU image. A conflict, a missing CUDA library or a
wheel that does not import shows here, not on a GPU host after a long download.

    .venv/bin/kbench gpu-stacks [STACK.ACCELERATOR ...] [--keep] [--out DIR]

One stack at a time (each image is several GB), removed after unless --keep; the table goes to stdout and
DIR/gpu_stacks.md (default results/gpu-stacks). Not run in CI: about an hour and tens of GB of downloads for all of
them. The NVIDIA driver's own libraries (libcuda.so.1, libnvidia-ml.so.1) are the one thing a CPU host cannot have:
they are listed apart, as what the GPU host must provide.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kbench.machine import host
from kbench.adapters import _packages
from kbench.machine.host import REPO
from kbench.plan import matrix
from kbench.run import launch
from kbench.stacks import images, lock_path, lockcheck, locks as stack_locks

ACCELERATORS = ("gpu", "gpu-cuda12")
DRIVER = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
# Run inside the image: imports, the wheels' CUDA libraries loaded, the frameworks' extension modules' links.
INSIDE = r"""
import ctypes, glob, importlib, json, os, subprocess, sys
modules, found = sys.argv[1].split(","), {"imports": {}, "libraries": {}, "unresolved": {}}
for name in modules:
    try:
        module = importlib.import_module(name)
        found["imports"][name] = str(getattr(module, "__version__", "yes"))
    except Exception as error:
        found["imports"][name] = f"error: {type(error).__name__}: {str(error)[:200]}"
site = [p for p in sys.path if p.endswith("site-packages")][0]
libraries = sorted(glob.glob(f"{site}/nvidia/*/lib/lib*.so*")) + [
    name for name in ("libcublas.so", "libcudnn.so", "libcufft.so", "libcurand.so") if "paddle" in modules]
pending = libraries
for _ in range(3):          # a library loads once the ones it needs are loaded (RTLD_GLOBAL)
    failed = []
    for library in pending:
        try:
            ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            found["libraries"][os.path.basename(library)] = "ok"
        except OSError as error:
            failed.append(library)
            found["libraries"][os.path.basename(library)] = str(error)[:200]
    pending = failed
extensions = [p for name in modules if name in found["imports"]
              for p in glob.glob(f"{site}/{name}/**/*.so*", recursive=True)]
for extension in extensions:
    out = subprocess.run(["ldd", extension], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "not found" in line:
            found["unresolved"].setdefault(line.split()[0], os.path.relpath(extension, site))
print("GPUSTACK " + json.dumps(found))
"""


def locks(selected: list[str]) -> list[tuple[str, str]]:
    found = [(stack, accelerator) for stack, accelerator in stack_locks(REPO) if accelerator in ACCELERATORS]
    unknown = sorted(set(selected) - {f"{s}.{a}" for s, a in found})
    if unknown:
        raise SystemExit(f"gpu-stacks: {unknown[0]}: no such GPU lock in envs/; allowed: "
                         + ", ".join(f"{s}.{a}" for s, a in found))
    return [(s, a) for s, a in found if not selected or f"{s}.{a}" in selected]


def inside(image_id: str, modules: list[str]) -> dict:
    argv = ["podman", "run", "--rm", "--network", "none", *host.ulimit_args(), image_id, "python", "-c", INSIDE,
            ",".join(modules)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=host.client_env("podman"), timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("GPUSTACK ")]
    if not lines:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(lines[-1].removeprefix("GPUSTACK "))


def tiny_cells(stack: str, record: Path, out: Path) -> dict[str, str]:
    """BERT predict at the tiny size, on the CPU, in each column of the stack, inside its GPU image."""
    config = {**yaml.safe_load((REPO / "config.yaml").read_text()), "accelerator": "cpu"}
    found = {}
    for framework, definition in config["framework_defs"].items():
        if definition["stack"] != stack:
            continue
        model = "synthetic" if stack == "synthetic" else "bert"
        if model not in config["model_defs"]:
            found[framework] = "no tiny model for this stack"
            continue
        spec = matrix.spec(config, "tiny", model, "predict", 2, "float32", framework)
        spec = spec.replace(steps=dataclasses.replace(spec.steps, timed=2, blocks=2))
        result = launch.run_cell(spec, "podman", record, out / f"{framework}.json", out / f"{framework}.log",
                                 launch.Options(timeout_s=900))
        found[framework] = result.status if result.status == "ok" else f"{result.status}: {result.text()}"
    return found


def check(stack: str, accelerator: str, base: Path, out: Path, keep: bool) -> dict:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    lock = lock_path(stack, accelerator, REPO)
    row = {"lock": f"{stack}.{accelerator}"}
    started = time.monotonic()
    try:
        info = images.build_stack(stack, accelerator, base, config["containers"]["source_date_epoch"],
                                  REPO / config["containers"]["uv_cache"], out / "images" / f"{stack}.{accelerator}.json")
    except (subprocess.CalledProcessError, images.UnreproducibleImage) as error:
        return {**row, "built": f"failed: {error}"[:300]}
    row.update(built="ok", build_s=round(time.monotonic() - started), size_gb=round(info["size_bytes"] / 1e9, 2))
    pins = lockcheck.pinned(lock.read_text())
    modules = lock_modules(pins)
    found = inside(info["id"], modules)
    imports = found.get("imports", {})
    failed = [f"{m} ({v})" for m, v in imports.items() if v.startswith("error")]
    row["imports"] = "ok: " + ", ".join(modules) if imports and not failed else "failed: " + "; ".join(failed or
                                                                                                  [str(found)])
    row.update(library_columns(found))
    record = out / "images" / f"{stack}.{accelerator}.json"
    row["tiny cell on CPU"] = "; ".join(f"{f}: {s}" for f, s in tiny_cells(stack, record, out / "cells" /
                                                                          f"{stack}.{accelerator}").items())
    if not keep:
        subprocess.run(["podman", "rmi", "--force", info["image"]], capture_output=True,
                       env=host.client_env("podman"))
    return row


def lock_modules(pins: dict[str, str]) -> list[str]:
    """The modules to import in a lock's image: every adapter's packages (kbench.adapters._packages) the lock pins, as
    the cells import them, each once."""
    return list(dict.fromkeys(module for dist, module in _packages.modules().items() if dist in pins))


def library_columns(found: dict) -> dict:
    """The table's two library columns from what INSIDE found: a wheel library that fails to load only for want of
    the NVIDIA driver (libcuda.so.1, which only a GPU host has) is not a defect of the image, and is named apart."""
    libraries = found.get("libraries", {})
    failed = {name: error for name, error in libraries.items() if error != "ok"}
    wants_driver = sorted(f"{name} (needs {next(d for d in DRIVER if d in error)}.1)"
                          for name, error in failed.items() if any(d in error for d in DRIVER))
    broken = sorted(name for name, error in failed.items() if not any(d in error for d in DRIVER))
    unresolved = found.get("unresolved", {})
    driver = sorted(n for n in unresolved if n.startswith(DRIVER))
    others = sorted(f"{n} (by {unresolved[n]})" for n in unresolved if not n.startswith(DRIVER))
    return {"CUDA libraries": (f"{len(libraries) - len(broken)} of {len(libraries)} load"
                               + (f" ({len(wants_driver)} with the driver only)" if wants_driver else "")
                               + (f"; not: {', '.join(broken)}" if broken else "")
                               + (f"; unresolved links: {', '.join(others)}" if others else "")),
            "driver libraries the host provides": ", ".join(driver + wants_driver) or "none linked"}


def table(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows])


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locks", nargs="*", help="STACK.ACCELERATOR (default: every GPU lock)")
    parser.add_argument("--keep", action="store_true", help="keep each image (default: removed after its check)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "gpu-stacks")
    args = parser.parse_args(argv)
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    base = args.out / "images" / "base.json"
    if not base.exists():
        images.build_base(config["containers"]["base"], config["containers"]["source_date_epoch"], base,
                          config["containers"]["base_packages"])
    rows = []
    for stack, accelerator in locks(args.locks):
        rows.append(check(stack, accelerator, base, args.out, args.keep))
        print(json.dumps(rows[-1]), flush=True)
        (args.out / "gpu_stacks.md").write_text(table(rows) + "\n")
    print(table(rows))
    return 0 if all(r.get("built") == "ok" and r.get("imports", "").startswith("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
