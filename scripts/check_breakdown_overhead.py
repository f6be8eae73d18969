#!/usr/bin/env python3
"""The timed ms/step of a cell with its breakdown by kind on and off, within noise (kbench.harness.breakdown_overhead).

    .venv/bin/python scripts/check_breakdown_overhead.py --images results [--framework native-torch-eager ...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.harness import breakdown_overhead  # noqa: E402

if __name__ == "__main__":
    sys.exit(breakdown_overhead.main())
