"""The one place that knows the machine the pipeline runs on, below every wing: where the repository is, what podman
and docker need from it (their settings, the host's limits, a host-wide lock), and which commit is checked out."""
from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock on `path` (flock: every process of this host), held for the with block."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")
