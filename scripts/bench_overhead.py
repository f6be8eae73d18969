#!/usr/bin/env python3
"""Harness overhead: the cell runner's ms/step over a bare loop's, same model, same process
(kbench.harness.bench_overhead). Target: ratio <= 1.02.

    .venv/bin/python scripts/bench_overhead.py [--framework keras3-jax --model sam --task predict --batch 4]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.harness import bench_overhead  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench_overhead.main())
