import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


@pytest.fixture
def config():
    """A fresh copy of config.yaml for each test to mutate."""
    return copy.deepcopy(CONFIG)


CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


def snakemake(*args, cwd=REPO, timeout=1800, env=None):
    """Run the workflow's own CLI, as a user would; returns the completed process (output in .stdout)."""
    return subprocess.run([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *args], cwd=cwd, text=True, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
