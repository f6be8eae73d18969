"""The package's wings (kbench.layout): every module in a wing, every import running down to a wing below, no circle,
and a docstring per wing that says what it does and what it may import. The planted cases are real edits to a copy
of the package."""
import shutil

import pytest

from conftest import REPO
from kbench import imports, layout


def test_the_package_has_no_import_from_a_higher_wing_and_no_circle():
    assert layout.problems() == []


def test_every_wing_says_what_it_does_and_what_it_may_import():
    for wing in layout.WINGS[1:]:
        text = (layout.ROOT / wing / "__init__.py").read_text()
        assert text.startswith(f'"""{wing}: ') and "May import:" in text, wing
    ground = (layout.ROOT / "__init__.py").read_text()
    assert all(f"    {wing}" in ground for wing in layout.WINGS), "kbench/__init__.py lists every wing"


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of scripts/kbench that kbench.layout reads instead of the real one."""
    shutil.copytree(REPO / "scripts" / "kbench", tmp_path / "kbench", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(layout, "ROOT", tmp_path / "kbench")
    monkeypatch.setattr(imports, "SCRIPTS", tmp_path)
    return tmp_path / "kbench"


def plant(path, line):
    path.write_text(path.read_text() + f"\n\ndef planted():\n    {line}\n")


def test_an_import_from_a_higher_wing_is_named(package_copy):
    """A results module reaching up into lifecycle (a function-level import counts: it runs all the same)."""
    plant(package_copy / "results" / "tables.py", "from kbench.lifecycle import history")
    found = layout.problems()
    assert found[:2] == ["kbench.results.tables (results) imports kbench.lifecycle (lifecycle), a wing above it",
                         "kbench.results.tables (results) imports kbench.lifecycle.history (lifecycle), a wing above it"]
    # history imports tables (and archive the studies' tables, which import tables): the back-edge closes a circle
    assert found[2:] == ["circle: kbench.lifecycle.archive -> kbench.lifecycle.compare -> kbench.lifecycle.history -> "
                         "kbench.results.batch -> kbench.results.breakdown_tables -> kbench.results.first_step_tables -> "
                         "kbench.results.plots -> kbench.results.registry -> "
                         "kbench.results.tables -> kbench.results.tuning"]


def test_a_circle_inside_a_wing_is_named(package_copy):
    plant(package_copy / "results" / "stats.py", "from kbench.results import tables")
    assert layout.problems() == ["circle: kbench.results.stats -> kbench.results.tables"]


def test_a_module_outside_every_wing_is_named(package_copy):
    (package_copy / "extras").mkdir()
    (package_copy / "extras" / "__init__.py").write_text('"""extras"""\n')
    assert layout.problems() == ["kbench.extras: in no wing of kbench.layout.WINGS"]


def test_the_layout_command_prints_the_wings_and_their_imports(capsys):
    assert layout.main([]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("ground       imports nothing of kbench")
    assert "results      imports ground, breakdown, models, gpu, plan" in out and out.rstrip().endswith("no problems")
    assert "scripts      imports ground, run, frontdoor" in out


THIN = ('"""An entry point."""\nimport sys\nfrom pathlib import Path\n\n'
        'sys.path.insert(0, str(Path(__file__).resolve().parent))\nfrom kbench.studies import census_tables  # noqa\n\n'
        'if __name__ == "__main__":\n    sys.exit(census_tables.main())\n')


def test_the_real_entry_points_hold_no_logic():
    assert layout.script_problems() == []
    assert {p.name for p in layout.scripts()} >= {"cli.py", "run_cell.py", "run_equivalence.py", "run_jax_numpy.py"}


def test_an_entry_point_with_a_def_fails_the_layout_check(package_copy, capsys):
    """scripts/*.py beside the (copied) package: a thin one passes, one with a function in it fails the check."""
    (package_copy.parent / "thin.py").write_text(THIN)
    assert layout.problems() == []
    (package_copy.parent / "tool.py").write_text(THIN.replace("if __name__", "def helper():\n    return 1\n\n\n"
                                                                             "if __name__"))
    assert layout.problems() == ["scripts/tool.py:8: def helper: an entry point holds no logic (a kbench module's "
                                 "function, which the script calls)"]
    assert layout.main([]) == 1
    assert "scripts/tool.py:8: def helper" in capsys.readouterr().out


@pytest.mark.parametrize("planted, problem", [
    ("class Tool:\n    pass\n", "3: class Tool: an entry point holds no logic"),
    ("run = lambda: 1\n", "3: a lambda: an entry point holds no logic"),
    ("import pandas\n", "3: imports pandas: an entry point imports kbench and sys, os, pathlib, argparse only"),
    ("from subprocess import run\n", "3: imports subprocess: an entry point imports kbench and sys, os"),
    ("from kbench.adapters import _packages\n", "3: imports kbench.adapters._packages: not a public module of a wing"),
    ("import kbench.nothing_here\n", "3: imports kbench.nothing_here: no such kbench module"),
])
def test_an_entry_point_that_holds_logic_or_imports_past_kbench_is_named(tmp_path, planted, problem):
    path = tmp_path / "tool.py"
    path.write_text('"""A script."""\nimport sys\n' + planted)
    found = layout.script_problems([path])
    assert len(found) == 1 and found[0].startswith(f"scripts/tool.py:{problem}"), found


def test_a_module_named_nowhere_is_named_twice(package_copy):
    """The maps cannot drift: a new module must be named in its package's docstring and in docs/layout.md."""
    (package_copy / "results" / "newtable.py").write_text("")
    assert layout.problems() == [
        "kbench.results.newtable: not named in kbench.results's docstring (kbench/results/__init__.py)",
        "kbench.results.newtable: not named in docs/layout.md's row of the wing results"]
    dropped = layout.LAYOUT_DOC.read_text().replace("breakdown_tables (time by kind", "(time by kind")
    assert "kbench.results.breakdown_tables: not named in docs/layout.md's row of the wing results" \
        in layout.unnamed(dropped)
