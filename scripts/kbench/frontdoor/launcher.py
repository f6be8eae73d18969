"""The `kbench` command in the driver venv: .venv/bin/kbench, a two-line shell script that runs the repository's
scripts/cli.py with the venv's Python, written by scripts/bootstrap after the venv is synced to envs/driver.lock.

Why a launcher and not an installed package: `uv pip install -e .` needs a build backend (setuptools, hatchling)
that the hash-checked driver lock does not pin, so bootstrap would fetch one unchecked from the index, and the next
`uv pip sync` of the lock would uninstall it again (sync leaves exactly the lock). The launcher needs nothing but the
venv's Python, works offline, and is written again by every bootstrap; its paths are absolute, as a venv's own
scripts are.

    python -m kbench.frontdoor.launcher VENV      writes VENV/bin/kbench for this repository
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

ENTRY = Path(__file__).resolve().parents[2] / "cli.py"


def text(venv: Path, entry: Path = ENTRY) -> str:
    python = Path(venv).absolute() / "bin" / "python"
    return ("#!/bin/sh\n"
            "# kbench: the commands beside Snakemake (`kbench --help`), written by scripts/bootstrap:\n"
            "# the driver venv's Python running the repository's scripts/cli.py (kbench.frontdoor.cli)\n"
            f"exec {shlex.quote(str(python))} {shlex.quote(str(entry))} \"$@\"\n")


def write(venv: Path, entry: Path = ENTRY) -> Path:
    """VENV/bin/kbench, executable; replaced whole where it is there (a checkout moved, a venv made again)."""
    path = Path(venv) / "bin" / "kbench"
    partial = path.with_name(".kbench.partial")
    partial.write_text(text(venv, entry))
    partial.chmod(0o755)
    partial.replace(path)
    return path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not (Path(argv[0]) / "bin" / "python").exists():
        print("usage: python -m kbench.frontdoor.launcher VENV  (a venv: VENV/bin/python)", file=sys.stderr)
        return 2
    print(f"kbench: {write(Path(argv[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
