import statistics

import numpy as np
import pytest

from kbench.instruments import timing


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


def test_warmup_steps_are_synced_and_excluded_and_the_window_is_synced_at_its_ends():
    clock = FakeClock([5.0, 0.010, 0.020, 0.030])
    times = timing.measure(clock.step, clock.sync, warmup=1, timed=3, clock=clock)
    assert times.warmup_ms == [5000.0]
    assert times.step_ms == pytest.approx([10.0, 20.0, 30.0])
    assert times.window_ms == pytest.approx(60.0)
    assert clock.events == [("sync", None), "step", ("sync", "out"), "step", "step", "step", ("sync", "out")]


class AsyncDevice(FakeClock):
    """Steps return at once (queued); the device needs `work` seconds for each, drained by sync."""
    def __init__(self, work_s, n):
        super().__init__([0.0001] * n)
        self.work, self.queued = work_s, 0

    def step(self):
        self.queued += 1
        return super().step()

    def sync(self, out):
        super().sync(out)
        self.now += self.queued * self.work
        self.queued = 0


def test_queued_device_work_is_inside_the_window_and_its_last_step():
    device = AsyncDevice(work_s=0.010, n=6)
    times = timing.measure(device.step, device.sync, warmup=1, timed=5, clock=device)
    assert times.warmup_ms == pytest.approx([10.1])
    assert times.window_ms == pytest.approx(5 * 10.0 + 5 * 0.1)
    assert sum(times.step_ms) == pytest.approx(times.window_ms)
    assert times.step_ms[-1] == pytest.approx(50.1)      # the drain lands on the last step
    assert times.summary()["mean_ms"] == pytest.approx(10.1)


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


def test_first_and_last_timed_outputs_are_kept_not_the_warmup_ones():
    outputs = iter(["warmup", "first", "middle", "last"])
    times = timing.measure(lambda: next(outputs), lambda out: None, warmup=1, timed=3)
    assert (times.first_output, times.last_output) == ("first", "last")


def test_the_first_output_is_kept_through_keep_before_later_steps_overwrite_it():
    buffer = np.zeros(1)
    values = iter([9.0, 1.0, 2.0, 3.0])

    def step():
        buffer[0] = next(values)
        return buffer
    times = timing.measure(step, lambda out: None, warmup=1, timed=3, keep=np.copy)
    assert times.first_output[0] == 1.0 and times.last_output[0] == 3.0


def test_the_window_is_split_into_blocks_each_closed_by_a_device_sync():
    clock = FakeClock([5.0] + [0.010] * 4)
    times = timing.measure(clock.step, clock.sync, warmup=1, timed=4, clock=clock, blocks=2)
    assert clock.events == [("sync", None), "step", ("sync", "out"), "step", "step", ("sync", "out"), "step",
                            "step", ("sync", "out")]
    assert times.block_steps == [2, 2] and times.block_ms == pytest.approx([20.0, 20.0])
    assert sum(times.block_ms) == pytest.approx(times.window_ms) == pytest.approx(sum(times.step_ms))


def test_each_synced_block_holds_the_device_work_of_its_own_steps_whatever_the_dispatch_times():
    """Steps that only queue work return at once: their step_ms are dispatch times and the drain lands on the last
    step of each block; the synced blocks still measure each block's device time."""
    device = AsyncDevice(work_s=0.010, n=11)
    times = timing.measure(device.step, device.sync, warmup=1, timed=10, clock=device, blocks=5)
    assert times.block_steps == [2] * 5
    assert times.block_ms == pytest.approx([2 * 10.1] * 5)
    assert times.step_ms[0] == pytest.approx(0.1) and times.step_ms[1] == pytest.approx(20.1)


@pytest.mark.parametrize("timed, blocks, sizes", [(20, 10, [2] * 10), (7, 10, [1] * 7), (10, 3, [3, 4, 3]),
                                                  (100, 10, [10] * 10), (5, 1, [5])])
def test_blocks_cover_every_timed_step_once(timed, blocks, sizes):
    clock = FakeClock([0.0] + [0.001] * timed)
    times = timing.measure(clock.step, clock.sync, warmup=1, timed=timed, clock=clock, blocks=blocks)
    assert times.block_steps == sizes and sum(times.block_steps) == timed


def test_the_window_hooks_run_just_outside_the_window():
    clock = FakeClock([5.0] + [0.010] * 4)
    phases = []

    def on_window(phase):
        phases.append((phase, len([e for e in clock.events if e == "step"])))
        clock.now += 1.0                   # slow hooks must not count as step time
    times = timing.measure(clock.step, clock.sync, warmup=1, timed=4, clock=clock, blocks=2, on_window=on_window)
    assert phases == [("start", 1), ("end", 5)]
    assert times.window_ms == pytest.approx(40.0)
