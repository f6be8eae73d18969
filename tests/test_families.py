"""Each registered model family (kbench.models.family), its tests generated from the registry as torchbench does per
model folder: a new family module gets them without a line added here. The unit tier checks its facts, draws its
inputs and counts its FLOPs on every tiny cell; the e2e tier builds its tiny model on the family's inputs in every
column whose adapter claims it, in that column's image or venv (its steps run in the cells). And a family module with one fact cut refuses to import."""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

import prebuild
from conftest import CONFIG, REPO
from kbench.machine import host, environment_records, runtimes
from kbench.models import family
from kbench.plan import matrix
from kbench.results import flops
from kbench.run import launch

CPU_CONFIG = {**copy.deepcopy(CONFIG), "accelerator": "cpu"}
FAMILIES = sorted(family.families())


def tiny_specs(name: str) -> list[dict]:
    """One spec per task and batch size of the family's model in the tiny suite (float32, the first column)."""
    model_def = CPU_CONFIG["model_defs"].get(name)
    if model_def is None:
        return []
    specs = []
    for cell in matrix.cells(CPU_CONFIG, "tiny"):
        if cell.model == name and cell.precision == model_def["precisions"][0] and not cell.not_applicable and \
                (cell.task, cell.batch_size) not in {(s.task, s.batch_size) for s in specs}:
            specs.append(matrix.spec(CPU_CONFIG, "tiny", cell.model, cell.task, cell.batch_size, cell.precision,
                                     cell.framework))
    return specs


@pytest.mark.unit
@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_gives_every_fact_for_every_task_its_config_runs(name):
    found = family.of(name)
    assert found.name == name and found.about and found.libraries
    configured = CPU_CONFIG["model_defs"].get(name, {}).get("tasks", {})
    assert set(configured) <= set(found.tasks), f"config runs tasks its family has no step for: {set(configured)}"
    for task in found.tasks:
        assert callable(found.inputs[task]) and callable(found.flops[task]) and found.example[task]


@pytest.mark.unit
@pytest.mark.parametrize("name", [n for n in FAMILIES if tiny_specs(n)])
def test_a_family_draws_the_same_inputs_from_a_seed_and_counts_flops_on_every_tiny_cell(name):
    for spec in tiny_specs(name):
        drawn = family.of(name).draw(spec, np.random.default_rng(spec.seed))
        again = family.of(name).draw(spec, np.random.default_rng(spec.seed))
        arrays = [a for a in _leaves(drawn)]
        assert arrays and all(a.shape[0] == spec.batch_size for a in arrays if a.ndim), spec.cell_id
        assert all(np.array_equal(a, b) for a, b in zip(arrays, _leaves(again))), spec.cell_id
        assert flops.per_step(spec) > 0, spec.cell_id
        k, d = family.of(name).contraction_and_depth(spec)
        assert k > 0 and d > 0


def _leaves(tree):
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from _leaves(tree[key])
    else:
        yield np.asarray(tree)


