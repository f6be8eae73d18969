import statistics

import numpy as np
import pytest

from kbench import timing


class FakeClock:
    """Each step advances time by the next duration; sync marks when the device finished."""
    def __init__(self, durations_s):
        self.now, self.durations, self.events = 0.0, list(durations_s), []

    def __call__(self):
        return self.now

    def step(self):
        self.events.append("step")
        self.now += self.durations.pop(0)
        return "out"

    def sync(self, out):
        self.events.append(("sync", out))


def test_warmup_is_excluded_and_every_step_is_synced():
    clock = FakeClock([5.0, 0.010, 0.020, 0.030])
    times = timing.measure(clock.step, clock.sync, warmup=1, timed=3, clock=clock)
    assert times.warmup_ms == [5000.0]
    assert times.step_ms == pytest.approx([10.0, 20.0, 30.0])
    assert times.window_ms == pytest.approx(60.0)
    assert clock.events == [("sync", None)] + ["step", ("sync", "out")] * 4


def test_mean_divides_by_exactly_the_timed_steps():
    clock = FakeClock([1.0] + [0.002] * 100)
    summary = timing.measure(clock.step, clock.sync, warmup=1, timed=100, clock=clock).summary()
    assert summary["n"] == 100
    assert summary["mean_ms"] == pytest.approx(2.0)


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(np.random.default_rng(0).random(37))])
def test_statistics_match_numpy(values):
    summary = timing.summarize(values)
    assert summary["mean_ms"] == pytest.approx(np.mean(values))
    assert summary["median_ms"] == pytest.approx(np.median(values))
    assert summary["p90_ms"] == pytest.approx(np.percentile(values, 90))
    assert summary["stdev_ms"] == pytest.approx(statistics.stdev(values) if len(values) > 1 else 0.0)


@pytest.mark.parametrize("warmup, timed", [(-1, 5), (1, 0)])
def test_bad_step_counts_are_refused(warmup, timed):
    with pytest.raises(ValueError, match="warmup"):
        timing.measure(lambda: None, lambda _: None, warmup, timed)
