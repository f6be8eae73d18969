"""The one table of runtimes: where a cell process starts (host venv, preinstalled interpreter, podman, docker or
apptainer) and everything that differs between them.

A Runtime is resolved once from its name (`resolve`) and answers for itself: the argv that starts
`python -m <module> --out OUT` in an environment (its command line), the environment of the process the launcher
starts, where a file handed to the process is seen from inside, and where its environment records live. The
launcher (kbench.run.launch) starts and supervises the process; the config check (kbench.plan.matrix) and the
environment records (kbench.machine.environment_records) read their list of runtimes from here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kbench.machine import host

SCRIPTS_IN_IMAGE = "/opt/kbench/scripts"
OUT_IN_IMAGE = "/kbench/out"
IN_IMAGE = "/kbench/in"
# The host runtime's cell gets these of the driver's environment and nothing else (the spec adds its own): a stray
# XLA_FLAGS or OMP_NUM_THREADS in the shell that started Snakemake must not change a measurement unrecorded.
HOST_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
            "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
            # where the driver's libraries and the CUDA toolkit are (a Kubernetes node's /usr/local/nvidia, an HPC
            # `module load`): without them torch and JAX find no GPU and Triton no libcuda. The cell records them.
            "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
            # the C compiler Triton's and Inductor's first compile builds its launcher with (a conda Python's own)
            "CC", "CXX")


@dataclass(frozen=True)
class Options:
    """How one process is started and watched, besides its runtime and environment. A caller of
    kbench.run.launch.run_cell sets what runs and its limits; run_cell sets the rest for each process it starts (a
    caller of Runtime.command sets them itself)."""
    module: str = "kbench.run.runner"           # what it runs: `python -m module --out OUT`
    timeout_s: float | None = None              # killed whole after this long (run_cell)
    repeat: int = 1                             # which repeat of the cell it is (its record says)
    memory_mb: int | None = None                # container limits
    cpus: float | None = None
    image_archive: str | Path | None = None     # where a node whose container storage lacks the image loads it from
    files: dict | None = None                   # name -> host path of a file the process reads (mounted read-only)
    # the persistent compile cache (kbench.instruments.compile_cache): None, none; (): an empty one (a cold run, kept beside its
    # record); records of cold runs: a fresh copy of their kept caches (a warm run)
    cache_from: tuple | None = None
    # every CPU the launcher may use, not its GPU's share, outside a scheduler (the JAX-vs-NumPy job: its NumPy half
    # runs on the CPU, and its verdict must not depend on how many GPUs share the host); its GPU is still leased alone
    host_cpus: bool = False
    # set by run_cell for each process
    name: str = "kbench-cell"                   # the container's name (removed by it)
    gpus: list[str] | None = None               # GPU indices or UUIDs of the allocation; None: every GPU
    cpuset: list[int] | None = None             # the CPUs it may run on
    # where a container can have no cpuset (kbench.run.launch.cpu_pinning): the CPUs the process in the image starts
    # on (taskset; the OCI runtime may reset the affinity its client passed on: runc does from 1.2.7 and 1.3.1)
    affinity: list[int] | None = None
    remove: bool = True                         # --rm (the launcher removes its cells itself, after reading OOM)
    workdir: Path | None = None                 # apptainer: where the container's /tmp and $HOME live


def _mounts(out: Path, files: dict | None = None) -> list[tuple[Path, str, str]]:
    return [(host.REPO / "scripts", SCRIPTS_IN_IMAGE, "ro"), (out.parent.resolve(), OUT_IN_IMAGE, "rw"),
            *((Path(path).resolve(), f"{IN_IMAGE}/{name}", "ro") for name, path in (files or {}).items())]


@dataclass(frozen=True)
class Runtime:
    """How one runtime starts a process, and where its environment records live."""
    name: str
    # where its environment records live, relative to results_dir (the rules write them, cells depend on them)
    records: str
    # the argv before `python -m <module> --out OUT` (the payload comes on stdin)
    prefix: Callable[[dict, Path, Options], list[str]]
    image: Callable[[dict], str] | None = None   # the image it starts (None: a process in the environment itself)
    # the flags that hand it GPUs (every GPU, or those of an allocation); none: CUDA_VISIBLE_DEVICES
    gpu_flags: Callable[[list[str] | None], list[str]] = lambda gpus: []
    # how it names one GPU: by UUID (CUDA_VISIBLE_DEVICES and docker take it, and it does not depend on CUDA's
    # device order); podman by the CDI device name, which `nvidia-ctk cdi generate` makes from NVML's index
    gpu_name: Callable[[dict], str] = lambda device: device["uuid"]
    # the client of a named container (killed and removed by name, its OOM state readable, its image loaded into
    # the client's storage from an archive); None: the process is the cell
    client: str | None = None
    image_probe: tuple[str, ...] = ()     # the client's command that succeeds when its storage holds an image ID
    lock_mode: str = "fail"               # a drift from the stack's lock fails the cell, or is recorded ("record")
    keeps_pythonpath: bool = False        # on the host: the driver's PYTHONPATH after the repo's scripts
    # the container descends from the client process (podman: conmon and the OCI runtime are its children), so the
    # client's CPU affinity reaches it where no cpuset can be set (an account without the cpuset controller); docker's
    # daemon starts its containers, and pinning its client would confine nothing
    inherits_affinity: bool = False
    workdir: bool = False                 # a scratch folder of the launcher's for the container's /tmp and $HOME

    def command(self, environment: dict, out: Path, options: Options = Options(), gpu: bool = False) -> list[str]:
        """argv that runs `python -m options.module --out OUT` inside `environment` (a record of kbench.stacks.envs
        or kbench.stacks.images), the payload on its stdin; gpu: hand it options.gpus (None: every GPU)."""
        argv = self.prefix(environment, out, options)
        if self.image:                                 # inside an image: its python, the staging folder mounted
            argv += self.gpu_flags(options.gpus) if gpu else []
            pinned = ["taskset", "--cpu-list", ",".join(map(str, options.affinity))] if options.affinity else []
            return argv + [self.image(environment), *pinned, "python", "-m", options.module, "--out",
                           f"{OUT_IN_IMAGE}/{out.name}"]
        return argv + ["-m", options.module, "--out", str(out)]

    def process_env(self, environment: dict | None = None, gpus: list[str] | None = None) -> dict[str, str]:
        """The environment of the process the launcher starts: the container client's (the cell inside gets only
        the image's and the spec's), or on the host an allow-list, the scripts on the path, the lock to check and
        the GPUs of its allocation (gpus: CUDA_VISIBLE_DEVICES; a container gets them as its GPU flags)."""
        if self.image is not None:
            return host.client_env(self.name)
        env = {k: v for k, v in os.environ.items() if k in HOST_ENV}
        # the repo's scripts first; a preinstalled interpreter keeps the PYTHONPATH its packages come from (a module's)
        inherited = os.environ.get("PYTHONPATH") if self.keeps_pythonpath else None
        env["PYTHONPATH"] = os.pathsep.join([str(host.REPO / "scripts"), *([inherited] if inherited else [])])
        if environment and environment.get("lock"):
            env["KBENCH_LOCK"] = str((host.REPO / environment["lock"]).resolve())   # images set their own
        env["KBENCH_LOCK_MODE"] = self.lock_mode
        if environment and environment.get("library_path"):      # a venv's own libraries first (kbench.stacks.envs)
            env["LD_LIBRARY_PATH"] = os.pathsep.join([environment["library_path"],
                                                      *([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH")
                                                        else [])])
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def staged_as_seen(self, path: Path) -> str:
        """Where the process sees a file or folder of its staging folder (mounted at OUT_IN_IMAGE in an image)."""
        return f"{OUT_IN_IMAGE}/{path.name}" if self.image is not None else str(path)

    def files_as_seen(self, files: dict | None) -> dict:
        """Where the process finds each file it reads: its own path on the host, the mount point in an image."""
        if self.image is None:
            return {name: str(Path(path).resolve()) for name, path in (files or {}).items()}
        return {name: f"{IN_IMAGE}/{name}" for name in (files or {})}

    def record_path(self, stack: str, accelerator: str) -> str:
        """Where its environment record of a stack lives, relative to results_dir."""
        return self.records.format(stack=stack, accelerator=accelerator)


def _process(interpreter: Callable[[dict], str]):
    return lambda environment, out, options: [interpreter(environment)]


def _container_run(binary: str):
    """podman/docker run: --init (the cell is not PID 1, which the kernel shields from signals it has no handler for,
    and a small init forwards signals and reaps children), named, labelled with its staging folder (`podman ps
    --filter label=kbench.out` finds a run's containers), offline, the scripts read-only and the staging folder the
    only writable mount, limits, the host's ulimits."""
    def prefix(environment: dict, out: Path, o: Options) -> list[str]:
        argv = [binary, "run", *(["--rm"] if o.remove else []), "-i", "--init", "--name", o.name, "--network", "none",
                f"--label=kbench.out={out.parent.resolve()}"]
        argv += [f"--volume={src}:{dst}:{mode}" for src, dst, mode in _mounts(out, o.files)]
        argv += [f"--memory={o.memory_mb}m"] if o.memory_mb else []
        argv += [f"--cpus={o.cpus}"] if o.cpus else []
        argv += [f"--cpuset-cpus={','.join(map(str, o.cpuset))}"] if o.cpuset else []
        return argv + host.ulimit_args()
    return prefix


def _apptainer(environment: dict, out: Path, o: Options) -> list[str]:
    """--containall alone gives /tmp and $HOME a size-limited tmpfs in the session, where Inductor's and Triton's
    caches for a compiled cell can run out of space: --workdir puts them in a folder of the launcher's on the node."""
    return ["apptainer", "exec", "--containall", "--cleanenv", "--net", "--network", "none",
            *(["--workdir", str(o.workdir)] if o.workdir else []),
            "--bind", ",".join(f"{src}:{dst}:{mode}" for src, dst, mode in _mounts(out, o.files)),
            "--env", f"PYTHONPATH={SCRIPTS_IN_IMAGE}"]


_ID = lambda environment: environment["id"]          # noqa: E731  (images are started by ID, never by tag)
RUNTIMES = {runtime.name: runtime for runtime in (
    # the stack's uv venv
    Runtime("host", "environments/{stack}.{accelerator}.json",
            _process(lambda environment: str(Path(environment["prefix"]) / "bin" / "python"))),
    # an interpreter the host already has (an HPC module, a vendor image): its versions are what they are, recorded
    # against the lock, and its packages may come from the PYTHONPATH of the module that provides it
    Runtime("preinstalled", "preinstalled/{stack}.{accelerator}.json",
            _process(lambda environment: environment["python"]), lock_mode="record", keeps_pythonpath=True),
    # the podman image
    Runtime("podman", "images/{stack}.{accelerator}.json", _container_run("podman"), _ID,
            # CDI: one device name per allocated GPU
            gpu_flags=lambda gpus: [a for d in (gpus or ["all"]) for a in ("--device", f"nvidia.com/gpu={d}")],
            gpu_name=lambda device: device["index"], client="podman", image_probe=("image", "exists"),
            inherits_affinity=True),
    # the same image loaded into docker. `--gpus` reads its value as one CSV record: device=1,3 would be two fields
    # (docker: "unexpected key '3'"), so the device list goes in CSV quotes, one argv element, no shell between
    Runtime("docker", "images/{stack}.{accelerator}.docker.json", _container_run("docker"), _ID,
            gpu_flags=lambda gpus: ["--gpus", f'"device={",".join(gpus)}"' if gpus else "all"],
            client="docker", image_probe=("image", "inspect")),
    # the same image built into a SIF
    Runtime("apptainer", "images/{stack}.{accelerator}.sif.json", _apptainer, lambda environment: environment["sif"],
            gpu_flags=lambda gpus: ["--nv"] + (["--env", f"CUDA_VISIBLE_DEVICES={','.join(gpus)}"] if gpus else []),
            workdir=True),
)}


def resolve(name: str) -> Runtime:
    """The runtime of that name; a ValueError naming it and the allowed ones if there is none."""
    if name not in RUNTIMES:
        raise ValueError(f"runtime {name!r} is not supported; allowed: {', '.join(RUNTIMES)}")
    return RUNTIMES[name]
