#!/usr/bin/env python3
"""Verify a run archive or compare two runs: `archive.py verify X.tar.gz`, `archive.py compare OLD NEW`
(see kbench.archive; the archive itself is the workflow's target results/archive/<run-id>.tar.gz)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench import archive  # noqa: E402

if __name__ == "__main__":
    sys.exit(archive.main())
