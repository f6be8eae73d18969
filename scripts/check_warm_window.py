#!/usr/bin/env python3
"""Each compiled column's timed ms/step cold and warm (its persistent compile cache filled), within noise
(kbench.harness.warm_window).

    .venv/bin/python scripts/check_warm_window.py --images results [--frameworks keras3-jax ...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.harness import warm_window  # noqa: E402

if __name__ == "__main__":
    sys.exit(warm_window.main())
