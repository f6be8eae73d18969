"""Rule cell's code inputs are derived from the imports of the runner and the adapter, so no module a cell runs can
be missing from them (an edit to it must rerun the cell)."""
import json

import pytest

from conftest import REPO
from kbench import imports
from kbench.plan import sources

from test_launch import driver_environment, run, synthetic_spec  # noqa: F401  (fixture)

ADAPTERS = ["native_torch", "keras3", "keras2", "synthetic"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_cell_runs_the_runner_the_timer_and_the_guards(adapter):
    found = sources.cell_modules(adapter)
    for module in ("kbench.run.runner", "kbench.instruments.timing", "kbench.contract.cell", "kbench.stacks.lockcheck", "kbench.instruments.numerics",
                   "kbench.gpu.nvml", "kbench.contract.spec", f"kbench.adapters.{adapter}", "kbench.adapters"):
        assert module in found, (adapter, module)
    assert all(path.startswith("scripts/kbench/") and path.endswith(".py") for path in sources.cell_sources(adapter))


def test_shared_helpers_are_inputs_only_of_the_adapters_that_import_them():
    assert "kbench.adapters._keras" in sources.cell_modules("keras3")
    assert "kbench.adapters._keras" not in sources.cell_modules("native_torch")
    assert "kbench.adapters._keras_sd" in sources.cell_modules("keras2")       # a function-level import


def test_a_module_is_followed_through_every_kind_of_import(tmp_path, monkeypatch):
    package = tmp_path / "kbench"
    (package / "adapters").mkdir(parents=True)
    files = {"__init__.py": "", "run/__init__.py": "", "run/runner.py": "import os\nfrom kbench import timing\n",
             "timing.py": "import kbench.helper\n", "helper.py": "def f():\n    from . import deep\n",
             "deep.py": "", "unused.py": "",
             "adapters/__init__.py": "", "adapters/a.py": "from kbench.adapters import _shared\n",
             "adapters/_shared.py": "from kbench.models.constructors import x\n", "models/__init__.py": "",
             "models/constructors.py": "x = 1\n"}
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    monkeypatch.setattr(imports, "SCRIPTS", tmp_path)
    assert sources.cell_modules("a") == ["kbench", "kbench.adapters", "kbench.adapters._shared", "kbench.adapters.a",
                                         "kbench.deep", "kbench.helper", "kbench.models", "kbench.models.constructors",
                                         "kbench.run", "kbench.run.runner", "kbench.timing"]


def test_a_real_cell_process_imports_nothing_outside_its_derived_sources(tmp_path, driver_environment):  # noqa: F811
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result.status == "ok", result.error
    ran = result.provenance["kbench_modules"]
    assert "kbench.run.runner" in ran and "kbench.adapters.synthetic" in ran
    assert set(ran) <= set(sources.cell_modules("synthetic")), json.dumps(ran)


@pytest.mark.parametrize("adapter", sorted(p.stem for p in (REPO / "scripts/kbench/adapters").glob("[a-z]*.py")))
def test_the_cell_rules_code_inputs_are_the_files_of_every_module_the_cell_runs(adapter):
    """rule cell's harness input (sources.cell_sources) names exactly the files of sources.cell_modules, which the
    e2e cells' recorded imports are checked against: a module the cell runs but the rule does not watch would let an
    edit to it leave old cells standing."""
    files = sorted(str(sources._path(m).relative_to(REPO)) for m in sources.cell_modules(adapter))
    assert sorted(sources.cell_sources(adapter)) == files
    assert {"scripts/kbench/instruments/numerics.py", "scripts/kbench/instruments/timing.py", "scripts/kbench/stacks/lockcheck.py"} <= set(files)
