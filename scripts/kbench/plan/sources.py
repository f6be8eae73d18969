"""Which of this repository's source files a cell process runs: every kbench module the runner and the cell's adapter
import, directly or through each other, read from their import statements (function-level imports included), and
every model family's module where the family registry is among them (it finds them, kbench.models.family).

Rule `cell` takes them as inputs, so editing any of them reruns exactly the cells that run it; a module added to the
runner's imports joins the list by itself. Each cell records the kbench modules it really imported
(provenance.kbench_modules), and the e2e tests check that every one of them is in this list.
"""
from __future__ import annotations

import functools

from kbench import imports
from kbench.models import family
from kbench.machine.host import REPO

SCRIPTS = REPO / "scripts"
_path, _imported = imports.path_of, imports.imported        # the one reader of kbench's imports


def modules(roots: list[str]) -> list[str]:
    """Every kbench module reachable from `roots` by imports, with the packages above each."""
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module in seen or _path(module) is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]      # importing a.b runs a/__init__ first
        todo += sorted(_imported(module, _path(module)))
        if module == "kbench.models.family":      # it finds the family modules rather than importing them by name
            todo += family.family_modules()
    return sorted(seen)


def cell_modules(adapter: str) -> list[str]:
    """What a cell of `adapter` runs: the runner, the adapter module, and all they import."""
    return modules(["kbench.run.runner", f"kbench.adapters.{adapter}"])


@functools.lru_cache(maxsize=None)        # rule cell asks once per job: parse each adapter's sources once per run
def cell_sources(adapter: str, entry: str = "kbench.run.runner") -> list[str]:
    """The files of the modules a process of `entry` (kbench.run.runner: a cell; kbench.equivalence.check: an equivalence
    job) and the adapter run, relative to the repository root (the rules' code inputs)."""
    root = SCRIPTS.parent
    found = modules([entry, f"kbench.adapters.{adapter}"])
    return [str(_path(m).relative_to(root)) for m in found]   # a list: Snakemake's input form


@functools.lru_cache(maxsize=None)
def entry_sources(entry: str) -> list[str]:
    """The files of the modules a process of `entry` runs without an adapter (kbench.studies.jax_numpy)."""
    root = SCRIPTS.parent
    return [str(_path(m).relative_to(root)) for m in modules([entry])]
