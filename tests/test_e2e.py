"""Real tiny cells, run by Snakemake in podman images and in host venvs (both built from the locks on first use).

Every real cell of every run here is checked against the invariants a trustworthy number needs (its steps add up to
its window, its mean is window / steps, it ran the dtypes its precision names, it checked its lock, a fit learned).
"""
import concurrent.futures
import dataclasses
import functools
import json
import math
import re
import shutil
import socket
import subprocess
import tarfile
import textwrap

import pandas as pd
import pytest
import yaml

import prebuild
from conftest import CONFIG, REPO, snakemake
from kbench.contract import cell
from kbench.instruments import compile_cache
from kbench.machine import host, environment_records, runtimes
from kbench.breakdown import measure, trace
from kbench.plan import matrix, sources
from kbench.run import launch
from kbench.stacks import envs
from kbench.results import flat

pytestmark = pytest.mark.e2e
# Every framework family in podman images (native PyTorch eager and compiled, Keras 2, Keras 3); host venvs for the
# Paddle columns (their only runtime here: the host runtime's run, and a venv per stack like any other).
RUNS = {"podman": (["bert", "sam"], ["native-torch-eager", "native-torch-compiled", "keras2", "keras3-jax",
                                     "keras3-tensorflow"]),
        "host": (["bert"], ["paddle-dygraph", "paddle-static"])}
# The LLM and diffusion families (LoRA fit, generate, pure bfloat16; VAE fit, guided denoising) in one column per
# family (Keras 3 on torch: the column no other run has; Keras 3 on JAX runs the same adapter in the podman run):
# generate at batch 1 only, and the compiled column's SD cells not run: Inductor compiles its whole train step for
# ~160 s and its whole denoising step for 175-210 s on CI's CPU. Its other compile sites run (the model for
# generate, the module for LoRA fit); the denoising step's graph (one, no break) is checked in a probe by dynamo
# alone (probes' sd-step-graph): a graph break is dynamo's, whatever backend compiles the graphs.
FAMILIES = (["gemma", "stable_diffusion"], ["native-torch-eager", "native-torch-compiled", "keras3-torch"])
FAMILIES_NOT_RUN = [{"framework": "native-torch-compiled", "model": "stable_diffusion", "task": "fit",
                     "reason": "not run in CI: Inductor compiles its train step ~160 s on CI's CPU"},
                    {"framework": "native-torch-compiled", "model": "stable_diffusion", "task": "predict",
                     "reason": "not run in CI: Inductor compiles its denoising step ~190 s on CI's CPU; its graph "
                               "is checked by dynamo alone (tests/test_e2e.py, sd-step-graph)"}]
FAMILIES_CONFIG = {"model_defs": {"gemma": {"sizes": {"tiny": {"batch_sizes": {"generate": [1]}}}}},
                   "not_applicable": CONFIG["not_applicable"] + FAMILIES_NOT_RUN}
BACKENDS = {"native-torch-eager": "torch", "native-torch-compiled": "torch", "keras2": "tensorflow",
            "keras3-jax": "jax", "keras3-tensorflow": "tensorflow", "keras3-torch": "torch",
            "paddle-dygraph": "paddle", "paddle-static": "paddle"}
# What each backend's sync is on a CPU: JAX dispatches asynchronously there too; torch and TF eager do not.
SYNC_ON_CPU = {"jax": "jax.block_until_ready", "torch": "none: torch runs synchronously on a CPU",
               "tensorflow": "none: TensorFlow runs synchronously on this CPU",
               "paddle": "none: paddle runs synchronously on a CPU"}
# precision -> (weights dtype, compute dtype) a cell must report having run in
DTYPES = {"float32": ("float32", "float32"), "mixed_float16": ("float32", "float16"),
          "mixed_bfloat16": ("float32", "bfloat16"), "bfloat16": ("bfloat16", "bfloat16")}
PADDLE = ["paddle-dygraph", "paddle-static"]
MIXED = ["float32", "mixed_float16", "mixed_bfloat16"]
FRAMEWORK_PACKAGE = {"native_torch": ("transformers", "5.24.0"), "keras2": ("tf-keras", "2.21.0"),
                     "keras3": ("keras", "3.15.1"), "paddle": ("paddlepaddle", "3.3.1")}


# The equivalence check in CI for BERT alone (every column of the podman run): SAM's check, about 400 s of cells
# on CI's CPU (the compiled column's 210 s of it), runs where a GPU run or a user selects it (docs/equivalence.md: its numbers).
EQUIVALENCE_MODELS = ["bert"]
# CI's runs time 6 steps a cell, not the tiny suite's 20: the pipeline's checks are the same (the window, its synced
# blocks, a fit that learns), and on CI's two cores, where the CPU is the limit, the steps were a fifth of the cell time.
# The precision run keeps the suite's 20: dynamic loss scaling skips a float16 fit's first steps (inf gradients at
# the initial scale), and 6 steps showed no loss falling.
CI_TIMED_STEPS = 6
TINY_TIMED_STEPS = CONFIG["suites"]["tiny"]["steps"]["timed"]
SIDE_BY_SIDE = [f"{rule}=1" for rule in ("cell", "equivalence", "equivalence_reference", "jax_numpy")]


