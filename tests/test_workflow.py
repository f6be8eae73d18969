"""The workflow as a user drives it: plans of both suites (in process, through Snakemake's own CLI code: tests/dag.py),
what a version bump or an edit reruns, and, through the real `snakemake` command, one dry run, the lint and a run of
n/a cells that needs no environment."""
import os
import re
import shutil

import pandas as pd
import pytest

from conftest import CONFIG, REPO, copy_from_repo, snakemake
from dag import plan
from kbench.plan import matrix
from kbench.run import scheduling

# The workflow tier: its plans (in process, each a DAG of the whole suite: seconds each, 15 s for the up-to-date
# workflow the rerun tests start from) and the real `snakemake` command.
pytestmark = pytest.mark.workflow


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}


def expected_jobs(suite, accelerator, runtime) -> tuple[dict[str, int], set[str]]:
    """Every job of a full run of the suite (each repeat of each cell), and the stacks its runnable cells use."""
    config = {**CONFIG, "accelerator": accelerator}
    cells = [c for c in matrix.every_cell(config, suite) for _ in range(matrix.repeats(config, suite))]  # every repeat
    stacks = {matrix.stack_of(config, c.framework) for c in cells if not c.not_applicable}
    environment_jobs = {"base_image": 1, "stack_image": len(stacks)} if runtime == "podman" else {
        "environment": len(stacks)}
    profiles = len(CONFIG["profiles"])
    warm = len(matrix.warm_cells(config, suite))      # each compiled cell's warm twin (first_step.warm_runs)
    return {**environment_jobs, "cell": len(cells), "tables": profiles, "time_by_kind": profiles, "plots": profiles,
            "first_step": profiles, "warm_cell": warm,
            "departures": 1, "run_facts": 1, "history": 1, "changes": profiles, "first_page": 1, "jax_numpy": 1,
            "jax_numpy_table": 1, "all": 1, **({"batch_study": profiles} if matrix.batch_cells(config, suite) else {}),
            "total": len(cells) + warm + (6 if matrix.batch_cells(config, suite) else 5) * profiles + 7
            + sum(environment_jobs.values())}, stacks


@pytest.mark.parametrize("runtime", ["podman", "host"])
@pytest.mark.parametrize("suite, accelerator", [("paper", "gpu"), ("tiny", "cpu")])
def test_a_plan_has_every_cell_of_the_suite(tmp_path, suite, accelerator, runtime):
    found = plan("-n", "--cores", "all", "--config", f"suite={suite}", f"accelerator={accelerator}",
                 f"runtime={runtime}", f"results_dir={tmp_path}")
    assert found.ok, found.log[-3000:]
    expected, stacks = expected_jobs(suite, accelerator, runtime)
    assert found.counts() == expected
    image_rule = "stack_image" if runtime == "podman" else "environment"
    assert sorted(path for rule, outputs, _ in found.jobs if rule == image_rule for path in outputs) == sorted(
        str(tmp_path / ("images" if runtime == "podman" else "environments") / f"{stack}.{accelerator}.json")
        for stack in stacks)


