#!/usr/bin/env python3
"""Verify a run archive or compare two runs: `archive.py verify X.tar.gz`, `archive.py compare OLD NEW [--suite S]`
(kbench.archive and kbench.compare; the archive itself is the workflow's target results/archive/<run-id>.tar.gz)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench import archive, compare  # noqa: E402

COMMANDS = {"verify": lambda argv: archive.main(["verify", *argv]), "compare": compare.main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} verify ARCHIVE | compare OLD NEW [--suite S] [--noise-floor PCT] [--out CSV]")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
