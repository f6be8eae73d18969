"""The README's examples must run as printed: every cell path it names is one the workflow makes, every file it
names exists, and its commands are the workflow's own (tests/test_lifecycle.py runs its verify walk-through)."""
import re
import shlex

from conftest import CONFIG, REPO
from kbench.plan import matrix

README = (REPO / "README.md").read_text()
CELL_PATH = re.compile(r"results/cells/(\S+?)\.r(\d+)\.json")


def test_every_cell_path_the_readme_names_is_one_the_workflow_makes():
    named = [p for p in re.findall(r"(?:results|t/tiny-run1)/cells/[^\s`'\"]+\.json", README) if "<" not in p]
    assert named
    for path in named:
        match = CELL_PATH.search(path.replace("t/tiny-run1/cells/", "results/cells/"))
        assert match, f"README names {path}, not <cell>.r<repeat>.json"
        suite = match[1].split("/")[0]
        config = {**CONFIG, "accelerator": "cpu" if suite == "tiny" else "gpu", "profiles": list(CONFIG["profile_defs"])}
        assert match[1] in {c.cell_id for c in matrix.cells(config, suite)}, path


def test_every_repository_file_the_readme_names_exists():
    named = set(re.findall(r"(?<![\w/.])((?:scripts|profiles|envs|containers|tests|rules|report|schemas|\.ci)/"
                           r"[\w./-]+\w)", README))
    assert len(named) > 20
    missing = sorted(p for p in named if "<" not in p and not (REPO / p).exists()
                     and not any((REPO / p).parent.glob((REPO / p).name + "*")))
    assert missing == [], missing


def verify_walkthrough() -> list[str]:
    """The indented command lines after "Try it" in the verify paragraph, as printed."""
    block = README.split("tests/test_lifecycle.py runs these lines as printed):", 1)[1].split("\n\n", 2)[1]
    return [line.strip().split("     #")[0] for line in block.splitlines() if line.strip()]


def test_the_verify_walkthrough_is_printed_as_shell_lines():
    lines = verify_walkthrough()
    assert len(lines) == 4 and lines[-1].startswith(".venv/bin/python scripts/archive.py verify")
    for line in lines:
        shlex.split(line)
