"""The launcher always leaves one result JSON: ok, or failed with the reason, whatever the cell process does."""
import json
import sys
from pathlib import Path

import pytest

from kbench import cell, launch


def synthetic_spec(fault=None, task="fit", timed=5):
    return {"cell_id": f"test/synthetic/{task}/bs4/synthetic", "suite": "test", "size": "tiny", "model": "synthetic",
            "task": task, "batch_size": 4, "framework": "synthetic", "dtype": "float32",
            "framework_def": {"stack": "driver", "adapter": "synthetic", "env": {}, "jit_compile": False},
            "arch": {"matrix_size": 64}, "inputs": {}, "task_options": {"fault": fault},
            "steps": {"warmup": 1, "timed": timed}, "seed": 0}


@pytest.fixture
def driver_environment(tmp_path):
    """The test's own venv stands in for a stack environment (it has NumPy, all the synthetic adapter needs)."""
    record = tmp_path / "environment.json"
    record.write_text(json.dumps({"stack": "driver", "kind": "venv", "prefix": str(Path(sys.executable).parents[1])}))
    return record


def run(tmp_path, environment, spec, timeout_s=60):
    return launch.run_cell(spec, "host", environment, tmp_path / "cell.json", tmp_path / "cell.log", timeout_s)


def test_host_command_runs_the_runner_in_the_stack_python():
    argv = launch.command("host", {"prefix": "/envs/keras3-jax.cpu"}, Path("out.json"))
    assert argv == ["/envs/keras3-jax.cpu/bin/python", "-m", "kbench.runner", "--out", "out.json"]


def test_unknown_runtime_names_the_allowed_ones():
    with pytest.raises(ValueError, match="runtime 'lxc' is not supported; allowed: host"):
        launch.command("lxc", {}, Path("out.json"))


def test_ok_cell_has_the_contract_fields(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result["status"] == "ok", result["error"]
    timing = result["timing"]
    assert len(timing["step_ms"]) == timing["n"] == 5 and len(timing["warmup_ms"]) == 1
    assert timing["mean_ms"] == pytest.approx(sum(timing["step_ms"]) / 5)
    assert timing["examples_per_s"] == pytest.approx(4 * 1e3 / timing["mean_ms"])
    assert result["params"] == {"total": 2 * 64 * 64, "trainable": 0}
    assert result["memory"]["peak_host_rss_bytes"] > 10 * 2**20
    prov = result["provenance"]
    assert prov["runtime"] == "host" and prov["device"] == "cpu" and "numpy" in prov["packages"]
    assert prov["python"].startswith("3.") and prov["hostname"] and prov["git_commit"]
    assert result["spec_digest"] == cell.spec_digest(synthetic_spec())
    assert cell.read(tmp_path / "cell.json") == result


@pytest.mark.parametrize("fault, error_type, message", [
    ("raise", "RuntimeError", "injected failure"),
    ("exit", "ProcessExit", "exited with status 3"),
    ("abort", "Killed", "SIGKILL"),
])
def test_failures_become_failed_cells(tmp_path, driver_environment, fault, error_type, message):
    result = run(tmp_path, driver_environment, synthetic_spec(fault))
    assert result["status"] == "failed" and result["timing"] is None
    assert result["error"]["type"] == error_type and message in result["error"]["message"]


def test_a_hanging_cell_is_killed_at_the_timeout(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec("hang"), timeout_s=3)
    assert result["status"] == "failed" and result["error"]["type"] == "Timeout"


def test_unsupported_task_is_reported_not_failed(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec(task="generate"))
    assert result["status"] == "unsupported" and "no generate task" in result["error"]["message"]
