#!/usr/bin/env python3
"""kbench, the commands beside Snakemake (kbench.frontdoor.cli): .venv/bin/kbench runs this file with the driver venv's
Python (scripts/bootstrap writes it); a Python without the venv runs it itself, from the repository root:

    python3 scripts/cli.py gpucheck --deadline 480      the GPU check on a new host (NumPy and PyYAML suffice)
    python3 scripts/cli.py --help                       every command
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.frontdoor import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main())
