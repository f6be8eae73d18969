"""Harness overhead: the cell runner's ms/step divided by a bare hand-written loop's ms/step, same model, same process.

    .venv/bin/python scripts/bench_overhead.py [--framework keras3-jax --model bert --task predict --batch 256]

The host side resolves the tiny cell from config.yaml and re-runs this file in the stack's environment, where the
runner path (kbench.runner.run: per-step device sync, statistics, provenance) and the bare loop (one clock around
N calls of the same step, one sync at the end, as the anchor timed) alternate, so drift hits both alike.
Target: ratio <= 1.02.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))


def host(args) -> int:
    import yaml
    from kbench import launch, matrix

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    spec = matrix.spec(config, "tiny", args.model, args.task, args.batch, args.framework)
    spec["steps"] = {"warmup": 1, "timed": args.steps}
    stack = matrix.stack_of(config, args.framework)
    python = REPO / ".envs" / f"{stack}.cpu" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: run the tiny suite once (README) so the {stack} environment exists")
    payload = json.dumps({"spec": spec, "repeats": args.repeats})
    return subprocess.run([str(python), __file__, "--in-env"], input=payload, text=True,
                          env=launch.process_env("host")).returncode


def in_env() -> int:
    payload = json.load(sys.stdin)
    spec, repeats = payload["spec"], payload["repeats"]
    import os
    os.environ.update(spec["framework_def"]["env"])
    from kbench import adapters, runner

    adapter = adapters.load(spec["framework_def"]["adapter"])
    backend = adapter.backend()
    workload = adapter.build(spec)
    steps = spec["steps"]["timed"]

    def bare_loop_ms() -> float:
        out = workload.step()             # its own warm-up call, like the runner's excluded first step
        backend.sync(out)
        start = time.perf_counter()
        for _ in range(steps):
            out = workload.step()
        backend.sync(out)
        return (time.perf_counter() - start) * 1e3 / steps

    runner_ms, bare_ms = [], []
    for _ in range(repeats):
        runner_ms.append(runner.run(spec, {"runtime": "host"})["timing"]["mean_ms"])
        bare_ms.append(bare_loop_ms())
    ratios = [r / b for r, b in zip(runner_ms, bare_ms)]
    print(f"cell: {spec['cell_id']}  steps/repeat: {steps}  repeats: {repeats}")
    print(f"runner ms/step (median of repeats): {statistics.median(runner_ms):.3f}   all: "
          + " ".join(f"{x:.3f}" for x in runner_ms))
    print(f"bare   ms/step (median of repeats): {statistics.median(bare_ms):.3f}   all: "
          + " ".join(f"{x:.3f}" for x in bare_ms))
    print(f"overhead ratio runner/bare: median {statistics.median(ratios):.4f} "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f}); target <= 1.02")
    return 0


def main() -> int:
    if "--in-env" in sys.argv:
        return in_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="keras3-jax")
    parser.add_argument("--model", default="bert")
    parser.add_argument("--task", default="predict")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    return host(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
