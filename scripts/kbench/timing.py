"""The one place that times steps, for every framework.

Each step is bracketed by a device sync, so a step's duration is the device work it caused, not the time to queue it
(the anchor timed without a sync). The first `warmup` steps carry compilation and autotuning: they are reported as
first-step time and never averaged in. The statistics divide by exactly the steps that were timed.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class StepTimes:
    warmup_ms: list[float]      # the excluded first step(s), compile included
    step_ms: list[float]        # every timed step
    window_ms: float            # wall time from the first timed step's start to the last one's end

    def summary(self) -> dict[str, float]:
        return summarize(self.step_ms)


def measure(step: Callable[[], Any], sync: Callable[[Any], None], warmup: int, timed: int,
            clock: Callable[[], float] = time.perf_counter) -> StepTimes:
    if warmup < 0 or timed < 1:
        raise ValueError(f"steps: warmup must be >= 0 and timed >= 1, got warmup={warmup} timed={timed}")
    sync(None)                                  # nothing queued from model building leaks into step 1

    def one_step() -> float:
        start = clock()
        sync(step())
        return (clock() - start) * 1e3

    warmup_ms = [one_step() for _ in range(warmup)]
    window_start = clock()
    step_ms = [one_step() for _ in range(timed)]
    window_ms = (clock() - window_start) * 1e3
    return StepTimes(warmup_ms=warmup_ms, step_ms=step_ms, window_ms=window_ms)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(step_ms: list[float]) -> dict[str, float]:
    if not step_ms:
        raise ValueError("no timed steps to summarize")
    return {
        "n": len(step_ms),
        "mean_ms": statistics.fmean(step_ms),
        "median_ms": statistics.median(step_ms),
        "p90_ms": percentile(step_ms, 90),
        "stdev_ms": statistics.stdev(step_ms) if len(step_ms) > 1 else 0.0,
        "min_ms": min(step_ms),
        "max_ms": max(step_ms),
    }
