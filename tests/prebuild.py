"""The images and venvs the e2e tier runs in, built once per test run by the workflow's own rules: by the test
command (tests/run_tiers.py) in the background from its start, while the unit and workflow tiers run, or else by the
first e2e test that needs them. Every e2e run then starts its results folder with their records (seed), as
Snakemake finds finished outputs, instead of building or waiting for the same images again.

    python tests/prebuild.py DIR      builds into DIR/results, writes DIR/exit (the status) when done

The synthetic stack comes first (the cluster and container-fault tests run in it while the rest build), then the
framework images largest first, the Paddle venvs last, and a run waits only for the records it needs. Largest
first because a build holds about 3.5 times its image at its commit (the build container's layer, the layer's tar,
the new layer): Keras 3 on torch (8.1 GB: torch with its CUDA libraries, and TensorFlow through keras-hub) took
28 GB at its peak from a warm uv cache; built last, beside the other images (14 GB), the uv cache (7.7 GB) and the
Paddle venvs, it ran out of disk on a machine with 50 GB free. Built early, each later peak is a smaller image's.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Podman images (the synthetic stack: docker, shipped archives, SLURM, container faults; then the frameworks'
# images by size, CPU locks: 8.1, 5.8, 3.8, 3.2 and 3.2 GB) and host venvs (the host and Paddle runs; the synthetic
# venv is the workflow tier's own).
ORDER = (("images/base", "images/synthetic"), ("images/keras3-torch",), ("images/native-torch",),
         ("images/keras3-jax",), ("images/keras3-tensorflow",), ("images/keras2",), ("environments/paddle",))
WAIT_S = 3600


def record(results: Path, name: str) -> Path:
    """images/keras3-jax -> results/images/keras3-jax.cpu.json (the base: images/base.json)."""
    return results / (f"{name}.json" if name == "images/base" else f"{name}.cpu.json")


def build(folder: Path) -> int:
    """The workflow's own image and environment jobs, group by group, two jobs at a time (podman builds still take
    the host's build lock one by one; a venv installs beside them). The status: the first group's that failed."""
    results, status = folder / "results", 0
    for group in ORDER:
        proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--snakefile", str(REPO / "Snakefile"),
                               *(str(record(results, name)) for name in group), "--cores", "2", "--config",
                               "suite=tiny", "accelerator=cpu", "runtime=podman", f"results_dir={results}"], cwd=REPO)
        status = status or proc.returncode
    (folder / "exit").write_text(f"{status}\n")
    return status


def seed(folder: Path, results: Path, needs: tuple[str, ...] = (), timeout_s: float = WAIT_S) -> None:
    """A results folder that starts with the built records (images, the base's history, venvs), times kept, once the
    records it needs (names as in ORDER) are there or the build has ended: a stack that failed to build is built
    again, or fails, in the run that needs it."""
    built = folder / "results"
    deadline = time.monotonic() + timeout_s
    while not (folder / "exit").exists() and not all(record(built, name).exists() for name in needs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the image build in {folder} gave none of {needs} in {timeout_s} s")
        time.sleep(2)
    for kind in ("images", "environments"):
        (results / kind).mkdir(parents=True, exist_ok=True)
        for found in (built / kind).glob("*.json"):
            shutil.copy2(found, results / kind / found.name)


def needs(runtime: str, stacks) -> tuple[str, ...]:
    """The records a run of these stacks needs: podman images (and their base), or host venvs."""
    if runtime == "host":
        return tuple(f"environments/{stack}" for stack in stacks)
    return ("images/base", *(f"images/{stack}" for stack in stacks))


if __name__ == "__main__":
    sys.exit(build(Path(sys.argv[1])))
