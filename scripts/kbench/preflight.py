"""The one place that checks a host before anything is built or run: the runtime's binary, and for a GPU run the
NVIDIA driver, its version against the CUDA of every selected stack's lock (kbench.cuda), and the runtime's GPU
plumbing (podman: a CDI spec naming nvidia.com/gpu; docker: the NVIDIA runtime or hook; apptainer: the driver
libraries --nv binds). Every problem comes with the command that fixes it, all in one error.

The workflow runs it before the first job (onstart) and the launcher before each GPU cell (a SLURM node is not the
submit host). Host facts are read through a `Host`, so tests hand it fake nvidia-smi, docker and CDI outputs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kbench import cuda

REPO = Path(__file__).resolve().parents[2]
BINARIES = {"podman": "podman", "docker": "docker", "apptainer": "apptainer"}
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
# What `podman run --init` starts (containers.conf init_path's default); Debian's podman only recommends it.
PODMAN_INIT = "/usr/libexec/podman/catatonit"


class PreflightError(RuntimeError):
    pass


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


@dataclass
class Host:
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], str] = _run
    cdi_dirs: tuple[str, ...] = CDI_DIRS
    read: Callable[[Path], str] = field(default=lambda path: Path(path).read_text())
    exists: Callable[[str], bool] = os.path.exists


def is_gpu(accelerator: str) -> bool:
    return accelerator != "cpu"


def gpus(host: Host) -> list[dict]:
    """nvidia-smi's GPUs: index, name, driver version, UUID."""
    out = host.run(["nvidia-smi", "--query-gpu=index,name,driver_version,uuid", "--format=csv,noheader"])
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    return [dict(zip(("index", "name", "driver_version", "uuid"), row)) for row in rows]


def problems(runtime: str, accelerator: str, stacks: list[str], host: Host | None = None,
             tools: set[str] | None = None, repo: Path = REPO) -> list[str]:
    """stacks: those of the cells to run (none: no GPU check); tools: the runtime binaries the jobs need (default:
    the cells' runtime; image builds add podman, docker loads docker, SIF builds apptainer)."""
    host = host or Host()
    tools = {BINARIES[runtime]} if tools is None and runtime in BINARIES else (tools or set())
    found = [f"`{tool}` is not on PATH, and the {'cells' if tool == BINARIES.get(runtime) else 'image jobs'} need it; "
             f"install it (scripts/bootstrap installs podman on Debian)"
             + (", or run the cells in venvs: --config runtime=host" if tool == BINARIES.get(runtime) else "")
             for tool in sorted(tools) if not host.which(tool)]
    if runtime == "podman" and host.which("podman") and not host.exists(PODMAN_INIT):
        found.append(f"podman: {PODMAN_INIT} is missing, and every cell runs with --init; install it: "
                     "apt-get install catatonit (scripts/bootstrap does)")
    if not stacks or not is_gpu(accelerator):
        return found
    return found + _driver(accelerator, stacks, host, repo) + _plumbing(runtime, host)


def _driver(accelerator: str, stacks: list[str], host: Host, repo: Path) -> list[str]:
    """The NVIDIA driver, and its version against the CUDA of every stack to run."""
    if not host.which("nvidia-smi"):
        return [f"accelerator {accelerator}: no NVIDIA driver here (`nvidia-smi` is not on PATH); install the NVIDIA "
                "driver, or run the CPU locks: --config accelerator=cpu"]
    try:
        listed = gpus(host)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as error:
        return [f"accelerator {accelerator}: nvidia-smi failed ({error}); is the NVIDIA driver loaded?"]
    if not listed:
        return [f"accelerator {accelerator}: nvidia-smi lists no GPU"]
    driver, found = listed[0]["driver_version"], []
    for stack in stacks:
        lock = f"envs/{stack}.{accelerator}.lock"
        need = cuda.requirement(host.read(repo / lock))
        if need and cuda.driver_tuple(driver) < cuda.driver_tuple(need.min_driver):
            fix = ("use the CUDA 12 locks (--config accelerator=gpu-cuda12, driver >= 525.60.13) or update the driver"
                   if accelerator == "gpu" and need.cuda.startswith("13.") else "update the NVIDIA driver")
            found.append(f"stack {stack}: NVIDIA driver {driver} is older than {need.min_driver}, the oldest that "
                         f"runs CUDA {need.cuda} ({lock} pins {need.pin}); {fix}")
    return found


def _plumbing(runtime: str, host: Host) -> list[str]:
    """What the container runtime needs to hand a GPU to a cell."""
    if runtime == "podman":
        specs = [p for d in host.cdi_dirs if Path(d).is_dir() for p in sorted(Path(d).iterdir())
                 if p.suffix in (".yaml", ".yml", ".json")]
        if not any("nvidia.com/gpu" in host.read(p) for p in specs):
            return ["podman: no CDI spec names nvidia.com/gpu (looked in " + ", ".join(host.cdi_dirs) + "); "
                    "generate one with the NVIDIA Container Toolkit: "
                    "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"]
    elif runtime == "docker":
        try:
            runtimes = host.run(["docker", "info", "--format", "{{json .Runtimes}}"])
        except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as error:
            return [f"docker: `docker info` failed ({error}); is the Docker daemon running?"]
        if "nvidia" not in runtimes and not host.which("nvidia-container-runtime-hook"):
            return ["docker: no NVIDIA runtime for --gpus (docker info lists none, and "
                    "nvidia-container-runtime-hook is not on PATH); install the NVIDIA Container Toolkit, then: "
                    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker"]
    elif runtime == "apptainer":
        try:
            libraries = host.run(["ldconfig", "-p"])
        except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
            libraries = ""
        if "libnvidia-ml.so" not in libraries and not host.which("nvidia-container-cli"):
            return ["apptainer: --nv would bind no NVIDIA libraries (libnvidia-ml.so is not in `ldconfig -p` and "
                    "nvidia-container-cli is not on PATH); install the NVIDIA driver's user-space libraries"]
    return []


def check(runtime: str, accelerator: str, stacks: list[str], host: Host | None = None,
          tools: set[str] | None = None) -> None:
    found = problems(runtime, accelerator, stacks, host, tools)
    if found:
        raise PreflightError(f"preflight: this host cannot run the selected cells (runtime {runtime}, accelerator "
                             f"{accelerator}):\n" + "\n".join(f"  - {problem}" for problem in found))
