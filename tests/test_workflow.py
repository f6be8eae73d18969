"""The workflow as a user drives it: dry runs of both suites, and n/a cells that run without any environment."""
import re

import pandas as pd
import pytest

from conftest import snakemake


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}


@pytest.mark.parametrize("suite_args", [[], ["--config", "suite=tiny", "accelerator=cpu"]])
def test_dry_run_plans_every_cell_of_the_suite(tmp_path, suite_args):
    args = suite_args or ["--config"]
    proc = snakemake("-n", "--cores", "all", *args, f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    assert job_counts(proc.stdout) == {"environment": 3, "cell": 36, "tables": 1, "all": 1, "total": 41}
    accelerator = "cpu" if suite_args else "gpu"
    for stack in ("keras3-jax", "keras3-tensorflow", "keras3-torch"):
        assert f"envs/{stack}.{accelerator}.lock" in proc.stdout


def test_not_applicable_cells_reach_the_table_without_an_environment(tmp_path):
    proc = snakemake("--cores", "1", "--config", "suite=tiny", "accelerator=cpu", f"results_dir={tmp_path}",
                     "models=[sam]", "frameworks=[keras3-torch]",
                     "not_applicable=[{framework: keras3-torch, model: sam, task: '*', reason: 'not on torch'}]")
    assert proc.returncode == 0, proc.stdout
    assert not (tmp_path / "environments").exists()
    table = pd.read_csv(tmp_path / "tables" / "tiny" / "ms_per_step.csv")
    assert table["keras3-torch"].tolist() == ["n/a: not on torch", "n/a: not on torch"]
