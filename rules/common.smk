import glob
import os
import sys

from snakemake.utils import validate

# kbench is importable here (matrix) and in every job's Python (launch, tables, envs).
SCRIPTS = os.path.join(workflow.basedir, "scripts")
sys.path.insert(0, SCRIPTS)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SCRIPTS, os.environ.get("PYTHONPATH")]))
PYTHON = sys.executable

from kbench import matrix

validate(config, "../schemas/config.schema.yaml")
matrix.check_references(config)
RESULTS = config["results_dir"]

TABLES = ["ms_per_step.csv", "ms_per_step.md", "speedup.csv", "speedup.md", "cells_long.csv"]


wildcard_constraints:
    suite="|".join(config["suites"]),
    model="|".join(config["model_defs"]),
    task="fit|predict|generate",
    batch=r"\d+",
    framework="|".join(config["framework_defs"]),
    stack="[a-z0-9-]+",
    accelerator="gpu|cpu",


def cell_json(cell):
    return f"{RESULTS}/cells/{cell.cell_id}.json"


def cell_of(wildcards):
    return matrix.Cell(wildcards.suite, wildcards.model, wildcards.task, int(wildcards.batch), wildcards.framework,
                       matrix.not_applicable_reason(config, wildcards.model, wildcards.task, wildcards.framework))


def environment_record(wildcards):
    """A runnable cell depends on its stack's environment record; an n/a cell depends on nothing."""
    if cell_of(wildcards).not_applicable:
        return []
    stack = matrix.stack_of(config, wildcards.framework)
    return f"{RESULTS}/environments/{stack}.{config['accelerator']}.json"


def harness_sources(wildcards):
    """The code a cell runs: a change to the timer, the runner or the cell's adapter reruns the cells it touches."""
    if cell_of(wildcards).not_applicable:
        return []
    adapter = config["framework_defs"][wildcards.framework]["adapter"]
    core = ["cell", "runner", "timing", "models", "adapters/__init__"]
    return [f"scripts/kbench/{name}.py" for name in core] + sorted(glob.glob(f"scripts/kbench/adapters/{adapter}*.py"))


def cell_spec(wildcards):
    return matrix.spec(config, wildcards.suite, wildcards.model, wildcards.task, int(wildcards.batch),
                       wildcards.framework)


def table_files(suite):
    return [f"{RESULTS}/tables/{suite}/{name}" for name in TABLES]
