"""The workflow as a user drives it: dry runs of both suites, and n/a cells that run without any environment."""
import re
import shutil

import pandas as pd
import pytest

from conftest import REPO, snakemake


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}


STACKS = ("native-torch", "keras2", "keras3-jax", "keras3-tensorflow", "keras3-torch")


@pytest.mark.parametrize("runtime, environment_jobs", [
    ("podman", {"base_image": 1, "stack_image": 5}), ("host", {"environment": 5})])
@pytest.mark.parametrize("suite_args", [[], ["suite=tiny", "accelerator=cpu"]])
def test_dry_run_plans_every_cell_of_the_suite(tmp_path, suite_args, runtime, environment_jobs):
    proc = snakemake("-n", "--cores", "all", "--config", *suite_args, f"runtime={runtime}", f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    total = 114 + 4 + sum(environment_jobs.values())    # 19 rows (precision study included) x 6 columns, 8 n/a
    assert job_counts(proc.stdout) == {**environment_jobs, "cell": 114, "tables": 1, "plots": 1, "run_facts": 1,
                                       "all": 1, "total": total}
    accelerator = "cpu" if suite_args else "gpu"
    for stack in STACKS:
        assert f"envs/{stack}.{accelerator}.lock" in proc.stdout


def test_not_applicable_cells_reach_the_table_without_an_environment(tmp_path):
    proc = snakemake("--cores", "1", "--config", "suite=tiny", "accelerator=cpu", f"results_dir={tmp_path}",
                     "models=[sam]", "frameworks=[keras3-torch]",
                     "not_applicable=[{framework: keras3-torch, model: sam, task: '*', reason: 'not on torch'}]")
    assert proc.returncode == 0, proc.stdout
    assert not (tmp_path / "environments").exists()
    table = pd.read_csv(tmp_path / "tables" / "tiny" / "ms_per_step.csv")
    assert table["keras3-torch"].tolist() == ["n/a: not on torch", "n/a: not on torch"]


def test_configured_not_applicable_rows_need_no_environment(tmp_path):
    """The shipped config's n/a cells (Keras 2 LLMs, uncompiled LoRA fits) are filled in without building anything."""
    proc = snakemake("--cores", "1", "--config", "suite=tiny", "accelerator=cpu", f"results_dir={tmp_path}",
                     "models=[gemma]", "frameworks=[keras2]")
    assert proc.returncode == 0, proc.stdout
    assert not (tmp_path / "environments").exists() and not (tmp_path / "images").exists()
    table = pd.read_csv(tmp_path / "tables" / "tiny" / "ms_per_step.csv")
    assert table["keras2"].str.startswith("n/a: keras-nlp 0.12.1").all() and len(table) == 3


def test_a_version_bump_in_one_lock_reruns_exactly_that_stacks_image_cells_and_tables(tmp_path):
    """In a copy of the workflow whose every output is up to date, bump one pin of one stack's lock."""
    for name in ("Snakefile", "config.yaml", "rules", "schemas", "envs", "scripts", "containers"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, tmp_path / name)
    args = ["--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman"]
    summary = snakemake("--summary", *args, cwd=tmp_path).stdout.splitlines()
    for line in summary[summary.index(next(l for l in summary if l.startswith("output_file"))) + 1:]:
        output = tmp_path / line.split("\t")[0]
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
    assert snakemake("--touch", *args, cwd=tmp_path).returncode == 0     # mtimes in DAG order: all up to date
    assert "Nothing to be done" in snakemake("-n", *args, cwd=tmp_path).stdout

    lock = tmp_path / "envs" / "keras3-jax.cpu.lock"
    lock.write_text(lock.read_text().replace("\nkeras==3.15.1 ", "\nkeras==3.15.0 ", 1))
    plan = snakemake("-n", *args, cwd=tmp_path).stdout
    assert job_counts(plan) == {"stack_image": 1, "cell": 19, "tables": 1, "plots": 1, "run_facts": 1, "all": 1,
                                "total": 24}
    rebuilt = re.findall(r"output: (\S+)", plan)
    assert "results/images/keras3-jax.cpu.json" in rebuilt
    cells = [path for path in rebuilt if path.startswith("results/cells/")]
    assert len(cells) == 19 and all(path.endswith("/keras3-jax.json") for path in cells)
