"""The README, ADDING.md and docs/*.md must hold as printed: every repository path they name exists, every cell path
they name is one the workflow makes, every kbench module they name is there, every relative link leads to a file (and
heading), and the commands in their code blocks that are cheap to run run as printed: `--help`, `kbench layout`
and Snakemake dry runs (`snakemake -n ...`, planned in this process by tests/dag.py).
tests/test_lifecycle.py runs the verify walk-through of docs/report.md."""
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import CONFIG, REPO
from dag import plan
from kbench import imports
from kbench.plan import matrix

PAGES = {path.relative_to(REPO).as_posix(): path.read_text()
         for path in [REPO / "README.md", REPO / "ADDING.md", *sorted((REPO / "docs").glob("*.md"))]}
README = PAGES["README.md"]
CELL_PATH = re.compile(r"results/cells/(\S+?)\.r(\d+)\.json")
REPO_PATH = re.compile(r"(?<![\w/.])((?:scripts|profiles|envs|containers|tests|rules|report|schemas|docs|kbench|\.ci)/"
                       r"[\w./-]+\w)")


def test_the_readme_is_the_front_door():
    """Short, with the commands CI and the walk-throughs rely on, and a link to every page of docs/."""
    assert len(README.splitlines()) <= 250
    assert "    scripts/bootstrap && .venv/bin/python tests/run_tiers.py " in README       # .ci/run runs this line
    assert "snakemake --cores all" in README and "python3 scripts/cli.py gpucheck" in README
    assert "PYTHONPATH=scripts" not in README       # one front door: the kbench command (.venv/bin/kbench, scripts/cli.py)
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)", README))
    assert linked == {name for name in PAGES if name.startswith("docs/")}


def test_every_cell_path_the_pages_name_is_one_the_workflow_makes():
    named = [(page, p) for page, text in PAGES.items()
             for p in re.findall(r"(?:results|t/tiny-run1)/cells/[^\s`'\"]+\.json", text) if "<" not in p]
    assert len(named) >= 3
    for page, path in named:
        match = CELL_PATH.search(path.replace("t/tiny-run1/cells/", "results/cells/"))
        assert match, f"{page} names {path}, not <cell>.r<repeat>.json"
        suite = match[1].split("/")[0]
        config = {**CONFIG, "accelerator": "cpu" if suite == "tiny" else "gpu", "profiles": list(CONFIG["profile_defs"])}
        assert match[1] in {c.cell_id for c in matrix.cells(config, suite)}, (page, path)


def test_every_repository_file_the_pages_name_exists():
    named = {(page, path) for page, text in PAGES.items() for path in REPO_PATH.findall(text)}
    assert len(named) > 100

    def exists(path: str) -> bool:
        where = REPO / ("scripts/" + path if path.startswith("kbench/") else path)
        return where.exists() or any(where.parent.glob(where.name + "*"))

    missing = sorted((page, path) for page, path in named if "<" not in path and not exists(path))
    assert missing == [], missing


def test_every_kbench_module_the_pages_name_is_there():
    """`kbench.x.y` is a module, or a module and a name it defines (`kbench.machine.runtimes.RUNTIMES`)."""
    wrong = []
    for page, text in PAGES.items():
        for name in set(re.findall(r"(?<![\w/])kbench(?:\.\w+)+(?![\w=])", text)):
            parts = name.split(".")
            module = next((k for k in range(len(parts), 0, -1) if imports.path_of(".".join(parts[:k]))), 0)
            rest = parts[module:]
            source = imports.path_of(".".join(parts[:module])).read_text() if module else ""
            if not module or (rest and not re.search(rf"^\s*(?:def |class )?{rest[0]}\b", source, re.M)):
                wrong.append((page, name))
    assert wrong == []


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_leads_to_a_file_and_heading():
    broken = []
    for page, text in PAGES.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            file, _, anchor = target.partition("#")
            path = (REPO / page).parent / file if file else REPO / page
            if not path.resolve().is_file():
                broken.append((page, target))
            elif anchor and anchor not in {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}:
                broken.append((page, target))
    assert broken == []


def code_lines(text: str) -> list[str]:
    """The command lines of a page's code blocks (fenced, or indented after a blank line), continuations joined,
    comments dropped."""
    found, fenced, block, before = [], False, False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, block = not fenced, False
        elif fenced or (line.startswith("    ") and (block or not before.strip())):
            found.append(line.strip())
            block = not fenced
        elif line.strip():
            block = False
        before = line
    joined: list[str] = []
    for line in found:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line
        else:
            joined.append(line)
    return [re.split(r"\s{2,}#", line)[0].strip() for line in joined if line and not line.startswith("#")]


COMMANDS = sorted({line for text in PAGES.values() for line in code_lines(text)})
DRY_RUNS = [line for line in COMMANDS if re.match(r"(\.venv/bin/)?snakemake ", line) and " -n " in f" {line} "]
CHEAP = [line for line in COMMANDS if line.endswith(" --help") or re.search(r"kbench layout$", line)]


def test_the_pages_print_commands_the_tests_run():
    assert len(COMMANDS) > 40 and DRY_RUNS and len(CHEAP) >= 2
    assert ".venv/bin/kbench layout" in CHEAP and ".venv/bin/kbench --help" in CHEAP


@pytest.mark.workflow     # a printed Snakemake command, run (9 s)
@pytest.mark.parametrize("line", DRY_RUNS)
def test_a_printed_dry_run_plans(line):
    """As printed (and with the equivalence check on, as a user's run has it), in this process."""
    found = plan(*shlex.split(line)[1:], equivalence=True)
    assert found.ok and not found.error, found.error or found.log[-2000:]


@pytest.mark.parametrize("line", CHEAP)
def test_a_printed_cheap_command_runs(line):
    proc = subprocess.run(line, shell=True, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip()


def verify_walkthrough() -> list[str]:
    """The indented command lines after "Try it" in docs/report.md's verify paragraph, as printed."""
    text = (REPO / "docs" / "report.md").read_text()
    block = text.split("tests/test_lifecycle.py runs these lines as printed):", 1)[1].split("\n\n", 2)[1]
    return [line.strip().split("     #")[0] for line in block.splitlines() if line.strip()]


def test_the_verify_walkthrough_is_printed_as_shell_lines():
    lines = verify_walkthrough()
    assert len(lines) == 4 and lines[-1].startswith(".venv/bin/kbench verify")
    for line in lines:
        shlex.split(line)
