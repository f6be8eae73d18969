"""The package's layout, checked: every kbench module belongs to a wing (a subpackage, or ground for the modules at
the top), the wings stand in the order data flows, and a module imports only from its own wing or wings below it,
with no circle; every module is named in its package's docstring and in its wing's row of docs/layout.md (the maps
cannot drift). The entry points beside the package (scripts/*.py: a command's, or a rule's script) stand above every
wing and hold no logic: no function, class or lambda, and imports of kbench's public modules and of sys, os, pathlib
and argparse only. Imports are read from the source by kbench.imports (every import statement, those inside
functions included), so nothing is imported to check them.

    python -m kbench.layout          the wings, what each imports, the scripts, and every problem (exit 1 if any)
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from kbench import imports
from kbench.imports import PACKAGE

ROOT = Path(__file__).resolve().parent
LAYOUT_DOC = ROOT.parents[1] / "docs" / "layout.md"
# Bottom to top: data flows upwards, config -> plan -> stacks -> run -> cell JSON -> results -> claims -> report.
WINGS = ("ground", "breakdown", "models", "gpu", "stacks", "plan", "adapters", "run", "equivalence", "results",
         "claims", "lifecycle", "studies", "harness", "gpucheck", "report", "frontdoor")
# The ground floor's shelves: subpackages that are ground, grouped by what they hold (the cell's contract, the
# measuring instruments, the machine), beside its loose modules (files, imports, layout).
SHELVES = ("contract", "instruments", "machine")
# What an entry point (scripts/*.py) may import besides kbench's public modules: enough to find the package, read
# argv and exit with the status of the one call it makes.
ENTRY_IMPORTS = ("__future__", "sys", "os", "pathlib", "argparse")


def modules() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def wing_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in SHELVES:
        return "ground"
    return parts[1] if len(parts) > 1 and (ROOT / parts[1]).is_dir() else "ground"


def graph() -> dict[str, set[str]]:
    return {module: imports.imported(module) - {module} for module in modules()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other round (Tarjan's strongly connected components, size > 1)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def scripts() -> list[Path]:
    return sorted(imports.SCRIPTS.glob("*.py"))


def script_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of an entry point: a kbench module where `from kbench.x import y` names one (y a
    module, else kbench.x), else the name as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found += [(node.lineno, f"{base}.{alias.name}" if base.split(".")[0] == PACKAGE
                       and imports.path_of(f"{base}.{alias.name}") else base) for alias in node.names]
    return sorted(set(found))


def script_problems(paths: list[Path] | None = None) -> list[str]:
    """One line per function, class or lambda of an entry point (logic: its place is a kbench module, where the wings
    are checked), and per import of one that is not a public kbench module of a wing, or of ENTRY_IMPORTS."""
    found = []
    for path in scripts() if paths is None else paths:
        where = f"scripts/{path.name}"
        nodes = sorted(ast.walk(ast.parse(path.read_text(), str(path))), key=lambda n: getattr(n, "lineno", 0))
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                what = "a lambda" if isinstance(node, ast.Lambda) else \
                    f"{'class' if isinstance(node, ast.ClassDef) else 'def'} {node.name}"
                found.append(f"{where}:{node.lineno}: {what}: an entry point holds no logic (a kbench module's "
                             "function, which the script calls)")
        for line, module in script_imports(path):
            parts = module.split(".")
            if parts[0] != PACKAGE:
                if parts[0] not in ENTRY_IMPORTS:
                    found.append(f"{where}:{line}: imports {module}: an entry point imports kbench and "
                                 f"{', '.join(ENTRY_IMPORTS[1:])} only")
            elif imports.path_of(module) is None:
                found.append(f"{where}:{line}: imports {module}: no such kbench module")
            elif wing_of(module) not in WINGS or any(p.startswith("_") and not p.startswith("__") for p in parts):
                found.append(f"{where}:{line}: imports {module}: not a public module of a wing")
    return found


def docstring(package: str) -> str:
    """A package's __init__ docstring (kbench: the ground floor's)."""
    path = ROOT.joinpath(*package.split(".")[1:], "__init__.py")
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def layout_rows(text: str) -> dict[str, str]:
    """docs/layout.md's table of wings: each wing's row, by the wing its first cell names."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| wing", "|---")):
            rows[line[2:].split()[0].strip("`/")] = line
    return rows


def named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text) is not None


def unnamed(layout_doc: str | None = None) -> list[str]:
    """The maps that must not drift: every module is named in its package's docstring and in its wing's row of
    docs/layout.md."""
    text = LAYOUT_DOC.read_text() if layout_doc is None else layout_doc
    rows, found = layout_rows(text), []
    for module in modules():
        if module == PACKAGE or wing_of(module) not in WINGS:      # (one in no wing is named as such)
            continue
        parent, name = module.rsplit(".", 1)
        if not named(name, docstring(parent)):
            found.append(f"{module}: not named in {parent}'s docstring ({parent.replace('.', '/')}/__init__.py)")
        if not named(name, rows.get(wing_of(module), "")):
            found.append(f"{module}: not named in docs/layout.md's row of the wing {wing_of(module)}")
    return found


def problems(edges: dict[str, set[str]] | None = None) -> list[str]:
    """One line per module in no known wing, per import from a wing above the importer's, per circle, and per entry
    point that holds logic or imports what it should not (script_problems)."""
    edges = graph() if edges is None else edges
    found = [f"{m}: in no wing of kbench.layout.WINGS" for m in edges if wing_of(m) not in WINGS]
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if wing_of(module) in WINGS and wing_of(target) in WINGS \
                    and WINGS.index(wing_of(target)) > WINGS.index(wing_of(module)):
                found.append(f"{module} ({wing_of(module)}) imports {target} ({wing_of(target)}), a wing above it")
    found += [f"circle: {' -> '.join(circle)}" for circle in circles(edges)]
    return found + script_problems() + unnamed()


def docstring_head(wing: str) -> str:
    path = ROOT / "__init__.py" if wing == "ground" else ROOT / wing / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench layout`'s)."""
    (parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    edges = graph()
    for wing in WINGS:
        members = [m for m in edges if wing_of(m) == wing]
        below = sorted({wing_of(t) for m in members for t in edges[m]} - {wing}, key=WINGS.index)
        names = ", ".join(m.removeprefix(f"{PACKAGE}.{wing}.").removeprefix(f"{PACKAGE}.")
                          for m in members if m != f"{PACKAGE}.{wing}")
        print(f"{wing:12s} imports {', '.join(below) or 'nothing of kbench'}\n{'':12s} {names}")
        if wing != "ground":
            print(f"{'':12s} {docstring_head(wing)[:200]}")
    called = sorted({wing_of(m) for path in scripts() for _, m in script_imports(path) if m.split(".")[0] == PACKAGE},
                    key=lambda w: WINGS.index(w) if w in WINGS else len(WINGS))
    print(f"{'scripts':12s} imports {', '.join(called) or 'nothing of kbench'}\n{'':12s} "
          f"{', '.join(p.name for p in scripts())}\n{'':12s} entry points: argv (or Snakemake's object) and one call")
    found = problems(edges)
    print(*(["", "problems:"] + [f"  {line}" for line in found] if found else ["", "no problems"]), sep="\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
