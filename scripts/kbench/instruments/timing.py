"""The one place that times steps, for every framework.

The timed window is bracketed by device syncs (the anchor had none), so it holds all the device work of exactly the
`timed` steps, and mean ms/step = window / timed. The window is split into `blocks` runs of consecutive steps, each
closed by a device sync (10 syncs over the paper's 100 steps): block_ms[j] is the device time of block j, the
within-run sample kbench.results.stats draws an interval from. Inside a block nothing extra syncs, so a framework's own async
dispatch overlaps steps as in any training loop. step_ms[i] is the host-observed time from the return of step i-1 to
the return of step i; the entries add up to the window exactly, the last step of each block carrying the drain of
its queued work. Where a step returns host data (train_on_batch, generate) that is its device time; where it returns
device arrays it is the dispatch cadence, which no statistic here is drawn from. The first `warmup` steps carry compilation and autotuning: each is synced on its own, reported as
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
    block_ms: list[float]       # each synced block of consecutive steps, sync to sync; sums to window_ms
    block_steps: list[int]      # how many steps each block holds
    first_output: Any = None    # what the first and the last timed step returned
    last_output: Any = None

    def summary(self) -> dict[str, float]:
        return summarize(self.step_ms)


def block_sizes(timed: int, blocks: int) -> list[int]:
    """`blocks` runs of consecutive steps as equal as can be (fewer where there are fewer steps)."""
    blocks = max(1, min(blocks, timed))
    edges = [round(i * timed / blocks) for i in range(blocks + 1)]
    return [b - a for a, b in zip(edges, edges[1:])]


def measure(step: Callable[[], Any], sync: Callable[[Any], None], warmup: int, timed: int,
            clock: Callable[[], float] = time.perf_counter, keep: Callable[[Any], Any] = lambda out: out,
            blocks: int = 1, on_window: Callable[[str], None] = lambda phase: None,
            on_warmup_step: Callable[[int, float], None] = lambda done, ms: None) -> StepTimes:
    """keep(output) is what survives of the first timed step's output until the window closes: a copy where later
    steps reuse its memory (CUDA-graph replays); the last output is read right after the closing sync.
    on_window("start") runs after the warm-up's last sync, just before the window opens, and on_window("end")
    right after it closed (the energy counter, compile counters): never inside it. on_warmup_step(done, ms) after each
    warm-up step's sync (the cell's log says how far it is; nothing is said inside the window)."""
    if warmup < 0 or timed < 1:
        raise ValueError(f"steps: warmup must be >= 0 and timed >= 1, got warmup={warmup} timed={timed}")
    sync(None)                                  # nothing queued from model building leaks into step 1
    warmup_ms = []
    for _ in range(warmup):
        start = clock()
        sync(step())
        warmup_ms.append((clock() - start) * 1e3)
        on_warmup_step(len(warmup_ms), warmup_ms[-1])

    sizes = block_sizes(timed, blocks)
    on_window("start")
    marks = [clock()]
    block_marks = [marks[0]]
    first = None
    for size in sizes:
        for _ in range(size):
            out = step()
            marks.append(clock())
            if first is None:
                first = (keep(out),)
        sync(out)
        marks[-1] = clock()                     # a block ends when the device has finished its steps
        block_marks.append(marks[-1])
    on_window("end")
    step_ms = [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]
    return StepTimes(warmup_ms=warmup_ms, step_ms=step_ms, window_ms=(marks[-1] - marks[0]) * 1e3,
                     block_ms=[(b - a) * 1e3 for a, b in zip(block_marks, block_marks[1:])], block_steps=sizes,
                     first_output=first[0], last_output=out)


def busy_ms(intervals: list[tuple[float, float]]) -> float:
    """How long the device did anything: the union of its activities' (start_ms, end_ms), overlaps counted once
    (kernels on several streams run at once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass
class Profiled:
    """What a device profiler saw of the steps it recorded: every device activity's (start_ms, end_ms), and why it
    stopped collecting early where it did (Kineto stops at its CUPTI buffer limit without raising: its list is then
    short of the steps), else None."""
    intervals: list[tuple[float, float]]
    stopped: str | None = None


class ProfiledSteps:
    """The two calls a profiler wraps after the timed window: warm() (one synced step, whose activities the profiler
    discards) and run() (`steps` steps synced at both ends, its wall time kept in wall_ms). run(mark): each step
    inside mark() (the profiler's annotation, kbench.breakdown.trace.STEP_MARKER) and synced at its end, so that a
    step's work lies inside its mark: the breakdown's figures per step."""

    def __init__(self, step: Callable[[], Any], sync: Callable[[Any], None], steps: int,
                 clock: Callable[[], float] = time.perf_counter):
        self.step, self.sync, self.steps, self.clock = step, sync, steps, clock
        self.warmed, self.wall_ms = 0, []

    def warm(self) -> None:
        self.sync(None)
        self.sync(self.step())
        self.warmed += 1

    def run(self, mark: Callable[[], Any] | None = None) -> None:
        self.sync(None)
        start, out = self.clock(), None
        for _ in range(self.steps):
            if mark is None:
                out = self.step()
                continue
            with mark():
                out = self.step()
                self.sync(out)
        self.sync(out)
        self.wall_ms.append((self.clock() - start) * 1e3)


def device_busy(step: Callable[[], Any], sync: Callable[[Any], None], steps: int,
                activities: Callable[[Callable[[], None], Callable[[], None]], Profiled], window_ms_per_step: float,
                clock: Callable[[], float] = time.perf_counter) -> dict:
    """The share of a step the device is busy: the device-busy time per step of `steps` more steps, run after the
    window under the framework's device profiler (the union of their activities: kbench.instruments.timing.busy_ms), over the
    timed window's own ms/step, which no profiler touched. activities(warm, run) runs warm() (one synced step) and
    then run() (the `steps`) under the profiler, discards warm's activities (the profiler's start-up, a first profiled
    launch) and returns run's as a Profiled.

    The profiled steps' own ms/step is kept beside it (profiler_overhead: profiled over unprofiled ms/step): the
    profiler lengthens the host's part of a step, and unevenly (torch.compile's Inductor wraps every Triton launch in
    a profiler record while profiling), so a share over the profiled wall would read compiled columns less busy than
    eager ones. The kernels' own durations are the device's either way. The share is capped at 1 (the
    profiler's clock is not the window's). None, with the reason, where the profiler stopped collecting early or
    recorded nothing: never 0.0, which would read as a measured idle device."""
    calls = ProfiledSteps(step, sync, steps, clock)
    found = activities(calls.warm, calls.run)
    if calls.warmed != 1 or len(calls.wall_ms) != 1:
        raise RuntimeError(f"the device profiler ran {calls.warmed} warm-up and {len(calls.wall_ms)} measured runs, "
                           "not 1 and 1")
    wall = calls.wall_ms
    busy = busy_ms(found.intervals)
    profiled = wall[0] / steps
    record = {"steps": steps, "warm_steps": 1, "busy_ms": busy, "busy_ms_per_step": busy / steps,
              "window_ms_per_step": window_ms_per_step, "profiled_ms_per_step": profiled,
              "profiler_overhead": profiled / window_ms_per_step if window_ms_per_step > 0 else None,
              "activities": len(found.intervals)}
    if found.stopped:
        return {**record, "share": None, "reason": f"the device profiler stopped collecting early: {found.stopped}"}
    if not found.intervals:
        return {**record, "share": None,
                "reason": f"the device profiler recorded no device activity in {steps} profiled steps"}
    if window_ms_per_step <= 0:
        return {**record, "share": None, "reason": "the timed window measured no time per step"}
    return {**record, "share": min(1.0, busy / steps / window_ms_per_step)}


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


def steady_step(warmup_ms: list[float], block_ms: list[float], block_steps: list[int], band: float = 0.1,
                run: int = 2) -> dict:
    """Where a cell's ms/step enters its steady band: the steps in order, each warm-up step (synced on its own) and
    each synced block of the window (its mean standing for its steps), against the window's steady level, the median
    block mean. The band is that level +- `band` of it, or +- 3 scaled MADs of the block means where they spread
    wider. The steady step is the first (1-based, the first warm-up step is 1) from which `run` points in a row lie in
    the band (fewer where fewer are left); None where no point does. A compile in the first step puts it at 2; an
    autotuner or a cache warming over several steps later."""
    means = [ms / steps for ms, steps in zip(block_ms, block_steps)]
    if not means:
        return {"steady_at_step": None, "band_ms": None}
    level = statistics.median(means)
    mad = statistics.median(abs(m - level) for m in means)
    half = max(band * level, 3 * 1.4826 * mad)
    low, high = level - half, level + half
    points = [(i + 1, ms) for i, ms in enumerate(warmup_ms)]
    first = len(warmup_ms) + 1
    for mean, steps in zip(means, block_steps):
        points.append((first, mean))
        first += steps
    inside = [low <= ms <= high for _, ms in points]
    for i in range(len(points)):
        if all(inside[i:i + run]):
            return {"steady_at_step": points[i][0], "band_ms": [low, high]}
    return {"steady_at_step": None, "band_ms": [low, high]}
