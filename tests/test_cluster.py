"""Beyond one host: cells through the docker runtime, a node loading a shipped image archive, and the suite on a real
(single-node) SLURM cluster through the shipped profile, one (fake) GPU per cell job.

CI brings up dockerd and SLURM itself (.ci/dockerd-up, .ci/slurm-up) and sets KBENCH_REQUIRE_DOCKER /
KBENCH_REQUIRE_SLURM, so a missing service fails these tests there instead of skipping them."""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import prebuild
from conftest import REPO, SNAKEMAKE, snakemake
from kbench.contract import cell
from kbench.machine import environment_records, runtimes
from kbench.run import launch
from test_faults import cell_of, fault_workflow, podman_containers, record

pytestmark = pytest.mark.e2e


def service(name: str, probe: list[str], require: str):
    """Skip where the service is absent, unless the environment says it must be there (CI). Probed when a test that
    needs it is set up, not at import: `docker info` without a daemon takes seconds, and every tier imports this."""
    up = shutil.which(probe[0]) and subprocess.run(probe, capture_output=True).returncode == 0
    if not up and os.environ.get(require):
        pytest.fail(f"{name} is required ({require}=1) but `{' '.join(probe)}` fails")
    if not up:
        pytest.skip(f"{name} is not running here (CI starts it)")


@pytest.fixture(scope="session")
def dockerd():
    service("dockerd", ["docker", "info"], "KBENCH_REQUIRE_DOCKER")


@pytest.fixture(scope="session")
def slurm():
    service("SLURM", ["sinfo", "-h"], "KBENCH_REQUIRE_SLURM")


def cells(results: Path) -> list[cell.CellResult]:
    return [cell.read(p) for p in sorted((results / "cells").rglob("*.json")) if "attempts" not in p.parts]


@pytest.mark.usefixtures("dockerd")
def test_docker_runs_cells_in_the_image_podman_built(tmp_path, built):
    """runtime docker: the image goes podman -> docker-archive -> docker load, keeps its ID, and cells run in it
    by that ID without a network. The synthetic stack (its image a tenth of a framework's: the transfer is what this
    tests, and the runner in it is the one every column runs)."""
    options = fault_workflow(tmp_path, {"ok": {}}) + ["--config", "runtime=docker"]
    prebuild.seed(built, tmp_path / "results", prebuild.needs("podman", ["synthetic"]))
    proc = snakemake(*options, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    images = tmp_path / "results" / "images"
    podman_record, docker_record = (environment_records.read(images / name) for name in
                                    ("synthetic.cpu.json", "synthetic.cpu.docker.json"))
    assert docker_record["id"] == podman_record["id"]
    found = [cell.read(cell_of(tmp_path, "ok", task)) for task in ("fit", "predict")]
    for result in found:
        assert result.status == "ok" and result.provenance["runtime"] == "docker", result.error
        assert result.provenance["environment"]["id"] == podman_record["id"]
        log = (tmp_path / "results" / "logs" / "cells" / f"{result.cell_id}.r1.log").read_text().splitlines()[0]
        assert log.startswith("$ docker run -i --init --name kbench-") and " --network none " in log
        assert log.split()[-6] == podman_record["id"]                 # started by image ID, not by tag


def test_a_node_without_the_image_loads_it_from_the_shipped_archive(tmp_path, built):
    """ship_images: the cell job finds no image in its node's storage (removed here) and loads the OCI archive the
    submit host wrote; the loaded image has the recorded ID and the cell runs in it."""
    options = fault_workflow(tmp_path, {"ok": {}})
    options += ["--config", "runtime=podman", "ship_images=True"]
    prebuild.seed(built, tmp_path / "results", prebuild.needs("podman", ["synthetic"]))
    image_record = tmp_path / "results/images/synthetic.cpu.json"
    # the submit host builds the image and its archive; the node (here the same machine) then lacks the image
    built = snakemake("results/images/synthetic.cpu.json", "results/images/synthetic.cpu.oci.tar", *options,
                      cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-3000:]
    image = environment_records.read(image_record)
    podman = dict(capture_output=True, env=launch.process_env("podman"))
    subprocess.run(["podman", "rmi", "--force", image["id"]], check=True, **podman)
    assert not launch.has_image(runtimes.resolve("podman"), image["id"])
    proc = snakemake(*options, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "results/images/synthetic.cpu.oci.tar").exists()
    assert launch.has_image(runtimes.resolve("podman"), image["id"])
    result = record(cell_of(tmp_path, "ok"))
    assert result["status"] == "ok" and result["provenance"]["environment"]["id"] == image["id"]


def squeue_states() -> list[str]:
    """Every job SLURM still lists (MinJobAge keeps finished ones): id, state, Snakemake's rule comment."""
    return subprocess.run(["squeue", "--states=all", "-h", "-o", "%i %T %k"], capture_output=True, text=True,
                          check=True).stdout.splitlines()


# The CI cluster: one node, 2 CPUs, 2 fake GPUs. A cell job takes one CPU, one GPU and 6 GB, so two cells run at once.
# (--set-resources on the command line replaces the profile's list, so gpu=1 is repeated.)
SLURM = ["--profile", str(REPO / "profiles" / "slurm"), "--set-threads", "cell=1", "--set-resources",
         "cell:gpu=1", "cell:mem_mb=6000", "--slurm-init-seconds-before-status-checks", "5"]


@pytest.mark.usefixtures("slurm")
def test_the_shipped_slurm_profile_runs_each_cell_as_a_job_with_one_gpu(tmp_path, built):
    """The synthetic stack's cells in two columns (fit and predict), each one SLURM job with one GPU, in the image
    the submit host built (local rules); and the JAX-against-NumPy job (keras3-jax selected, its cells n/a here), the
    one job besides cells that runs on a node. The columns' real images run in the e2e podman run: here SLURM's
    plumbing is what is tested."""
    before = set(squeue_states())
    options = fault_workflow(tmp_path, {"first": {}, "second": {}}, timeout_minutes=5)
    # the JAX-against-NumPy job at a few small sizes: here it shows where the job runs; what it measures is the e2e
    # podman run's
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({
        "frameworks": ["first", "second", "keras3-jax"],
        "not_applicable": [{"framework": "keras3-jax", "model": "synthetic", "task": "*",
                            "reason": "the synthetic model has no Keras 3 build"}],
        "jax_numpy": {"enabled": True, "suites": {"tiny": {
            "steps": {"warmup": 1, "timed": 4, "blocks": 2}, "mlp_widths": [16, 32, 4],
            "sizes": {"matmul": [64], "elementwise": [1000], "reduction": [64], "mlp": [8]}}}}}))
    options.insert(options.index("--configfile") + 2, str(overlay))
    prebuild.seed(built, tmp_path / "results", prebuild.needs("podman", ["synthetic", "keras3-jax"]))
    # ship_images off: this one node has the images already (the archive path runs in the scancel test below and in
    # test_a_node_without_the_image_loads_it...)
    proc = snakemake(*SLURM, *options, "--config", "runtime=podman", "ship_images=False", cwd=tmp_path, timeout=3000)
    jobs = [line for line in squeue_states() if line not in before]
    print("SLURM jobs of this run:", *jobs, sep="\n  ")
    assert proc.returncode == 0, proc.stdout[-5000:]
    found = [r for r in cells(tmp_path / "results") if r.provenance.get("launcher", {}).get("slurm_job_id")]
    assert len(found) == 4 and {r.status for r in found} == {"ok"}, [(r.cell_id, r.error) for r in found]
    # every cell is a job, the two n/a keras3-jax ones too (they only write their record)
    cell_jobs = [line for line in jobs if "rule_cell" in line]
    assert len(cell_jobs) == 6 and all(line.split()[1] == "COMPLETED" for line in cell_jobs)
    # images and tables ran on the submit host; the JAX-against-NumPy job runs on a node, as a cell does: on a GPU
    # cluster its JAX is the node's GPU
    others = [line for line in jobs if "rule_cell" not in line]
    assert len(others) == 1 and "rule_jax_numpy" in others[0] and others[0].split()[1] == "COMPLETED", others
    for result in found:
        launcher = result.provenance["launcher"]
        assert launcher["slurm_job_id"] in {line.split()[0] for line in cell_jobs}
        assert launcher["node"] == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
        assert launcher["gpus_allocated"] in (["0"], ["1"]) and len(launcher["cpus_allocated"]) == 1
        log = (tmp_path / "results" / "logs" / "cells" / f"{result.cell_id}.r1.log").read_text().splitlines()[0]
        assert "--memory=6000m" in log and f"--cpuset-cpus={launcher['cpus_allocated'][0]}" in log
    assert (tmp_path / "results" / "tables" / "tiny" / "strict" / "ms_per_step.csv").exists()


