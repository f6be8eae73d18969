#!/usr/bin/env python3
"""Image build times, reproducibility and per-cell container overhead, a benchmark (kbench.harness.bench_images).

    .venv/bin/python scripts/bench_images.py [--stack keras3-jax --accelerator cpu --runs 15 --base]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.harness import bench_images  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench_images.main())
