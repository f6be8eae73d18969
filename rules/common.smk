import dataclasses
import functools
import json
import os
import math
import shlex
import shutil
import sys
from pathlib import Path


# kbench is importable here (matrix) and, through the shell prefix, in every job: rule scripts and `python -m kbench.*`
# run with the driver's Python (the venv Snakemake was started from) and the repo's scripts/ on the path.
SCRIPTS = os.path.join(workflow.basedir, "scripts")
sys.path.insert(0, SCRIPTS)
shell.prefix(f"export PATH={shlex.quote(os.path.dirname(sys.executable))}:$PATH PYTHONPATH={shlex.quote(SCRIPTS)}; ")

from kbench.instruments import compile_cache
from kbench.contract import precision
from kbench.contract.spec import on_gpu
from kbench.machine import environment_records
from kbench.contract.cell import WARM_SUFFIX
from kbench.gpu import preflight
from kbench.plan import config_check, matrix, sources
from kbench.run import scheduling
from kbench.results import registry
from kbench.results.context import RunContext
from kbench.stacks import disk, envs, lock_path
from kbench.studies import jax_numpy

try:      # every bad config: one line before any job (file and line, or key path; the bad value; what is allowed)
    config_check.check(config, Path(workflow.basedir) / "schemas" / "config.schema.yaml")
except config_check.ConfigError as error:
    sys.exit(f"config error: {error}")
RESULTS = config["results_dir"]
os.makedirs(os.path.join(RESULTS, "report"), exist_ok=True)     # `snakemake --report results/report/<suite>.html`
# auto: podman where it is installed, else the host venvs. The runtime a cell used is in its JSON.
RUNTIME = config["runtime"] if config["runtime"] != "auto" else ("podman" if shutil.which("podman") else "host")


wildcard_constraints:
    suite="|".join(config["suites"]),
    profile="|".join(config["profile_defs"]),
    model="|".join(config["model_defs"]),
    task="|".join(matrix.TASKS),
    batch=r"\d+",
    repeat=r"\d+",
    precision=precision.pattern(),
    framework="|".join(config["framework_defs"]),
    stack="[a-z0-9-]+",
    accelerator="gpu-cuda12|gpu|cpu",


def results(*parts):
    """A path under the configured results_dir: the one place outputs are placed."""
    return os.path.join(RESULTS, *parts)


def cell_json(cell, repeat):
    return results("cells", f"{cell.cell_id}.r{repeat}.json")


def cell_jsons(cells, suite):
    """Every repeat of every cell (config repeats, else the suite's)."""
    return [cell_json(c, r) for c in cells for r in range(1, matrix.repeats(config, suite) + 1)]


def every_cell(suite):
    return matrix.every_cell(config, suite)


def cell_of(wildcards):
    return matrix.Cell(wildcards.suite, wildcards.profile, wildcards.model, wildcards.task, int(wildcards.batch),
                       wildcards.precision, wildcards.framework,
                       matrix.not_applicable_reason(config, wildcards.model, wildcards.task, wildcards.framework,
                                                    wildcards.precision))


def previous_rung_json(wildcards):
    """The rung below a study cell above its row's own batch (its first repeat), or nothing."""
    below = matrix.previous_rung(config, cell_of(wildcards))
    return cell_json(below, 1) if below else []


def cache_sources(wildcards):
    """The repeats of the cell whose compile caches this run starts from (kbench.plan.matrix.cache_sources)."""
    return matrix.cache_sources(config, cell_of(wildcards), int(wildcards.repeat))


def cache_source_jsons(wildcards):
    return [cell_json(cell_of(wildcards), r) for r in cache_sources(wildcards) or []]


def warm_jsons(suite, profile):
    """The warm twins of one profile's cells (config first_step.warm_runs)."""
    return [results("cells", f"{c.cell_id}.r1{WARM_SUFFIX}") for c in matrix.warm_cells(config, suite)
            if c.profile == profile]


def environment_record(wildcards):
    """A runnable cell depends on its stack's environment (venv or image) record; an n/a cell depends on nothing."""
    if cell_of(wildcards).not_applicable:
        return []
    return stack_record(matrix.stack_of(config, wildcards.framework))


def ships_images():
    """Images go to the nodes as archives when jobs run on other machines (a cluster executor) or config says so."""
    return config["ship_images"] is True or (config["ship_images"] == "auto" and not workflow.local_exec)


def image_archive(wildcards):
    """The archive a node without the cell's image loads it from (podman: OCI, docker: docker-archive)."""
    if cell_of(wildcards).not_applicable or RUNTIME not in ("podman", "docker") or not ships_images():
        return []
    archive = "oci" if RUNTIME == "podman" else "docker"
    return results(f"images/{matrix.stack_of(config, wildcards.framework)}.{config['accelerator']}.{archive}.tar")


