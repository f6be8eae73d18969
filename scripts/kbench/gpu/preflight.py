"""The one place that checks a host before anything is built or run: the runtime's binary, and for a GPU run the
NVIDIA driver, its version against the CUDA of every selected stack's lock (kbench.gpu.cuda), and the runtime's GPU
plumbing (podman: a CDI spec naming nvidia.com/gpu; docker: the NVIDIA runtime or hook; apptainer: the driver
libraries --nv binds). Every problem comes with the command that fixes it, all in one error.

The workflow runs it before the first job (onstart) and the launcher before each GPU cell (a SLURM node is not the
submit host). Host facts are read through a `Host`, so tests hand it fake nvidia-smi, docker and CDI outputs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kbench.contract.spec import on_gpu
from kbench.gpu import cuda
from kbench.machine.host import DELEGATE_FIX, REPO, Delegation, cpuset_delegation
from kbench.machine.lockpaths import lock_path

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
    delegation: Callable[[], Delegation] = cpuset_delegation      # the cgroup controllers this account's containers get


def gpus(host: Host) -> list[dict]:
    """nvidia-smi's GPUs: index, name, driver version, UUID, PCI bus ID (whose NUMA node the launcher's CPU shares
    prefer; a row without it is read without it)."""
    out = host.run(["nvidia-smi", "--query-gpu=index,name,driver_version,uuid,pci.bus_id", "--format=csv,noheader"])
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    return [dict(zip(("index", "name", "driver_version", "uuid", "pci_bus_id"), row)) for row in rows]


# nvidia-smi -L: "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)", then its MIG instances indented beneath it
_LISTED_GPU = re.compile(r"^GPU (?P<index>\d+): .*\(UUID: (?P<uuid>GPU-[^)\s]+)\)")
_LISTED_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>MIG-[^)\s]+)\)")


def mig_instances(host: Host) -> dict[str, list[dict]]:
    """The MIG instances nvidia-smi -L lists, by their GPU's index: {profile, device, uuid}; {} where none (or where
    nvidia-smi cannot say)."""
    try:
        out = host.run(["nvidia-smi", "-L"])
    except (OSError, subprocess.SubprocessError):
        return {}
    found, parent = {}, None
    for line in out.splitlines():
        gpu, mig = _LISTED_GPU.match(line), _LISTED_MIG.match(line)
        if gpu:
            parent = gpu["index"]
        elif mig and parent is not None:
            found.setdefault(parent, []).append({"profile": mig["profile"], "device": mig["device"],
                                                 "uuid": mig["uuid"]})
    return found


def leasable(host: Host) -> list[dict]:
    """The devices a cell can run on: nvidia-smi's GPUs, each GPU in MIG mode replaced by its MIG instances (CUDA
    runs on an instance, never on such a GPU whole), named as CUDA and the runtimes take them: index "<gpu>:<device>"
    (podman's CDI names), UUID MIG-... (CUDA_VISIBLE_DEVICES, docker), name "<GPU> MIG <profile>", mig True."""
    instances = mig_instances(host)
    found = []
    for device in gpus(host):
        for mig in instances.get(device["index"], []):
            found.append({**device, "index": f"{device['index']}:{mig['device']}", "uuid": mig["uuid"],
                          "name": f"{device['name']} MIG {mig['profile']}", "mig": True, "parent": device["uuid"]})
        if device["index"] not in instances:
            found.append(device)
    return found


def visible(devices: list[dict], environ=os.environ) -> list[dict]:
    """The GPUs this pipeline may use: outside a SLURM job, those an exported CUDA_VISIBLE_DEVICES names (by index or
    UUID, as CUDA reads it), else all. Within a job SLURM's allocation says (kbench.run.launch)."""
    wanted = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if environ.get("SLURM_JOB_ID") or not wanted:
        return devices
    names = [name.strip() for name in wanted.split(",") if name.strip()]
    return [d for name in names for d in devices if name in (d["index"], d["uuid"])]


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
    if not stacks or not on_gpu(accelerator):
        return found
    return found + _driver(accelerator, stacks, host, repo, runtime) + _plumbing(runtime, host)


def notes(accelerator: str, stacks: list[str], host: Host | None = None, repo: Path = REPO,
          runtime: str | None = None) -> list[str]:
    """What this host runs otherwise than asked rather than refusing the run: GPU cells in podman pinned to their CPUs
    without a cpuset (cpuset_note); a stack whose GPU wheel has no kernels for some of its GPUs
    (kbench.gpu.cuda.KERNEL_ARCHS; its adapter refuses those cells with the same reason, unsupported)."""
    host = host or Host()
    if not stacks or not on_gpu(accelerator):
        return []
    found = cpuset_note(runtime, host)
    if not host.which("nvidia-smi"):
        return found
    for stack in stacks:
        lock = lock_path(stack, accelerator)
        found += _architectures(stack, lock, host.read(repo / lock), host)
    return found


def cpuset_note(runtime: str | None, host: Host) -> list[str]:
    """podman run by an account systemd gives no cpuset controller (its default delegation: cpu io memory pids) cannot
    start a container with --cpuset-cpus: the launcher pins each GPU cell's podman client and the cell's command
    instead (kbench.run.launch.cpu_pinning), and says how an admin gives the account the controller once."""
    if runtime != "podman":
        return []
    found = host.delegation()
    if found.cpuset:
        return []
    return [f"podman: this account's containers cannot be given a cpuset ({found.why}), so each GPU cell keeps to its "
            "share of the CPUs through the podman client's affinity and taskset in the image instead of "
            "--cpuset-cpus (its record says provenance.launcher.cpu_pinning: client affinity); for podman to "
            f"confine them itself, {DELEGATE_FIX}"]


def _driver(accelerator: str, stacks: list[str], host: Host, repo: Path, runtime: str = "host") -> list[str]:
    """The NVIDIA driver, and its version against the CUDA of every stack to run (a preinstalled interpreter runs
    its own CUDA, not the lock's: only the driver's presence is checked there)."""
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
    for stack in stacks if runtime != "preinstalled" else ():
        lock = lock_path(stack, accelerator)
        need = cuda.requirement(host.read(repo / lock))
        if need and cuda.driver_tuple(driver) < cuda.driver_tuple(need.min_driver):
            fix = ("use the CUDA 12 locks (--config accelerator=gpu-cuda12, driver >= 525.60.13) or update the driver"
                   if need.cuda.startswith("13.") else "update the NVIDIA driver")     # (the CUDA 12 locks carry 12.x)
            found.append(f"stack {stack}: NVIDIA driver {driver} is older than {need.min_driver}, the oldest that "
                         f"runs CUDA {need.cuda} ({lock} pins {need.pin}); {fix}")
    return found


def compute_capabilities(host: Host) -> dict[str, tuple[int, int]]:
    """nvidia-smi's compute capability of each GPU, by index (asked only where a stack's kernels need it: drivers
    before R510 have no compute_cap field)."""
    out = host.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"])
    found = {}
    for line in out.splitlines():
        index, _, capability = (part.strip() for part in line.partition(","))
        if re.fullmatch(r"\d+\.\d+", capability):
            found[index] = tuple(int(part) for part in capability.split("."))
    return found


def _architectures(stack: str, lock: Path, lock_text: str, host: Host) -> list[str]:
    """A stack whose GPU wheel has kernels for some architectures only (kbench.gpu.cuda.KERNEL_ARCHS), on GPUs they do
    not cover: every kernel would fail with "no kernel image is available for execution on the device"."""
    listed = cuda.kernel_archs(lock_text)
    if listed is None:
        return []
    pin, archs = listed
    try:
        capabilities = compute_capabilities(host)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as error:
        return [f"stack {stack}: {lock} pins {pin}, whose kernels run on some GPUs only, and nvidia-smi could not "
                f"say this host's compute capability ({error}); a driver >= R510 reports it"]
    if not capabilities:
        return [f"stack {stack}: {lock} pins {pin}, whose kernels run on some GPUs only, and nvidia-smi reported no "
                "compute capability (a driver >= R510 reports it)"]
    cannot = {index: cuda.kernel_refusal(pin, c) for index, c in sorted(capabilities.items())}
    return [f"stack {stack}: {lock}: GPU {index}: {reason}; its cells there read unsupported (the other columns "
            f"run)" for index, reason in cannot.items() if reason]


# The newest CDI spec version each podman reads, from the container-device-interface library it vendors (podman's
# go.mod at each tag: 4.3-4.6 v0.5.x, 4.7-5.0 v0.6.x, 5.1 v0.7.2, 5.2-5.4 v0.8.0, 5.5+ v1.0.1). Older libraries
# parse strictly: a field they do not know fails the whole spec, whatever its cdiVersion says.
PODMAN_CDI = (((5, 5), "1.0.0"), ((5, 2), "0.8.0"), ((5, 1), "0.7.0"), ((4, 7), "0.6.0"), ((4, 3), "0.5.0"),
              ((4, 1), "0.4.0"))
# The fields that need each spec version (container-device-interface specs-go/version.go requiresV0x0).
CDI_FIELDS = {"additionalGids": "0.7.0", "intelRdt": "0.7.0", "annotations": "0.6.0", "netDevices": "1.1.0",
              "hostPath": "0.5.0"}
# nvidia-ctk >= 1.19.1 adds additionalGids (group-owned device nodes, /dev/dri/*), so writes 0.7.0; this feature
# flag leaves them out and gives 0.5.0 (NVIDIA Container Toolkit 1.19.1 release notes; nvidia-container-toolkit
# issues 1860, 1940). nvidia-cdi-refresh rewrites /var/run/cdi/nvidia.yaml unless told the same.
CDI_FIX = ("sudo nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes "
           "--output=/etc/cdi/nvidia.yaml (and NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS="
           "no-additional-gids-for-device-nodes in /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env, or that "
           "service writes /var/run/cdi/nvidia.yaml anew), or podman 5.1 or newer, or --config runtime=docker with "
           "the NVIDIA runtime")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def podman_cdi_version(host: Host) -> tuple[str, str] | None:
    """(podman's version, the newest CDI spec version it reads), or None where podman does not say."""
    try:
        found = re.search(r"(\d+\.\d+(?:\.\d+)?)", host.run(["podman", "--version"]))
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return None
    if not found:
        return None
    version = _version(found[1])
    readable = next((cdi for floor, cdi in PODMAN_CDI if version[:2] >= floor), "0.3.0")
    return found[1], readable


def _fields(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _fields(v)}
    if isinstance(node, list):
        return {k for v in node for k in _fields(v)}
    return set()


def cdi_device_names(texts: list[str]) -> set[str]:
    """The nvidia.com/gpu device names the CDI specs define."""
    import yaml
    names = set()
    for text in texts:
        try:
            spec = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue            # named by cdi_problem
        if isinstance(spec, dict) and spec.get("kind") == "nvidia.com/gpu":
            names.update(str(device.get("name")) for device in spec.get("devices") or [] if isinstance(device, dict))
    return names


def cdi_names_problem(texts: list[str], host: Host) -> list[str]:
    """A cell asks podman for nvidia.com/gpu=<its GPU's index> (kbench.run.launch): a spec generated with UUID names
    only, or holding MIG devices only, names none of them, and every cell would fail to start."""
    try:
        wanted = [d["index"] for d in visible(gpus(host))]
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return []               # the driver check names it
    defined = cdi_device_names(texts)
    missing = [index for index in wanted if index not in defined]
    if not missing:
        return []
    return [f"podman: the CDI specs name nvidia.com/gpu devices {', '.join(sorted(defined)) or 'none'}, but the cells "
            f"ask for nvidia.com/gpu={missing[0]}{' and others' if len(missing) > 1 else ''} (the GPU's index, as "
            f"nvidia-smi numbers them): regenerate the spec with index names: sudo nvidia-ctk cdi generate "
            f"--device-name-strategy=index --output=/etc/cdi/nvidia.yaml"]


def cdi_problem(name: str, text: str, podman: tuple[str, str] | None) -> str | None:
    """Why this podman cannot read a CDI spec (None if it can): its cdiVersion, or a field newer than it reads."""
    import yaml         # here: a cell process imports this module too, and the synthetic stack has no PyYAML
    try:
        spec = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        return f"podman: CDI spec {name} is not valid YAML/JSON ({error}); regenerate it: {CDI_FIX}"
    if podman is None:
        return None
    version, readable = podman
    declared = str(spec.get("cdiVersion", ""))
    if _version(declared) > _version(readable):
        return (f"podman: CDI spec {name} is cdiVersion {declared}, but podman {version} reads up to {readable} "
                f"(every GPU cell would fail: unresolvable CDI devices); {CDI_FIX}")
    newer = sorted(f for f in _fields(spec) if f in CDI_FIELDS and _version(CDI_FIELDS[f]) > _version(readable))
    if newer:
        return (f"podman: CDI spec {name} uses {', '.join(newer)} (CDI {max(CDI_FIELDS[f] for f in newer)}), which "
                f"podman {version} cannot parse (it reads up to {readable}; every GPU cell would fail); {CDI_FIX}")
    return None


def _plumbing(runtime: str, host: Host) -> list[str]:
    """What the container runtime needs to hand a GPU to a cell."""
    if runtime == "podman":
        specs = [p for d in host.cdi_dirs if Path(d).is_dir() for p in sorted(Path(d).iterdir())
                 if p.suffix in (".yaml", ".yml", ".json")]
        nvidia = [(p, host.read(p)) for p in specs]
        nvidia = [(p, text) for p, text in nvidia if "nvidia.com/gpu" in text]
        if not nvidia:
            return ["podman: no CDI spec names nvidia.com/gpu (looked in " + ", ".join(host.cdi_dirs) + "); "
                    f"generate one with the NVIDIA Container Toolkit: {CDI_FIX}"]
        podman = podman_cdi_version(host)
        return ([problem for p, text in nvidia if (problem := cdi_problem(str(p), text, podman))]
                + cdi_names_problem([text for _, text in nvidia], host))
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
    if not found:
        for note in notes(accelerator, stacks, host, runtime=runtime):
            print(f"preflight: note: {note}", file=sys.stderr)
    if found:
        raise PreflightError(f"preflight: this host cannot run the selected cells (runtime {runtime}, accelerator "
                             f"{accelerator}):\n" + "\n".join(f"  - {problem}" for problem in found))
