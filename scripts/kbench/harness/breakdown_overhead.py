"""Does the breakdown by kind touch the number it explains? The same tiny cell run in fresh processes with its
breakdown on (config breakdown.steps profiled after the window) and off, alternating (ABBA, so drift hits both
alike), each in its column's image as the workflow runs it; the timed window's ms/step of the two sides, their 95%
intervals over the processes, the ratio on / off and Welch's p. The breakdown runs after the window: within noise
(intervals overlapping) is the target.

    .venv/bin/kbench breakdown-overhead --images results [--framework native-torch-eager
        --model bert --task fit --batch 8 --pairs 3 --runtime podman]

--images: the results folder of a run whose environment records (images/ for podman, environments/ for host) the
cells start from.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

from kbench.results import stats


def run(args) -> int:
    from kbench.run import launch
    from kbench.harness import two_sides
    base, record = two_sides.cell(two_sides.config(), args, args.framework)
    timed = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        order = [side for _ in range(args.pairs) for side in ("on", "off", "off", "on")][:2 * args.pairs]
        for i, side in enumerate(order):
            steps = dataclasses.replace(base.steps, breakdown=args.steps if side == "on" else 0)
            out = Path(tmp) / f"{i}-{side}.r1.json"
            result = launch.run_cell(base.replace(steps=steps), args.runtime, record, out, out.with_suffix(".log"),
                                     launch.Options(timeout_s=1800))
            if result.status != "ok":
                print(f"{side}: {result.text()}", file=sys.stderr)
                return 1
            timed[side].append(result.timing["mean_ms"])
            closes = (result.breakdown or {}).get("closes")
            print(f"{i + 1}/{len(order)} breakdown {side}: {result.timing['mean_ms']:.2f} ms/step"
                  + (f" (breakdown closes: {closes})" if side == "on" else ""), flush=True)
    on, off = (stats.estimate(timed[s], []) for s in ("on", "off"))
    ratio = statistics.fmean(timed["on"]) / statistics.fmean(timed["off"])
    within = not stats.separate(on, off)
    print(f"{base.cell_id}: timed ms/step with the breakdown on {on.ms:.2f} [{on.low:.2f}, {on.high:.2f}], off "
          f"{off.ms:.2f} [{off.low:.2f}, {off.high:.2f}] over {args.pairs} processes each; ratio on / off "
          f"{ratio:.3f}, Welch p {stats.welch_p(timed['off'], timed['on']):.2f}: "
          + ("within noise (the intervals overlap)" if within else "NOT within noise (the intervals are apart)"))
    return 0 if within else 1


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    from kbench.harness import two_sides
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    two_sides.arguments(parser, pairs=3)
    parser.add_argument("--framework", default="native-torch-eager")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps with the breakdown on")
    return run(two_sides.parse(parser, argv))