def test_the_snakemake_command_dry_runs_the_tiny_suite(tmp_path):
    """The CLI smoke of the plans above: the real command prints the same job counts and each stack's lock."""
    proc = snakemake("-n", "--cores", "all", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman",
                     f"results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout
    expected, stacks = expected_jobs("tiny", "cpu", "podman")
    assert job_counts(proc.stdout) == expected
    for stack in stacks:
        assert f"envs/{stack}.cpu.lock" in proc.stdout


def test_not_applicable_cells_reach_the_table_without_an_environment(tmp_path):
    """A run whose every cell is n/a builds nothing and fills its table: the reasons an overlay adds (keras3-torch,
    Keras 2's SAM) and the shipped config's own (the Keras 2 LLMs: keras-nlp 0.12.1), in one real run."""
    import yaml
    overlay = tmp_path / "na.yaml"
    overlay.write_text(yaml.safe_dump({"not_applicable": CONFIG["not_applicable"] + [
        {"framework": "keras3-torch", "model": model, "task": "*", "reason": "not on torch"} for model in ("sam", "gemma")]
        + [{"framework": "keras2", "model": "sam", "task": "*", "reason": "not here"}]}))
    proc = snakemake("--cores", "1", "--configfile", str(overlay), "--config", "suite=tiny", "accelerator=cpu",
                     f"results_dir={tmp_path / 'results'}", "models=[sam,gemma]", "frameworks=[keras3-torch,keras2]")
    assert proc.returncode == 0, proc.stdout
    assert scheduling.DROPPED in proc.stdout         # the scheduler's own overhead, kept off every real run
    assert not (tmp_path / "results" / "environments").exists() and not (tmp_path / "results" / "images").exists()
    table = pd.read_csv(tmp_path / "results" / "tables" / "tiny" / "strict" / "ms_per_step.csv")
    assert (table["keras3-torch"] == "n/a: not on torch").all() and len(table) == 5
    sam, gemma = table[table.model == "sam"], table[table.model == "gemma"]
    assert (sam["keras2"] == "n/a: not here").all() and len(sam) == 2
    assert gemma["keras2"].str.startswith("n/a: keras-nlp 0.12.1").all() and len(gemma) == 3


TINY = ["--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman"]


@pytest.fixture(scope="module")
def up_to_date_template(tmp_path_factory):
    """A copy of the workflow whose every output of the tiny suite exists and is up to date."""
    copy = copy_from_repo(tmp_path_factory.mktemp("workflow"), "Snakefile", "config.yaml", "rules", "schemas", "envs",
                          "scripts", "containers")
    every = plan("-n", "--forceall", *TINY, cwd=copy)
    assert every.ok, every.log[-3000:]
    for path in every.outputs():
        output = copy / path
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
    # mtimes in DAG order and every job's metadata (params, input checksums), as a finished run leaves them
    touched = plan("--touch", "--forceall", *TINY, cwd=copy)
    assert touched.ok, touched.error
    assert plan("-n", *TINY, cwd=copy).nothing_to_do
    return copy


@pytest.fixture
def up_to_date(up_to_date_template, tmp_path):
    """A fresh copy of the up-to-date workflow for one test to change (copytree keeps the mtimes)."""
    shutil.copytree(up_to_date_template, tmp_path / "w")
    return tmp_path / "w"


def edit(path):
    """A real change (Snakemake 9 skips inputs whose mtime changed but whose checksum did not)."""
    path.write_text(path.read_text() + "\n# changed\n")


def planned_cells(planned) -> list[str]:
    return [path for path in planned.outputs("results/cells/") if not path.endswith(".warm.json")]


def planned_warm(planned) -> list[str]:
    return sorted(path for path in planned.outputs("results/cells/") if path.endswith(".warm.json"))


def warm_twins(cells: list[str]) -> list[str]:
    """The warm twins (first_step.warm_runs) of those of the cells that compile into a persistent cache."""
    twins = {f"results/cells/{c.cell_id}.r1.warm.json" for c in matrix.warm_cells({**CONFIG, "accelerator": "cpu"},
                                                                                     "tiny")}
    return sorted(path.replace(".r1.json", ".r1.warm.json") for path in cells
                  if path.replace(".r1.json", ".r1.warm.json") in twins)


def runnable_cells(**where) -> list[str]:
    """The tiny suite's cell JSONs whose framework has the given framework_defs values (e.g. stack=...)."""
    config = {**CONFIG, "accelerator": "cpu"}
    return sorted(f"results/cells/{c.cell_id}.r1.json" for c in matrix.every_cell(config, "tiny") if not c.not_applicable
                  and all(config["framework_defs"][c.framework][k] == v for k, v in where.items()))


def test_a_version_bump_in_one_lock_reruns_exactly_that_stacks_image_cells_and_tables(up_to_date):
    lock = up_to_date / "envs" / "keras3-jax.cpu.lock"
    lock.write_text(lock.read_text().replace("\nkeras==3.15.1 ", "\nkeras==3.15.0 ", 1))
    bumped = plan("-n", *TINY, cwd=up_to_date)
    cells = runnable_cells(stack="keras3-jax")
    warm = warm_twins(cells)
    # one profile configured: one tables job; the new cells join the history, its changes and the first page; the
    # JAX-against-NumPy job runs in the keras3-jax image too, and keras3-jax is a column of the batch study; the
    # compiled cells' warm twins run again, from the new cells' caches
    assert warm and bumped.counts() == {
        "stack_image": 1, "cell": len(cells), "warm_cell": len(warm), "tables": 1, "time_by_kind": 1, "plots": 1,
        "first_step": 1, "run_facts": 1, "history": 1, "changes": 1, "first_page": 1, "jax_numpy": 1,
        "jax_numpy_table": 1, "batch_study": 1, "all": 1, "total": len(cells) + len(warm) + 13}
    assert "results/images/keras3-jax.cpu.json" in bumped.outputs()
    assert sorted(planned_cells(bumped)) == cells
    assert planned_warm(bumped) == warm


def test_a_changed_lock_digest_alone_reruns_that_stacks_cells(up_to_date):
    """The lock's content, not its mtime: a lock restored from a backup (old mtime, new pins) still reruns its
    stack's cells, through the cells' lock_sha256 param."""
    lock = up_to_date / "envs" / "keras3-torch.cpu.lock"
    stat = lock.stat()
    lock.write_text(lock.read_text().replace("\nkeras==3.15.1 ", "\nkeras==3.15.0 ", 1))
    os.utime(lock, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    planned = plan("-n", *TINY, "--rerun-triggers", "params", cwd=up_to_date)
    assert sorted(planned_cells(planned)) == runnable_cells(stack="keras3-torch")
    reasons = {reason for rule, _, reason in planned.jobs if rule == "cell"}
    assert all("Params have changed since last execution" in reason for reason in reasons), reasons


@pytest.mark.parametrize("adapter", ["keras3", "native_torch", "keras2"])
def test_a_changed_adapter_reruns_exactly_its_columns(up_to_date, adapter):
    edit(up_to_date / "scripts" / "kbench" / "adapters" / f"{adapter}.py")
    planned = plan("-n", *TINY, "--rerun-triggers", "mtime", cwd=up_to_date)
    assert sorted(planned_cells(planned)) == runnable_cells(adapter=adapter)
    assert planned_warm(planned) == warm_twins(runnable_cells(adapter=adapter))


def test_more_repeats_run_only_the_new_repeats(up_to_date):
    """repeats 1 -> 2: every cell gets a second fresh process; the first repeats stand."""
    planned = planned_cells(plan("-n", *TINY, "repeats=2", cwd=up_to_date))
    assert planned and all(path.endswith(".r2.json") for path in planned)
    assert len(planned) == len(matrix.every_cell({**CONFIG, "accelerator": "cpu"}, "tiny"))


@pytest.mark.parametrize("setting", ["cell_timeout_minutes: 5", "containers: {limits: {memory_mb: 4096, cpus: 2}}"])
def test_operational_settings_rerun_nothing(up_to_date, setting):
    """A timeout or a container limit does not change what a finished cell measured: no rerun (every trigger on)."""
    (up_to_date / "operational.yaml").write_text(setting + "\n")
    planned = plan("-n", *TINY, "--configfile", "operational.yaml", cwd=up_to_date)
    assert planned.nothing_to_do, planned.jobs[:3]


def test_a_version_bump_reruns_every_repeat_of_that_stacks_cells(up_to_date_template, tmp_path):
    """With repeats=3 up to date, a bumped lock reruns all three repeats of its stack's cells and nothing else (BERT's
    rows: the property is per cell, and every job of the suite three times over is a minute of touching)."""
    shutil.copytree(up_to_date_template, tmp_path / "w")
    workflow = tmp_path / "w"
    for first in (workflow / "results" / "cells").rglob("*.r1.json"):
        for r in (2, 3):
            shutil.copy(first, first.with_name(first.name.replace(".r1.json", f".r{r}.json")))
    selection = [*TINY, "repeats=3", "models=[bert]"]
    assert plan("--touch", "--forceall", *selection, cwd=workflow).ok
    lock = workflow / "envs" / "keras3-jax.cpu.lock"
    lock.write_text(lock.read_text().replace("\nkeras==3.15.1 ", "\nkeras==3.15.0 ", 1))
    planned = sorted(planned_cells(plan("-n", *selection, cwd=workflow)))
    expected = sorted(path.replace(".r1.json", f".r{r}.json") for path in runnable_cells(stack="keras3-jax")
                      if "/bert/" in path for r in (1, 2, 3))
    assert planned == expected and planned


def test_a_changed_timer_reruns_every_runnable_cell(up_to_date):
    edit(up_to_date / "scripts" / "kbench" / "instruments" / "timing.py")
    planned = plan("-n", *TINY, "--rerun-triggers", "mtime", cwd=up_to_date)
    assert sorted(planned_cells(planned)) == runnable_cells()


def test_lint_finds_nothing_but_the_cell_launchers_own_containers():
    """`snakemake --lint` may only ask for a conda environment or container per rule: by design every rule runs in
    the driver's venv or launches its own container (rule cell). Snakemake 9.27's CLI ignores --lint's json format,
    so the text report is parsed: a header per rule or Snakefile, a "*" line per finding."""
    proc = snakemake("--lint", "--cores", "1")
    findings, where = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("Lints for "):
            where = line.removeprefix("Lints for ").split(" (")[0].rstrip(":")
        elif line.startswith("    * "):
            findings.append((where, line.removeprefix("    * ").rstrip(".:")))
    assert findings, proc.stdout[-2000:]        # the by-design finding must be seen, or the parse is broken
    allowed = "Specify a conda environment or container for each rule"
    assert [f for f in findings if f[1] != allowed] == []
    rules = {where for where, title in findings}
    assert all(where.startswith("rule ") for where in rules) and len(findings) == len(rules)


def test_a_gpu_dry_run_on_a_host_without_a_gpu_plans_and_says_the_preflight_would_stop_it(tmp_path):
    """Planned silently for a cluster's submit host, but one line says a real run here would not get past the
    preflight, and why (this machine has no NVIDIA driver); a CPU dry run says nothing of the kind."""
    gpu = plan("-n", "--cores", "1", "--config", "models=[bert]", f"results_dir={tmp_path}")
    assert gpu.ok, gpu.log[-3000:]
    notes = [line for line in gpu.log.splitlines() if line.startswith("note: dry run only")]
    assert len(notes) == 1 and "no NVIDIA driver here (`nvidia-smi` is not on PATH)" in notes[0]
    cpu = plan("-n", "--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "models=[bert]",
               f"results_dir={tmp_path}")
    assert cpu.ok and "note: dry run only" not in cpu.log
