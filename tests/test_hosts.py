"""Hosts other than this Debian 12 one: GPU hosts run Ubuntu 24.04 (Python 3.12) and Debian 13 (Python 3.13) as often.
A Debian 13 root made with mmdebstrap, the repository copied in: scripts/bootstrap's venv step (the universal driver
lock on Python 3.13) and a dry run of the workflow, as a user there would run them."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from kbench.machine import host

pytestmark = pytest.mark.e2e
TAG = "localhost/kbench-test/debian:trixie"


def host_mirror() -> str:
    """The Debian archive this host's apt reads (its sources' first URIs), else Debian's own."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if path.exists():
            for line in path.read_text().splitlines():
                words = line.split()
                if line.startswith("URIs:") and "security" not in line:
                    return words[1]
                if words[:1] == ["deb"] and "security" not in line:
                    return next(w for w in words[1:] if w.startswith("http"))
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="module")
def trixie(tmp_path_factory):
    """Debian 13 with its Python (3.13) and venv, from the host's own apt sources, as a podman image."""
    folder = tmp_path_factory.mktemp("trixie")
    rootfs = folder / "rootfs.tar"
    # the host's mirror, with trixie's suite: a sources file given whole would bring its own suite (bookworm here)
    subprocess.run(["mmdebstrap", "--quiet", "--variant=apt", "--include=python3,python3-venv,ca-certificates",
                    "trixie", str(rootfs), f"deb {host_mirror()} trixie main"], check=True, timeout=900)
    subprocess.run(["podman", "import", "--quiet", str(rootfs), TAG], check=True, capture_output=True,
                   env=host.client_env("podman"))
    yield TAG
    subprocess.run(["podman", "rmi", "--force", TAG], capture_output=True, env=host.client_env("podman"))


def repository_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored): no venv, no results."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    return target


def test_bootstrap_and_a_dry_run_on_debian_13_with_python_3_13(trixie, tmp_path):
    repo = repository_copy(tmp_path / "repo")
    cache = Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv"))
    cache.mkdir(parents=True, exist_ok=True)
    script = ("scripts/bootstrap --venv-only && .venv/bin/kbench --help && .venv/bin/snakemake -n --cores 1 --config "
              "suite=tiny accelerator=cpu runtime=host models=[bert] frameworks=[keras3-jax,native-torch-eager] "
              "precisions=[float32]")
    proc = subprocess.run(["podman", "run", "--rm", "--network", "host", *host.ulimit_args(),
                           "--volume=/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro",
                           f"--volume={cache}:/root/.cache/uv", f"--volume={repo}:/repo", "--workdir", "/repo",
                           trixie, "sh", "-c", script], capture_output=True, text=True, timeout=900,
                          env=host.client_env("podman"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "bootstrap: .venv ready (Python 3.13" in out
    assert "retry-failed" in out and "gpucheck" in out          # the kbench command bootstrap put into the venv
    assert "cell " in out and "This was a dry-run" in out
