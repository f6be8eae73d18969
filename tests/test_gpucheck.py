"""The ten-minute GPU check, on this CPU machine: a fake nvidia-smi with four GPUs and the synthetic stack pretending
to a GPU (the harness alone), through the same launcher, lease, preflight and runner as the workflow."""

import json
import subprocess
import sys
import time

import pytest

from conftest import REPO
from test_gpu_host import fake_gpu_host

pytestmark = pytest.mark.workflow  # real cell processes of the synthetic stack, ~25 s


def gpucheck(tmp_path, *args, timeout=300):
    env = {**fake_gpu_host(tmp_path), "PYTHONPATH": str(REPO / "scripts")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbench.gpucheck.check", "--plan", "synthetic", "--out",
                           str(tmp_path / "out"), *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=timeout)
    return proc, time.monotonic() - started


def test_the_gpu_check_runs_its_plan_and_prints_one_table(tmp_path):
    proc, _ = gpucheck(tmp_path, "--deadline", "200", "--timed", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "GPUs (nvidia-smi): 0: NVIDIA H100 80GB HBM3 (driver 580.95.05)" in out
    assert "missing " in out and "torch" in out.split("missing ", 1)[1]      # reports what it lacks, runs anyway
    table = [line for line in out.splitlines() if line.startswith("| synthetic fit")]
    assert len(table) == 4 and all("| ok " in line and "synthetic GPU GPU-fake-" in line for line in table), out
    report = json.loads(next((tmp_path / "out").glob("*/gpucheck.json")).read_text())
    assert {row["status"] for row in report["cells"]} == {"ok"}
    cells = list((tmp_path / "out").glob("*/cells/**/*.r1.json"))
    assert len(cells) == 4 and all(json.loads(p.read_text())["provenance"]["runtime"] == "preinstalled" for p in cells)
    # the acceptance steps: a process started as a cell is ran on its share (this host: fewer CPUs than the fake
    # GPUs, so none) and saw no GPU UUID (no driver); the synthetic cells compared their device with the lease
    steps = {row["step"]: row for row in report["steps"]}
    assert "acceptance steps" in out and not any(row["status"].startswith("FAILED") for row in steps.values()), steps
    assert set(steps) >= {"CPU shares by core", "a second account's lease", "CPU pinning (preinstalled)",
                          "launched device (preinstalled)", "float32 conv probe", "busy share against the window",
                          "device UUID", "breakdown by kind"}, steps
    assert steps["device UUID"]["status"] == "passed" and "GPU-fake-" in steps["device UUID"]["figures"], steps
    # the synthetic stack's trace has no device lanes: its breakdowns are named, not read as a framework's
    assert steps["breakdown by kind"] == {"step": "breakdown by kind", "status": "not measured: no GPU cell with a "
                                          "framework's breakdown ran", "figures": "no breakdown of a framework's GPU "
                                          "trace: synthetic-1, synthetic-2, synthetic-3, synthetic-4"}, steps
    assert "| breakdown by kind " in out and "breakdown by kind" in (tmp_path / "out").joinpath(
        next((tmp_path / "out").iterdir()).name, "gpucheck.md").read_text()


def test_the_gpu_check_stops_starting_cells_at_its_deadline(tmp_path):
    proc, elapsed = gpucheck(tmp_path, "--deadline", "27", "--timed", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = [row["status"] for row in json.loads(next((tmp_path / "out").glob("*/gpucheck.json")).read_text())[
        "cells"]]
    assert statuses[0] == "ok" and "not run: deadline" in statuses, statuses
    assert elapsed < 27 + 15
