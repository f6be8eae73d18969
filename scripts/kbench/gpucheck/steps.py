"""The GPU check's acceptance steps: what a first run on a GPU host must show of the guards that keep its numbers
honest, beside its cells (kbench.gpucheck.check). Each step is one row: passed, FAILED with why (the check then
exits 1), or not measured with why (what the host lacks for it: no second account to act as, no podman, no GPU cell
that ran). The steps:

- CPU shares by core: the launcher's shares of this host's CPUs among its GPUs (kbench.run.launch.cpu_shares) hold
  whole cores, never overlap, and sit on their GPU's NUMA node where sysfs names it;
- a second account's lease: another account (uid 65534, by setpriv, where this one is root) takes a GPU's lease lock
  root made, is refused while this process holds it, and takes it again after;
- CPU pinning (per runtime): a process started exactly as a cell is (lease, share, the runtime's command line; for
  podman by an account without the cpuset controller, the pinned client: kbench.machine.host.cpuset_delegation) runs on the
  CPUs its record says it was given;
- the launched device: that process's GPU, by UUID (torch's device properties, else NVML), is the one it was leased;
- float32 conv probe: with TF32 off, a float32 convolution runs in float32 like the matmul (JAX's matmul preset
  once left convolutions at DEFAULT);
- busy share against the window: every GPU cell with a device profiler has a device-busy share over its own timed
  window's ms/step, in (0, 1];
- device UUID: every GPU cell compared the device its framework ran on with its lease (kbench.run.runner
  .check_device_identity) and recorded it checked;
- breakdown by kind: every GPU cell's breakdown (kbench.breakdown.measure) closes, has each profiled step's figures
  and the timed window's waiting; an XLA cell read its programs from the profiler's XSpace, and a TensorFlow cell tied
  its kernels to the ops that launched them;
- compile cache across GPU models: a cache built on another GPU model (or a MIG instance of this one) is refused
  for this GPU, one built on this model is not (kbench.instruments.compile_cache.refusal);
- identity on an index lease: with this GPU leased by index (podman's CDI) and no UUID from the framework (JAX,
  TensorFlow, Paddle), the check expects the UUID the launcher leased: this GPU's passes, another GPU's fails;
- a SLURM allocation other than GPU 0: the node's last GPU, in the node's view and in a job's renumbered view
  (ConstrainDevices: it alone, as 0), resolves to that GPU's UUID;
- MIG: the devices a cell can lease, MIG instances in place of their GPU (kbench.gpu.preflight.leasable), listed in
  one line; a GPU in MIG mode without an instance fails it (no cell could run there);
- MIG in a container: a GPU cell whose framework reports no UUID (the synthetic adapter's stand-in GPU, read as JAX's,
  TensorFlow's and Paddle's are: through NVML) leased the host's first MIG instance in podman (its CDI name, no
  CUDA_VISIBLE_DEVICES inside): its identity check compared the instance's UUID with the lease, and its record says
  energy and clocks are not measured on an instance. A host without a MIG instance: not measured.
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

from kbench.contract import cell
from kbench.instruments import compile_cache
from kbench.machine import host, environment_records
from kbench.gpu import nvml, preflight
from kbench.run import launch
from kbench.run import runner
from kbench.run.runner import uuid_key

PASSED = "passed"
NOBODY = 65534          # the second account: nobody's uid, which every Linux host has
CHILD_S = 60


def failed(why: str) -> str:
    return f"FAILED: {why}"


def not_measured(why: str) -> str:
    return f"not measured: {why}"


def step(name: str, status: str, figures: str = "") -> dict:
    return {"step": name, "status": status, "figures": figures}


def cpus_text(cpus) -> str:
    """CPU numbers as a kernel CPU list: [0, 1, 2, 3, 8] -> "0-3,8"."""
    runs, cpus = [], sorted(cpus)
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) or "none"


# ---------------------------------------------------------------- host steps, before any cell

def cpu_shares_step(devices: list[dict], sysfs: Path | None = None) -> dict:
    """The launcher's CPU shares for cells side by side on `devices`, checked against this host's topology."""
    name = "CPU shares by core"
    if not devices:
        return step(name, not_measured("no GPU listed"))
    shares = launch.cpu_shares(devices, sysfs)
    mine = sorted(os.sched_getaffinity(0))
    if shares is None:
        return step(name, not_measured(f"fewer CPUs ({len(mine)}) than GPUs ({len(devices)}): no shares to check"))
    cores = host.cpu_cores(mine, sysfs)
    node_of = {cpu: node for node, cpus in host.numa_nodes(sysfs).items() for cpu in cpus}
    gpu_nodes = [host.pci_numa_node(d.get("pci_bus_id"), sysfs) for d in devices]
    share_nodes = [{node_of.get(cpu) for cpu in share} for share in shares]
    problems = []
    taken = [cpu for share in shares for cpu in share]
    if len(taken) != len(set(taken)):
        problems.append("a CPU is in two shares")
    if len({len(share) for share in shares}) > 1:
        problems.append(f"shares of {sorted({len(share) for share in shares})} CPUs")
    if len(cores) >= len(devices):          # else threads are shared out by design (launch.cpu_shares)
        split = [core for core in cores
                 if sum(bool(set(core) & set(share)) for share in shares) > 1
                 or any(set(core) & set(share) and not set(core) <= set(share) for share in shares)]
        problems += [f"core {cpus_text(core)} is split between shares" for core in split]
    node_cores = {}
    for core in cores:
        node_cores[node_of.get(core[0])] = node_cores.get(node_of.get(core[0]), 0) + 1
    for i, node in enumerate(gpu_nodes):
        if node is None or share_nodes[i] == {node}:
            continue
        others = [j for j, found in enumerate(share_nodes) if found == {node} and gpu_nodes[j] != node]
        per_gpu = node_cores.get(node, 0) // gpu_nodes.count(node)
        if others:
            problems.append(f"GPU {devices[i]['index']}'s share is off its NUMA node {node}, where GPU "
                            f"{devices[others[0]]['index']}'s share (its GPU on node {gpu_nodes[others[0]]}) sits")
        elif per_gpu >= 1:          # its node could hold a share for each of its GPUs: split, not left
            problems.append(f"GPU {devices[i]['index']}'s share is off its NUMA node {node}, whose "
                            f"{node_cores.get(node, 0)} cores give each of its {gpu_nodes.count(node)} GPUs "
                            f"{per_gpu}")
    figures = "; ".join(f"GPU {d['index']} (node {'?' if n is None else n}): CPUs {cpus_text(s)}"
                        for d, n, s in zip(devices, gpu_nodes, shares))
    return step(name, failed("; ".join(problems)) if problems else PASSED, figures)


# The launcher's own lock, opened as the launcher opens it, taken without waiting
TRY_LEASE = ("import fcntl, sys\nfrom pathlib import Path\nfrom kbench.machine.host import open_lock\n"
             "fd = open_lock(Path(sys.argv[1]))\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    print('refused')\n"
             "else:\n    print('taken')\n")


def account_argv(uid: int = NOBODY) -> tuple[list[str] | None, str]:
    """How to start a Python process as a second account (setpriv, as root), with who it is; None and why where this
    process cannot act as another account."""
    if os.geteuid() != 0:
        return None, f"this account is uid {os.geteuid()}, not root: it cannot act as another"
    python = host.python_for(uid)
    if python is None:
        return None, (f"no Python here that uid {uid} can run with kbench importable (setpriv missing, or the "
                      "interpreters and the repository lie where that account cannot read)")
    return ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", python], f"uid {uid}"


def second_account_lease_step(devices: list[dict], uid: int = NOBODY, leases: Path | None = None) -> dict:
    """While this process holds the first GPU's lease (its lock file made by this account where none was, as a cell's
    launcher makes it), another account is refused it; once it lets go, that account takes it. A lock file the other
    account cannot open (an older launcher's, made 0600 under root's umask) reads as an error: that GPU would be lost
    to every other account."""
    name = "a second account's lease"
    if not devices:
        return step(name, not_measured("no GPU listed"))
    argv, who = account_argv(uid)
    if argv is None:
        return step(name, not_measured(who))
    path = launch.lease_path(devices[0]["uuid"], leases)

    def attempt() -> str:
        proc = subprocess.run([*argv, "-c", TRY_LEASE, str(path)], capture_output=True, text=True, timeout=CHILD_S,
                              env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(host.REPO / "scripts")})
        said = proc.stdout.strip()
        return said if said in ("taken", "refused") else \
            f"error: {(proc.stderr.strip().splitlines() or ['no output'])[-1][:200]}"
    fd = host.open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return step(name, not_measured(f"GPU {devices[0]['index']} is leased now (a cell runs on it)"))
        during = attempt()
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    after = attempt()
    mode = stat.S_IMODE(path.stat().st_mode)
    figures = (f"{who} on GPU {devices[0]['index']}: {during} while this process held it, {after} after; {path} "
               f"mode {mode:o}")
    problems = [f"{when}: {said}, expected {want}" for when, said, want in
                (("while held", during, "refused"), ("after", after, "taken")) if said != want]
    return step(name, failed("; ".join(problems)) if problems else PASSED, figures)


# ---------------------------------------------------------------- a process started as a cell is

def launched(runtime: str, record: Path, out: Path, stack: str, timeout_s: float) -> cell.CellResult:
    """kbench.run.seen started through the launcher on a GPU lease, as a cell of `stack` in `runtime`."""
    job = {"cell_id": f"gpucheck/launched/{runtime}", "job": "gpucheck_launched", "accelerator": "gpu",
           "framework_def": {"stack": stack}}
    return launch.run_cell(job, runtime, record, out / f"launched-{runtime}.json", out / f"launched-{runtime}.log",
                           launch.Options(module="kbench.run.seen", timeout_s=timeout_s))


def pinning_step(result: cell.CellResult, delegation: host.Delegation | None = None) -> dict:
    """The CPUs the launched process ran on are those its record says its launcher gave it (its share), however the
    runtime pinned it (cpuset, client affinity, affinity)."""
    runtime = result.provenance.get("runtime")
    name = f"CPU pinning ({runtime})"
    delegation = delegation or host.cpuset_delegation()
    reading = (f"cpuset {'delegated' if delegation.cpuset else 'not delegated'} to uid {os.geteuid()} "
               f"({delegation.why})")
    if result.status != "ok":
        return step(name, failed(f"the process did not run: {result.text()}"), reading)
    launcher = result.provenance.get("launcher") or {}
    given, pinning, seen = launcher.get("cpus_allocated"), launcher.get("cpu_pinning"), result.evidence["cpus"]
    figures = f"{pinning}; given CPUs {cpus_text(given or [])}, ran on {cpus_text(seen)}; {reading}"
    if not given:
        return step(name, not_measured("no CPU share (fewer CPUs than GPUs)"), figures)
    if sorted(seen) != sorted(given):
        return step(name, failed(f"ran on CPUs {cpus_text(seen)}, given {cpus_text(given)} ({pinning})"), figures)
    return step(name, PASSED, figures)


def launched_device_step(result: cell.CellResult, devices: list[dict]) -> dict:
    """The GPU the launched process saw, by UUID, is the one it was leased: by the UUID the launcher knew for its lease
    (provenance.launcher.gpu_uuids: a SLURM job's renumbered view included, where the node's index "5" names nothing
    the job's nvidia-smi lists), else the lease's own name (a UUID, or an index: podman's CDI)."""
    runtime = result.provenance.get("runtime")
    name = f"launched device ({runtime})"
    if result.status != "ok":
        return step(name, failed(f"the process did not run: {result.text()}"))
    launcher = result.provenance.get("launcher") or {}
    leased = (launcher.get("gpus_allocated") or [None])[0]
    known = next((u for u in launcher.get("gpu_uuids") or [] if uuid_key(u)), None)
    evidence = result.evidence
    seen, source = ((evidence["torch_uuid"], "torch") if uuid_key(evidence.get("torch_uuid"))
                    else ((evidence.get("nvml") or {}).get("uuid"), "NVML"))
    expected = known or (leased if uuid_key(leased) else next((d["uuid"] for d in devices
                                                                if d["index"] == str(leased)), None))
    figures = f"leased {leased}, saw {seen} ({source}); CUDA_VISIBLE_DEVICES={evidence.get('cuda_visible_devices')}"
    if not uuid_key(seen):
        return step(name, not_measured("the process saw no GPU UUID (no torch with a GPU, no NVML)"), figures)
    if uuid_key(seen) != uuid_key(expected):
        lease = expected or f"{leased}, whose UUID nothing knows (no GPU listed as {leased}, none the launcher knew)"
        return step(name, failed(f"leased {lease}, ran on {seen}"), figures)
    return step(name, PASSED, figures)


def podman_image_record(results: Path, nvml_bindings: bool = False) -> Path | None:
    """A GPU image record of this repository's whose image podman's storage holds (the launched process needs any
    image with Python; the scripts are mounted), or None. nvml_bindings: only an image whose lock pins nvidia-ml-py
    (every framework stack's; not the synthetic stack's), for a process that reads NVML."""
    if not shutil.which("podman"):
        return None
    for path in sorted((results / "images").glob("*.gpu.json")):
        try:
            found = environment_records.read(path)
            image = found["id"]
            if nvml_bindings and "nvidia-ml-py==" not in (host.REPO / found["lock"]).read_text():
                continue
        except (OSError, ValueError, KeyError):
            continue
        if subprocess.run(["podman", "image", "exists", image], capture_output=True).returncode == 0:
            return path
    return None


# ---------------------------------------------------------------- MIG in a container

MIG_CONTAINER = "MIG in a container"


def mig_instance(host_: preflight.Host | None = None) -> dict | None:
    """The first MIG instance a cell here may lease (kbench.gpu.preflight.leasable, narrowed as the cells' leases are
    by an exported CUDA_VISIBLE_DEVICES), or None: none on this host, or nvidia-smi cannot say."""
    try:
        found = preflight.visible(preflight.leasable(host_ or preflight.Host()))
    except (OSError, subprocess.SubprocessError):
        return None
    return next((device for device in found if device.get("mig")), None)


@contextlib.contextmanager
def lease_narrowed_to(uuid: str):
    """The launcher's GPU lease narrowed to one device, as an exported CUDA_VISIBLE_DEVICES narrows it outside a
    SLURM job (kbench.gpu.preflight.visible; a container still gets none: its runtime hands it the device)."""
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def mig_cell(spec, record: Path, out: Path, instance: dict, timeout_s: float) -> cell.CellResult:
    """The GPU cell `spec` run through the launcher in podman (the image of `record`) on the MIG instance's lease: its
    CDI name (0:1) on the command line, no CUDA_VISIBLE_DEVICES in the container."""
    with lease_narrowed_to(instance["uuid"]):
        return launch.run_cell(spec, "podman", record, out / "mig-container.json", out / "mig-container.log",
                               launch.Options(timeout_s=timeout_s))


def mig_container_step(result: cell.CellResult | None, instance: dict | None, why_not: str = "") -> dict:
    """A cell on a MIG instance in a container: ok, its identity checked against the leased instance's UUID (NVML's
    MIG device under the visible GPU: kbench.gpu.nvml) and named MIG, and its energy and clocks not measured, with
    the reason (they would be the whole GPU's). instance None: no MIG instance on this host; result None: not run
    (why_not)."""
    if instance is None:
        return step(MIG_CONTAINER, not_measured("no MIG instance on this host"))
    if result is None:
        return step(MIG_CONTAINER, not_measured(why_not), f"MIG instance {instance['index']} {instance['uuid']}")
    launcher = result.provenance.get("launcher") or {}
    leased = next(iter(launcher.get("gpu_uuids") or []), None)
    identity, energy = result.provenance.get("device_identity") or {}, result.energy or {}
    figures = (f"leased {', '.join(launcher.get('gpus_allocated') or []) or 'nothing'} ({leased}); ran on "
               f"{identity.get('uuid')} ({identity.get('uuid_from')}); energy: {energy.get('energy_note')}")
    if result.status != "ok":
        return step(MIG_CONTAINER, failed(f"the cell did not run: {result.text()}"), figures)
    if not runner.is_mig(leased):
        return step(MIG_CONTAINER, not_measured(f"the lease was {leased}, no MIG instance (a SLURM job's allocation "
                                                "decides)"), figures)
    problems = []
    if not identity.get("checked") or not identity.get("mig"):
        problems.append(f"its identity was not checked as a MIG instance ({identity.get('reason') or identity})")
    if (not str(energy.get("energy_note") or "").startswith(nvml.NOT_ON_MIG_INSTANCE)
            or energy.get("energy_j") is not None or energy.get("sm_clock_mhz_mean") is not None):
        problems.append("its record reports energy or clocks on the instance: the whole GPU's")
    return step(MIG_CONTAINER, failed("; ".join(problems)) if problems else PASSED, figures)


# ---------------------------------------------------------------- the probes and the cells' records

def conv_probe_step(probes: list[dict]) -> dict:
    """With TF32 off, a float32 conv and a float32 matmul are both float32 (class fp32), in every framework probed."""
    name = "float32 conv probe"
    off = [p for p in probes if p["TF32 mode"] == "off" and not p.get("error")]
    if not any(p.get("float32 conv is") for p in off):
        return step(name, not_measured("no conv probe ran with TF32 off"))
    problems = [f"{p['framework']}: {kind} is {p.get(key)} with TF32 off" for p in off
                for kind, key in (("matmul", "float32 matmul is"), ("conv", "float32 conv is"))
                if p.get(key) != "fp32"]
    figures = "; ".join(f"{p['framework']}: matmul {p.get('float32 matmul is')}, conv {p.get('float32 conv is')}"
                        for p in off)
    return step(name, failed("; ".join(problems)) if problems else PASSED, figures)


def gpu_cells(results: list[cell.CellResult]) -> list[cell.CellResult]:
    return [r for r in results if r.status == "ok" and r.spec.on_gpu]


def each_gpu_cell(name: str, results: list[cell.CellResult], read, unread: str, none_read: str) -> dict:
    """A step over every GPU cell that ran: read(result) is None for a cell the step does not count (named after
    `unread`), else (its problems, its figure or None). Passed where no counted cell has a problem; not measured where
    no GPU cell ran, or none was counted (none_read)."""
    ran = gpu_cells(results)
    if not ran:
        return step(name, not_measured("no GPU cell ran"))
    problems, figures, left = [], [], []
    for result in ran:
        found = read(result)
        if found is None:
            left.append(result.cell_id.rsplit("/", 1)[-1])
            continue
        problems += found[0]
        figures += [found[1]] if found[1] else []
    if left:
        figures.append(f"{unread}: {', '.join(left)}")
    if not problems and len(left) == len(ran):
        return step(name, not_measured(none_read), "; ".join(figures))
    return step(name, failed("; ".join(problems)) if problems else PASSED, "; ".join(figures))


def busy_share_step(results: list[cell.CellResult]) -> dict:
    """Every GPU cell whose framework has a device profiler (torch: kbench.adapters._hooks) has a busy share, over
    its own timed window's ms/step (not the profiled steps'), within (0, 1]; a cell without a device profiler says so
    and is not counted."""
    return each_gpu_cell("busy share against the window", results, _busy_share, "no device profiler",
                         "no GPU cell with a device profiler ran")


def _busy_share(result: cell.CellResult) -> tuple[list[str], str | None] | None:
    busy = result.timing.get("device_busy") or {}
    share, reason = busy.get("share"), busy.get("reason") or ""
    if share is None and "no device profiler here" in reason:
        return None
    if share is None:
        return [f"{result.cell_id}: no share ({reason or 'no reason given'})"], None
    problems = []
    window = busy.get("window_ms_per_step")
    if window is None or not math.isclose(window, result.timing["mean_ms"], rel_tol=1e-9):
        problems.append(f"{result.cell_id}: share over {window} ms/step, not its window's {result.timing['mean_ms']}")
    if not 0 < share <= 1:
        problems.append(f"{result.cell_id}: share {share}")
    overhead = busy.get("profiler_overhead")
    return problems, f"{result.cell_id}: {share:.0%} busy" + (f", profiled x{overhead:.2f}" if overhead else "")


def device_uuid_step(results: list[cell.CellResult]) -> dict:
    """Every GPU cell compared its framework's device with its lease, by UUID, and recorded it checked (a mismatch
    fails the cell itself: kbench.run.runner.DeviceMismatch)."""
    name = "device UUID"
    ran = gpu_cells(results)
    if not ran:
        return step(name, not_measured("no GPU cell ran"))
    identities = {r.cell_id: r.provenance.get("device_identity") or {} for r in ran}
    unchecked = [f"{cell_id}: {found.get('reason', 'no device identity recorded')}"
                 for cell_id, found in identities.items() if not found.get("checked")]
    figures = "; ".join(f"{cell_id.rsplit('/', 1)[-1]}: {found.get('uuid')} ({found.get('uuid_from')})"
                        for cell_id, found in identities.items() if found.get("checked"))
    return step(name, failed("; ".join(unchecked)) if unchecked else PASSED, figures)


# The columns that run their step in XLA programs where the cell compiles it (jit_compile); any cell whose breakdown
# found time in XLA's ops (xla_share) is one too
XLA_COLUMNS = ("keras3-jax", "keras3-tensorflow", "keras2")
# The columns whose GPU kernels XProf's trace ties to the TensorFlow op that launched them (tf_op) or, under XLA, to
# their HLO instruction
TF_COLUMNS = ("keras2", "keras3-tensorflow")


def breakdown_problems(result: cell.CellResult) -> list[str]:
    """What a GPU cell's breakdown (kbench.breakdown.measure) lacks of what the tables need from it: it closes, it has
    each profiled step's figures, its waiting is the timed window's, an XLA cell read its programs' contents from the
    profiler's XSpace, and a TensorFlow cell's kernels were tied to the ops that launched them (a kernel read by its
    bare name alone says nothing of a cuBLAS or Eigen kernel's op)."""
    found, spec = result.breakdown, result.spec
    if not found.get("closes"):
        return [f"does not close ({found.get('why') or 'no reason given'})"]
    problems = []
    per_step = (found.get("per_step") or {}).get("step_ms")
    if per_step is None or len(per_step) != found.get("steps"):
        problems.append(f"per-step figures for {'no' if per_step is None else len(per_step)} of its "
                        f"{found.get('steps')} steps")
    if found.get("waiting_basis") != "timed":
        problems.append(f"waiting on the {found.get('waiting_basis')} basis, not the timed window's")
    read_from = found.get("read_from") or {}
    if (found.get("xla_share") or 0) > 0 or (spec.framework in XLA_COLUMNS and spec.settings.get("jit_compile")):
        if not found.get("programs_read") or not read_from.get("program"):
            problems.append(f"XLA programs not read ({found.get('programs_read') or 0} read, "
                            f"{read_from.get('program', 0):.0%} of the ops' time read from them)")
    if spec.framework in TF_COLUMNS and not read_from.get("launcher") and not read_from.get("program"):
        problems.append("kernels not tied to their ops (read by kernel name alone: "
                        + ", ".join(f"{source} {share:.0%}" for source, share in read_from.items()) + ")")
    return problems


def breakdown_step(results: list[cell.CellResult]) -> dict:
    """Every GPU cell profiled for its breakdown by kind has one the tables can use (breakdown_problems); a cell of
    the synthetic stack (its trace has no device lanes) and one whose spec asked for no breakdown are named and not
    counted."""
    return each_gpu_cell("breakdown by kind", results, _breakdown, "no breakdown of a framework's GPU trace",
                         "no GPU cell with a framework's breakdown ran")


def _breakdown(result: cell.CellResult) -> tuple[list[str], str | None] | None:
    if result.breakdown is None or result.spec.adapter == "synthetic":
        return None
    problems = [f"{result.cell_id}: {problem}" for problem in breakdown_problems(result)]
    if problems:
        return problems, None
    found = result.breakdown
    return [], (f"{result.cell_id.rsplit('/', 1)[-1]}: closes, {len(found['per_step']['step_ms'])} steps, "
                f"{found.get('programs_read', 0)} XLA programs, read from "
                + ", ".join(f"{source} {share:.0%}" for source, share in (found.get("read_from") or {}).items()))


def cache_across_models_step(devices: list[dict]) -> dict:
    """The lent GPU's compile-cache key refuses a cache from another GPU model and from a MIG instance, and takes one
    from its own model."""
    name = "compile cache across GPU models"
    if not devices:
        return step(name, not_measured("no GPU listed"))
    own = {"status": "ok", "lock_sha256": "sha256:l", "image_id": "i", "device": compile_cache.device_key(devices[0])}
    other = "NVIDIA A100-SXM4-40GB" if "A100" not in devices[0]["name"] else "NVIDIA H100 80GB HBM3"
    found = {"another model": compile_cache.refusal({**own, "device": compile_cache.device_key({"name": other})},
                                                    own),
             "a MIG instance": compile_cache.refusal({**own, "device": compile_cache.device_key(
                 {**devices[0], "uuid": "MIG-x"})}, own) if not devices[0].get("mig") else "n/a",
             "its own model": compile_cache.refusal(dict(own), own)}
    figures = f"{own['device']}: " + "; ".join(f"{k}: {v or 'taken'}" for k, v in found.items())
    if not found["another model"] or not found["a MIG instance"] or found["its own model"]:
        return step(name, failed("the key does not tell this GPU's model from another's"), figures)
    return step(name, PASSED, figures)


def index_lease_identity_step(devices: list[dict]) -> dict:
    """The runner's identity check on a lease by index, with NVML's view alone (JAX, TensorFlow, Paddle): this GPU
    leased by its UUID passes; another GPU's UUID leased fails (it used to compare NVML's view with itself)."""
    name = "identity on an index lease"
    if not devices:
        return step(name, not_measured("no GPU listed"))
    mine = devices[0]
    other = next((d["uuid"] for d in devices[1:]), "GPU-00000000-0000-0000-0000-000000000000")
    facts = {"kind": "gpu", "name": mine["name"], "uuid": None, "nvml": {"uuid": mine["uuid"], "name": mine["name"]}}
    spec = SimpleNamespace(accelerator="gpu", on_gpu=True)      # what the check reads of a cell's spec

    def check(leased_uuid):
        context = {"launcher": {"gpus_allocated": [mine["index"]], "gpu_uuids": [leased_uuid]}}
        try:
            return runner.check_device_identity(spec, "jax", facts, context)
        except runner.DeviceMismatch as error:
            return error
    own, wrong = check(mine["uuid"]), check(other)
    figures = f"GPU {mine['index']} by index, NVML {mine['uuid']}; leased other {other}: " + (
        "refused" if isinstance(wrong, runner.DeviceMismatch) else "taken")
    if isinstance(own, Exception) or not own.get("checked") or not isinstance(wrong, runner.DeviceMismatch):
        return step(name, failed("the check does not hold an index lease to the UUID it leased"), figures)
    return step(name, PASSED, figures)


def slurm_allocation_step(devices: list[dict]) -> dict:
    """A SLURM job on the node's last GPU (7 of 8 single-GPU jobs are on no GPU 0): its index resolves to that GPU's
    UUID in the node's view, and in a job's renumbered view (ConstrainDevices: the GPU alone, as 0)."""
    name = "SLURM allocation other than GPU 0"
    if not devices:
        return step(name, not_measured("no GPU listed"))
    last = devices[-1]
    node = launch.allocation_devices([last["index"]], preflight.Host(run=lambda argv: _rows(devices)))
    job = launch.allocation_devices([last["index"]], preflight.Host(run=lambda argv: _rows([{**last, "index": "0"}])))
    seen = [found[0]["uuid"] if found else None for found in (node, job)]
    figures = f"GPU {last['index']}: node view {seen[0]}, job view {seen[1]}"
    if seen != [last["uuid"], last["uuid"]]:
        return step(name, failed(f"GPU {last['index']} did not resolve to {last['uuid']}"), figures)
    return step(name, PASSED, figures)


def _rows(devices: list[dict]) -> str:
    return "".join(f"{d['index']}, {d['name']}, {d.get('driver_version', '')}, {d['uuid']}, "
                   f"{d.get('pci_bus_id', '')}\n" for d in devices if ":" not in d["index"])


def mig_step(host_: preflight.Host | None = None) -> dict:
    """The devices a cell can lease, MIG instances in place of their GPU, in one line; a GPU in MIG mode with no
    instance fails (CUDA would see nothing there)."""
    name = "MIG"
    host_ = host_ or preflight.Host()
    try:
        found = preflight.leasable(host_)
        modes = host_.run(["nvidia-smi", "--query-gpu=index,mig.mode.current", "--format=csv,noheader"])
    except (OSError, subprocess.SubprocessError) as error:
        return step(name, not_measured(f"nvidia-smi: {error}"))
    figures = "; ".join(f"{d['index']} {d['name']}" for d in found)
    enabled = [row.split(",")[0].strip() for row in modes.splitlines() if row.strip().lower().endswith("enabled")]
    empty = [index for index in enabled if not any(d["index"].startswith(f"{index}:") for d in found)]
    if empty:
        return step(name, failed(f"GPU {', '.join(empty)} in MIG mode with no MIG instance: no cell can run there "
                                 "(nvidia-smi mig -cgi <profile> -C, by an admin, or -mig 0)"), figures)
    return step(name, PASSED, figures or "no GPU listed")


def failures(rows: list[dict]) -> list[str]:
    """The steps that failed, as the check's verdict names them."""
    return [f"{row['step']}: {row['status'].removeprefix('FAILED: ')}" for row in rows
            if row["status"].startswith("FAILED")]
