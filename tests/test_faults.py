"""Faults injected into real Snakemake runs (host runtime, the NumPy-only synthetic stack): a crash by signal, an
OOM-style kill, a hang with a child process, a driver killed mid-run and resumed, a retry of the failed cells. Each
checks that finished cells stay byte-identical, the failed cell names its cause, nothing is left running, and the
tables are made."""
import copy
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import prebuild
from conftest import CONFIG, KBENCH, REPO, SNAKEMAKE, snakemake
from dag import plan
from kbench.run import launch
from test_launch import left_behind

FAULTS = {"ok": None, "segv": "segv", "killed": "killed", "hang-child": "hang-child"}


def fault_workflow(folder: Path, columns: dict[str, dict], timeout_minutes: float = 0.25) -> list[str]:
    """A working folder whose config.yaml runs the synthetic model (fit, predict) in the given framework columns
    (name -> env of the column); returns the --config options every call passes."""
    config = copy.deepcopy(CONFIG)
    config["framework_defs"].update({name: {"stack": "synthetic", "adapter": "synthetic", "env": env,
                                            "jit_compile": False} for name, env in columns.items()})
    config["model_defs"]["synthetic"] = {
        "precisions": ["float32"], "tasks": {"fit": {"batch_sizes": [4], "learning_rate": 1e-3}, "predict": {"batch_sizes": [4]}},
        "sizes": {"tiny": {"arch": {"matrix_size": 64}, "inputs": {}}}}
    config.update(models=["synthetic"], frameworks=list(columns), precisions=["float32"], suite="tiny",
                  accelerator="cpu", runtime="host", cell_timeout_minutes=timeout_minutes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for shared in ("envs", "scripts", "containers"):     # what jobs read relative to the working folder
        (folder / shared).symlink_to(REPO / shared)
    # two jobs at a time: the hanging columns' timeouts overlap, and so do the tables, plots and history jobs (the
    # cells' numbers are not what these tests read)
    return ["--cores", "2", "--configfile", str(folder / "config.yaml")]


# What the fault runs ask for: the cells and their ms/step table (not the plots, history and first page, whose jobs
# are a pandas process each and prove nothing about faults)
TABLE = "results/tables/tiny/strict/ms_per_step.csv"


def cells(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted((folder / "results" / "cells").rglob("*.json"))
            if "attempts" not in p.parts}


def cell_of(folder: Path, framework: str, task: str = "fit") -> Path:
    return folder / f"results/cells/tiny/strict/synthetic/{task}/bs4/float32/{framework}.r1.json"


def record(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.workflow
def test_failing_cells_end_in_records_that_name_the_cause_and_the_run_goes_on(tmp_path):
    options = fault_workflow(tmp_path, {name: {"KBENCH_SYNTHETIC_FAULT": f} if f else {} for name, f in FAULTS.items()})
    assert left_behind() == []
    proc = snakemake(TABLE, *options, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    errors = {name: record(cell_of(tmp_path, name))["error"] for name in FAULTS}
    assert errors["ok"] is None and record(cell_of(tmp_path, "ok"))["status"] == "ok"
    assert errors["segv"]["message"] == "cell process killed by SIGSEGV (a crash in native code)"
    assert errors["killed"]["message"] == "cell process killed by SIGKILL (out of memory? the kernel's OOM killer sends it)"
    assert errors["hang-child"]["type"] == "Timeout" and "process group was killed" in errors["hang-child"]["message"]
    assert left_behind() == []          # the hanging cell's own child went with it
    table = pd.read_csv(tmp_path / "results/tables/tiny/strict/ms_per_step.csv")
    assert table["segv"].tolist() == ["failed: Killed"] * 2 and table["hang-child"].tolist() == ["failed: Timeout"] * 2
    assert (table["ok"].astype(float) > 0).all()


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


@pytest.mark.workflow
def test_a_driver_killed_mid_run_resumes_with_one_command(tmp_path):
    """Two columns finish; the driver is SIGKILLed while a third column's cell runs (it takes 6 s to build).
    `kbench resume` then redoes only that column: the finished records are byte-identical, the killed cell left no
    process, and the resumed run makes the tables."""
    options = fault_workflow(tmp_path, {"first": {}, "second": {}, "slow": {"KBENCH_SYNTHETIC_BUILD_S": "6"}})
    finished_targets = [str(cell_of(tmp_path, f, t).relative_to(tmp_path)) for f in ("first", "second")
                        for t in ("fit", "predict")]
    assert snakemake(*finished_targets, *options, cwd=tmp_path).returncode == 0     # (--configfile takes a list)
    finished = digests(cells(tmp_path))
    assert len(finished) == 4

    driver = subprocess.Popen([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), TABLE, *options], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    slow_log = tmp_path / "results/logs/cells/tiny/strict/synthetic"
    deadline = time.monotonic() + 120
    while not left_behind(f"{tmp_path}/results/cells") and time.monotonic() < deadline:    # a slow cell is running
        time.sleep(0.2)
    assert driver.poll() is None and left_behind(f"{tmp_path}/results/cells"), list(slow_log.rglob("*"))
    os.kill(driver.pid, signal.SIGKILL)         # the driver alone, as a lost session or an OOM kill would
    driver.wait()
    deadline = time.monotonic() + 30
    while left_behind(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(str(tmp_path)) == []     # no launcher, no cell process of this run survives its driver
    assert not cell_of(tmp_path, "slow").exists() and not cell_of(tmp_path, "slow", "predict").exists()

    refused = snakemake(TABLE, *options, cwd=tmp_path)    # what a user meets first: the dead driver's lock
    assert refused.returncode != 0 and "Directory cannot be locked" in refused.stdout, refused.stdout[-2000:]
    resumed = subprocess.run([KBENCH, "resume", "--snakefile", str(REPO / "Snakefile"), TABLE, *options],
                             cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = digests(cells(tmp_path))
    assert {name: after[name] for name in finished} == finished
    assert record(cell_of(tmp_path, "slow"))["status"] == record(cell_of(tmp_path, "slow", "predict"))["status"] == "ok"
    assert (tmp_path / "results/tables/tiny/strict/ms_per_step.csv").exists()


@pytest.mark.workflow
def test_resume_refuses_while_the_run_is_still_going(tmp_path):
    options = fault_workflow(tmp_path, {"slow": {"KBENCH_SYNTHETIC_BUILD_S": "30"}})
    driver = subprocess.Popen([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *options], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(2)
        resumed = subprocess.run([KBENCH, "resume", *options], cwd=tmp_path, capture_output=True, text=True)
        assert resumed.returncode == 1
        assert resumed.stderr.startswith(f"resume: Snakemake is still running in {tmp_path} (pid {driver.pid})")
    finally:
        os.killpg(driver.pid, signal.SIGTERM)
        driver.wait()


@pytest.mark.workflow
def test_retry_failed_reruns_exactly_the_failed_cells_and_keeps_their_first_attempt(tmp_path):
    """A transient fault (the column fails its first attempt only): a plain rerun has nothing to do, since a failed
    cell is a finished job; `kbench retry-failed` reruns exactly the failed cells."""
    options = fault_workflow(tmp_path, {"ok": {}, "flaky": {"KBENCH_SYNTHETIC_FAIL_ONCE": str(tmp_path)}})
    assert snakemake(TABLE, *options, cwd=tmp_path).returncode == 0
    before = cells(tmp_path)
    flaky = [cell_of(tmp_path, "flaky", t) for t in ("fit", "predict")]
    assert [record(p)["error"]["message"] for p in flaky] == ["injected transient failure"] * 2

    assert plan("-n", TABLE, *options, cwd=tmp_path).nothing_to_do
    retried = subprocess.run([KBENCH, "retry-failed", "--snakefile", str(REPO / "Snakefile"), TABLE, *options],
                             cwd=tmp_path, capture_output=True, text=True)
    assert retried.returncode == 0, retried.stdout[-3000:] + retried.stderr[-3000:]
    assert "retry-failed: rerunning 2 failed cell(s)" in retried.stdout
    after = cells(tmp_path)
    assert {k: v for k, v in after.items() if "flaky" not in k} == {k: v for k, v in before.items() if "flaky" not in k}
    assert [record(p)["status"] for p in flaky] == ["ok", "ok"]
    kept = sorted((flaky[0].parent / "attempts").glob("flaky.r1.json.*"))
    assert [record(p)["status"] for p in kept] == ["failed", "ok"]      # the failed attempt is kept beside


def podman_containers(folder: Path) -> list[str]:
    """Containers (running or not) of cells whose results lie in the folder (other runs may share the host)."""
    listing = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}} {{.Labels}}"], capture_output=True,
                             text=True, env=launch.process_env("podman"), check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if f"kbench.out:{folder}/" in line]


@pytest.mark.e2e
def test_container_faults_end_in_decoded_records_and_leave_no_container(tmp_path, built):
    """The same faults in podman, with a memory limit the "oom" column runs into: every container is removed."""
    columns = {"ok": {}, "oom": {"KBENCH_SYNTHETIC_FAULT": "oom"}, "segv": {"KBENCH_SYNTHETIC_FAULT": "segv"},
               "hang-child": {"KBENCH_SYNTHETIC_FAULT": "hang-child"}}
    # a 30 s timeout, not 15: the e2e tier runs this beside test_e2e.py's cells, and the ok column's container must
    # start and finish inside it on a busy CPU
    options = fault_workflow(tmp_path, columns, timeout_minutes=0.5)
    prebuild.seed(built, tmp_path / "results", prebuild.needs("podman", ["synthetic"]))
    (tmp_path / "limits.yaml").write_text("runtime: podman\ncontainers: {limits: {memory_mb: 256}}\n")
    proc = snakemake(*options, str(tmp_path / "limits.yaml"), "--cores", "all", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    errors = {name: record(cell_of(tmp_path, name))["error"] for name in columns}
    assert errors["ok"] is None
    assert errors["oom"]["message"] in ("the kernel killed the cell for memory (container OOMKilled)",
                                        "cell process killed by SIGKILL (out of memory? the container's limit is "
                                        "256 MiB)")
    assert errors["segv"]["message"] == "cell process killed by SIGSEGV (a crash in native code)"
    assert errors["hang-child"]["type"] == "Timeout"
    assert podman_containers(tmp_path) == [] and left_behind() == [] and left_behind(str(tmp_path)) == []
