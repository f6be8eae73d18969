"""kbench.machine.host, what the machine gives every account: lock files in a host-wide folder that any account can take,
whichever made them (the GPU lease, the image load and build locks), taken here for real as another account."""
import contextlib
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO
from kbench.machine import host
from kbench.run import launch

NOBODY = 65534


@pytest.fixture
def shared_folder():
    """A folder like /tmp (world-writable, sticky) that another account can reach: pytest's own tmp_path lies under a
    folder only root may enter."""
    folder = Path(tempfile.mkdtemp(prefix="kbench-test-locks-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def umask(mask: int):
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def python_for(uid: int) -> str:
    """An interpreter the account can run (this one may live under root's home), or a skip saying why not."""
    python = host.python_for(uid, "kbench.run.launch")
    if python is None:
        pytest.skip(f"no Python here that uid {uid} can run (setpriv missing or needs root, or the interpreters lie "
                    "where that account cannot read)")
    return python


def as_another_account(code: str, *args: str, uid: int = NOBODY) -> subprocess.CompletedProcess:
    """`code` run by uid (its own group, no supplementary groups), kbench importable, no scheduler or GPU variables."""
    python = python_for(uid)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_", "PYTHON"))}
    return subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", python, "-c", code,
                           *args], capture_output=True, text=True, timeout=60,
                          env={**env, "PYTHONPATH": str(REPO / "scripts")})


GPU_ROWS = "".join(f"{i}, NVIDIA H100 80GB HBM3, 580.95.05, GPU-fake-{i}\n" for i in range(2))
LEASE_AS_ANOTHER_ACCOUNT = f"""
import sys
from pathlib import Path
from kbench.machine import runtimes
from kbench.gpu import preflight
from kbench.run import launch
launch.LEASES = Path(sys.argv[1])
host = preflight.Host(run=lambda argv: {GPU_ROWS!r})
with launch.gpu_lease({{"cell_id": "lease", "job": "lease", "accelerator": "gpu"}}, runtimes.resolve("host"), host, poll_s=0.01) as lease:
    print(",".join(lease))
"""


def test_a_gpu_lease_root_made_is_taken_by_another_account(shared_folder, monkeypatch):
    """Root (a run as root, or CI) leased both GPUs first, under a umask that keeps files private: the lock files it
    left are 0666, and another account then leases the GPU root does not hold, reading root's lock files without
    writing them; GPU-fake-0, which root holds, stays root's."""
    monkeypatch.setattr(launch, "LEASES", shared_folder)
    for name in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    from kbench.gpu import preflight
    gpus = preflight.Host(run=lambda argv: GPU_ROWS)
    spec = {"cell_id": "lease", "job": "lease", "accelerator": "gpu"}
    with umask(0o077):
        with launch.gpu_lease(spec, launch.runtimes.resolve("host"), gpus) as first, \
                launch.gpu_lease(spec, launch.runtimes.resolve("host"), gpus) as second:
            assert (first, second) == (["GPU-fake-0"], ["GPU-fake-1"])
    locks = sorted(shared_folder.iterdir())
    assert [p.name for p in locks] == ["kbench-gpu-GPU-fake-0.lock", "kbench-gpu-GPU-fake-1.lock"]
    with launch.gpu_lease(spec, launch.runtimes.resolve("host"), gpus) as held:
        assert held == ["GPU-fake-0"]
        other = as_another_account(LEASE_AS_ANOTHER_ACCOUNT, str(shared_folder))
        assert other.returncode == 0, other.stderr[-2000:]
        assert other.stdout.strip() == "GPU-fake-1"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o666 and p.stat().st_uid == os.geteuid() for p in locks)


FILE_LOCK_AS_ANOTHER_ACCOUNT = """
import sys
from pathlib import Path
from kbench.machine import host
with host.file_lock(Path(sys.argv[1])):
    print("held")
"""


