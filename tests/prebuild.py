"""The images and venvs the e2e tier runs in, built once per test run by the workflow's own rules: by the test
command (tests/run_tiers.py) in the background from its start, while the unit and workflow tiers run, or else by the
first e2e test that needs them. Every e2e run then starts its results folder with their records (seed), as
Snakemake finds finished outputs, instead of building or waiting for the same images again.

    python tests/prebuild.py DIR      builds into DIR/results, writes DIR/exit (the status) when done
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Every stack the e2e runs use in podman (the synthetic stack: docker, shipped archives, SLURM, container faults)
IMAGES = ("keras3-jax", "native-torch", "keras2", "keras3-tensorflow", "keras3-torch", "synthetic")
# Host venvs of the host and Paddle runs (the synthetic venv is the workflow tier's own: it builds it as it runs)
VENVS = ("keras3-jax", "paddle")
WAIT_S = 3600


def targets(results: Path) -> list[str]:
    return ([str(results / "images" / "base.json")] + [str(results / "images" / f"{s}.cpu.json") for s in IMAGES]
            + [str(results / "environments" / f"{s}.cpu.json") for s in VENVS])


def build(folder: Path) -> int:
    """The workflow's own image and environment jobs for the targets, two at a time (podman builds still take the
    host's build lock one by one; a venv installs beside them)."""
    results = folder / "results"
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--snakefile", str(REPO / "Snakefile"),
                           *targets(results), "--cores", "2", "--config", "suite=tiny", "accelerator=cpu",
                           "runtime=podman", f"results_dir={results}"], cwd=REPO)
    (folder / "exit").write_text(f"{proc.returncode}\n")
    return proc.returncode


def wait(folder: Path, timeout_s: float = WAIT_S) -> Path:
    """The results folder of a build started elsewhere, once it has ended (whatever its status: a stack that failed
    to build is built again, or fails, in the run that needs it)."""
    deadline = time.monotonic() + timeout_s
    while not (folder / "exit").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the image build in {folder} did not end in {timeout_s} s")
        time.sleep(2)
    return folder / "results"


def seed(built: Path, results: Path) -> None:
    """A results folder that starts with the built records (images, their base's history, venvs), times kept."""
    for kind in ("images", "environments"):
        (results / kind).mkdir(parents=True, exist_ok=True)
        for record in (built / kind).glob("*.json"):
            shutil.copy2(record, results / kind / record.name)


if __name__ == "__main__":
    sys.exit(build(Path(sys.argv[1])))
