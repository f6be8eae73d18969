"""Shared by every tier. A test's tier is its marker: `e2e` (real images and services), `workflow` (the real
Snakemake CLI on dry runs and the synthetic stack) or, unmarked, `unit` (in this process: no Snakemake subprocess,
no container, no network). A unit test that starts the Snakemake CLI fails: plan in process with tests/dag.py, or
mark the test `workflow`."""
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import prebuild

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
KBENCH = str(Path(sys.executable).parent / "kbench")      # the command scripts/bootstrap writes into the venv
TIERS = ("unit", "workflow", "e2e")
_running = {"tier": None}


def copy_from_repo(dst: Path, *names: str, source: Path = REPO) -> Path:
    """The repository's files and folders by name into dst, without bytecode caches: another test worker may be
    writing a .pyc there (a temporary name, then a rename) while the copy lists the folder."""
    for name in names:
        if (source / name).is_dir():
            shutil.copytree(source / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source / name, dst / name)
    return dst


def tier_of(item) -> str:
    return next((name for name in TIERS[1:] if item.get_closest_marker(name)), "unit")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if tier_of(item) == "unit":
            item.add_marker(pytest.mark.unit)


def pytest_runtest_setup(item):
    _running["tier"] = tier_of(item)


@pytest.fixture
def config():
    """A fresh copy of config.yaml for each test to mutate."""
    return copy.deepcopy(CONFIG)


CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


NO_EQUIVALENCE = REPO / "tests" / "fixtures" / "no_equivalence.yaml"


def snakemake(*args, cwd=REPO, timeout=1800, env=None, equivalence=False):
    """Run the workflow's own CLI, as a user would; returns the completed process (output in .stdout).
    equivalence: False adds a config file that turns the equivalence check off, before any the caller gives (theirs
    win: --configfile takes a list, and a second flag would replace the first)."""
    if _running["tier"] == "unit":
        raise RuntimeError("a unit test started the Snakemake CLI: plan in process (tests/dag.py) or mark the test "
                           "workflow (pytest.mark.workflow)")
    args = list(args)
    if not equivalence and "--configfile" in args:
        args.insert(args.index("--configfile") + 1, str(NO_EQUIVALENCE))
    elif not equivalence:
        args += ["--configfile", str(NO_EQUIVALENCE)]
    return subprocess.run([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *args], cwd=cwd, text=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """The folder of the e2e tier's images and venvs (tests/prebuild.py): the test command's background build where
    KBENCH_TEST_IMAGES names it, else one built here on first use. Each run seeds its own results folder from it
    (prebuild.seed, which waits for the records the run needs)."""
    if os.environ.get("KBENCH_TEST_IMAGES"):
        return Path(os.environ["KBENCH_TEST_IMAGES"])
    folder = tmp_path_factory.mktemp("prebuild")
    prebuild.build(folder)
    return folder


def image_record(tmp_path_factory, built, stack: str) -> dict:
    """A stack's podman image record for a module's e2e tests (the session's, conftest.built; built through the
    workflow where it is missing)."""
    from kbench.machine import environment_records
    results = tmp_path_factory.mktemp(f"results-{stack}")
    prebuild.seed(built, results, prebuild.needs("podman", [stack]))
    target = results / environment_records.path("podman", stack, "cpu")
    proc = snakemake(str(target), "--cores", "all", "--config", "accelerator=cpu", "runtime=podman",
                     f"results_dir={results}", timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return environment_records.read(target)


def python_in_image(image: dict, script: str, marker: str, timeout: int = 900):
    """A script run by the image's python (offline, the repository's scripts mounted as a cell gets them); the JSON
    of its stdout's line that starts with `marker`."""
    import json
    from kbench.machine import host, runtimes
    from kbench.run import launch
    argv = ["podman", "run", "--rm", "-i", "--network", "none", *host.ulimit_args(),
            f"--volume={REPO / 'scripts'}:{runtimes.SCRIPTS_IN_IMAGE}:ro", image["id"], "python", "-"]
    proc = subprocess.run(argv, input=script, text=True, capture_output=True, timeout=timeout,
                          env=launch.process_env("podman"))
    lines = [line for line in proc.stdout.splitlines() if line.startswith(marker + " ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[0][len(marker) + 1:])


def run_context(tables_root, profile: str | None = "strict", plots_root=None, **fields):
    """A table's run context (kbench.results.context) for a test: suite tiny on a CPU, no columns unless given."""
    from kbench.results.context import RunContext
    return RunContext(**{"suite": "tiny", "profile": profile, "tables_root": Path(tables_root),
                         "plots_root": None if plots_root is None else Path(plots_root), "accelerator": "cpu",
                         "frameworks": (), "keras3": (), "native": (), **fields})
