"""Real tiny cells, run by Snakemake in podman images and in host venvs (both built from the locks on first use)."""
import json
import socket
import tarfile

import pandas as pd
import pytest

from conftest import REPO, snakemake
from kbench import envs

pytestmark = pytest.mark.e2e
FRAMEWORKS = ["keras3-jax", "keras3-tensorflow"]
RUNS = {"podman": ["bert", "sam"], "host": ["bert"]}


def run_tiny(runtime, tmp_path_factory):
    models = RUNS[runtime]
    results = tmp_path_factory.mktemp(f"results-{runtime}")
    proc = snakemake("--cores", "all", "--config", "suite=tiny", "accelerator=cpu", f"runtime={runtime}",
                     f"results_dir={results}", f"models=[{','.join(models)}]", f"frameworks=[{','.join(FRAMEWORKS)}]")
    assert proc.returncode == 0, proc.stdout[-5000:]
    return runtime, models, results


@pytest.fixture(scope="module")
def podman_run(tmp_path_factory):
    return run_tiny("podman", tmp_path_factory)


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    return run_tiny("host", tmp_path_factory)


@pytest.fixture(params=list(RUNS))
def tiny_run(request):
    return request.getfixturevalue(f"{request.param}_run")


def cells(results):
    return [json.loads(path.read_text()) for path in sorted((results / "cells").rglob("*.json"))]


def test_every_cell_ran_and_the_table_is_filled(tiny_run):
    runtime, models, results = tiny_run
    table = pd.read_csv(results / "tables" / "tiny" / "ms_per_step.csv")
    assert list(table.columns) == ["model", "task", "batch_size", *FRAMEWORKS]
    assert len(table) == 2 * len(models)
    values = table[FRAMEWORKS].astype(float)     # "failed: ..." would not parse
    assert (values > 0).all().all()


def test_cells_record_backend_environment_and_timing(tiny_run):
    runtime, models, results = tiny_run
    for result in cells(results):
        assert result["status"] == "ok", result["error"]
        prov, framework = result["provenance"], result["spec"]["framework"]
        backend = {"keras3-jax": "jax", "keras3-tensorflow": "tensorflow"}[framework]
        assert prov["runtime"] == runtime and prov["backend"] == backend and backend in prov["packages"]
        assert prov["packages"]["keras"] == "3.15.1" and prov["device"].lower().startswith("cpu")
        assert prov["environment"]["lock_sha256"] == envs.sha256_file(REPO / "envs" / f"{framework}.cpu.lock")
        timing = result["timing"]
        assert timing["n"] == len(timing["step_ms"]) == 20 and timing["first_step_ms"] > timing["median_ms"]
        assert result["params"]["total"] >= result["params"]["trainable"] > 0


def test_podman_cells_name_the_image_they_ran_in(podman_run):
    runtime, models, results = podman_run
    for result in cells(results):
        stack, environment = result["spec"]["framework_def"]["stack"], result["provenance"]["environment"]
        record = json.loads((results / "images" / f"{stack}.cpu.json").read_text())
        assert environment["id"] == record["id"] and environment["kind"] == "image"
        assert record["image"].endswith(record["lock_sha256"].removeprefix("sha256:")[:16])
        assert result["provenance"]["hostname"] != socket.gethostname()     # it ran in a container


def test_host_cells_name_the_venv_they_ran_in(host_run):
    runtime, models, results = host_run
    for result in cells(results):
        stack, environment = result["spec"]["framework_def"]["stack"], result["provenance"]["environment"]
        assert environment["kind"] == "venv" and environment["prefix"].endswith(f".envs/{stack}.cpu")


def test_exported_oci_archive_carries_the_recorded_image(podman_run):
    runtime, models, results = podman_run
    target = results / "images" / "keras3-jax.cpu.oci.tar"
    proc = snakemake(str(target), "--cores", "all", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman",
                     f"results_dir={results}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    with tarfile.open(target) as archive:
        def blob(digest):
            return json.load(archive.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}"))
        manifest = blob(json.load(archive.extractfile("index.json"))["manifests"][0]["digest"])
    record = json.loads((results / "images" / "keras3-jax.cpu.json").read_text())
    assert manifest["config"]["digest"] == record["id"]