@pytest.mark.unit
@pytest.mark.parametrize("fact", ["flops", "example", "contraction_and_depth"])
def test_a_family_module_with_one_fact_cut_refuses_to_import_naming_the_family_and_the_fact(tmp_path, fact):
    source = (REPO / "scripts/kbench/models/bert.py").read_text()
    lines = source.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("FAMILY = "))
    cut = [line for i, line in enumerate(lines) if i <= start or not line.lstrip().startswith(f"{fact}=")]
    cut = "".join(cut).replace(f" {fact}={{", " _cut={").replace(f", {fact}=", ", _cut=")
    assert cut != source
    path = tmp_path / "bert_cut.py"
    path.write_text(cut)
    spec = importlib.util.spec_from_file_location("kbench.models.bert_cut", path)
    with pytest.raises(family.MissingFact, match=rf"'bert' is missing the fact '{fact}'"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def toy_facts(**changed) -> dict:
    """A family's facts, every one given for both tasks; `changed` replaces some."""
    return {"name": "toy", "about": "a toy", "tasks": ("fit", "predict"), "libraries": {"numpy": dict},
            "inputs": {"fit": dict, "predict": dict}, "flops": {"fit": dict, "predict": dict},
            "contraction_and_depth": lambda spec: (1, 1), "example": {"fit": "x", "predict": "x"}, **changed}


@pytest.mark.unit
@pytest.mark.parametrize("fact", ["inputs", "flops", "example"])
def test_a_family_that_steps_a_task_without_one_of_its_per_task_facts_is_refused(fact):
    """Each per-task fact on its own: a task with no inputs, no FLOP count or no example is refused."""
    with pytest.raises(family.MissingFact, match=f"'toy' is missing the fact '{fact}' for its task 'predict'"):
        family.register(**toy_facts(**{fact: {"fit": dict if fact != "example" else "x"}}))
    assert family.register(**toy_facts()).tasks == ("fit", "predict")        # the whole set passes


@pytest.mark.unit
@pytest.mark.parametrize("fact, empty", [("inputs", {}), ("libraries", {}), ("about", ""), ("example", {})])
def test_an_empty_fact_is_refused_as_a_missing_one(fact, empty):
    """A fact given as {} or "" says nothing: refused like one left out, not taken as given."""
    with pytest.raises(family.MissingFact, match=f"'toy' is missing the fact '{fact}'"):
        family.register(**toy_facts(**{fact: empty}))


@pytest.mark.unit
def test_a_config_model_without_a_family_module_is_a_config_error():
    config = copy.deepcopy(CPU_CONFIG)
    config["model_defs"]["no-such-model"] = copy.deepcopy(config["model_defs"]["bert"])
    with pytest.raises(matrix.ConfigError,
                       match=r"model_defs.no-such-model .*family module.*'no-such-model' is not defined"):
        matrix.check_references(config)


@pytest.mark.unit
def test_the_cells_sources_include_every_family_module():
    from kbench.plan import sources
    for module in family.family_modules():
        assert module in sources.cell_modules("synthetic"), module


# ---------------------------------------------------------------- e2e: every column that claims a family builds it

BUILD_SCRIPT = """
import json, sys, traceback
sys.path.insert(0, "{scripts}")
from kbench import adapters
from kbench.contract.spec import CellSpec
for case in CASES:
    try:
        adapter = adapters.load(case["adapter"])
        workload = adapters.build(adapter, CellSpec.from_dict(case["spec"]))   # built on the family's inputs
        print("BUILT " + json.dumps({{"name": case["name"], "params": workload.params_total}}), flush=True)
    except Exception:
        print("BUILT " + json.dumps({{"name": case["name"], "error": traceback.format_exc()[-2000:]}}), flush=True)
"""


def columns() -> dict[str, list[str]]:
    """One column per adapter and environment (the uncompiled one where a stack has both) -> its families' cases."""
    chosen = {}
    for framework in CPU_CONFIG["frameworks"]:
        definition = CPU_CONFIG["framework_defs"][framework]
        key = (definition["stack"], definition["adapter"], json.dumps(definition.get("env") or {}, sort_keys=True))
        if key not in chosen or definition.get("jit_compile") is False:
            chosen[key] = framework
    return sorted(chosen.values())


def cases(framework: str) -> list[dict]:
    definition = CPU_CONFIG["framework_defs"][framework]
    claimed = set(launch_free_models(definition["adapter"]))
    found, seen = [], set()
    for cell in matrix.cells(CPU_CONFIG, "tiny"):
        key = (cell.model, cell.task)
        if cell.framework != framework or cell.not_applicable or key in seen or cell.model not in claimed \
                or cell.precision != CPU_CONFIG["model_defs"][cell.model]["precisions"][0]:
            continue
        seen.add(key)
        spec = matrix.spec(CPU_CONFIG, "tiny", cell.model, cell.task, cell.batch_size, cell.precision, framework)
        found.append({"name": f"{cell.model} {cell.task}", "adapter": definition["adapter"], "spec": spec.to_dict()})
    return found


def launch_free_models(adapter: str) -> list[str]:
    """The models an adapter's MODELS table claims, read from its source (its framework is not installed here)."""
    import ast
    tree = ast.parse((REPO / "scripts/kbench/adapters" / f"{adapter}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            return [key.value for key in node.value.keys]
    return []


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, built):
    results = tmp_path_factory.mktemp("results-families")
    stacks = sorted({CPU_CONFIG["framework_defs"][f]["stack"] for f in columns()})
    built_as = {name for group in prebuild.ORDER for name in group}      # images/<stack> or environments/<stack>
    podman = [s for s in stacks if f"images/{s}" in built_as]
    venvs = [s for s in stacks if f"environments/{s}" in built_as]
    prebuild.seed(built, results, prebuild.needs("podman", podman) + prebuild.needs("host", venvs))
    return results


def run_in_column(results, framework: str, column_cases: list[dict]) -> dict:
    definition = CPU_CONFIG["framework_defs"][framework]
    stack, env = definition["stack"], {k: str(v) for k, v in (definition.get("env") or {}).items()}
    podman_record = results / environment_records.path("podman", stack, "cpu")
    if podman_record.exists():
        image = environment_records.read(podman_record)["id"]
        script = BUILD_SCRIPT.format(scripts=runtimes.SCRIPTS_IN_IMAGE)
        argv = ["podman", "run", "--rm", "-i", "--network", "none", *host.ulimit_args(),
                f"--volume={REPO / 'scripts'}:{runtimes.SCRIPTS_IN_IMAGE}:ro",
                *(f"--env={k}={v}" for k, v in env.items()), image, "python", "-"]
        process_env = launch.process_env("podman")
    else:
        venv = environment_records.read(results / environment_records.path("host", stack, "cpu"))["prefix"]
        script = BUILD_SCRIPT.format(scripts=REPO / "scripts")
        argv = [f"{venv}/bin/python", "-"]
        process_env = {**os.environ, **env}
    script = f"CASES = {json.dumps(column_cases)!r}\nimport json\nCASES = json.loads(CASES)\n" + script
    proc = subprocess.run(argv, input=script, text=True, capture_output=True, timeout=1800, env=process_env)
    found = [json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("BUILT ")]
    assert len(found) == len(column_cases), proc.stdout[-2000:] + proc.stderr[-4000:]
    return {f["name"]: f for f in found}


@pytest.mark.e2e
def test_every_column_that_claims_a_family_builds_its_tiny_model_on_its_inputs(seeded):
    failures, built_count = [], 0
    for framework in columns():
        column_cases = cases(framework)
        if not column_cases:
            continue
        for name, found in run_in_column(seeded, framework, column_cases).items():
            if "error" in found:
                failures.append(f"{framework} {name}:\n{found['error']}")
            built_count += 1
    assert not failures, "\n\n".join(failures)
    claimed = {(f, c["name"]) for f in columns() for c in cases(f)}
    assert built_count == len(claimed) and {n.split()[0] for _, n in claimed} >= set(CPU_CONFIG["models"]) - {"synthetic"}
