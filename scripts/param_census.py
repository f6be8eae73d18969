#!/usr/bin/env python3
"""Parameter counts of every model/task in every framework at one size, without running (kbench.studies.census_tables).

    .venv/bin/python scripts/param_census.py --size paper [--runtime podman|host] [--frameworks a,b]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.studies import census_tables  # noqa: E402

if __name__ == "__main__":
    sys.exit(census_tables.main())
