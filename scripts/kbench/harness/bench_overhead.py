"""Harness overhead: the cell runner's ms/step divided by a bare hand-written loop's ms/step, same model, same process.

    .venv/bin/kbench bench-overhead [--framework keras3-jax --model sam --task predict --batch 4]

The host side resolves the tiny cell from config.yaml and runs this module again in the stack's environment
(`python -m kbench.harness.bench_overhead --in-env`, the spec on stdin). There one
workload is built, as the runner builds it, and two timings of it alternate (ABBA order, so drift hits both alike):
kbench.instruments.timing.measure, the code the runner times every cell with, and a bare loop (one clock around N calls of the
step, one sync at the end). Everything else the runner does happens outside the timed window.
Target: ratio <= 1.02.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time

from kbench.contract.spec import CellSpec
from kbench.machine.host import REPO


def host(args) -> int:
    import yaml
    from kbench.plan import matrix
    from kbench.run import launch

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["accelerator"] = "cpu"       # the cpu venv; a gpu spec would carry JAX_PLATFORMS=cuda and the GPU checks
    precision = config["model_defs"][args.model]["precisions"][0]
    spec = matrix.spec(config, "tiny", args.model, args.task, args.batch, precision, args.framework, "strict")
    spec = spec.replace(steps=dataclasses.replace(spec.steps, warmup=1, timed=args.steps))
    stack = matrix.stack_of(config, args.framework)
    python = REPO / ".envs" / f"{stack}.cpu" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: run the tiny suite once (README.md) so the {stack} environment exists")
    payload = json.dumps({"spec": spec.to_dict(), "repeats": args.repeats})
    return subprocess.run([str(python), "-m", "kbench.harness.bench_overhead", "--in-env"], input=payload, text=True,
                          env=launch.process_env("host"), cwd=REPO).returncode


def in_env() -> int:
    payload = json.load(sys.stdin)
    spec, repeats = CellSpec.from_dict(payload["spec"]), payload["repeats"]
    import os
    os.environ.update(spec.env)
    from kbench import adapters
    from kbench.instruments import timing

    adapter = adapters.load(spec.adapter)
    backend = adapter.backend()
    workload = adapters.build(adapter, spec)
    steps = spec.steps.timed

    def bare_loop_ms() -> float:
        out = workload.step()             # its own warm-up call, like the runner's excluded first step
        backend.sync(out)
        start = time.perf_counter()
        for _ in range(steps):
            out = workload.step()
        backend.sync(out)
        return (time.perf_counter() - start) * 1e3 / steps

    def runner_loop_ms() -> float:
        return timing.measure(workload.step, backend.sync, warmup=1, timed=steps).summary()["mean_ms"]

    runner_ms, bare_ms = [], []
    for i in range(repeats):
        if i % 2:
            bare_ms.append(bare_loop_ms())
            runner_ms.append(runner_loop_ms())
        else:
            runner_ms.append(runner_loop_ms())
            bare_ms.append(bare_loop_ms())
    ratios = [r / b for r, b in zip(runner_ms, bare_ms)]
    print(f"cell: {spec.cell_id}  steps/repeat: {steps}  repeats: {repeats}")
    print(f"runner ms/step (median of repeats): {statistics.median(runner_ms):.3f}   all: "
          + " ".join(f"{x:.3f}" for x in runner_ms))
    print(f"bare   ms/step (median of repeats): {statistics.median(bare_ms):.3f}   all: "
          + " ".join(f"{x:.3f}" for x in bare_ms))
    print(f"overhead ratio runner/bare: median {statistics.median(ratios):.4f} "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f}); target <= 1.02")
    return 0


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    argv = sys.argv[1:] if argv is None else argv
    if "--in-env" in argv:
        return in_env()
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="keras3-jax")
    # A short step (~3 ms on 2 CPU cores) is where a per-step cost of the harness would show most.
    parser.add_argument("--model", default="sam")
    parser.add_argument("--task", default="predict")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=20)
    return host(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