def stack_record(stack):
    return results(environment_records.path(RUNTIME, stack, config["accelerator"]))


def stack_lock_digest(wildcards):
    """The cell's environment by content: a bumped lock changes this param (and the image tag derived from it)."""
    if cell_of(wildcards).not_applicable:
        return None
    return envs.sha256_file(lock_path(matrix.stack_of(config, wildcards.framework), config["accelerator"]))


def harness_sources(wildcards):
    """The code a cell runs (every kbench module its runner and adapter import, kbench.plan.sources): a change to any of
    them reruns exactly the cells that run it."""
    if cell_of(wildcards).not_applicable:
        return []
    return sources.cell_sources(matrix.adapter_of(config, wildcards.framework))


@functools.cache
def gpus_on_this_host():
    """How many GPUs the cells may use here: those nvidia-smi lists, narrowed by an exported CUDA_VISIBLE_DEVICES
    (1 where there are none, or on a CPU run)."""
    if not on_gpu(config["accelerator"]) or not shutil.which("nvidia-smi"):
        return 1
    try:
        return max(1, len(preflight.visible(preflight.gpus(preflight.Host()))))
    except Exception:       # the preflight names a broken driver; the plan stays one cell at a time
        return 1


def cell_threads(wildcards):
    return max(1, workflow.cores // gpus_on_this_host())


def untimed_threads(wildcards):
    """An equivalence job reads no clock (its record is numerics), so on a CPU host two run side by side, each on
    half the cores: most of its time is one core's compile (dynamo tracing Keras's Python, XLA's passes). A timed
    cell takes every core (cell_threads), so it still never starts beside one. On a GPU host: a cell's share."""
    return cell_threads(wildcards) if on_gpu(config["accelerator"]) else max(1, workflow.cores // 2)


def cell_spec(wildcards):
    return matrix.spec(config, wildcards.suite, wildcards.model, wildcards.task, int(wildcards.batch),
                       wildcards.precision, wildcards.framework, wildcards.profile)


def profile_cells(wildcards):
    """The cell JSONs (every repeat) of one profile of the suite, in the config's order."""
    return cell_jsons([c for c in matrix.cells(config, wildcards.suite) if c.profile == wildcards.profile],
                      wildcards.suite)


def equivalence_jsons(suite, profile):
    """The equivalence jobs' JSONs of one profile of the suite: the reference and every column of every model."""
    if not config["equivalence"]["enabled"]:
        return []
    found = []
    for model in matrix.equivalence_models(config):
        columns = matrix.equivalence_frameworks(config, suite, profile, model)
        if config["equivalence"]["reference"] in columns:      # the reference column makes the weights from its cell
            base = results("equivalence", suite, profile, model)
            found += [os.path.join(base, "reference.json")] + [os.path.join(base, f"{f}.json") for f in columns]
    return found


def equivalence_cache_jsons(wildcards, framework=None):
    """The cells' first repeats whose compile caches an equivalence job starts from (config first_step.reuse_caches)."""
    framework = framework or wildcards.framework
    return [cell_json(c, 1) for c in matrix.equivalence_cache_cells(config, wildcards.suite, wildcards.profile,
                                                                     wildcards.model, framework)]


def profile_equivalence(wildcards):
    return equivalence_jsons(wildcards.suite, wildcards.profile)


def table_files(suite, archived=False):
    """Every table and plot the suite's run makes (kbench.results.registry; archived: those its archive packs)."""
    return registry.files(config, suite, results("tables", suite), results("plots", suite), archived)


def table_run(wildcards):
    """The run's context a table reads (kbench.results.context), for one profile or (no profile) the suite."""
    return RunContext.of(config, wildcards.suite, getattr(wildcards, "profile", None), results("tables", wildcards.suite),
                         results("plots", wildcards.suite))


def profile_batch_cells(wildcards):
    return cell_jsons([c for c in matrix.batch_cells(config, wildcards.suite) if c.profile == wildcards.profile],
                      wildcards.suite)


def in_report(path, category, subcategory=None):
    """An output the Snakemake report shows (HTML tables, PNG plots), with its caption from report/<name>.rst."""
    name = os.path.basename(path).rsplit(".", 1)[0]
    return report(path, caption=f"../report/{name}.rst", category=category, subcategory=subcategory)


def image_archives(suite):
    """OCI archives of the suite's stack images (podman save); docker and apptainer run the images podman built."""
    return [results("images", f"{s}.{config['accelerator']}.oci.tar") for s in suite_stacks(suite)]


def suite_stacks(suite):
    return sorted({matrix.stack_of(config, c.framework) for c in every_cell(suite) if not c.not_applicable})


def stack_records(suite):
    """The environment records (image IDs, venvs) of the stacks that the suite's runnable cells use."""
    return [stack_record(stack) for stack in suite_stacks(suite)]


# The runtime binary each image job needs (cells need the configured runtime's).
IMAGE_TOOLS = {"base_image": "podman", "stack_image": "podman", "export_image": "podman", "docker_image": "docker",
               "sif_image": "apptainer"}


def preflight_before_jobs():
    """Before the first job: the binaries the planned jobs need and, for GPU cells, the GPU host (driver, its version
    against each stack's CUDA, the runtime's GPU plumbing): one error in seconds instead of GBs of image builds
    ending in 114 failed cells. Jobs sent to a cluster check their own node (kbench.run.launch)."""
    if workflow.executor_plugin.name != "local":
        return
    jobs = list(workflow.dag.needrun_jobs())
    cells = [job for job in jobs if job.rule.name == "cell" and not cell_of(job.wildcards).not_applicable]
    stacks = sorted({matrix.stack_of(config, job.wildcards.framework) for job in cells})
    tools = {IMAGE_TOOLS[job.rule.name] for job in jobs if job.rule.name in IMAGE_TOOLS}
    if cells and RUNTIME in preflight.BINARIES:
        tools.add(preflight.BINARIES[RUNTIME])
    try:
        preflight.check(RUNTIME, config["accelerator"], stacks, tools=tools)
    except preflight.PreflightError as error:
        sys.exit(str(error))


# Image jobs and where their files go (kbench.stacks.disk): built into podman's storage, or saved as files under results/.
BUILD_RULES = ("base_image", "stack_image")
ARCHIVE_RULES = ("export_image", "sif_image")


def disk_preflight_before_jobs():
    """Before the first job: the images still to build (each at its recorded or measured size, and the largest build's
    peak), their archives, the venvs and the jobs' results, against the free space of podman's storage, results/ and
    .envs/; a plan that will not fit stops here with one line naming both figures and what to free, not hours later
    with a full disk mid-build. config disk_check: false skips it, and so does --touch (its jobs write no byte)."""
    if not config["disk_check"] or workflow.executor_plugin.common_settings.touch_exec:
        return
    jobs = list(workflow.dag.needrun_jobs())
    name = lambda job: f"{job.wildcards.stack}.{job.wildcards.accelerator}"        # noqa: E731
    builds = ["base" if job.rule.name == "base_image" else name(job) for job in jobs if job.rule.name in BUILD_RULES]
    builds = [image for image in builds if not disk.held(image, config["containers"]["base"])]
    archives = [name(job) for job in jobs if job.rule.name in ARCHIVE_RULES]
    if config["archive_images"] and any(job.rule.name == "archive" for job in jobs):
        archives += [f"{stack}.{config['accelerator']}" for stack in suite_stacks(config["suite"])]
    venvs = [name(job) for job in jobs if job.rule.name == "environment"]
    others = [job for job in jobs if job.rule.name not in BUILD_RULES + ARCHIVE_RULES + ("environment",)]
    cells = [(job, cell_spec(job.wildcards)) for job in others if job.rule.name == "cell"]
    kept = disk.Kept(
        caches=sum(1 for job, spec in cells if job.wildcards.repeat == "1" and compile_cache.has_cache(spec)),
        traces=sum(1 for _, spec in cells if spec.steps.breakdown),
        copies=sum(1 for job in others if job.rule.name == "warm_cell")
        + sum(1 for job, spec in cells if job.wildcards.repeat != "1" and compile_cache.has_cache(spec)),
        at_once=gpus_on_this_host(),
        kind="gpu" if on_gpu(config["accelerator"]) else "cpu")
    needs = disk.plan_needs(disk.graphroot() if builds else None, Path(RESULTS), Path(workflow.basedir) / ".envs",
                            builds, archives, venvs, len(others), Path(results("images")), kept)
    try:
        disk.check(needs)
    except disk.DiskShort as error:
        sys.exit(f"disk: {error}")


def note_gpu_preflight_on_a_dry_run():
    """A dry run plans GPU cells on a host without a GPU silently (right for a cluster's submit host), but says in
    one line that a real run here would stop at the preflight, and why."""
    # (at parse time the executor is not chosen yet: the output settings are what know it is a dry run)
    if not workflow.output_settings.dryrun or not on_gpu(config["accelerator"]):
        return
    found = preflight.problems(RUNTIME, config["accelerator"], suite_stacks(config["suite"]), tools=set())
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        print(f"note: dry run only: a real run on this host would stop at the GPU preflight: {found[0]}{more}; on a "
              "cluster's submit host that is expected (each GPU job checks its own node)", file=sys.stderr)


note_gpu_preflight_on_a_dry_run()


def equivalence_environment(framework):
    return stack_record(matrix.stack_of(config, framework))


def equivalence_sources(framework):
    return sources.cell_sources(matrix.adapter_of(config, framework), entry="kbench.equivalence.check")
