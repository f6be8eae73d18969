import glob
import json
import os
import shutil
import sys

from snakemake.utils import validate

# kbench is importable here (matrix) and in every job's Python (launch, tables, envs).
SCRIPTS = os.path.join(workflow.basedir, "scripts")
sys.path.insert(0, SCRIPTS)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SCRIPTS, os.environ.get("PYTHONPATH")]))
PYTHON = sys.executable

from kbench import envs, matrix

validate(config, "../schemas/config.schema.yaml")
matrix.check_references(config)
RESULTS = config["results_dir"]
# auto: podman where it is installed, else the host venvs. The runtime a cell used is in its JSON.
RUNTIME = config["runtime"] if config["runtime"] != "auto" else ("podman" if shutil.which("podman") else "host")
ENVIRONMENT_RECORDS = {
    "host": "environments/{stack}.{accelerator}.json",
    "podman": "images/{stack}.{accelerator}.json",
    "docker": "images/{stack}.{accelerator}.docker.json",
    "apptainer": "images/{stack}.{accelerator}.sif.json",
}

TABLES = ["ms_per_step.csv", "ms_per_step.md", "speedup.csv", "speedup.md", "params.csv", "params.md",
          "precision.csv", "precision.md", "precision_speedup.csv", "precision_speedup.md", "cells_long.csv"]


wildcard_constraints:
    suite="|".join(config["suites"]),
    model="|".join(config["model_defs"]),
    task="fit|predict|generate",
    batch=r"\d+",
    precision="float32|bfloat16|mixed_float16|mixed_bfloat16",
    framework="|".join(config["framework_defs"]),
    stack="[a-z0-9-]+",
    accelerator="gpu|cpu",


def cell_json(cell):
    return f"{RESULTS}/cells/{cell.cell_id}.json"


def cell_of(wildcards):
    return matrix.Cell(wildcards.suite, wildcards.model, wildcards.task, int(wildcards.batch), wildcards.precision,
                       wildcards.framework,
                       matrix.not_applicable_reason(config, wildcards.model, wildcards.task, wildcards.framework))


def environment_record(wildcards):
    """A runnable cell depends on its stack's environment (venv or image) record; an n/a cell depends on nothing."""
    if cell_of(wildcards).not_applicable:
        return []
    record = ENVIRONMENT_RECORDS[RUNTIME].format(stack=matrix.stack_of(config, wildcards.framework),
                                                 accelerator=config["accelerator"])
    return f"{RESULTS}/{record}"


def stack_lock_digest(wildcards):
    """The cell's environment by content: a bumped lock changes this param (and the image tag derived from it)."""
    if cell_of(wildcards).not_applicable:
        return None
    return envs.sha256_file(f"envs/{matrix.stack_of(config, wildcards.framework)}.{config['accelerator']}.lock")


def harness_sources(wildcards):
    """The code a cell runs: a change to the timer, the runner or the cell's adapter reruns the cells it touches."""
    if cell_of(wildcards).not_applicable:
        return []
    adapter = config["framework_defs"][wildcards.framework]["adapter"]
    core = ["cell", "runner", "timing", "models", "adapters/__init__", f"adapters/{adapter}"]
    shared = sorted(glob.glob("scripts/kbench/adapters/_[!_]*.py"))    # helpers used by several adapters
    return [f"scripts/kbench/{name}.py" for name in core] + shared


def cell_spec(wildcards):
    return matrix.spec(config, wildcards.suite, wildcards.model, wildcards.task, int(wildcards.batch),
                       wildcards.precision, wildcards.framework)


def table_files(suite):
    return [f"{RESULTS}/tables/{suite}/{name}" for name in TABLES]
