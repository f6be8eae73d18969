"""Does a warm compile cache touch the number a cell reports? For each compiled column, the same tiny cell in fresh
processes, cold (an empty persistent compile cache) and warm (a copy of the first cold run's cache,
kbench.instruments.compile_cache), alternating (cold, warm, warm, cold, ...: drift hits both alike), each in its column's image as
the workflow runs it. Per column: the timed window's ms/step of each side, their 95% intervals over the processes, the
ratio warm / cold and Welch's p, and the first step's median on each side. Within noise (intervals overlapping) is the
target: a warm cell loads the cold run's programs, it does not time others.

    .venv/bin/kbench warm-window --images results [--frameworks keras3-jax,native-torch-compiled
        --model bert --task fit --batch 8 --pairs 2 --runtime podman]

--images: the results folder of a run whose environment records (images/ for podman, environments/ for host) the
cells start from. Exit 1 where a column's sides are apart (or a run failed).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

from kbench.results import stats

COMPILED = "native-torch-compiled,keras2,keras3-tensorflow,keras3-jax,keras3-torch"


def order(pairs: int) -> list[str]:
    """cold first (it fills the cache the warm runs copy), then warm, warm, cold, cold, warm, ...: `pairs` of each."""
    sides = [side for i in range(pairs) for side in (("cold", "warm") if i % 2 == 0 else ("warm", "cold"))]
    return sides


def column(config: dict, args, framework: str, folder: Path) -> bool:
    from kbench.run import launch
    from kbench.harness import two_sides
    spec, record = two_sides.cell(config, args, framework)
    spec = spec.replace(steps=dataclasses.replace(spec.steps, breakdown=0))
    timed, first, seed = {"cold": [], "warm": []}, {"cold": [], "warm": []}, None
    for i, side in enumerate(order(args.pairs)):
        out = folder / framework / f"{i}-{side}.r1.json"
        result = launch.run_cell(spec, args.runtime, record, out, out.with_suffix(".log"),
                                 launch.Options(timeout_s=3600, cache_from=() if side == "cold" else (str(seed),)))
        state = ((result.first_step or {}).get("cache") or {}).get("state")
        if result.status != "ok" or state != side:
            print(f"{framework} {side}: {result.text()} (cache {state})", file=sys.stderr)
            return False
        seed = seed or out
        timed[side].append(result.timing["mean_ms"])
        first[side].append(result.timing["first_step_ms"])
        print(f"  {framework} {i + 1}: {side} {result.timing['mean_ms']:.2f} ms/step, first step "
              f"{result.timing['first_step_ms'] / 1e3:.1f} s", flush=True)
    cold, warm = (stats.estimate(timed[s], []) for s in ("cold", "warm"))
    within = not stats.separate(cold, warm)
    print(f"{framework} {spec.model} {spec.task} bs{spec.batch_size}: timed ms/step cold {cold.ms:.2f} "
          f"[{cold.low:.2f}, {cold.high:.2f}], warm {warm.ms:.2f} [{warm.low:.2f}, {warm.high:.2f}] over {args.pairs} "
          f"processes each; ratio warm / cold {warm.ms / cold.ms:.3f}, Welch p "
          f"{stats.welch_p(timed['cold'], timed['warm']):.2f}: "
          + ("within noise (the intervals overlap)" if within else "NOT within noise (the intervals are apart)")
          + f"; first step cold {statistics.median(first['cold']) / 1e3:.1f} s, warm "
            f"{statistics.median(first['warm']) / 1e3:.1f} s", flush=True)
    return within


def run(args) -> int:
    from kbench.harness import two_sides
    config = two_sides.config()
    with tempfile.TemporaryDirectory() as tmp:
        verdicts = [column(config, args, framework, Path(tmp)) for framework in args.frameworks.split(",")]
    return 0 if all(verdicts) else 1


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    from kbench.harness import two_sides
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    two_sides.arguments(parser, pairs=2)
    parser.add_argument("--frameworks", default=COMPILED, help="compiled columns, comma-separated")
    return run(two_sides.parse(parser, argv))
