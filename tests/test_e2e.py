"""Real tiny cells, run by Snakemake in their stack environments (built from the locks on first use)."""
import json

import pandas as pd
import pytest

from conftest import REPO, snakemake
from kbench import envs

pytestmark = pytest.mark.e2e
FRAMEWORKS = ["keras3-jax", "keras3-tensorflow"]
MODELS = ["bert", "sam"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    proc = snakemake("--cores", "all", "--config", "suite=tiny", "accelerator=cpu", "runtime=host",
                     f"results_dir={results}", f"models=[{','.join(MODELS)}]", f"frameworks=[{','.join(FRAMEWORKS)}]")
    assert proc.returncode == 0, proc.stdout[-5000:]
    return results


def test_every_cell_ran_and_the_table_is_filled(tiny_run):
    table = pd.read_csv(tiny_run / "tables" / "tiny" / "ms_per_step.csv")
    assert list(table.columns) == ["model", "task", "batch_size", *FRAMEWORKS]
    assert len(table) == 4
    values = table[FRAMEWORKS].astype(float)     # "failed: ..." would not parse
    assert (values > 0).all().all()


@pytest.mark.parametrize("framework, backend_package", [("keras3-jax", "jax"), ("keras3-tensorflow", "tensorflow")])
def test_cells_record_their_backend_environment_and_timing(tiny_run, framework, backend_package):
    result = json.loads((tiny_run / "cells" / "tiny" / "bert" / "fit" / "bs32" / f"{framework}.json").read_text())
    assert result["status"] == "ok", result["error"]
    prov = result["provenance"]
    assert prov["backend"] == backend_package and backend_package in prov["packages"]
    assert prov["packages"]["keras"] == "3.15.1" and prov["device"].lower().startswith("cpu")
    stack = framework
    assert prov["environment"]["lock_sha256"] == envs.sha256_file(REPO / "envs" / f"{stack}.cpu.lock")
    timing = result["timing"]
    assert timing["n"] == len(timing["step_ms"]) == 20 and timing["first_step_ms"] > timing["median_ms"]
    assert result["params"]["total"] == result["params"]["trainable"] > 0
