"""Each adapter's packages are one table, kbench.adapters._packages, which imports nothing: the adapters record the
versions of its distributions, the GPU check (kbench.gpucheck.check) skips a cell whose required modules do not
import, and the GPU-stack check (kbench.gpucheck.stacks) imports in each GPU image every module of them its lock
pins. Checked against the committed locks, so that a misspelt distribution fails."""
import ast

import pytest

from conftest import CONFIG, REPO
from kbench.adapters import _packages
from kbench.stacks import lock_path, lockcheck, locks
from kbench.gpucheck import stacks as gpu_stacks, check as gpucheck

ADAPTERS = REPO / "scripts" / "kbench" / "adapters"


def test_the_table_imports_nothing_but_annotations():
    tree = ast.parse((ADAPTERS / "_packages.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [(node.module, [a.name for a in node.names]) for node in imports] == [("__future__", ["annotations"])]


def test_every_adapter_has_its_list_and_reads_it_from_the_table():
    """Every adapter module has a list; each that records versions by name takes it from the table, one import."""
    adapters = sorted(p.stem for p in ADAPTERS.glob("[!_]*.py"))
    assert sorted(_packages.PACKAGES) == adapters
    for adapter in adapters:
        tree = ast.parse((ADAPTERS / f"{adapter}.py").read_text())
        assigned = [target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
                    if isinstance(target, ast.Name)]
        assert "_PACKAGES" not in assigned, f"{adapter}: a package list of its own"
        read = [(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for a in node.names if a.asname == "_PACKAGES"]
        if adapter != "synthetic":          # records numpy's version from the module it imported
            assert read == [("kbench.adapters._packages", adapter.upper())], adapter
        assert _packages.PACKAGES[adapter] is getattr(_packages, adapter.upper())


def test_what_a_column_requires_is_pinned_by_every_lock_of_its_stack():
    """Required distributions (and a Keras 3 column's backend's) are among the adapter's, and every CPU and GPU lock
    of the column's stack pins them: the GPU check's skip rests on names the locks really use."""
    for adapter, required in _packages.REQUIRED.items():
        assert set(required) <= set(_packages.PACKAGES[adapter]), adapter
    for backend, required in _packages.BACKEND_REQUIRED.items():
        assert set(required) <= set(_packages.KERAS3), backend
    definitions = {**CONFIG["framework_defs"], "synthetic": {"stack": "synthetic", "adapter": "synthetic", "env": {}}}
    for framework, definition in definitions.items():
        required = _packages.REQUIRED.get(definition["adapter"], ()) + _packages.BACKEND_REQUIRED.get(
            definition.get("env", {}).get("KERAS_BACKEND"), ())
        stack_locks = [lock_path(s, a, REPO) for s, a in locks(REPO) if s == definition["stack"]]
        assert stack_locks, framework
        for lock in stack_locks:
            pins = lockcheck.pinned(lock.read_text())
            assert [d for d in required if lockcheck.normalize(d) not in pins] == [], (framework, lock.name)


def test_every_distribution_of_an_adapter_is_pinned_by_a_lock_of_its_stacks_or_named_as_optional():
    stacks = {}
    for definition in CONFIG["framework_defs"].values():
        stacks.setdefault(definition["adapter"], set()).add(definition["stack"])
    stacks["synthetic"] = {"synthetic"}
    for adapter, packages in _packages.PACKAGES.items():
        pinned = set()
        for stack, accelerator in locks(REPO):
            if stack in stacks[adapter]:
                pinned |= set(lockcheck.pinned(lock_path(stack, accelerator, REPO).read_text()))
        # tensorflow-cpu: recorded where an interpreter has it (a preinstalled one), pinned by no lock
        assert [d for d in packages if lockcheck.normalize(d) not in pinned] == (
            ["tensorflow-cpu"] if adapter == "keras3" else []), adapter


@pytest.mark.parametrize("adapter, backend, modules", [
    ("native_torch", None, ("torch", "transformers", "peft")),
    ("keras3", "jax", ("keras", "keras_hub", "jax")),
    ("keras3", "torch", ("keras", "keras_hub", "torch")),
    ("keras2", None, ("tensorflow", "tf_keras", "keras_nlp")),
    ("synthetic", None, ("numpy",)),
    ("paddle", None, ()),
])
def test_the_gpu_check_requires_each_columns_modules_and_imports_them_all(adapter, backend, modules):
    assert _packages.required_modules(adapter, backend) == modules
    assert set(modules) <= set(gpucheck.PACKAGES)         # found[] has every module a skip reads


@pytest.mark.parametrize("stack, accelerator, modules", [
    ("paddle", "gpu", ["paddle", "paddlenlp", "ppdiffusers", "numpy"]),
    ("keras3-jax", "gpu", ["keras", "keras_hub", "keras_cv", "jax", "jaxlib", "tensorflow", "numpy"]),
    ("native-torch", "gpu-cuda12", ["torch", "torchvision", "transformers", "peft", "accelerate", "diffusers",
                                    "segment_anything", "numpy"]),
])
def test_the_gpu_stack_check_imports_every_adapter_module_its_lock_pins(stack, accelerator, modules):
    """On the committed GPU locks: each module once (paddlepaddle-gpu as paddle), none the lock does not pin."""
    pins = lockcheck.pinned(lock_path(stack, accelerator, REPO).read_text())
    assert gpu_stacks.lock_modules(pins) == modules
