"""The one place that turns a cell's repeats (and, with one repeat, its steps) into an estimate of its ms/step with a
95% interval, and two cells into a verdict.

The quantity estimated is the ms/step a fresh cell process gets: each repeat is one process (its compile caches,
allocator and autotuner choices redrawn) and yields one exact mean, window / timed steps.

- Point estimate: the median of the repeats' means (robust to one odd run).
- Interval, 2 or more repeats: Student's t over the repeats' means, mean +- t(0.975, n-1) * s / sqrt(n). Each repeat
  mean already carries its own step noise, so this covers run-to-run and within-run spread alike, and it is exact
  for normal run-to-run noise. With 3 repeats it is wide (t = 4.30); a bootstrap over 3 values cannot reach 95%: its
  widest interval is their range, which holds the true median with probability 1 - 2 * 0.5^3 = 75%
  (tests/test_stats.py measures both coverages).
- Interval, 1 repeat: within-run only, from the steps: Student's t over the means of 10 blocks of consecutive steps.
  It cannot see run-to-run spread, and where steps are asynchronous the drain of queued work lands in the last block
  and widens it (conservative). Tables mark it.
- Two cells: different when their intervals do not overlap (a tie otherwise); compare's verdict between two runs of
  one cell is Welch's t-test on the repeat means (p < 0.05), where both sides have 2 or more repeats.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as scipy_stats

CONFIDENCE = 0.95
BLOCKS = 10
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Estimate:
    ms: float            # median of the repeats' means
    low: float
    high: float
    repeats: int
    method: str          # "repeats" (t over repeat means) | "steps" (one repeat: within-run only)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def t_interval(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = statistics.fmean(values)
    half = scipy_stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


def block_means(steps: list[float], blocks: int = BLOCKS) -> list[float]:
    """Means of `blocks` runs of consecutive steps (fewer where there are fewer steps)."""
    blocks = min(blocks, len(steps))
    edges = [round(i * len(steps) / blocks) for i in range(blocks + 1)]
    return [statistics.fmean(steps[a:b]) for a, b in zip(edges, edges[1:])]


def estimate(repeat_means: list[float], repeat_steps: list[list[float]]) -> Estimate:
    """repeat_means: each repeat's mean ms/step; repeat_steps: each repeat's per-step ms (used with one repeat)."""
    if not repeat_means:
        raise ValueError("no repeats to estimate from")
    point = statistics.median(repeat_means)
    if len(repeat_means) >= 2:
        (low, high), method = t_interval(repeat_means), "repeats"
    else:
        means, method = block_means(repeat_steps[0]), "steps"
        low, high = t_interval(means) if len(means) >= 2 else (point, point)
    return Estimate(point, min(low, point), max(high, point), len(repeat_means), method)


def separate(a: Estimate, b: Estimate) -> bool:
    """True when the two intervals do not overlap: one cell is faster beyond the uncertainty of both."""
    return a.high < b.low or b.high < a.low


def welch_p(old: list[float], new: list[float]) -> float:
    """Two-sided p-value of Welch's t-test on two runs' repeat means (2 or more each)."""
    if statistics.pstdev(old) == statistics.pstdev(new) == 0:     # no spread at all: equal or certainly different
        return 1.0 if statistics.fmean(old) == statistics.fmean(new) else 0.0
    return float(scipy_stats.ttest_ind(old, new, equal_var=False).pvalue)
