"""The one place that knows the machine the pipeline runs on, below every wing: where the repository is, what podman
and docker need from it (their settings, the host's limits, a host-wide lock any account can take), and which commit
is checked out."""
from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SYSFS = Path("/sys")        # where the CPU and NUMA topology is read (tests hand a fake tree)
CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
CONTAINERS_CONF = REPO / "containers" / "containers.conf"
# What a container runtime's own client gets of the driver's environment: everything but what would steer Python or
# this pipeline inside the client (the cell in the container gets only the image's and the spec's)
CLIENT_ENV = {"podman": {"CONTAINERS_CONF": str(CONTAINERS_CONF)}, "docker": {}}


def client_env(runtime: str) -> dict[str, str]:
    """The environment podman or docker runs with, here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KERAS_", "KBENCH_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **CLIENT_ENV.get(runtime, {})}


def ulimit_args() -> list[str]:
    """podman's and docker's default open-file limit (1048576) is refused where the host's hard limit is lower: use
    the host's."""
    def hard(limit: int, cap: int) -> int:
        value = resource.getrlimit(limit)[1]
        return cap if value == resource.RLIM_INFINITY else min(value, cap)
    nofile, nproc = hard(resource.RLIMIT_NOFILE, 1048576), hard(resource.RLIMIT_NPROC, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


LOCK_MODE = 0o666      # a lock file holds nothing: every account of the host may take it


def open_lock(path: Path) -> int:
    """A descriptor of the lock file `path` to flock, for whichever account asks: opened read-only (flock needs no
    more), as it is where it exists (no O_CREAT: with fs.protected_regular even that fails on another account's file
    in a sticky /tmp), and where it does not, made 0666 whatever the umask (os.fchmod after the create)."""
    while True:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        except PermissionError as error:
            raise PermissionError(error.errno, f"{error.strerror} (a lock file another account made unreadable to this "
                                               "one; it holds nothing: its owner or root may remove it)",
                                  str(path)) from None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, LOCK_MODE)
        except FileExistsError:
            continue            # another process made it in between: open it as it is
        os.fchmod(fd, LOCK_MODE)
        return fd


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock on `path` (flock: every process of this host, whichever account), held for the with block."""
    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def python_for(uid: int, module: str = "kbench.machine.host") -> str | None:
    """An interpreter that account can run with this repository's `module` importable (this process's may lie under
    root's home), started by setpriv; None where there is none (or no setpriv)."""
    if shutil.which("setpriv") is None:
        return None
    for python in dict.fromkeys((sys.executable, "/usr/bin/python3")):
        if subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", python, "-c",
                           f"import {module}"], capture_output=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO / "scripts")}).returncode == 0:
            return python
    return None


# ---------------------------------------------------------------- cgroup controllers given to this account

DELEGATE_CONF = "/etc/systemd/system/user@.service.d/delegate.conf"
DELEGATE_FIX = (f"an admin sets once {DELEGATE_CONF} to `[Service]` `Delegate=cpu cpuset io memory pids` and runs "
                "`systemctl daemon-reload`; it holds from the account's next login")


@dataclass(frozen=True)
class Delegation:
    """Whether a container this account starts can be given a cpuset (podman's --cpuset-cpus), and where that was
    read."""
    cpuset: bool
    why: str


def cpuset_delegation(uid: int | None = None, cgroup: Path | None = None, own: Path | None = None) -> Delegation:
    """Root's containers get every cgroup controller. Another account's (rootless podman) get those systemd delegates
    to its user manager, `cpu io memory pids` by default and no cpuset: podman then cannot start a container with
    --cpuset-cpus (the OCI runtime: "controller `cpuset` is not available"), and on cgroup v1 it drops every limit with
    a warning. Read from the unified hierarchy (cgroup v2: <cgroup>/cgroup.controllers exists): the user manager's
    cgroup (user.slice/user-<uid>.slice/user@<uid>.service), where rootless podman's containers go, else this
    process's own (`own`, /proc/self/cgroup's 0:: line). uid, cgroup, own: this account's, /sys/fs/cgroup,
    /proc/self/cgroup where not given (tests hand a fake tree)."""
    uid = os.geteuid() if uid is None else uid
    cgroup = CGROUP if cgroup is None else cgroup
    own = PROC_CGROUP if own is None else own
    if uid == 0:
        return Delegation(True, "root: every controller")
    if not (cgroup / "cgroup.controllers").exists():
        return Delegation(False, "cgroup v1 (or hybrid): a container of an account other than root gets no cgroup "
                                 "limits; the fix needs a host booted with cgroup v2 "
                                 "(systemd.unified_cgroup_hierarchy=1)")
    places = [Path("user.slice") / f"user-{uid}.slice" / f"user@{uid}.service"]
    try:
        places += [Path(line[3:].strip().lstrip("/")) for line in own.read_text().splitlines()
                   if line.startswith("0::")]
    except OSError:
        pass
    for place in places:
        try:
            controllers = (cgroup / place / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        where = f"{cgroup / place}/cgroup.controllers: {' '.join(controllers) or 'none'}"
        return Delegation("cpuset" in controllers, where)
    return Delegation(False, f"no cgroup of uid {uid} readable under {cgroup}")


# ---------------------------------------------------------------- CPU topology (sysfs)

def cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8-11\n") as CPU numbers."""
    found = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            found += range(int(first), int(last or first) + 1)
    return found


def _read_cpus(path: Path) -> list[int] | None:
    try:
        return cpu_list(path.read_text())
    except (OSError, ValueError):
        return None


def cpu_cores(cpus, sysfs: Path | None = None) -> list[list[int]]:
    """`cpus` grouped into physical cores (each CPU with its hyperthread siblings among `cpus`: the kernel's
    core_cpus_list, or thread_siblings_list on older kernels), ordered by their first CPU. A CPU whose siblings sysfs
    does not say (no sysfs, a container's partial view) is a core of its own."""
    sysfs = SYSFS if sysfs is None else sysfs
    allowed, cores = set(cpus), {}
    for cpu in sorted(allowed):
        topology = sysfs / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        siblings = _read_cpus(topology / "core_cpus_list") or _read_cpus(topology / "thread_siblings_list") or [cpu]
        key = frozenset(siblings) if cpu in siblings else frozenset([cpu])
        cores.setdefault(key, []).append(cpu)
    return sorted(cores.values())


def numa_nodes(sysfs: Path | None = None) -> dict[int, list[int]]:
    """NUMA node -> its CPUs (sysfs devices/system/node/node*/cpulist); empty where sysfs says nothing."""
    sysfs = SYSFS if sysfs is None else sysfs
    found = {}
    for folder in (sysfs / "devices" / "system" / "node").glob("node[0-9]*"):
        cpus = _read_cpus(folder / "cpulist")
        if cpus is not None and folder.name[4:].isdigit():
            found[int(folder.name[4:])] = cpus
    return dict(sorted(found.items()))


def pci_numa_node(bus_id: str | None, sysfs: Path | None = None) -> int | None:
    """The NUMA node of a PCI device by nvidia-smi's pci.bus_id (00000000:3B:00.0; sysfs names it 0000:3b:00.0), or
    None: no bus ID, no such device, or no NUMA affinity (-1)."""
    sysfs = SYSFS if sysfs is None else sysfs
    domain, _, rest = (bus_id or "").strip().partition(":")
    try:
        name = f"{int(domain, 16):04x}:{rest.lower()}"
        node = int((sysfs / "bus" / "pci" / "devices" / name / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The host CPU's model name (compilers generate code for its instruction set), "unknown" where not said."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")
