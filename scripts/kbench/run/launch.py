"""The one place that starts a cell process and sees it end, in a runtime of kbench.machine.runtimes (host venv, preinstalled
interpreter, podman, docker or apptainer: its command line and environment are the runtime's, resolved once a cell).

run_cell() turns (spec, environment record) into one process, feeds it the payload on stdin, sends its output to the
log (and, every 25 s while it runs, the log's last line to the terminal: kbench.heartbeat), and guarantees a result JSON
whatever happens: a process that crashes, is killed, runs out of memory or time, or cannot even be started (a missing
runtime binary, an unreadable record) becomes a `failed` cell with the reason decoded (a container the kernel
OOM-killed an `oom` one), so the rest of the run and the tables go on.

Lifecycle: the cell runs in its own process group (and, in podman/docker, as a named container that is removed
explicitly), killed whole on timeout, on SIGTERM/SIGINT (scancel, Ctrl-C) and when the Snakemake process that
started it dies (a watchdog polls it: a killed driver leaves no cell running into the next run's timings). A rerun of
a cell waits for the lock its previous process held and keeps the previous record and log under attempts/.

Confinement: in a container the cell has no network, sees the repo's scripts/ read-only and writes only a fresh
staging folder of its own (moved to its result path afterwards); on the host it gets an allow-listed environment.
Within a SLURM job only the GPUs of the allocation are handed to the container, the job's memory becomes the
container's limit and its CPUs the container's cpuset (a container's processes are outside the job's cgroup); where
podman runs without the cpuset controller (an account other than root, cpu_pinning), its client's affinity instead.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from kbench import heartbeat
from kbench.contract import cell
from kbench.contract.spec import CellSpec, JobSpec, spec_of
from kbench.instruments import compile_cache
from kbench.machine import host, environment_records, runtimes
from kbench.gpu import preflight
from kbench.machine.host import open_lock
from kbench.machine.runtimes import Options, Runtime

REPO = host.REPO
RESULT_NAME = cell.STAGED + ".json"
STOP_GRACE_S = 10
# The error type of a container the kernel OOM-killed (its runtime's State.OOMKilled): the record's status is oom, as
# for a framework's own out-of-memory error, so the batch study's ladder stops there (ladder_stopped)
OOM_KILLED = "OutOfMemory"


class LaunchError(Exception):
    """The cell process could not be started or supervised."""


# ---------------------------------------------------------------- by a runtime's name (kbench.machine.runtimes)

def command(runtime: str, environment: dict, out: Path, gpu: bool = False, **options) -> list[str]:
    """argv that runs `python -m module --out OUT` (kbench.run.runner for a cell) inside `environment` (a record of
    kbench.stacks.envs or kbench.stacks.images), the payload on its stdin. options: kbench.machine.runtimes.Options (what
    runs, the container's name, the allocation's GPUs, limits)."""
    return runtimes.resolve(runtime).command(environment, out, Options(**options), gpu)


def process_env(runtime: str, environment: dict | None = None, gpus: list[str] | None = None) -> dict[str, str]:
    """The environment of the process the launcher starts in `runtime` (kbench.machine.runtimes.Runtime.process_env)."""
    return runtimes.resolve(runtime).process_env(environment, gpus)


def allocated_gpus() -> list[str] | None:
    """The GPUs SLURM gave this job, as the node numbers them (SLURM_STEP_GPUS / SLURM_JOB_GPUS), or None: no
    scheduler allocation (the GPU lease picks one; an exported CUDA_VISIBLE_DEVICES only narrows its choice)."""
    if not os.environ.get("SLURM_JOB_ID"):
        return None
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = os.environ.get(name, "").strip()
        if value:
            return [device.strip() for device in value.split(",") if device.strip()]
    return None


def allocation_names(runtime: Runtime, allocated: list[str], host: preflight.Host | None = None) -> list[str]:
    """SLURM's GPUs as the runtime takes them. A container starts outside the job's cgroup and sees the node's numbers
    (podman's CDI names, docker by UUID); a process in the job (host, preinstalled, apptainer) sees its GPUs
    renumbered from 0 where the cluster constrains devices, so it gets their UUIDs (the same on every view), and where
    nvidia-smi here cannot name them (a renumbered view), the CUDA_VISIBLE_DEVICES SLURM set for the job. MIG
    instances (SLURM's MIG gres) by their own names: the runtime's for each instance SLURM's CUDA_VISIBLE_DEVICES
    names."""
    devices = allocation_devices(allocated, host)
    if devices and all(d.get("mig") for d in devices):
        return [runtime.gpu_name(d) for d in devices]
    try:
        by_index = {d["index"]: d for d in preflight.gpus(host or preflight.Host())}
    except (OSError, subprocess.SubprocessError):
        by_index = {}
    if all(index in by_index for index in allocated):
        return [runtime.gpu_name(by_index[index]) for index in allocated]
    if runtime.client:
        return allocated
    slurm_set = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return [d.strip() for d in slurm_set.split(",") if d.strip()] if slurm_set else allocated


def allocation_devices(allocated: list[str], host: preflight.Host | None = None) -> list[dict]:
    """SLURM's GPUs as nvidia-smi lists them: by the node's numbers where it lists them so; where the job sees its
    GPUs renumbered from 0 (ConstrainDevices), the ones it lists are the job's own, as many as were allocated; else
    none known."""
    try:
        listed = preflight.leasable(host or preflight.Host())
    except (OSError, subprocess.SubprocessError):
        return []
    # SLURM's MIG gres: its numbers count MIG instances, the job's CUDA_VISIBLE_DEVICES names them by UUID
    named = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    by_uuid = {d["uuid"]: d for d in listed}
    if named and all(name.startswith("MIG-") and name in by_uuid for name in named):
        return [by_uuid[name] for name in named]
    by_index = {d["index"]: d for d in listed}
    if all(index in by_index for index in allocated):
        return [by_index[index] for index in allocated]
    return listed if len(listed) == len(allocated) else []


def cpu_shares(devices: list[dict], sysfs: Path | None = None) -> list[list[int]] | None:
    """The CPUs of the cells side by side, one per GPU of `devices` (outside a scheduler), in their order: this
    process's CPUs handed out as whole physical cores (a core's hyperthread siblings stay in one share), the same
    number of cores to each. A share keeps to one NUMA node where the count allows: the node of its GPU's PCI device
    where sysfs says it (kbench.machine.host.pci_numa_node), else the nodes filled in order, one share after another. Where
    every GPU's node is known and a node holds several GPUs (a DGX A100 in NPS4: 8 nodes, 2 GPUs on each of 4), the
    node is split between its GPUs: every share shrinks to what each such node gives each of its GPUs, rather than a
    pair's second GPU getting a whole node with no GPU on it. Where
    there are fewer cores than cells, threads are shared out instead; None where there are fewer CPUs than cells.
    Every cell's launcher computes the same layout (the same CPUs, topology and GPUs), so the shares never overlap."""
    mine = sorted(os.sched_getaffinity(0))
    count = len(devices)
    cores = host.cpu_cores(mine, sysfs)
    if len(cores) < count:
        size = len(mine) // count
        return [mine[i * size:(i + 1) * size] for i in range(count)] if size else None
    node_of = {cpu: node for node, cpus in host.numa_nodes(sysfs).items() for cpu in cpus}
    pools: dict[int | None, list[list[int]]] = {}
    for core in cores:                                      # each node's cores in order (None: no node known)
        pools.setdefault(node_of.get(core[0]), []).append(core)
    pools = dict(sorted(pools.items(), key=lambda item: -1 if item[0] is None else item[0]))
    size = len(cores) // count
    gpu_nodes = [host.pci_numa_node(device.get("pci_bus_id"), sysfs) for device in devices]
    if None not in gpu_nodes:
        local = min(len(pools.get(node, [])) // gpu_nodes.count(node) for node in set(gpu_nodes))
        size = min(size, local) or size         # a node with more GPUs than cores: shares as before
    shares: list[list[list[int]] | None] = [None] * count
    for i, node in enumerate(gpu_nodes):                    # near its GPU, while its node has a share's worth left
        pool = pools.get(node) if node is not None else None
        if pool is not None and len(pool) >= size:
            shares[i] = [pool.pop(0) for _ in range(size)]
    for i in range(count):                                  # the rest: in one node where one has room, else across
        if shares[i] is None:
            fits = next((pool for pool in pools.values() if len(pool) >= size), None)
            taken = []
            for pool in [fits] if fits else pools.values():
                while pool and len(taken) < size:
                    taken.append(pool.pop(0))
            shares[i] = taken
    return [sorted(cpu for core in share for cpu in core) for share in shares]


def cpu_share(position: int, devices: list[dict], sysfs: Path | None = None) -> list[int] | None:
    """The CPUs of the cell on devices[position] (cpu_shares), None where there are fewer CPUs than cells."""
    shares = cpu_shares(devices, sysfs)
    return shares[position] if shares else None


# How a cell keeps to its CPUs (provenance.launcher.cpu_pinning)
CPUSET, CLIENT_AFFINITY, AFFINITY, NO_PINNING = "cpuset", "client affinity", "affinity", "none"


def cpu_pinning(runtime: Runtime, cpus: list[int] | None) -> str:
    """How a process of `runtime` keeps to `cpus`: "cpuset" (the container's --cpuset-cpus; docker's daemon sets it);
    "client affinity" (podman run by an account without the cpuset cgroup controller, kbench.machine.host.cpuset_delegation:
    --cpuset-cpus would stop the container, or on cgroup v1 be dropped with a warning, so the podman client is
    pinned instead, and conmon and the container inherit its affinity; the cell's command in the image starts under
    taskset with the same CPUs too, since runc from 1.2.7 and 1.3.1 resets an inherited affinity to the container's
    cgroup, which is then every CPU); "affinity" (a process on the host, apptainer's included, pinned itself);
    "none" (no CPUs to keep to: a CPU cell outside a scheduler, which has them all)."""
    if not cpus:
        return NO_PINNING
    if runtime.client is None:
        return AFFINITY
    if runtime.inherits_affinity and not host.cpuset_delegation().cpuset:
        return CLIENT_AFFINITY
    return CPUSET


def allocated_cpus() -> list[int] | None:
    """The CPUs a SLURM job was given (its affinity), or None outside SLURM."""
    return sorted(os.sched_getaffinity(0)) if os.environ.get("SLURM_JOB_ID") else None


# ---------------------------------------------------------------- one cell, start to end

def ladder_stopped(below: cell.CellResult | None) -> dict | None:
    """The batch study's ladder stops at a column's first oom: a rung whose rung below ran out of memory is not run,
    and its error says which batch did (None: run it)."""
    if below is None or below.status != "oom":
        return None
    return cell.error_info("LadderStopped", f"not run: batch {below.spec.batch_size} already ran out of memory "
                                            f"({(below.error or {}).get('type')})")


def with_share_of_cores(job: dict, threads: int, cpus: int | None = None) -> dict:
    """The job with OpenMP held to `threads` where the rule gave it fewer than this process's CPUs (an equivalence
    job beside another on a CPU host): two torch processes each spinning an OpenMP thread per core run many times
    slower. An OMP_NUM_THREADS the job's config sets stays."""
    cpus = cpus or len(os.sched_getaffinity(0))
    if threads >= cpus or "OMP_NUM_THREADS" in job["env"]:
        return job
    return {**job, "env": {**job["env"], "OMP_NUM_THREADS": str(threads)}}


def run_cell(spec: CellSpec | JobSpec | dict, runtime: str, environment_record: str | Path, out: str | Path, log: str | Path,
             options: Options = Options()) -> cell.CellResult:
    """Run one cell (or another job: options.module, e.g. kbench.equivalence.check) in `runtime` (a name of
    kbench.machine.runtimes.RUNTIMES), its environment read from `environment_record`, its result written to `out` whatever
    happens. options: what runs, the timeout, the repeat, the container's limits, the image archive a node whose
    container storage lacks the image loads it from (a cluster node), the files it reads (mounted read-only into a
    container); the process's name, GPUs, CPUs and scratch folder are set here."""
    spec = spec_of(spec)
    out, log = Path(out), Path(log)
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    context = {"runtime": runtime, "git_commit": host.git_commit(), "repeat": options.repeat,
               "launcher": {"node": socket.gethostname(), "gpus_allocated": allocated_gpus(),
                            "cpus_allocated": allocated_cpus(), "cpu_pinning": None,
                            "slurm_job_id": os.environ.get("SLURM_JOB_ID")}}
    with _exclusive(out):
        try:
            context["environment"] = environment = environment_records.read(environment_record)
            resolved = runtimes.resolve(runtime)
            ensure_image(resolved, environment, options.image_archive)
            failure = _preflight(spec, resolved)
            if not failure:
                with gpu_lease(spec, resolved, host_cpus=options.host_cpus) as lease:
                    # what a compile cache built here is built for (kbench.instruments.compile_cache.device_key)
                    context["launcher"]["device"] = compile_cache.device_key(
                        (lease.devices[0] if lease.devices else {}) if lease is not None else None)
                    if lease:        # a CPU cell keeps the scheduler's allocation as the record of its job
                        # the leased GPUs by UUID, however the runtime names them (podman's CDI: by index): what
                        # the runner's identity check expects the framework to run on
                        context["launcher"]["gpu_uuids"] = [d.get("uuid") for d in lease.devices]
                        context["launcher"].update(gpus_allocated=lease.gpus,
                                                   cpus_allocated=lease.cpus or context["launcher"]["cpus_allocated"])
                    elif options.host_cpus and context["launcher"]["cpus_allocated"] is None:
                        context["launcher"]["cpus_allocated"] = sorted(os.sched_getaffinity(0))     # all it has
                    failure = _supervise(spec, resolved, environment, context, out, log,
                                         replace(options, gpus=lease.gpus if lease else None,
                                                 cpuset=lease.cpus if lease else None))
        except (LaunchError, OSError, ValueError, KeyError) as error:
            failure = cell.error_info("LaunchError", f"the cell process could not be started: "
                                                     f"{type(error).__name__}: {error}")
        if failure or not out.exists():
            failure = failure or cell.error_info("NoResult", "cell process exited without writing a result")
            failure["detail"] = log.read_text()[-4000:] if log.exists() else ""
            status = "oom" if failure["type"] == OOM_KILLED else "failed"
            cell.new_result(spec, context, status, failure, options.repeat).write(out)
        _keep_attempt(out, log)
    return cell.read(out)


LEASES = Path("/tmp")          # host-wide: every run (and user) of this pipeline on the host takes its GPUs from here


def lease_path(uuid: str, leases: Path | None = None) -> Path:
    """The host-wide lock file of one GPU's lease, by its UUID."""
    return (LEASES if leases is None else leases) / f"kbench-gpu-{uuid}.lock"


class Lease(list):
    """The GPUs a cell got, as its runtime names them, and (outside a scheduler) the CPUs that go with them; devices:
    their facts as nvidia-smi lists them, where it does (a compile cache's device, the identity check)."""

    def __init__(self, gpus: list[str], cpus: list[int] | None = None, devices: list[dict] | None = None):
        super().__init__(gpus)
        self.cpus, self.devices = cpus, devices or []

    @property
    def gpus(self) -> list[str]:
        return list(self)


@contextlib.contextmanager
def gpu_lease(spec: CellSpec | JobSpec | dict, runtime: Runtime, host: preflight.Host | None = None, poll_s: float = 0.5,
              host_cpus: bool = False):
    """The GPUs a GPU cell gets: a scheduler's allocation where there is one (SLURM); else one GPU of this host to
    itself, the first free one among those it may use (an exported CUDA_VISIBLE_DEVICES narrows them), under a
    host-wide lock per GPU (by UUID), waiting while every one is taken, with that GPU's share of the CPUs (cpu_shares;
    host_cpus: every CPU this process may use, for a job whose CPU half is measured too, which its rule runs alone).
    So cells side by side (rule cell's threads share the cores among the GPUs) never share a GPU or a core, and no
    cell sees every GPU. Yields a Lease (the names the runtime takes: Runtime.gpu_name), None for a CPU cell."""
    spec = spec_of(spec)
    if not spec.on_gpu:
        yield None
        return
    host = host or preflight.Host()
    allocated = allocated_gpus()
    if allocated is not None:
        yield Lease(allocation_names(runtime, allocated, host), devices=allocation_devices(allocated, host))
        return
    listed = preflight.leasable(host)
    devices = preflight.visible(listed)
    if not devices:
        wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise LaunchError(f"CUDA_VISIBLE_DEVICES={wanted} names none of the GPUs nvidia-smi lists "
                          f"({', '.join(d['index'] + ' ' + d['uuid'] for d in listed)})" if listed and wanted
                          else "a GPU cell, and nvidia-smi lists no GPU on this host")
    while True:
        for position, device in enumerate(devices):
            # whichever account made the lock file, this one can take it (kbench.machine.host.open_lock)
            fd = open_lock(lease_path(device["uuid"]))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield Lease([runtime.gpu_name(device)],
                            sorted(os.sched_getaffinity(0)) if host_cpus else cpu_share(position, devices), [device])
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        time.sleep(poll_s)


def has_image(runtime: Runtime, image_id: str) -> bool:
    return subprocess.run([runtime.client, *runtime.image_probe, image_id], capture_output=True,
                          env=runtime.process_env()).returncode == 0


def ensure_image(runtime: Runtime, environment: dict, archive: str | Path | None) -> None:
    """A node whose container storage lacks the cell's image (a cluster node: images are built on the submit host)
    loads it from the archive the submit host wrote, once per node (a node-local lock), and must then hold exactly
    the recorded image ID."""
    client = runtime.client
    if client is None:
        return
    if not shutil.which(client):
        raise LaunchError(f"`{client}` is not on PATH (runtime {runtime.name})")
    if has_image(runtime, environment["id"]):
        return
    node = socket.gethostname()
    if not archive:
        raise LaunchError(f"image {environment['id']} is not in {client}'s storage on {node}, and no archive to "
                          "load it from (config ship_images: true ships images to the nodes)")
    with host.file_lock(Path(f"/tmp/kbench-image-load-{runtime.name}.lock")):
        if not has_image(runtime, environment["id"]):
            loaded = subprocess.run([client, "load", "--quiet", "--input", str(archive)], capture_output=True,
                                    text=True, env=runtime.process_env())
            if loaded.returncode != 0:
                raise LaunchError(f"{client} load of {archive} on {node} failed: {loaded.stderr.strip()[-500:]}")
        if not has_image(runtime, environment["id"]):
            raise LaunchError(f"{archive} loaded on {node} does not hold the recorded image {environment['id']}")


def _exclusive(out: Path):
    """One process per cell at a time: a run resumed after its driver died waits here until the previous cell
    process (killed by its watchdog) has let go."""
    return host.file_lock(out.parent / f".{out.name}.lock")


def _keep_attempt(out: Path, log: Path) -> None:
    """Every attempt's record and log are also kept, timestamped, in attempts/ beside them: Snakemake deletes a
    job's outputs before it reruns it (a retry of failed cells, a forced rerun), and nothing computed may be lost."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in (out, log):
        if path.exists():
            kept = path.parent / "attempts" / f"{path.name}.{stamp}"
            kept.parent.mkdir(parents=True, exist_ok=True)
            _copy_whole(path, kept)


def _copy_whole(source: Path, target: Path) -> None:
    """A copy that is whole or absent (as kbench.files writes records): written to a temp file beside the target and
    renamed, so a write that fails midway (a full disk) leaves no truncated attempt behind, only the error."""
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, temporary)
        shutil.copystat(source, temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _preflight(spec: CellSpec | JobSpec, runtime: Runtime) -> dict | None:
    """This node's GPU, driver and runtime plumbing: on a cluster the submit host's check said nothing about them."""
    if not spec.on_gpu:
        return None
    if os.environ.get("SLURM_JOB_ID") and allocated_gpus() is None:
        # Without an allocation the container would get every GPU of the node, shared with other jobs' cells.
        raise LaunchError(f"SLURM job {os.environ['SLURM_JOB_ID']} has no GPU allocated; a GPU cell needs one "
                          "(profiles/slurm: set-resources cell: gpu: 1)")
    problems = preflight.problems(runtime.name, spec.accelerator, [spec.stack])
    return cell.error_info("PreflightFailed", "; ".join(problems)) if problems else None


def _supervise(spec: CellSpec | JobSpec, runtime: Runtime, environment: dict, context: dict, out: Path, log: Path,
               options: Options) -> dict | None:
    """Start the cell, wait for it (killing it whole on timeout, on SIGTERM/SIGINT, or when the driver dies), move
    its result out of its staging folder; the failure (decoded) or None."""
    name = f"kbench-{uuid.uuid4().hex[:12]}"
    staging = out.parent.resolve() / f".staging-{name}"     # absolute: the cell runs in the repo folder
    staging.mkdir()
    container = runtime.client is not None
    cpuset = options.cpuset or allocated_cpus()
    context["launcher"]["cpu_pinning"] = pinning = cpu_pinning(runtime, cpuset)
    # apptainer's scratch on the node's own disk (TMPDIR: a SLURM job's local scratch where the cluster sets one)
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-work-")) if runtime.workdir else None
    options = replace(options, name=name, cpuset=cpuset if pinning == CPUSET else None,
                      affinity=cpuset if pinning == CLIENT_AFFINITY else None, remove=not container, workdir=workdir)
    argv = runtime.command(environment, staging / RESULT_NAME, options, gpu=spec.on_gpu)
    if not shutil.which(argv[0]):
        raise LaunchError(f"`{argv[0]}` is not on PATH (runtime {runtime.name})")
    stop = _Stop(runtime, name if container else None)
    cache = seed_cache(staging, options.cache_from, environment, context["launcher"].get("device"))
    if cache:
        context["compile_cache"] = {**cache, "folder": runtime.staged_as_seen(staging / CACHE_NAME)}
    try:
        with open(log, "w") as log_file, stop.on_signals():
            log_file.write(f"$ {' '.join(argv)}\n")
            log_file.flush()
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT, text=True,
                                    env=runtime.process_env(environment, options.gpus),
                                    # a container's conmon writes a file named "oom" into its working folder when
                                    # the kernel OOM-kills the cell: the cell's own staging folder, not the repo
                                    cwd=staging if container else REPO, start_new_session=True,
                                    # a process on the host keeps to its share of the CPUs (a container: its
                                    # --cpuset-cpus, or where it cannot have one its client's affinity: cpu_pinning)
                                    preexec_fn=(lambda: os.sched_setaffinity(0, cpuset))
                                    if pinning in (AFFINITY, CLIENT_AFFINITY) else None)
            stop.process = proc
            watchdog = _Watchdog(stop)
            watchdog.start()
            proc.stdin.write(json.dumps({"spec": spec.to_dict(), "context": context,
                                         "files": runtime.files_as_seen(options.files)}))
            proc.stdin.close()
            try:       # the log the cell writes is its progress; a line of it on the terminal every 25 s
                with heartbeat.Heartbeat(f"{spec.cell_id}.r{options.repeat}", log, limit_s=options.timeout_s):
                    returncode = proc.wait(timeout=options.timeout_s)
            except subprocess.TimeoutExpired:
                stop.kill()
                return cell.error_info("Timeout", f"cell process exceeded {options.timeout_s:.0f} s; its process group"
                                                  + (" and container were" if container else " was") + " killed")
            finally:
                watchdog.leave_if_abandoned()
        oom = stop.oom_killed()
        if cache and cache["state"] != "cold":   # only a cold run's cache is kept: a warm one holds copies of others'
            shutil.rmtree(staging / CACHE_NAME, ignore_errors=True)
        for made in sorted(staging.glob("result.*")):      # the record, and what was written beside it (arrays,
            kept = cell.beside(out, made.name)        # a trace, the compile cache)
            if kept.is_dir():                   # an earlier run's cache: replaced whole
                shutil.rmtree(kept)
            os.replace(made, kept)
        if oom:
            return cell.error_info(OOM_KILLED, "the kernel killed the cell for memory (container OOMKilled)")
        return None if returncode == 0 else exit_failure(returncode, options.memory_mb if container else None)
    finally:
        stop.kill()                 # whatever is left of the group, and the container
        shutil.rmtree(staging, ignore_errors=True)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)


CACHE_NAME = compile_cache.STAGED     # in the staging folder; kept beside the record as <stem>.cache


def seed_cache(staging: Path, sources: tuple | None, environment: dict, device: str | None = None) -> dict | None:
    """The compile cache folder of a run (options.cache_from): None: none; (): an empty one, cold; records of cold runs:
    a copy of each one's kept cache that may seed this run (kbench.instruments.compile_cache.refusal: the same image and lock, the
    same kind of device, a run that ended ok and kept a cache), warm where any did (a run all of whose sources were
    refused is cold, and says why). device: this run's (kbench.instruments.compile_cache.device_key)."""
    if sources is None:
        return None
    folder = staging / CACHE_NAME
    folder.mkdir()
    own = {"status": "ok", "lock_sha256": environment.get("lock_sha256"), "image_id": environment.get("id"),
           "device": device}
    seeded, refused = [], []
    for source in map(Path, sources):
        kept = compile_cache.beside(source)
        try:
            record = cell.read(source)
        except (OSError, ValueError) as error:
            refused.append(f"{source.name}: unreadable ({type(error).__name__})")
            continue
        facts = {"status": record.status, "lock_sha256": record.provenance.get("environment", {}).get("lock_sha256"),
                 "image_id": record.provenance.get("environment", {}).get("id"),
                 "device": record.provenance.get("launcher", {}).get("device")}
        why = compile_cache.refusal(facts, own) or (None if kept.is_dir() else "it kept no cache")
        if why:
            refused.append(f"{'/'.join(source.parts[-4:])}: {why}")
            continue
        shutil.copytree(kept, folder, dirs_exist_ok=True)     # content-addressed entries: a shared one is the same
        seeded.append("/".join(source.parts[-4:]))     # task/batch/precision/record: the cell it came from
    return {"state": "warm" if seeded else "cold", "seeded_from": seeded, "refused": refused,
            "entries_before": compile_cache.entries(folder)}


class _Stop:
    """Everything that ends a cell: its process group, and its container by name."""

    def __init__(self, runtime: Runtime, container: str | None):
        self.runtime, self.container, self.process = runtime, container, None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:        # children the cell left behind in its group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.container:
            subprocess.run([self.runtime.client, "rm", "--force", "--time", "2", self.container],
                           capture_output=True, env=self.runtime.process_env())

    def oom_killed(self) -> bool:
        if not self.container:
            return False
        state = subprocess.run([self.runtime.client, "inspect", "--format", "{{.State.OOMKilled}}", self.container],
                               capture_output=True, text=True, env=self.runtime.process_env())
        return state.stdout.strip() == "true"

    @contextlib.contextmanager
    def on_signals(self):
        """SIGTERM (scancel, a kill) and SIGINT (Ctrl-C) end the cell and its container before the launcher goes."""
        def handler(signum, frame):
            self.kill()
            raise SystemExit(128 + signum)
        if threading.current_thread() is not threading.main_thread():    # only the main thread may set handlers
            yield
            return
        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


class _Watchdog(threading.Thread):
    """Kills the cell when the Snakemake process that runs this job is gone (SIGKILLed, or its node lost), and then
    the launcher, which must leave no record: a cell killed with its driver is not finished, and the next run (a
    plain rerun, `kbench resume`) redoes it only if nothing finished-looking is there."""

    def __init__(self, stop: _Stop, interval_s: float = 0.5):
        super().__init__(daemon=True)
        self.stop, self.interval_s = stop, interval_s
        self.driver = _driver()
        self.abandoned = threading.Event()

    def run(self) -> None:
        if self.driver is None:
            return
        pid, started = self.driver
        while self.stop.process.poll() is None:
            if _start_time(pid) != started:         # gone, or the PID reused by another process
                self.abandoned.set()                # before the kill: the main thread's wait returns after it
                self.stop.kill()
                os._exit(137)
            time.sleep(self.interval_s)

    def leave_if_abandoned(self) -> None:
        """Called by the main thread when the cell process has ended: if the watchdog killed it for a dead driver,
        wait for the watchdog to finish removing the cell (it then ends the process) and never return to write a
        record."""
        if self.abandoned.is_set():
            self.join()
            os._exit(137)


def _driver() -> tuple[int, str] | None:
    """The nearest ancestor that is a Snakemake process (the local driver, or a SLURM job's own Snakemake): its PID
    and start time."""
    pid = os.getppid()
    while pid > 1:
        try:
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if any(part == b"snakemake" or part.endswith(b"/snakemake") for part in command_line[:3]):
            return pid, _start_time(pid)
        pid = parent
    return None


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def exit_failure(returncode: int, memory_limit_mb: int | None = None) -> dict:
    """A cell process's exit status, decoded: a signal (negative on the host, 128+n from a container runtime or a
    shell) by name, with the likely cause where there is one. memory_limit_mb: the container's limit (a SIGKILL
    there is the limit's OOM kill, which a runtime on cgroup v1 may not report as OOMKilled)."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None
    if number is None:
        return cell.error_info("ProcessExit", f"cell process exited with status {returncode}")
    try:
        name = signal.Signals(number).name
    except ValueError:
        return cell.error_info("ProcessExit", f"cell process exited with status {returncode}")
    hint = {"SIGKILL": " (out of memory? the kernel's OOM killer sends it)", "SIGSEGV": " (a crash in native code)",
            "SIGABRT": " (an abort in native code)", "SIGTERM": " (stopped from outside)"}.get(name, "")
    if name == "SIGKILL" and memory_limit_mb:
        hint = f" (out of memory? the container's limit is {memory_limit_mb} MiB)"
    return cell.error_info("Killed", f"cell process killed by {name}{hint}")