def run_tiny(runtime, tmp_path_factory, models, frameworks, precisions=("float32",), overlay=None, profile="strict",
             equivalence=False, jax_numpy=False, batch_study=False, built=None, timed_steps=CI_TIMED_STEPS):
    """equivalence, jax_numpy, batch_study: the run's equivalence jobs, its JAX-against-NumPy job and its batch
    ladder too (CI runs each in one run only: the other runs would repeat the same jobs in the same images). built: the session's images and venvs
    (conftest.built), seeded into the run's results folder."""
    results = tmp_path_factory.mktemp(f"results-{runtime}")
    if built:
        stacks = sorted({matrix.stack_of(CONFIG, f) for f in frameworks})
        prebuild.seed(built, results, prebuild.needs(runtime, stacks))
    # one OpenMP thread a cell: two torch processes each spinning two OpenMP threads on two cores ran 10-14x slower
    overlay = {"breakdown": {"steps": 0, "cells": []}, "first_step": {**CONFIG["first_step"], "warm_runs": False},
               **(overlay or {}),
               "equivalence": {"enabled": equivalence, "models": EQUIVALENCE_MODELS},
               "suites": {"tiny": {"steps": {"timed": timed_steps}}},
               "jax_numpy": {"enabled": jax_numpy},
               "batch_study": BATCH_STUDY if batch_study else {"enabled": False},
               "cell_env": {"OMP_NUM_THREADS": "1"}}
    (results / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    # Two processes at a time on CI's two cores (the default gives a CPU cell every core): a cell's start-up, model
    # build and compilation are mostly one thread, so two overlap; CI checks the pipeline, not the numbers.
    extra = ["--configfile", str(results / "overlay.yaml"), "--set-threads", *SIDE_BY_SIDE]
    proc = snakemake("--cores", "all", *extra, "--config", "suite=tiny", "accelerator=cpu", f"runtime={runtime}",
                     f"results_dir={results}", f"models=[{','.join(models)}]", f"frameworks=[{','.join(frameworks)}]",
                     f"precisions=[{','.join(precisions)}]", f"profiles=[{profile}]", timeout=3600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    return runtime, models, frameworks, results / "tables" / "tiny" / profile, results


# The compiled column's SAM cells are not run in CI: Inductor compiles for about 150 s a cell on CI's two cores
# (a third of the podman run's cell time); the column's BERT cells and equivalence job run, and every other column
# runs SAM. Graph breaks of its SAM predict, as measured: docs/cells.md.
# The breakdown by kind in CI: the demo's cells (BERT, native eager and Keras 3 on JAX); every other run of CI runs
# none (profiles/demo-cpu; the tiny suite gives every cell one, config breakdown).
DEMO_BREAKDOWN = {"steps": 3, "cells": [{"framework": "native-torch-eager|keras3-jax", "model": "bert"}]}
# Cold and warm in CI (docs/first-step.md): the warm twins of the podman run's BERT cells in the compiled JAX and
# torch columns (XLA's and Inductor's persistent caches); every other run of CI runs none (config runs every compiled
# cell's). The equivalence jobs of the podman run start from the cells' caches.
WARM_CELLS = [{"framework": "native-torch-compiled|keras3-jax", "model": "bert",
               "reason": "CI's twins: one compiled column of each kind, on BERT"}]
PODMAN_CONFIG = {"not_applicable": CONFIG["not_applicable"] + [
    {"framework": "native-torch-compiled", "model": "sam", "task": "*",
     "reason": "not run in CI: Inductor compiles ~150 s a cell on CI's CPU; the column's BERT cells run"}],
    "breakdown": DEMO_BREAKDOWN, "first_step": {**CONFIG["first_step"], "warm_cells": WARM_CELLS}}


# The batch study in CI: BERT predict at batch 1, 16 and its own 256, in one native and one Keras 3 column (4 cells
# beside the podman run's own): the ladder, its fit, the verdict and the plot. The tiny suite's whole ladder (fit and
# predict in three columns) is in config.yaml.
BATCH_STUDY = {"enabled": True, "suites": ["tiny"], "ladders": {"tiny": {
    "frameworks": ["native-torch-eager", "keras3-jax"],
    "rows": {"bert": {"precisions": ["float32"], "fit": [], "predict": [1, 16, 256]}}}}}


@pytest.fixture(scope="module")
def podman_run(tmp_path_factory, built):
    return run_tiny("podman", tmp_path_factory, *RUNS["podman"], overlay=PODMAN_CONFIG, equivalence=True,
                    jax_numpy=True, batch_study=True, built=built)


# The tuned profile in CI: BERT fit in the native eager column (the fused AdamW, seen in the optimizer it built) and
# keras3-jax (no documented setting applies: it runs as in strict), tuned beside the podman run's strict cells (a copy
# of its results folder: 2 tuned cells run, the strict ones are read), the gain table, its verdict and the departures
# page. BERT predict is n/a here (one row is enough to show the profile). The compiled column's max-autotune is not
# run in CI (Inductor's autotuned compile of the BERT fit took 111 s on CI's CPU): its spec is checked in the unit
# tier (test_tuning.py); it runs, with the tuned cells' equivalence check, where a user adds the profile
# (`--config profiles=[strict,tuned]`, docs/profiles.md).
TUNED_COLUMNS = ["native-torch-eager", "keras3-jax"]
TUNED_NOT_RUN = [{"framework": "native-torch-eager|keras3-jax", "model": "bert", "task": "predict",
                  "reason": "not run in CI: one row shows the tuned profile"}]


@pytest.fixture(scope="module")
def tuned_run(podman_run, tmp_path_factory):
    *_, podman_results = podman_run
    results = tmp_path_factory.mktemp("results-tuned") / "results"
    shutil.copytree(podman_results, results, ignore=shutil.ignore_patterns("*.tar", "archive", "history"))
    overlay = yaml.safe_load((podman_results / "overlay.yaml").read_text())
    overlay.update(equivalence={"enabled": False}, batch_study={"enabled": False}, jax_numpy={"enabled": False},
                   first_step={**overlay["first_step"], "warm_runs": False},
                   not_applicable=overlay["not_applicable"] + TUNED_NOT_RUN)
    (results / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    proc = snakemake("--cores", "all", "--configfile", str(results / "overlay.yaml"), "--set-threads", *SIDE_BY_SIDE,
                     "--config", "suite=tiny", "accelerator=cpu", "runtime=podman", f"results_dir={results}",
                     "models=[bert]", f"frameworks=[{','.join(TUNED_COLUMNS)}]", "precisions=[float32]",
                     "profiles=[strict,tuned]", timeout=3600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    return results


@pytest.fixture(scope="module")
def host_run(tmp_path_factory, built):
    return run_tiny("host", tmp_path_factory, *RUNS["host"], built=built)


@pytest.fixture(scope="module")
def paddle_run(tmp_path_factory, built):
    """The Paddle columns' other rows in host venvs: ResNet-50 fit in float32 (and mixed_float16, n/a on a CPU:
    Paddle's auto_cast computes float32 there), the SD VAE-encoder fit and guided DDIM step."""
    return run_tiny("host", tmp_path_factory, ["resnet50", "stable_diffusion"], PADDLE, ["float32", "mixed_float16"],
                    built=built)


# The precision study in CI on one native and one Keras column (every precision each: the study's tables, speedups
# and claims, and each cell's dtype evidence). The other columns' mixed-precision paths are checked in their images
# by the dtype-policy and autocast probes below; their ResNet-50 cells are not run in CI (about nine minutes of CPU on
# CI's two cores, where the CPU is the limit). Native float16 training on a CPU: torch emulates float16 convolutions,
# about 15 s a step at any batch size, so its ResNet-50 fit is not run; the torch float16 path (autocast, GradScaler)
# runs in test_native_adapter_builds_in_place_and_its_autocast_is_observed.
PRECISION_COLUMNS = ["native-torch-eager", "keras3-jax"]
NOT_RUN_IN_CI = [{"framework": "native-torch-eager", "model": "resnet50", "task": "fit", "precision": "mixed_float16",
                  "reason": "not run in CI: torch emulates float16 convolutions on a CPU"}]
PRECISION_CONFIG = {"not_applicable": CONFIG["not_applicable"] + NOT_RUN_IN_CI}


@pytest.fixture(scope="module")
def precision_run(tmp_path_factory, built):
    """The mixed-precision study's ResNet-50 fit: its columns x every precision, each in its podman image, in the
    anchor profile (its settings are checked against the cells' evidence too)."""
    return run_tiny("podman", tmp_path_factory, ["resnet50"], PRECISION_COLUMNS, MIXED, overlay=PRECISION_CONFIG,
                    profile="anchor", built=built, timed_steps=TINY_TIMED_STEPS)


@pytest.fixture(scope="module")
def families_run(tmp_path_factory, built):
    """The LLM and diffusion families in the anchor profile: the native compiled column at the anchor's compile
    sites (generate: torch.compile(model), SD predict: the whole step; LoRA fit compiled), Keras 3 on torch
    uncompiled, bf16 LoRA adapters natively."""
    return run_tiny("podman", tmp_path_factory, *FAMILIES, precisions=["float32", "bfloat16"],
                    overlay=FAMILIES_CONFIG, profile="anchor", built=built)


@pytest.fixture(params=list(RUNS))
def tiny_run(request):
    return request.getfixturevalue(f"{request.param}_run")


@pytest.fixture(params=["podman", "host", "precision", "families"])
def any_run(request):
    return request.getfixturevalue(f"{request.param}_run")


class Probes(dict):
    """name -> what the probe returned; a probe that raised raises again in the test that reads it."""

    def __getitem__(self, name):
        value = super().__getitem__(name)
        if isinstance(value, BaseException):
            raise value
        return value


def two_at_a_time(jobs: dict) -> Probes:
    """Each job (a callable) on one of two threads: a probe's container start, model build and compilation are
    mostly one thread, so two fill CI's two cores where one after another left one idle."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
    found = Probes()
    for name, future in futures.items():
        try:
            found[name] = future.result()
        except Exception as error:          # noqa: BLE001  (kept for the test that reads it)
            found[name] = error
    return found


def probe_cell(results, folder, name, spec, framework, timeout_s=900):
    """One cell outside any run (a spec a test changed), in its column's image, with one OpenMP thread."""
    spec = spec.replace(env={**spec.env, "OMP_NUM_THREADS": "1"})
    return launch.run_cell(spec, "podman", results / "images" / f"{matrix.stack_of(CONFIG, framework)}.cpu.json",
                           folder / f"{name}.json", folder / f"{name}.log", launch.Options(timeout_s=timeout_s))


def no_accelerator(results, folder, framework):
    """A GPU spec in a CPU-only container (no GPU handed in, as a runtime without GPU plumbing would leave it)."""
    spec = matrix.spec({**CONFIG, "accelerator": "gpu"}, "tiny", "bert", "predict", 2, "float32", framework)
    environment = environment_records.read(results / "images" / f"{matrix.stack_of(CONFIG, framework)}.cpu.json")
    out = folder / f"no-gpu-{framework}.json"
    argv = launch.command("podman", environment, out, gpu=False, name=f"kbench-test-{framework}")
    subprocess.run(argv, input=json.dumps({"spec": spec.to_dict(), "context": {"runtime": "podman"}}), text=True,
                   env=launch.process_env("podman"), check=True, capture_output=True, timeout=600)
    return cell.read(out)


CPU = {**CONFIG, "accelerator": "cpu"}
DIVERGING = ["native-torch-eager", "keras2", "keras3-jax"]
NO_GPU = ["native-torch-eager", "keras3-jax", "keras3-tensorflow"]
POLICIES = [("keras3-jax", "keras3", "keras3-jax"), ("keras2", "keras2", "keras2")]


def diverging_spec(framework):
    """Injected overflow: a learning rate of 1e10 drives ResNet-50's weights and activations past float range within
    a few steps."""
    spec = matrix.spec(CPU, "tiny", "resnet50", "fit", 4, "float32", framework)
    spec.task_options["learning_rate"] = 1e10
    spec = spec.replace(steps=dataclasses.replace(spec.steps, warmup=1, timed=4, blocks=2))
    return spec


def short(spec):
    return spec.replace(steps=dataclasses.replace(spec.steps, timed=2))


@pytest.fixture(scope="module")
def probes(tmp_path_factory, built):
    """Every probe of this module that needs only the images: one-cell runs of specs a test changed, and Python
    snippets in the images (the adapters where their frameworks are importable), two at a time."""
    results = tmp_path_factory.mktemp("probes")
    prebuild.seed(built, results, prebuild.needs("podman", ["keras2", "native-torch", "keras3-jax",
                                                            "keras3-tensorflow", "keras3-torch"]))
    folder = results / "probes"
    cell_of = functools.partial(probe_cell, results, folder)
    jobs = {"keras2-lora": lambda: cell_of("keras2-lora", matrix.spec(CPU, "tiny", "mistral", "fit", 8, "float32",
                                                                      "keras2"), "keras2"),
            "keras2-sam-anchor": lambda: cell_of("keras2-sam-anchor", short(matrix.spec(
                CPU, "tiny", "sam", "predict", 4, "float32", "keras2", "anchor")), "keras2"),
            "keras3-torch-strict": lambda: cell_of("keras3-torch-strict", short(matrix.spec(
                CPU, "tiny", "bert", "predict", 2, "float32", "keras3-torch", "strict")), "keras3-torch"),
            "native-autocast": lambda: run_in_image(results, "native-torch", ADAPTER_GUARDS, NATIVE_AUTOCAST),
            "sd-step-graph": lambda: run_in_image(results, "native-torch", ADAPTER_GUARDS, SD_STEP_GRAPH)}
    jobs.update({f"diverging-{f}": functools.partial(cell_of, f"diverging-{f}", diverging_spec(f), f)
                 for f in DIVERGING})
    jobs.update({f"no-gpu-{f}": functools.partial(no_accelerator, results, folder, f) for f in NO_GPU})
    jobs.update({f"policy-{stack}": functools.partial(run_in_image, results, stack, ADAPTER_GUARDS,
                                                      policy_snippet(adapter, framework))
                 for stack, adapter, framework in POLICIES})
    return two_at_a_time(jobs)


def cells(results) -> list[cell.CellResult]:
    """The records of the cells that ran (a configured n/a has a record too, and never ran)."""
    found = [cell.read(path) for path in sorted((results / "cells").rglob("*.json"))
             if not path.name.endswith(cell.WARM_SUFFIX) and "attempts" not in path.parts
             and not any(part.endswith(compile_cache.CACHE_SUFFIX) for part in path.parts)]
    return [r for r in found if (r.error or {}).get("type") != "NotApplicable"]


# The first tests of this file set up the runs whose images the background build finishes first (tests/prebuild.py:
# Keras 3 on torch and native torch, then Keras 3 on JAX), so the e2e tier's worker for this file starts while
# the podman run's last images still build.
def test_llm_and_diffusion_families_ran_in_every_family_of_columns(families_run):
    runtime, models, frameworks, tables, results = families_run
    found = {result.cell_id: result for result in cells(results)}
    not_run = {(e["model"], e["task"], e["framework"]) for e in FAMILIES_NOT_RUN}
    assert {(r.cell_spec.model, r.cell_spec.task, r.cell_spec.framework) for r in found.values()} == {
        (model, task, framework) for model, tasks in (("gemma", ("fit", "generate")),
                                                      ("stable_diffusion", ("fit", "predict")))
        for task in tasks for framework in frameworks} - not_run
    for result in found.values():
        if result.cell_spec.model == "gemma":
            assert result.cell_spec.precision == "bfloat16"       # pure bf16: bf16 weights (asserted above)
        if result.cell_spec.task == "fit" and result.cell_spec.model == "gemma":   # LoRA trains its factors only
            assert 0 < result.params["trainable"] < result.params["total"] / 10, result.params
    table = pd.read_csv(tables / "ms_per_step.csv")
    timed = table[frameworks].apply(lambda column: ~column.astype(str).str.startswith("n/a: not run in CI"))
    assert (table[frameworks].where(timed).astype(float)[timed] > 0).sum().sum() == timed.sum().sum() == 10


def test_the_precision_studys_columns_ran_resnet50_at_every_precision_in_their_images(precision_run):
    runtime, models, frameworks, tables, results = precision_run
    table = pd.read_csv(tables / "precision.csv").set_index("framework")
    assert table.index.tolist() == PRECISION_COLUMNS and list(table.columns[-3:]) == MIXED
    timed = table[MIXED].apply(lambda column: column.str.contains(" ± "))        # "failed: ..." has none
    not_run = {(entry["framework"], entry["precision"]) for entry in NOT_RUN_IN_CI}
    for framework in PRECISION_COLUMNS:
        for precision in MIXED:
            text = table.loc[framework, precision]
            assert timed.loc[framework, precision] or (framework, precision) in not_run, (framework, precision, text)
            assert text.startswith("n/a: not run in CI") == ((framework, precision) in not_run), text
    for result in cells(results):
        spec, losses = result.cell_spec, result.loss
        assert result.status == "ok", (result.cell_id, result.error)
        assert result.cell_id.split("/")[-2] == spec.precision and result.provenance["runtime"] == "podman"
        assert math.isfinite(losses["first_timed_step"]) and math.isfinite(losses["last_timed_step"])
    speedup = pd.read_csv(tables / "precision_speedup.csv")
    assert list(speedup.columns[-7:]) == ["fp32 / fp16 x", "fp32 / fp16 verdict", "fp32 / bf16 x",
                                          "fp32 / bf16 verdict", "claimed x", "claim against", "claim"]
    speedup = speedup.set_index("framework")
    assert (speedup["claimed x"] == 1.5).all()
    # a speedup where both its cells ran, none where either was not run
    for column, half in (("fp32 / fp16 x", "mixed_float16"), ("fp32 / bf16 x", "mixed_bfloat16")):
        ran = [f for f in PRECISION_COLUMNS if not {(f, "float32"), (f, half)} & not_run]
        assert (speedup.loc[ran, column] > 0).all() and speedup[column].drop(ran).isna().all(), speedup[column]


def test_every_cell_ran_and_the_tables_are_filled(tiny_run):
    runtime, models, frameworks, tables, results = tiny_run
    table = pd.read_csv(tables / "ms_per_step.csv")
    assert list(table.columns) == ["model", "task", "batch_size", "precision",
                                   *(c for f in frameworks for c in (f, f"{f} low", f"{f} high")), "params_parity",
                                   "networks differ", "cell flags", "equivalence"]
    assert len(table) == 2 * len(models)
    ran = ~table[frameworks].apply(lambda column: column.astype(str).str.startswith("n/a: not run in CI"))
    values = table[frameworks].where(ran).astype(float)      # "failed: ..." would not parse
    assert (values[ran] > 0).sum().sum() == ran.sum().sum()
    for f in frameworks:                          # every estimate inside its interval
        timed = ran[f]
        assert (table.loc[timed, f"{f} low"].astype(float) <= values.loc[timed, f]).all()
        assert (values.loc[timed, f] <= table.loc[timed, f"{f} high"].astype(float)).all()
    # BERT and SAM are the same models in every library: same parameter counts (SAM within 0.04 %), no flag.
    assert table["params_parity"].isna().all()
    speedup = pd.read_csv(tables / "speedup.csv")
    assert {f"vs {f} %" for f in frameworks} <= set(speedup.columns)


def test_compiled_cells_run_cold_then_warm_from_their_own_cache_and_the_table_shows_both(podman_run):
    """WARM_CELLS: the BERT cells of the compiled JAX and torch columns ran cold (an empty persistent cache, kept
    beside the record) and again warm in a fresh process from a copy of it: the warm twin loaded what the cold run
    compiled (cache hits, no misses, a shorter first step) and timed the same program (the window within noise or
    flagged). The first_step table shows both with their parts; the equivalence jobs of those columns started warm."""
    runtime, models, frameworks, tables, results = podman_run
    warm = sorted((results / "cells").rglob("*" + cell.WARM_SUFFIX))
    where = [p.relative_to(results / "cells" / "tiny" / "strict").parts for p in warm]
    assert sorted((parts[0], parts[1], parts[4]) for parts in where) == sorted(
        ("bert", task, f"{f}.r1.warm.json") for f in ("keras3-jax", "native-torch-compiled") for task in ("fit", "predict"))
    for path in warm:
        twin, cold = cell.read(path), cell.read(str(path).replace(cell.WARM_SUFFIX, ".json"))
        assert cold.status == twin.status == "ok", (path, cold.error, twin.error)
        assert compile_cache.beside(str(path).replace(cell.WARM_SUFFIX, ".json")).is_dir()
        cold_cache, warm_cache = cold.first_step["cache"], twin.first_step["cache"]
        assert cold_cache["state"] == "cold" and cold_cache["entries_before"] == 0 and cold_cache["entries_after"] > 0
        assert warm_cache["state"] == "warm" and warm_cache["entries_before"] == cold_cache["entries_after"]
        assert warm_cache["cache_hits"] > 0 and warm_cache["cache_misses"] == 0, (path, warm_cache)
        assert cold_cache["cache_misses"] > 0, (path, cold_cache)     # (a program met twice in one process hits)
        assert twin.first_step["parts"]["compile_s"] < cold.first_step["parts"]["compile_s"], path
        assert cold.first_step["import_s"] > 0 and cold.first_step["build_s"] > 0 and cold.first_step["programs"] > 0
        assert cold.first_step["probe_s"] > 0 and twin.first_step["probe_s"] > 0      # the libraries' start-up
    long = pd.read_csv(tables / "first_step_long.csv")
    compiled = long[long.framework.isin(["keras3-jax", "native-torch-compiled"]) & (long.model == "bert")]
    assert sorted(compiled.state) == ["cold"] * 4 + ["warm"] * 4
    paid = long[(long.framework == "native-torch-compiled") & (long.model == "bert")]
    assert paid.pays_back_after_steps.notna().all()         # against native eager in the same rows
    text = (tables / "first_step.md").read_text()
    assert "cold " in text and " | warm " in text and "cache hits" in text and "steady at step" in text
    assert (results / "plots" / "tiny" / "strict" / "first_step.png").stat().st_size > 10_000
    for framework in ("keras3-jax", "native-torch-compiled"):
        job = cell.read(results / "equivalence" / "tiny" / "strict" / "bert" / f"{framework}.json")
        assert job.status == "ok" and job.provenance["compile_cache"]["state"] == "warm", job.provenance
    page = (results / "report" / "tiny" / "first_page.md").read_text()
    assert "What the compile costs a user" in page


def test_the_demo_cells_step_breaks_down_by_kind_side_by_side_and_closes(podman_run):
    """CI's breakdown (DEMO_BREAKDOWN): BERT fit and predict in native eager and Keras 3 on JAX, each profiled after
    its window by its own framework, broken down by kind, closing, its trace kept beside its record (and JAX's
    XSpace beside it) and in the table and picture; every other cell has none. The first page tests the benchmark's explanations on them."""
    runtime, models, frameworks, tables, results = podman_run
    profiled = {r.cell_id: r for r in cells(results) if r.breakdown}
    assert {(r.cell_spec.model, r.cell_spec.framework) for r in profiled.values()} == {
        ("bert", "native-torch-eager"), ("bert", "keras3-jax")}
    for cell_id, result in profiled.items():
        found = result.breakdown
        assert found["closes"] and found["closure_gap"] < trace.CLOSURE_TOLERANCE, (cell_id, found)
        kinds = {k: v for k, v in found["ms_per_step"].items() if k != "waiting"}
        assert max(kinds, key=kinds.get) != "other" and found["ops_per_step"] > 10, (cell_id, found)
        # every column names its matrix products: XLA's fusions that hold BERT's dots are read from their programs
        assert found["ms_per_step"]["matmul_conv"] > 0 and len(found["per_step"]["matmul_conv"]) == found["steps"]
        # the same work, the same word: both columns find BERT's attention core (native's SDPA op and the core
        # the runner scoped in Keras's MultiHeadAttention), its softmax and dropout inside it
        assert found["ms_per_step"]["attention"] > 0 and found["attention_scopes"] >= 1, (cell_id, found)
        if "keras3-jax" in cell_id:
            assert found["programs_read"] > 0 and found["read_from"]["program"] > 0.5, (cell_id, found)
            assert found["ms_per_step"]["fusion_unread"] < 0.2 * found["step_ms_per_step"], (cell_id, found)
            # JAX's XSpace kept beside the trace (XProf's and TensorBoard's input), where jax.profiler wrote it
            xplane = found["trace"]["xplane"]
            assert xplane["kept"] and re.fullmatch(r"plugins/profile/[^/]+/[^/]+\.xplane\.pb",
                                                   xplane["files"]["xplane.pb.gz"]), (cell_id, xplane)
            assert [p.name.split(".r1.")[1] for p in measure.kept_files(results / "cells" / f"{cell_id}.r1.json")] \
                == ["trace.json.gz", "xplane.pb.gz"]
        else:
            assert "xplane" not in found["trace"], (cell_id, found["trace"])       # torch writes none
        assert found["trace"]["kept"] and 0.2 < found["profiler_overhead"] < 20, (cell_id, found)
        kept = measure.kept_trace(results / "cells" / f"{cell_id}.r1.json")
        assert trace.breakdown(trace.read_trace(kept), found["steps"], "cpu")["ms_per_step"] == \
            pytest.approx(found["ms_per_step"])           # the kept trace gives the recorded breakdown back
    table = pd.read_csv(tables / "time_by_kind.csv")      # the batch study's rungs are rows too (the verdict reads them)
    assert set(zip(table.task, table.framework)) == {
        (t, f) for t in ("fit", "predict") for f in ("keras3-jax", "native-torch-eager")}
    assert (table["closes"] == "closes").all()
    assert (results / "plots" / "tiny" / "strict" / "time_by_kind.png").stat().st_size > 10_000
    page = (results / "report" / "tiny" / "first_page.md").read_text()
    assert "The benchmark's explanations, tested on this run's breakdowns by kind" in page


def test_cells_record_backend_environment_and_timing(tiny_run):
    runtime, models, frameworks, tables, results = tiny_run
    for result in cells(results):
        assert result.status == "ok", result.error
        prov, framework_def = result.provenance, result.cell_spec.framework_def
        backend = BACKENDS[result.cell_spec.framework]
        distribution = {"paddle": "paddlepaddle"}.get(backend, backend)      # the backend's package on PyPI
        assert prov["runtime"] == runtime and prov["backend"] == backend and distribution in prov["packages"]
        package, version = FRAMEWORK_PACKAGE[framework_def["adapter"]]
        assert prov["packages"][package] == version and prov["device"].lower().startswith("cpu")
        lock = REPO / "envs" / f"{framework_def['stack']}.cpu.lock"
        assert prov["environment"]["lock_sha256"] == envs.sha256_file(lock)
        timing = result.timing
        assert timing["n"] == len(timing["step_ms"]) == CI_TIMED_STEPS and timing["first_step_ms"] > 0
        if framework_def["jit_compile"]:       # XLA / torch.compile / to_static: compiled before the window only
            compiles = (result.evidence or {}).get("compiles")
            if compiles:                        # the framework's own counters (JAX, torch, Paddle's SOT)
                before, during = compiles["before_window"], compiles["in_window"]
                assert before.get("xla_compiles", 0) + before.get("graphs", 0) > 0, (result.cell_id, compiles)
                assert during.get("xla_compiles", 0) + during.get("graphs", 0) == 0, (result.cell_id, compiles)
            else:                               # TensorFlow has none: its first step holds the XLA compile
                assert timing["first_step_ms"] > 3 * timing["median_ms"], result.cell_id
        assert result.params["total"] >= result.params["trainable"] > 0


def test_every_ok_cell_has_model_flops_and_throughput(any_run):
    runtime, models, frameworks, tables, results = any_run
    summary = pd.read_csv(tables / "cells_summary.csv")
    ok = summary[summary.status == "ok"]
    assert len(ok) and (ok.flops_per_step > 0).all() and (ok.tflops_per_s > 0).all()
    assert ok.mfu.isna().all()          # a CPU has no peak in kbench.gpu.peaks: no MFU, rather than a guessed one
    throughput = pd.read_csv(tables / "throughput.csv")
    assert len(throughput) == len(ok)


def test_every_real_cell_keeps_the_invariants_of_a_trustworthy_number(any_run):
    runtime, models, frameworks, tables, results = any_run
    found = cells(results)
    assert found
    for result in found:
        spec, timing, prov = result.cell_spec, result.timing, result.provenance
        where = result.cell_id
        assert result.status == "ok", (where, result.error)
        # the timed window: exactly the timed steps, each step's time accounted for once
        assert timing["n"] == len(timing["step_ms"]) == spec.steps.timed, where
        assert math.isclose(sum(timing["step_ms"]), timing["window_ms"], rel_tol=1e-9), where
        assert math.isclose(timing["mean_ms"], timing["window_ms"] / spec.steps.timed, rel_tol=1e-9), where
        # the arithmetic the precision names, as the cell observed it (not copied from its spec)
        weights, compute = DTYPES[spec.precision]
        observed = {k: result.numerics[k] for k in ("weights_dtype", "compute_dtype")}
        assert observed == {"weights_dtype": weights, "compute_dtype": compute}, where
        # the environment was checked against the stack's lock, and the backend's own sync closed the window
        lock = REPO / "envs" / f"{spec.framework_def['stack']}.cpu.lock"
        assert prov["lock_check"]["lock_sha256"] == envs.sha256_file(lock) and prov["lock_check"]["result"] == "exact"
        assert prov["sync"] == SYNC_ON_CPU[BACKENDS[spec.framework]], where
        # ... and the timer called it: once before the warm-up, after each warm-up step and each synced block
        blocks = min(spec.settings["sync_blocks"], spec.steps.timed)
        assert result.evidence["sync_calls"] == 1 + spec.steps.warmup + blocks, where
        assert timing["block_steps"] and sum(timing["block_steps"]) == spec.steps.timed, where
        assert math.isclose(sum(timing["block_ms"]), timing["window_ms"], rel_tol=1e-9), where
        # every repository module the cell ran is an input of its rule (an edit to it reruns the cell)
        assert set(prov["kbench_modules"]) <= set(sources.cell_modules(spec.adapter)), where
        # the same host work per step in every column: a fit reads its loss back (train_on_batch does, so the
        # native loop does too); nothing compiled inside the timed window
        if spec.task == "fit":
            assert result.evidence["step_returns"] == "host", where
        assert flat.row(result)["compiles_in_window"] in (None, 0), (where, result.evidence.get("compiles"))
        assert result.memory["peak_host_rss_bytes"] > 50 * 2**20, where
        if spec.task == "fit":      # the same batch every step: a model that learns lowers its loss
            assert result.loss["last_timed_step"] < result.loss["first_timed_step"], (where, result.loss)
        if spec.task == "generate":  # tokens counted in the output: batch x new tokens, every step
            tokens = spec.batch_size * spec.task_options["new_tokens"]
            assert timing["generated_tokens_per_step"] == tokens, where
            assert math.isclose(timing["tokens_per_s"], tokens * 1e3 / timing["mean_ms"]), where
        else:
            assert timing["tokens_per_s"] is None


def test_keras2_lora_that_trains_nothing_is_failed_not_timed(probes):
    """Keras 2's enable_lora silently leaves nothing trainable. Mistral builds on Keras 2 in float32 (not in the
    anchor's bf16, hence n/a in config.yaml): run that real cell in the keras2 image and see it refused."""
    result = probes["keras2-lora"]
    assert result.status == "failed" and result.error["type"] == "LoRANotApplied", result.error
    assert result.timing is None and result.params["trainable"] == 0 < result.params["total"]


def test_podman_cells_name_the_image_they_ran_in(podman_run):
    runtime, models, frameworks, tables, results = podman_run
    for result in cells(results):
        stack, environment = result.cell_spec.stack, result.provenance["environment"]
        record = json.loads((results / "images" / f"{stack}.cpu.json").read_text())
        assert environment["id"] == record["id"] and environment["kind"] == "image"
        assert record["image"].endswith(record["lock_sha256"].removeprefix("sha256:")[:16])
        assert result.provenance["hostname"] != socket.gethostname()     # it ran in a container


def test_host_cells_name_the_venv_they_ran_in(host_run):
    runtime, models, frameworks, tables, results = host_run
    for result in cells(results):
        stack, environment = result.cell_spec.stack, result.provenance["environment"]
        assert environment["kind"] == "venv" and environment["prefix"].endswith(f".envs/{stack}.cpu")


def test_exported_oci_archive_carries_the_recorded_image(podman_run):
    """The export rule on the synthetic stack's image (seeded in the podman run's folder): the archive's manifest
    names the recorded image ID. (A framework's multi-GB image shows the same rule, and costs minutes to save.)"""
    runtime, models, frameworks, tables, results = podman_run
    target = results / "images" / "synthetic.cpu.oci.tar"
    proc = snakemake(str(target), "--cores", "all", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman",
                     f"results_dir={results}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    with tarfile.open(target) as archive:
        def blob(digest):
            return json.load(archive.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}"))
        manifest = blob(json.load(archive.extractfile("index.json"))["manifests"][0]["digest"])
    record = json.loads((results / "images" / "synthetic.cpu.json").read_text())
    assert manifest["config"]["digest"] == record["id"]


@pytest.mark.parametrize("framework", DIVERGING)
def test_a_diverging_fit_is_failed_for_its_non_finite_loss(probes, framework):
    """A learning rate of 1e10 (diverging_spec): the cell must come back failed with its losses, not timed."""
    result = probes[f"diverging-{framework}"]
    assert result.status == "failed" and result.error["type"] == "NonFiniteLoss", result.error
    assert result.error["message"].startswith("non-finite loss: ") and result.timing is None
    assert not math.isfinite(result.loss["last_timed_step"])


@pytest.mark.parametrize("framework", NO_GPU)
def test_a_gpu_cell_whose_framework_finds_no_gpu_fails_as_no_accelerator(probes, framework):
    """A GPU spec in a CPU-only container (no_accelerator): each framework's own view of its device fails the cell
    before the model is built, JAX included (JAX_PLATFORMS=cuda, no silent CPU fall-back)."""
    result = probes[f"no-gpu-{framework}"]
    assert result.status == "failed" and result.error["type"] == "NoAccelerator", result.error
    assert result.params is None and result.timing is None


def expected_evidence(result: cell.CellResult) -> dict:
    """What a cell must have done: its profile's settings, which come from config `settings` and the departures that
    profile keeps (a lora_dtype of "model" is the weights' dtype)."""
    expected = dict(result.cell_spec.settings)
    expected.pop("not_compilable", None)
    expected["sync_blocks"] = min(expected["sync_blocks"], result.cell_spec.steps.timed)
    if expected.get("lora_dtype") == "model":
        expected["lora_dtype"] = result.cell_spec.dtypes.weights
    return expected


def test_every_cell_did_what_its_profiles_settings_and_departures_say(any_run):
    """The departures in config, checked against the cells: TF32 mode applied, warm-up steps run, whether and where
    the cell compiled (read from the objects it built), LoRA adapter dtype, and no metric work in a Keras fit."""
    runtime, models, frameworks, tables, results = any_run
    for result in cells(results):
        expected, evidence = expected_evidence(result), result.evidence
        assert {"tf32", "warmup", "jit_compile"} <= set(evidence), (result.cell_id, evidence)
        assert {k: evidence.get(k) for k in expected} == expected, result.cell_id
        if result.cell_spec.task == "fit" and result.cell_spec.adapter != "native_torch":
            assert evidence["metrics"] == [], result.cell_id


def test_anchor_cells_show_the_anchors_settings(families_run, precision_run):
    """The departures the anchor profile keeps, seen in its cells' evidence (not only in their specs)."""
    found = {r.cell_id.split("/", 2)[2]: r.evidence for run in (families_run, precision_run) for r in cells(run[-1])}
    assert found["gemma/generate/bs1/bfloat16/native-torch-compiled"]["compile_site"] == "model"
    assert found["gemma/fit/bs8/bfloat16/native-torch-compiled"]["compile_site"] == "module"     # compiled LoRA fit
    assert found["gemma/fit/bs8/bfloat16/native-torch-eager"]["lora_dtype"] == "bfloat16"
    assert found["gemma/fit/bs8/bfloat16/keras3-torch"]["lora_dtype"] == "float32"     # not reproducible (Keras)
    assert not found["stable_diffusion/fit/bs8/float32/keras3-torch"]["jit_compile"]     # Keras on torch, eager
    assert {e["warmup"] for k, e in found.items() if "native-torch" in k} == {2}
    assert {e["warmup"] for k, e in found.items() if "keras" in k and "/generate/" not in k} == {1}
    # TF32 as each library defaults, except where the anchor's native scripts turned it on (departure tf32)
    tf32_on = {k for k, e in found.items() if e["tf32"] == "on"}
    assert tf32_on == {k for k in found if k.endswith("native-torch-compiled")
                       and (k.startswith("bert/") or k.startswith(("gemma/fit", "mistral/fit")))}
    assert {e["tf32"] for k, e in found.items() if k not in tf32_on} == {"library-default"}


def test_keras2_sam_predict_runs_without_xla_only_in_the_anchor_profile(podman_run, probes):
    """keras2-without-xla: the anchor predicted SAM uncompiled (a probe cell in the anchor profile); strict compiles
    it (the podman run's own keras2 SAM predict cell, not run again)."""
    runtime, models, frameworks, tables, results = podman_run
    strict = cell.read(results / "cells" / "tiny/strict/sam/predict/bs4/float32/keras2.r1.json")
    assert strict.status == "ok" and strict.evidence["jit_compile"] is True, strict.error
    result = probes["keras2-sam-anchor"]
    assert result.status == "ok", result.error
    assert result.evidence["jit_compile"] is False and result.evidence["warmup"] == result.cell_spec.steps.warmup


def test_keras3_torch_compiles_in_the_strict_profile(probes):
    """keras3-torch-eager is the anchor's; strict compiles Keras on torch (torch.compile through Keras)."""
    result = probes["keras3-torch-strict"]
    assert result.status == "ok", result.error
    assert result.evidence["jit_compile"] is True and result.cell_spec.settings["jit_compile"] is True


def run_in_image(results, stack, *parts, timeout=600):
    """A Python snippet in a stack's image (offline, the repo's scripts mounted as the cells get them): the
    adapters where their frameworks are importable, which the driver's venv is not."""
    environment = environment_records.read(results / "images" / f"{stack}.cpu.json")
    code = f"CONFIG_JSON = {json.dumps(json.dumps({**CONFIG, 'accelerator': 'cpu'}))}\n" + "".join(
        textwrap.dedent(part) for part in parts)
    argv = ["podman", "run", "--rm", "-i", "--network", "none", "--env", "OMP_NUM_THREADS=1",
            f"--volume={launch.REPO / 'scripts'}:{runtimes.SCRIPTS_IN_IMAGE}:ro", *host.ulimit_args(),
            environment["id"], "python", "-c", code]
    proc = subprocess.run(argv, env=launch.process_env("podman"), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


ADAPTER_GUARDS = """
    import contextlib, json, math
    from kbench import adapters
    from kbench.plan import matrix
    from kbench.run import runner
    config = json.loads(CONFIG_JSON)

    def workload(adapter, model, task, batch, precision, framework):
        spec = matrix.spec(config, "tiny", model, task, batch, precision, framework)
        return spec, adapters.build(adapters.load(adapter), spec)

    def refused(spec, w):
        w.step()
        try:
            runner.check_dtypes(spec, w.dtypes())
        except runner.PrecisionMismatch as error:
            return str(error)
        return None
"""


NATIVE_AUTOCAST = """
        import peft, torch
        from kbench.adapters import native_torch
        created, register, in_lora = [], torch.nn.Module.register_parameter, []
        def spy(module, name, parameter):
            if parameter is not None:
                created.append((type(module).__name__, name, parameter.dtype, bool(in_lora)))
            return register(module, name, parameter)
        def creating_lora(owner, name):             # what runs inside owner.name creates or recasts LoRA factors
            original = getattr(owner, name)
            def wrapped(*args, **kwargs):
                in_lora.append(True)
                try:
                    return original(*args, **kwargs)
                finally:
                    in_lora.pop()
            setattr(owner, name, wrapped)
            return lambda: setattr(owner, name, original)
        restore = [creating_lora(peft, "get_peft_model"), creating_lora(native_torch, "_lora_to_float32")]
        torch.nn.Module.register_parameter = spy
        spec, w = workload("native_torch", "gemma", "fit", 2, "bfloat16", "native-torch-eager")
        torch.nn.Module.register_parameter = register
        for undo in restore:
            undo()
        wrong = [entry for entry in created if entry[2] != torch.bfloat16 and not entry[3]]
        assert created and not wrong, wrong
        assert any(entry[3] for entry in created), "peft created the LoRA factors"
        assert isinstance(w.step(), float), "a native fit step reads its loss back, as train_on_batch does"
        # float16 training: autocast and GradScaler (scale, unscale, a skipped step on overflow, update)
        spec, w = workload("native_torch", "bert", "fit", 4, "mixed_float16", "native-torch-eager")
        losses = [w.step() for _ in range(6)]
        assert refused(spec, w) is None and w.dtypes() == {"weights": "float32", "compute": "float16"}, w.dtypes()
        assert all(math.isfinite(loss) for loss in losses) and min(losses[1:]) < losses[0], losses
        spec, w = workload("native_torch", "bert", "predict", 4, "mixed_bfloat16", "native-torch-eager")
        assert refused(spec, w) is None, w.dtypes()
        native_torch._autocast = lambda spec, device: contextlib.nullcontext
        spec, w = workload("native_torch", "bert", "predict", 4, "mixed_bfloat16", "native-torch-eager")
        print("REFUSED", refused(spec, w))
    """


def test_native_adapter_builds_in_place_and_its_autocast_is_observed(probes):
    """In the native-torch image: a pure-bf16 Gemma is created in bf16 where it runs (every base parameter
    registered in bfloat16, none in float32 first; only the LoRA factors are left out: peft's get_peft_model creates
    them as plain nn.Linear weights and, where settings.lora_dtype is float32, the adapter's _lora_to_float32 registers
    them again through peft's cast_adapter_dtype); a mixed-precision cell whose autocast did nothing (the adapter's
    autocast replaced by a null context) is refused as PrecisionMismatch."""
    out = probes["native-autocast"]
    assert "REFUSED precision mixed_bfloat16 names weights float32 and compute bfloat16, but the steps ran in " \
           "weights float32 and compute float32" in out


# The anchor's SD predict in the compiled column: the whole denoising step under torch.compile, traced by dynamo
# alone (backend "eager": no Inductor code generation, which takes the real cell 175-210 s on CI's CPU).
SD_STEP_GRAPH = """
    import torch
    from kbench.adapters import _hooks, native_torch
    native_torch._compile = lambda target, spec: torch.compile(target, backend="eager")
    spec = matrix.spec(config, "tiny", "stable_diffusion", "predict", 2, "float32", "native-torch-compiled", "anchor")
    w = adapters.build(adapters.load("native_torch"), spec)
    w.step(), w.step()
    print("EVIDENCE", json.dumps({**w.evidence(), "compiles": _hooks.dynamo_counters(torch)}))
"""


def test_the_anchors_compiled_sd_step_is_one_graph(probes):
    """The anchor compiled the SD pipeline, so the compiled column's SD predict compiles its whole denoising step
    (compile site "step"), and it is one graph: the scheduler gets a Python int timestep (a tensor one was a
    data-dependent branch in DDIMScheduler.step: a graph break inside the "compiled" step). Read from dynamo's
    own counters after two steps, as a cell reads them before its window."""
    evidence = json.loads(probes["sd-step-graph"].split("EVIDENCE ", 1)[1])
    assert evidence["jit_compile"] and evidence["compile_site"] == "step", evidence
    compiles = evidence["compiles"]
    assert compiles["graphs"] >= 1 and compiles["graph_breaks"] == compiles["unsupported"] == 0, compiles


def policy_snippet(adapter, framework):
    return f"""
        from kbench.adapters import _keras
        spec, w = workload("{adapter}", "bert", "predict", 4, "mixed_bfloat16", "{framework}")
        assert refused(spec, w) is None, w.dtypes()
        _keras.prepare = lambda keras, spec: (keras.mixed_precision.set_global_policy("float32"), {{}})[1]
        spec, w = workload("{adapter}", "bert", "predict", 4, "mixed_bfloat16", "{framework}")
        print("REFUSED", refused(spec, w))
    """


@pytest.mark.parametrize("stack", [stack for stack, _, _ in POLICIES])
def test_keras_adapters_dtype_policy_is_observed(probes, stack):
    """In the Keras images: a mixed-precision cell runs its policy's compute dtype; one whose dtype policy was
    dropped (the shared prepare() without set_global_policy) is refused as PrecisionMismatch."""
    assert "REFUSED precision mixed_bfloat16 names weights float32 and compute bfloat16, but the steps ran in " \
           "weights float32 and compute float32" in probes[f"policy-{stack}"]


def test_a_stack_built_alone_and_beside_another_gets_the_same_image_id(podman_run, tmp_path):
    """The synthetic stack (NumPy only) rebuilt with --no-cache alone, then twice at once as Snakemake would build
    two stacks (each build's intermediates are the other's): one ID, and no history naming a `-tmp` intermediate."""
    import threading
    from kbench.stacks import images
    runtime, models, frameworks, tables, results = podman_run
    base, cache = results / "images" / "base.json", REPO / CONFIG["containers"]["uv_cache"]
    tags = [f"localhost/kbench-test/synthetic:id-{name}" for name in ("alone", "beside-1", "beside-2")]

    def build(tag, out):
        out[tag] = images.build_stack("synthetic", "cpu", base, CONFIG["containers"]["source_date_epoch"], cache,
                                      tmp_path / f"{tag.rsplit(':', 1)[1]}.json", no_cache=True, tag=tag)["id"]
    built = {}
    try:
        build(tags[0], built)
        workers = [threading.Thread(target=build, args=(tag, built)) for tag in tags[1:]]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert len(built) == 3 and len(set(built.values())) == 1, built
        assert all(images.temporary_names(tag) == [] for tag in tags)
    finally:
        for tag in tags:
            subprocess.run(["podman", "rmi", "--force", tag], env=launch.process_env("podman"), capture_output=True)


def test_a_lock_given_to_the_image_build_makes_the_image_envs_makes(podman_run, tmp_path):
    """images.build_stack with a lock from elsewhere (a bisect step's) gives the same image ID as the same lock in
    envs/: the step's image is the stack's image for that lock (on the podman run's base image)."""
    from kbench.stacks import images
    runtime, models, frameworks, tables, results = podman_run
    base = results / "images" / "base.json"
    elsewhere = tmp_path / "steps" / "old" / "synthetic.cpu.lock"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes((REPO / "envs" / "synthetic.cpu.lock").read_bytes())
    cache, epoch = REPO / CONFIG["containers"]["uv_cache"], CONFIG["containers"]["source_date_epoch"]
    tags = ["localhost/kbench-test/synthetic:from-envs", "localhost/kbench-test/synthetic:from-elsewhere"]
    try:
        from_envs = images.build_stack("synthetic", "cpu", base, epoch, cache, tmp_path / "a.json", tag=tags[0])
        from_elsewhere = images.build_stack("synthetic", "cpu", base, epoch, cache, tmp_path / "b.json", tag=tags[1],
                                            lock=elsewhere)
    finally:
        for tag in tags:
            subprocess.run(["podman", "rmi", "--force", tag], env=launch.process_env("podman"), capture_output=True)
    assert from_elsewhere["id"] == from_envs["id"]
    assert from_envs["lock"] == "envs/synthetic.cpu.lock" and from_elsewhere["lock"] == str(elsewhere)
    assert from_elsewhere["lock_sha256"] == from_envs["lock_sha256"]


def equivalence_rows(results) -> pd.DataFrame:
    return pd.read_csv(results / "tables" / "tiny" / "strict" / "equivalence_long.csv")


def test_every_column_of_bert_computes_the_references_function(podman_run):
    """The equivalence check in CI: BERT in all five columns, each loading the reference column's
    unit-scale weights: every column's outputs within the float32 tolerance of the reference's."""
    runtime, models, frameworks, tables_dir, results = podman_run
    rows = equivalence_rows(results)
    checked = rows[~rows["reference column"] & (rows.precision == "float32")]
    assert set(checked.framework) == set(frameworks) and set(checked.model) == set(EQUIVALENCE_MODELS)
    assert (checked.verdict.str.startswith("equivalent")).all(), checked[["model", "task", "framework", "verdict"]]
    assert (checked.rel <= checked.tolerance).all()
    # Keras 3's TF Adam moves a repeated token's embedding row once per occurrence (config equivalence.differences):
    # its fit losses leave the reference's after the first step, and the table names why
    tf_fit = checked[(checked.framework == "keras3-tensorflow") & (checked.model == "bert") & (checked.task == "fit")]
    assert tf_fit.verdict.str.contains(r"training steps drift: .*IndexedSlices").all() and len(tf_fit) == 1
    other_bert = checked[(checked.model == "bert")].drop(tf_fit.index)
    assert not other_bert.verdict.str.contains("drift").any(), other_bert[["task", "framework", "verdict"]]
    table = pd.read_csv(tables_dir / "ms_per_step.csv")
    assert table["equivalence"].isna().all()            # no row flagged


def equivalence_job(results, framework, model="bert", **settings):
    """The check's job of one column, started as the workflow starts it, with settings changed in its cells."""
    config = {**CONFIG, "accelerator": "cpu", "models": [model], "frameworks": [framework]}
    job = matrix.equivalence_job(config, "tiny", "strict", model, framework)
    job["cells"] = [{**c, "settings": {**c["settings"], **settings}} for c in job["cells"]
                    if c["precision"] == "float32"]
    return job


def run_job(results, job, reference, tmp_path):
    stack = matrix.stack_of(CONFIG, job["framework"])
    out = tmp_path / f"{job['framework']}.json"
    launch.run_cell(job, "podman", results / "images" / f"{stack}.cpu.json", out, tmp_path / "job.log",
                    launch.Options(timeout_s=900, module="kbench.equivalence.check", files={"reference": reference}))
    return cell.read(out)


def verdicts(result) -> list[str]:
    from kbench.results import equivalence_tables
    return list(equivalence_tables.equivalence_long([result], CONFIG["equivalence"]["differences"]).verdict)


def perturbed_reference(reference, out):
    """One element of one reference weight moved by 1% of its scale (the fit's last feed-forward kernel)."""
    import numpy as np
    arrays = dict(np.load(reference))
    key = next(k for k in sorted(arrays) if k.startswith("w|fit|") and k.endswith("feedforward_output_dense/kernel"))
    arrays[key] = arrays[key].copy()
    arrays[key][3, 5] += 0.01 * np.abs(arrays[key]).max()
    np.savez(out, **arrays)
    return out


@pytest.fixture(scope="module")
def controls(podman_run, tmp_path_factory):
    """The equivalence check's two controls against the podman run's BERT reference, side by side."""
    runtime, models, frameworks, tables_dir, results = podman_run
    folder = tmp_path_factory.mktemp("controls")
    reference = results / "equivalence" / "tiny" / "strict" / "bert" / "reference.npz"
    return two_at_a_time({
        "swapped-gelu": lambda: verdicts(run_job(results, equivalence_job(results, "native-torch-eager", gelu="exact"),
                                                 reference, folder / "gelu")),
        "perturbed-weight": lambda: verdicts(run_job(results, equivalence_job(results, "keras2"),
                                                     perturbed_reference(reference, folder / "perturbed.npz"),
                                                     folder / "perturbed"))})


def test_the_check_sees_a_swapped_gelu_in_one_column(controls):
    """The native column with HF's exact GELU (the anchor's) instead of the tanh one every Keras column runs: at the
    check's unit-scale weights its outputs leave the tolerance (about 3e-3 against 7e-6)."""
    found = controls["swapped-gelu"]
    assert found and all(v.startswith("differs: rel ") for v in found), found


def test_the_check_sees_one_perturbed_weight(controls):
    """One element of one reference weight moved by 1% of its scale, for one column only (the Keras 2 column
    reads a copy of the reference whose arrays are the reference's but that one): flagged."""
    fit, predict = controls["perturbed-weight"]
    assert fit.startswith("differs: rel ") and predict.startswith("equivalent"), (fit, predict)   # fit's weights moved


def test_paddle_columns_ran_resnet50_and_sd_and_say_what_to_static_ran(paddle_run):
    """paddle-dygraph runs uncompiled; paddle-static's evidence names SOT, the backend Paddle chose (PHI: this
    wheel has no CINN) and its graph breaks; trainable parameters as torchvision counts them (Paddle's batch-norm
    statistics are Parameters, left out)."""
    runtime, models, frameworks, tables, results = paddle_run
    found = {(r.cell_spec.model, r.cell_spec.task, r.cell_spec.precision, r.cell_spec.framework): r for r in cells(results)}
    assert set(found) == {(m, t, p, f) for m, t, p in (("resnet50", "fit", "float32"),
                                                       ("stable_diffusion", "fit", "float32"),
                                                       ("stable_diffusion", "predict", "float32")) for f in PADDLE}
    for (model, task, precision, framework), result in found.items():
        if precision == "mixed_float16":
            continue
        assert result.status == "ok", (result.cell_id, result.error)
        assert result.provenance["sync"] == SYNC_ON_CPU["paddle"] and result.evidence["omp_num_threads"]
        if framework == "paddle-dygraph":
            assert result.evidence["jit_compile"] is False and result.evidence["to_static"] == "none"
        else:
            evidence = result.evidence
            assert evidence["jit_compile"] is True and evidence["to_static"] == "sot"
            assert evidence["static_backend"] == "PHI" and evidence["cinn_compiled"] is False
            assert "BreakGraphInlineCallBreak" not in evidence["sot_graph_breaks"]
            assert flat.row(result)["compiles_in_window"] == 0
        if task == "fit":
            assert result.loss["last_timed_step"] < result.loss["first_timed_step"], result.loss
    # torchvision's resnet50(num_classes=10): 25,557,032 at 1000 classes less 990 x (2048 + 1) of its head
    assert found["resnet50", "fit", "float32", "paddle-dygraph"].params == {"total": 23_528_522,
                                                                          "trainable": 23_528_522}


def test_paddle_mixed_precision_on_a_cpu_is_planned_not_applicable(paddle_run):
    """paddle.amp.auto_cast on a CPU only warns and computes float32: a known limit, so the plan makes those cells
    n/a with the reason (config not_applicable, accelerator cpu) and no process runs them; the dtype guard that would
    fail such a cell stays for what is not known (next test, and tests/test_launch.py)."""
    runtime, models, frameworks, tables, results = paddle_run
    records = [cell.read(path) for path in sorted((results / "cells").rglob("*.json"))]
    mixed = [r for r in records if r.cell_spec.precision == "mixed_float16"]
    assert len(mixed) == 2 and not any(r.cell_spec.precision == "mixed_float16" for r in cells(results))
    assert mixed and all(r.status == "unsupported" and r.error["type"] == "NotApplicable"
                         and "auto_cast on a CPU computes float32" in r.error["message"] for r in mixed)
    assert all(r.timing is None and r.provenance.get("runtime") is None for r in mixed)


def test_paddle_dtype_observation_is_what_ran_not_what_was_asked(paddle_run):
    """The adapter reads the compute dtype from a product computed inside the autocast context: on a CPU it is
    float32 and the guard refuses the mixed cell; with the observation replaced by the requested dtype (what
    auto_cast was asked for), the same cell would pass the guard."""
    runtime, models, frameworks, tables, results = paddle_run
    out = run_in_venv(results, "paddle", ADAPTER_GUARDS, """
        from kbench.adapters import paddle as paddle_adapter
        spec, w = workload("paddle", "bert", "predict", 4, "mixed_bfloat16", "paddle-dygraph")
        print("OBSERVED", refused(spec, w))
        paddle_adapter.observed_compute_dtype = lambda autocast: spec.dtypes.compute
        spec, w = workload("paddle", "bert", "predict", 4, "mixed_bfloat16", "paddle-dygraph")
        print("ASKED", refused(spec, w))
    """)
    assert "OBSERVED precision mixed_bfloat16 names weights float32 and compute bfloat16, but the steps ran in " \
           "weights float32 and compute float32" in out
    assert "ASKED None" in out


def run_in_venv(results, stack, *parts, timeout=600):
    """A Python snippet in a stack's host venv (the repository's scripts on its path), as run_in_image does."""
    environment = environment_records.read(results / "environments" / f"{stack}.cpu.json")
    code = f"CONFIG_JSON = {json.dumps(json.dumps({**CONFIG, 'accelerator': 'cpu'}))}\n" + "".join(
        textwrap.dedent(part) for part in parts)
    proc = subprocess.run([f"{environment['prefix']}/bin/python", "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "scripts")}, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_batch_study_fits_its_ladder_and_says_its_verdict(podman_run):
    """The ladder's rungs ran in both columns (the row's own batch is the podman run's own cell), each column has
    its fit or says why not, the verdict is marked as a CPU check, and the first page shows it."""
    *_, tables_dir, results = podman_run
    study = pd.read_csv(tables_dir / "batch_study.csv")
    assert sorted(study.batch) == [1, 16, 256]
    for column in ("native-torch-eager", "keras3-jax"):
        assert study[f"{column} ms/step"].notna().all() and not study[f"{column} ms/step"].str.startswith("failed").any()
    fits = pd.read_csv(tables_dir / "batch_fit.csv")
    assert sorted(fits.framework) == ["keras3-jax", "native-torch-eager"]
    for row in fits.to_dict("records"):     # a fit whose intervals hold its point, or the reason there is none
        assert (row["a_low"] <= row["a"] <= row["a_high"] and row["c_low"] <= row["c"] <= row["c_high"]
                if pd.notna(row.get("a")) else row["fixed ms/step (a)"].startswith("no fit")), row
    verdicts = pd.read_csv(tables_dir / "batch_verdicts.csv")
    assert list(verdicts.native) == ["native-torch-eager"] and verdicts.at[0, "best Keras 3"] == "keras3-jax"
    said = verdicts.at[0, "verdict"]
    assert said == "not measured" or said.endswith("(CPU: the pipeline's check)"), said
    assert (results / "plots" / "tiny" / "strict" / "batch_curves.png").stat().st_size > 10_000
    assert "The batch study" in (results / "report" / "tiny" / "first_page.html").read_text()


def test_the_tuned_profile_runs_its_settings_and_reports_each_columns_gain(tuned_run, podman_run):
    """Only the tuned cells ran (the strict ones are the podman run's), each did what its tuned settings say, and the
    gain table, its verdict and the departures page are there."""
    tuned = {r.cell_id: r for r in cells(tuned_run) if r.cell_spec.profile == "tuned"}
    ran = {k: r for k, r in tuned.items() if "/fit/" in k}
    assert sorted(ran) == sorted(f"tiny/tuned/bert/fit/bs32/float32/{f}" for f in TUNED_COLUMNS)
    assert all(r.status == "ok" for r in ran.values()), {k: r.error for k, r in ran.items()}
    native_fit = tuned["tiny/tuned/bert/fit/bs32/float32/native-torch-eager"]
    assert native_fit.cell_spec.settings["fused_optimizer"] is True and native_fit.evidence["fused_optimizer"] is True
    assert tuned["tiny/tuned/bert/fit/bs32/float32/keras3-jax"].cell_spec.settings == cell.read(
        tuned_run / "cells/tiny/strict/bert/fit/bs32/float32/keras3-jax.r1.json").cell_spec.settings
    strict = cell.read(tuned_run / "cells/tiny/strict/bert/fit/bs32/float32/native-torch-eager.r1.json")
    assert strict.evidence["fused_optimizer"] is False
    assert strict == cell.read(podman_run[-1] / "cells/tiny/strict/bert/fit/bs32/float32/native-torch-eager.r1.json")
    gains = pd.read_csv(tuned_run / "tables/tiny/tuning_gain.csv")
    assert sorted(gains.framework) == sorted(TUNED_COLUMNS) and (gains["gain x"] > 0).all()
    verdicts = pd.read_csv(tuned_run / "tables/tiny/tuning_verdicts.csv")
    # a row per row of the strict tables (the copied folder's: BERT and SAM), each measured on this CPU or not
    assert ("bert", "fit") in set(zip(verdicts.model, verdicts.task))
    assert all(v == "not measured" or v.endswith("(CPU: the pipeline's check)") for v in verdicts.verdict)
    assert "torch-compile-max-autotune" in (tuned_run / "tables/tiny/departures.md").read_text()
    assert "Out of the box against tuned" in (tuned_run / "report/tiny/first_page.html").read_text()


def test_the_jax_numpy_job_times_both_sides_and_agrees(podman_run):
    """The JAX-against-NumPy job of the podman run (the keras3-jax image, the tiny suite's sizes): every workload and
    size timed on both sides with synced blocks, JAX's results within the float32 tolerance of NumPy's, and the
    claim read per workload."""
    from kbench.results import jax_numpy_tables
    runtime, models, frameworks, tables_dir, results = podman_run
    result = cell.read(results / "jax_numpy" / "tiny" / "result.json")
    assert result.status == "ok", result.error
    study = CONFIG["jax_numpy"]["suites"]["tiny"]
    found = result.jax_numpy
    assert found["device"]["platform"] == "cpu" and found["matmul_precision"] == "highest"
    assert [(r["workload"], r["size"]) for r in found["rows"]] == [(w, s) for w, sizes in study["sizes"].items()
                                                                   for s in sizes]
    for r in found["rows"]:
        assert r["status"] == "ok" and r["rel"] <= r["tolerance"], r
        assert r["numpy"]["ms"] > 0 and r["jax"]["ms"] > 0 and r["jax"]["first_ms"] > 0
        assert len(r["jax"]["block_ms"]) == study["steps"]["blocks"] and r["jax"]["low"] <= r["jax"]["ms"] <= r["jax"]["high"]
    claims = pd.read_csv(results / "tables" / "tiny" / "jax_numpy_claim.csv")
    assert len(claims) == len(study["sizes"])
    assert set(claims.verdict) <= {jax_numpy_tables.HOLDS, jax_numpy_tables.FAILS, jax_numpy_tables.NOT_SHOWN}
