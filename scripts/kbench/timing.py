"""The one place that times steps, for every framework.

The timed window is bracketed by device syncs (the anchor had none), so it holds all the device work of exactly the
`timed` steps, and mean ms/step = window / timed. Inside the window nothing extra syncs, so a framework's own async
dispatch overlaps steps as in any training loop. step_ms[i] is the host-observed time from the return of step i-1 to
the return of step i; the entries add up to the window exactly, the last one carrying the drain of queued work.
Where a step returns host data (train_on_batch, generate) that is its device time; where it returns device arrays it is
the dispatch cadence. The first `warmup` steps carry compilation and autotuning: each is synced on its own, reported as
first-step time, and never averaged in. The outputs of the first and last timed steps are kept (a fit step returns its
loss; the first one through the workload's keep, a copy where a later step would overwrite it), and read only after
the window closes.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class StepTimes:
    warmup_ms: list[float]      # the excluded first step(s), compile included, each synced
    step_ms: list[float]        # every timed step, return to return; sums to window_ms
    window_ms: float            # from the synced start of the first timed step to the synced end of the last
    first_output: Any = None    # what the first and the last timed step returned
    last_output: Any = None

    def summary(self) -> dict[str, float]:
        return summarize(self.step_ms)


def measure(step: Callable[[], Any], sync: Callable[[Any], None], warmup: int, timed: int,
            clock: Callable[[], float] = time.perf_counter, keep: Callable[[Any], Any] = lambda out: out) -> StepTimes:
    """keep(output) is what survives of the first timed step's output until the window closes: a copy where later
    steps reuse its memory (CUDA-graph replays); the last output is read right after the closing sync."""
    if warmup < 0 or timed < 1:
        raise ValueError(f"steps: warmup must be >= 0 and timed >= 1, got warmup={warmup} timed={timed}")
    sync(None)                                  # nothing queued from model building leaks into step 1
    warmup_ms = []
    for _ in range(warmup):
        start = clock()
        sync(step())
        warmup_ms.append((clock() - start) * 1e3)

    marks = [clock()]
    first = None
    for i in range(timed):
        out = step()
        marks.append(clock())
        if i == 0:
            first = keep(out)
    sync(out)
    marks[-1] = clock()                         # the last step ends when the device has finished everything
    step_ms = [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]
    return StepTimes(warmup_ms=warmup_ms, step_ms=step_ms, window_ms=(marks[-1] - marks[0]) * 1e3,
                     first_output=first, last_output=out)


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
