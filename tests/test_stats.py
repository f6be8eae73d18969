"""The interval method on synthetic runs of known spread: how often it holds the true ms/step (coverage), against the
bootstrap it was chosen over; ties and winners; Welch's verdict."""
import random
import statistics

import pytest

from kbench import stats

TRUE_MS, BETWEEN_RUNS, WITHIN_RUN, STEPS, TRIALS = 100.0, 4.0, 10.0, 100, 2000


def synthetic_repeat(rng):
    """One fresh process: its own offset (compile, allocator, clocks), then STEPS noisy steps around it."""
    offset = rng.gauss(0, BETWEEN_RUNS)
    steps = [TRUE_MS + offset + rng.gauss(0, WITHIN_RUN) for _ in range(STEPS)]
    return statistics.fmean(steps), steps


def coverage(repeats: int, interval) -> float:
    rng = random.Random(7)
    held = 0
    for _ in range(TRIALS):
        runs = [synthetic_repeat(rng) for _ in range(repeats)]
        low, high = interval([m for m, _ in runs], [s for _, s in runs], rng)
        held += low <= TRUE_MS <= high
    return held / TRIALS


def t_over_repeats(means, steps, rng):
    estimate = stats.estimate(means, steps)
    return estimate.low, estimate.high


def bootstrap_over_repeats(means, steps, rng, resamples=400):
    medians = sorted(statistics.median(rng.choices(means, k=len(means))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


@pytest.mark.parametrize("repeats", [3, 5])
def test_the_t_interval_over_repeats_covers_about_95_percent(repeats):
    assert 0.93 <= coverage(repeats, t_over_repeats) <= 0.97


def test_a_bootstrap_over_three_repeats_would_cover_far_less():
    """Why the t-interval: with 3 repeats a bootstrap's interval is at most their range (about 75% coverage)."""
    assert coverage(3, bootstrap_over_repeats) < 0.85


def test_one_repeat_gives_a_within_run_interval_from_step_blocks():
    rng = random.Random(3)
    steps = [TRUE_MS + rng.gauss(0, WITHIN_RUN) for _ in range(STEPS)]
    estimate = stats.estimate([statistics.fmean(steps)], [steps])
    assert estimate.method == "steps" and estimate.repeats == 1
    assert estimate.low < statistics.fmean(steps) < estimate.high and estimate.half_width < 5


def test_block_means_split_consecutive_steps():
    assert stats.block_means([1, 1, 2, 2, 3, 3], blocks=3) == [1, 2, 3]
    assert stats.block_means([5.0, 7.0], blocks=10) == [5.0, 7.0]


def test_intervals_that_overlap_are_a_tie_and_separated_ones_a_winner():
    a = stats.Estimate(10.0, 9.0, 11.0, 3, "repeats")
    assert not stats.separate(a, stats.Estimate(11.5, 10.5, 12.5, 3, "repeats"))
    assert stats.separate(a, stats.Estimate(13.0, 12.0, 14.0, 3, "repeats"))


def test_welch_finds_a_real_change_and_not_noise():
    assert stats.welch_p([10.0, 10.2, 9.9], [12.0, 12.1, 11.8]) < 0.05
    assert stats.welch_p([10.0, 11.0, 9.5], [10.4, 9.8, 10.9]) > 0.05
    assert stats.welch_p([10.0, 10.0], [10.0, 10.0]) == 1.0 and stats.welch_p([10.0, 10.0], [12.0, 12.0]) == 0.0