@pytest.mark.usefixtures("slurm")
def test_scancel_of_a_running_cell_job_removes_its_container_and_the_cell_is_redone(tmp_path, built):
    """A cell that builds for 40 s is cancelled while it runs: SLURM signals the job's processes, the launcher
    removes the container (whose processes SLURM does not track), the run reports the job failed, and a rerun redoes
    the cell."""
    options = fault_workflow(tmp_path, {"slow": {"KBENCH_SYNTHETIC_BUILD_S": "40"}}, timeout_minutes=5)
    prebuild.seed(built, tmp_path / "results", prebuild.needs("podman", ["synthetic"]))
    target = str(cell_of(tmp_path, "slow").relative_to(tmp_path))     # the fit cell alone
    options = [target, *options, "--config", "runtime=podman"]
    driver = subprocess.Popen([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *SLURM, *options],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    deadline = time.monotonic() + 600
    while not podman_containers(tmp_path) and time.monotonic() < deadline:     # the cell's container is up
        time.sleep(1)
    assert podman_containers(tmp_path), "no cell container started"
    job = next(line.split()[0] for line in squeue_states() if "rule_cell" in line and " RUNNING " in line)
    subprocess.run(["scancel", job], check=True)
    cancelled = time.monotonic()
    while podman_containers(tmp_path) and time.monotonic() < cancelled + 60:
        time.sleep(1)
    assert podman_containers(tmp_path) == []
    print(f"container of job {job} gone {time.monotonic() - cancelled:.0f} s after scancel")
    output = driver.communicate(timeout=600)[0]
    print(f"cancelled SLURM job {job}:", *[l for l in squeue_states() if l.startswith(f"{job} ")])
    assert driver.returncode != 0 and f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in output
    assert not cell_of(tmp_path, "slow").exists()

    fast = tmp_path / "fast.yaml"      # the redo needs no slow build (the cell reruns: it has no record)
    fast.write_text(yaml.safe_dump({"framework_defs": {"slow": {"env": {"KBENCH_SYNTHETIC_BUILD_S": "0"}}}}))
    options.insert(options.index("--configfile") + 2, str(fast))
    redo = snakemake(*SLURM, *options, cwd=tmp_path, timeout=1200)
    assert redo.returncode == 0, redo.stdout[-3000:]
    assert record(cell_of(tmp_path, "slow"))["status"] == "ok"
    assert json.loads(cell_of(tmp_path, "slow").read_text())["provenance"]["launcher"]["slurm_job_id"] != job