def test_the_image_load_lock_root_made_is_taken_by_another_account(shared_folder):
    """kbench.machine.host.file_lock (a node's image load, the host's podman builds): made by root under a private umask, then
    taken by another account; and the other way round, root takes the one that account made."""
    made_by_root = shared_folder / "kbench-image-load-podman.lock"
    with umask(0o077), host.file_lock(made_by_root):
        pass
    assert stat.S_IMODE(made_by_root.stat().st_mode) == 0o666
    other = as_another_account(FILE_LOCK_AS_ANOTHER_ACCOUNT, str(made_by_root))
    assert (other.returncode, other.stdout) == (0, "held\n"), other.stderr[-2000:]
    made_by_other = shared_folder / "kbench-podman-build.lock"
    other = as_another_account(f"import os; os.umask(0o077)\n{FILE_LOCK_AS_ANOTHER_ACCOUNT}", str(made_by_other))
    assert (other.returncode, other.stdout) == (0, "held\n"), other.stderr[-2000:]
    assert (made_by_other.stat().st_uid, stat.S_IMODE(made_by_other.stat().st_mode)) == (NOBODY, 0o666)
    with host.file_lock(made_by_other):
        pass


def test_an_existing_lock_file_is_opened_without_o_creat(tmp_path, monkeypatch):
    """fs.protected_regular refuses O_CREAT on another account's file in a sticky world-writable folder, even where the
    file exists and is writable: here an open that asks O_CREAT of an existing file fails as it would there."""
    path = tmp_path / "kbench-gpu-GPU-fake-0.lock"
    path.touch()
    real_open = os.open

    def protected_regular(name, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.exists(name):
            raise PermissionError(errno.EACCES, "Permission denied", str(name))
        return real_open(name, flags, *args, **kwargs)
    monkeypatch.setattr(host.os, "open", protected_regular)
    with host.file_lock(path):
        pass
    fd = host.open_lock(tmp_path / "new.lock")           # absent: made, and taken
    os.close(fd)
    assert stat.S_IMODE((tmp_path / "new.lock").stat().st_mode) == 0o666


# ---------------------------------------------------------------- the cgroup controllers given to an account

USER = 1000
DEFAULT_DELEGATION = "cpu io memory pids"            # systemd's user@.service, without a Delegate= drop-in


def fake_cgroup(root: Path, controllers: str | None = DEFAULT_DELEGATION, uid: int = USER, v2: bool = True,
                manager: bool = True) -> tuple[Path, Path]:
    """A /sys/fs/cgroup of cgroup v2 (v2=False: v1, no unified root) where systemd gave user `uid`'s manager
    `controllers` (manager=False: no user manager, only the login session's own cgroup says), and the
    /proc/self/cgroup of a process in that user's login session. Returns both paths."""
    root.mkdir(parents=True)
    own = root.parent / "proc-self-cgroup"
    session = f"user.slice/user-{uid}.slice/session-3.scope"
    if not v2:
        for controller in ("cpu,cpuacct", "cpuset", "memory", "pids"):
            (root / controller).mkdir()
        own.write_text(f"12:cpuset:/\n4:memory:/{session}\n0::/{session}\n")
        return root, own
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    places = [session] + ([f"user.slice/user-{uid}.slice/user@{uid}.service"] if manager else [])
    for place in places:
        (root / place).mkdir(parents=True)
        (root / place / "cgroup.controllers").write_text(f"{controllers}\n")
    own.write_text(f"0::/{session}\n")
    return root, own


@pytest.mark.parametrize("controllers, uid, v2, manager, delegated, where", [
    (DEFAULT_DELEGATION, USER, True, True, False, f"user@{USER}.service/cgroup.controllers: cpu io memory pids"),
    ("cpuset cpu io memory pids", USER, True, True, True, f"user@{USER}.service/cgroup.controllers: cpuset cpu"),
    ("cpuset cpu io memory pids", USER, True, False, True, "session-3.scope/cgroup.controllers: cpuset"),
    (DEFAULT_DELEGATION, USER, False, True, False, "cgroup v1"),
    (DEFAULT_DELEGATION, 0, True, True, True, "root"),
    (DEFAULT_DELEGATION, 0, False, True, True, "root"),
])
def test_whether_an_account_may_give_its_containers_a_cpuset(tmp_path, controllers, uid, v2, manager, delegated,
                                                              where):
    """Read as rootless podman meets it: the user manager's controllers (systemd's default delegation has no cpuset),
    the process's own cgroup where there is no user manager, cgroup v1 (no limits at all for an account), root."""
    cgroup, own = fake_cgroup(tmp_path / "cgroup", controllers, v2=v2, manager=manager)
    found = host.cpuset_delegation(uid=uid, cgroup=cgroup, own=own)
    assert found.cpuset is delegated and where in found.why, found
    nothing = host.cpuset_delegation(uid=USER, cgroup=tmp_path / "cgroup", own=tmp_path / "no-proc")
    assert nothing.cpuset is (v2 and manager and "cpuset" in controllers)
