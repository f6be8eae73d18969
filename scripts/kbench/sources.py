"""Which of this repository's source files a cell process runs: every kbench module the runner and the cell's adapter
import, directly or through each other, read from their import statements (function-level imports included).

Rule `cell` takes them as inputs, so editing any of them reruns exactly the cells that run it; a module added to the
runner's imports joins the list by itself. Each cell records the kbench modules it really imported
(provenance.kbench_modules), and the e2e tests check that every one of them is in this list.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1]
PACKAGE = "kbench"


def _path(module: str) -> Path | None:
    parts = module.split(".")
    for candidate in (SCRIPTS.joinpath(*parts).with_suffix(".py"), SCRIPTS.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _imported(module: str, path: Path) -> set[str]:
    """kbench modules named by the import statements of one file (`from kbench import x` may name a module or a
    name in kbench/__init__; both are followed where a file exists)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != PACKAGE:
                continue
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if _path(m)}


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
    return sorted(seen)


def cell_modules(adapter: str) -> list[str]:
    """What a cell of `adapter` runs: the runner, the adapter module, and all they import."""
    return modules(["kbench.runner", f"kbench.adapters.{adapter}"])


@functools.lru_cache(maxsize=None)        # rule cell asks once per job: parse each adapter's sources once per run
def cell_sources(adapter: str, entry: str = "kbench.runner") -> list[str]:
    """The files of the modules a process of `entry` (kbench.runner: a cell; kbench.equivalence: an equivalence
    job) and the adapter run, relative to the repository root (the rules' code inputs)."""
    root = SCRIPTS.parent
    found = modules([entry, f"kbench.adapters.{adapter}"])
    return [str(_path(m).relative_to(root)) for m in found]   # a list: Snakemake's input form


@functools.lru_cache(maxsize=None)
def entry_sources(entry: str) -> list[str]:
    """The files of the modules a process of `entry` runs without an adapter (kbench.jax_numpy)."""
    root = SCRIPTS.parent
    return [str(_path(m).relative_to(root)) for m in modules([entry])]
