"""The one reader of kbench's imports: the kbench modules a module's import statements name (every import statement,
those inside functions included), read from the source, so nothing is imported to know them. kbench.layout checks
the wings with it; kbench.plan.sources finds the code a cell runs with it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "kbench"
SCRIPTS = Path(__file__).resolve().parent.parent        # scripts/: kbench's parent, and the entry points beside it


def path_of(module: str) -> Path | None:
    """The file of a kbench module (its __init__.py for a package), or None where there is none."""
    parts = module.split(".")
    for candidate in (SCRIPTS.joinpath(*parts).with_suffix(".py"), SCRIPTS.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def named(module: str, path: Path) -> set[str]:
    """Every name the import statements of a file give (`from a import b` gives a and a.b: b may be a module or a name
    in a), relative ones resolved against `module`, whatever package they are of."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def imported(module: str, path: Path | None = None) -> set[str]:
    """The kbench modules named by the import statements of one module (`from kbench import x` may name a module or a
    name in kbench/__init__; both are followed where a file exists)."""
    path = path or path_of(module)
    return {m for m in named(module, path) if m.split(".")[0] == PACKAGE and path_of(m)}
