"""The one place that turns a cell's repeats (and, with one repeat, its synced blocks) into an estimate of its ms/step
with a 95% interval, and two cells into a verdict.

The quantity estimated is the ms/step a fresh cell process gets: each repeat is one process (its compile caches,
allocator and autotuner choices redrawn) and yields one exact mean, window / timed steps.

- Point and interval are one method, so the printed "estimate ± half-width" is exactly the range the verdicts use:
  the mean of the repeats' means, and Student's t around it, mean ± t(0.975, n-1) * s / sqrt(n).
- 2 or more repeats ("repeats"): t over the repeats' means. Each repeat mean already carries its own step noise, so
  this covers run-to-run and within-run spread alike, and it is exact for normal run-to-run noise. With 3 repeats it
  is wide (t = 4.30); a bootstrap over 3 values cannot reach 95%: its widest interval is their range, which holds the
  true value with probability 1 - 2 * 0.5^3 = 75% (tests/test_stats.py measures both coverages).
- 1 repeat ("blocks", marked * in the tables): within-run only, t over the mean ms/step of the run's synced blocks
  (kbench.instruments.timing: the window split into blocks that each end in a device sync). It cannot see run-to-run spread: on
  the project's synthetic model it holds a fresh process's true ms/step far less often than 95%. A record without
  synced blocks gets no interval ("none"): the step times of a step that returns device arrays are its dispatch
  cadence, and an interval from them means nothing.
- Two cells: different when their intervals do not overlap. That is a strict test, and a weak one: with 3 repeats a
  side at 4% run-to-run spread it calls about 0.5% of equal pairs different and finds a true 10% difference about
  15% of the time (Welch's t-test at p < 0.05: 5% and about 50%; tests/test_stats.py). Overlapping intervals are
  "not shown to differ", never "equal". Where both sides have 2 or more repeats the tables give Welch's verdict
  beside it, its p-values adjusted over the table (Benjamini-Hochberg), as compare does between runs.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def _scipy_stats():
    """scipy.stats, imported where a statistic needs it: the Snakefile imports this module through kbench.results.registry
    at every start, and scipy costs about 1.5 s of CPU to import."""
    from scipy import stats
    return stats


CONFIDENCE = 0.95
SIGNIFICANCE = 0.05
METHODS = ("repeats", "blocks", "none")
ONE_RUN = "*"                  # a verdict or interval from one repeat: within-run only
NOT_SHOWN = "not shown to differ"      # overlapping intervals: no difference shown, not "equal"


@dataclass(frozen=True)
class Estimate:
    ms: float                  # mean of the repeats' means
    low: float | None          # the 95% interval (None: no interval, see the module docstring)
    high: float | None
    repeats: int
    method: str                # repeats | blocks | none
    means: tuple[float, ...] = ()      # the repeats' means (Welch's test reads them)

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    @property
    def one_run(self) -> bool:
        return self.method != "repeats"


def t_interval(values: list[float], centre: float | None = None) -> tuple[float, float]:
    """Student's t interval of the mean of `values` (around `centre` where given: an exact mean of unequal parts)."""
    n = len(values)
    centre = statistics.fmean(values) if centre is None else centre
    half = _scipy_stats().t.ppf((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return centre - half, centre + half


def estimate(repeat_means: list[float], repeat_blocks: list[list[float] | None]) -> Estimate:
    """repeat_means: each repeat's mean ms/step; repeat_blocks: each repeat's per-block mean ms/step (synced blocks;
    None for a record without them), read only when there is one repeat."""
    if not repeat_means:
        raise ValueError("no repeats to estimate from")
    point = statistics.fmean(repeat_means)
    means = tuple(repeat_means)
    if len(repeat_means) >= 2:
        return Estimate(point, *t_interval(repeat_means), len(repeat_means), "repeats", means)
    blocks = repeat_blocks[0] if repeat_blocks else None
    if not blocks or len(blocks) < 2:
        return Estimate(point, None, None, 1, "none", means)
    return Estimate(point, *t_interval(blocks, point), 1, "blocks", means)


def separate(a: Estimate, b: Estimate) -> bool:
    """True when both have intervals and they do not overlap: one cell is faster beyond the uncertainty of both."""
    if a.low is None or b.low is None:
        return False
    return a.high < b.low or b.high < a.low


def welch_p(old: list[float], new: list[float]) -> float:
    """Two-sided p-value of Welch's t-test on two runs' repeat means (2 or more each)."""
    if statistics.pstdev(old) == statistics.pstdev(new) == 0:     # no spread at all: equal or certainly different
        return 1.0 if statistics.fmean(old) == statistics.fmean(new) else 0.0
    return float(_scipy_stats().ttest_ind(old, new, equal_var=False).pvalue)


def testable(a: Estimate, b: Estimate) -> bool:
    """Welch's test needs 2 or more repeats on both sides."""
    return a.repeats >= 2 and b.repeats >= 2


def adjusted(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q) of tests made together: q < 0.05 keeps the expected share of false
    changes among those reported at 5%, however many cells are tested."""
    if not p_values:
        return []
    return [float(q) for q in _scipy_stats().false_discovery_control(p_values, method="bh")]


def interval_verdict(a: Estimate, b: Estimate, different: str) -> str:
    """The intervals' verdict between two cells: `different`, "not shown to differ", or "no interval"; marked * when
    either side is one repeat (within-run only)."""
    if a.low is None or b.low is None:
        return "no interval"
    text = different if separate(a, b) else NOT_SHOWN
    return text + (ONE_RUN if a.one_run or b.one_run else "")

