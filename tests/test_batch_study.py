"""The batch study: the cost model recovers a known fixed cost and per-example cost (and its knee), the claim's verdict
reads each case right, the ladders' bad input is one line, and a rung above an oom rung is not run."""
import copy
import dataclasses
import random

import pandas as pd
import pytest

from kbench.contract import cell
from kbench.plan import config_check, matrix
from kbench.results import batch, stats
from kbench.run import launch, runner
from kbench.results import flat

from conftest import CONFIG, REPO
from dag import plan

A, C, FULL, KNEE = 4.0, 0.25, 32, 64   # ms, ms per example, the device full from batch 32, the first rung off the line
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def true_ms(b: int) -> float:
    """A step's time: a + c x b while the device has room; past batch FULL each further example costs 4 x as much."""
    return A + C * b + 3 * C * max(0, b - FULL)


def rung(b: int, ms: float, relative_half_width: float) -> batch.Rung:
    half = relative_half_width * ms
    return batch.Rung(b, stats.Estimate(ms, ms - half, ms + half, 1, "blocks", (ms,)))


def measured(seed: int = 3, spread: float = 0.01) -> list[batch.Rung]:
    """Each rung measured with noise of `spread` (relative) and an interval of 2 x spread, as the tables give it."""
    rng = random.Random(seed)
    return [rung(b, true_ms(b) * (1 + rng.gauss(0, spread)), 2 * spread) for b in BATCHES]


def test_the_fit_recovers_a_known_fixed_cost_and_cost_per_example_within_their_intervals():
    for seed in range(5):
        found = batch.fit(measured(seed), tolerance=0.10)
        assert found.a_low <= A <= found.a_high, (seed, found)
        assert found.c_low <= C <= found.c_high, (seed, found)
        assert found.knee == KNEE and found.rungs == BATCHES.index(KNEE)
        assert found.throughput_at_knee == pytest.approx(32 * 1e3 / true_ms(32), rel=0.05)


def test_an_unweighted_fit_through_the_knee_misses_what_the_study_recovers():
    """What the fit must not be: every rung weighted alike, through the knee: its a and c leave the true ones."""
    rungs = measured()
    (a, c), _, _ = batch.line([r.batch for r in rungs], [r.estimate.ms for r in rungs], [1.0] * len(rungs))
    found = batch.fit(rungs, tolerance=0.10)
    assert not found.a_low <= a <= found.a_high and not found.c_low <= c <= found.c_high
    assert abs(a - A) > 5 * abs(found.a - A)


def test_the_fit_weights_each_rung_by_its_interval():
    """One imprecise rung far off the line moves a weighted fit little; the line still holds within its interval."""
    rungs = [rung(b, true_ms(b), 0.005) for b in BATCHES[:6]]
    rungs[2] = rung(4, true_ms(4) * 1.3, 0.40)
    found = batch.fit(rungs, tolerance=0.10)
    assert found.a == pytest.approx(A, rel=0.02) and found.c == pytest.approx(C, rel=0.02)


def test_no_fit_from_fewer_than_three_rungs_with_intervals():
    rungs = [rung(b, true_ms(b), 0.01) for b in (1, 2)]
    assert batch.fit(rungs, 0.1) is None
    no_interval = batch.Rung(4, stats.Estimate(true_ms(4), None, None, 1, "none", (1.0,)))
    assert batch.fit(rungs + [no_interval, rung(8, true_ms(8), 0.01)], 0.1) is None


def repeats_rung(b: int, ms: float, spread: float, n: int) -> batch.Rung:
    """A rung of n repeats whose means lie symmetrically around ms (their mean is ms), as stats.estimate makes it."""
    offsets = [spread * (2 * i / (n - 1) - 1) for i in range(n)]
    return batch.Rung(b, stats.estimate([ms * (1 + o) for o in offsets], [None] * n))


def wls_halves(rungs: list[batch.Rung], sigmas: list[float], scaled: bool) -> tuple[float, float]:
    """The 95% half-widths of a and c from scipy's curve_fit: absolute sigmas, or scaled by the reduced chi-square."""
    from scipy import optimize
    from scipy import stats as scipy_stats
    x, y = [r.batch for r in rungs], [r.estimate.ms for r in rungs]
    _, covariance = optimize.curve_fit(lambda b, a, c: a + c * b, x, y, p0=(1.0, 0.1), sigma=sigmas,
                                       absolute_sigma=not scaled)
    t = scipy_stats.t.ppf(0.975, len(rungs) - 2)
    return t * covariance[0, 0] ** 0.5, t * covariance[1, 1] ** 0.5


def test_a_rung_of_several_repeats_is_weighted_by_its_repeats_standard_error_and_one_repeat_by_the_normal_quantile():
    """A repeats interval is mean +- t(n - 1) s / sqrt(n): its sigma is s / sqrt(n) whatever n, and the fit's
    intervals are the ones those sigmas give. Ladders of 2, 3 and 5 repeats: a t on the wrong degrees of freedom
    is off by a different factor at each."""
    import statistics

    from scipy import stats as scipy_stats
    for n in (2, 3, 5):
        rungs = [repeats_rung(b, true_ms(b), 0.04, n) for b in BATCHES[:5]]
        expected = [statistics.stdev(r.estimate.means) / n ** 0.5 for r in rungs]
        assert [r.estimate.method for r in rungs] == ["repeats"] * 5
        assert [r.sigma for r in rungs] == pytest.approx(expected, rel=1e-9), n
        found = batch.fit(rungs, tolerance=0.10)
        assert found.rungs == 5 and found.chi2_per_dof < 1          # on the line: the intervals are not scaled
        half_a, half_c = wls_halves(rungs, expected, scaled=False)
        assert found.a_high - found.a == pytest.approx(half_a, rel=1e-4), n
        assert found.c_high - found.c == pytest.approx(half_c, rel=1e-4), n
    # one repeat: its interval's blocks are not counted in the estimate, so the normal quantile (1.96, rounded)
    one = rung(8, true_ms(8), 0.02)
    assert one.estimate.method == "blocks"
    assert one.sigma == pytest.approx(0.02 * true_ms(8) / scipy_stats.norm.ppf(0.975), rel=1e-4)


@pytest.mark.parametrize("scatter, interval, over_dispersed", [
    (0.05, 0.005, True),      # rungs 5% off the line, intervals of 0.5%: the scatter is the uncertainty
    (0.001, 0.02, False),     # rungs well within their intervals: the intervals are not shrunk below their own
])
def test_the_fits_intervals_grow_by_the_root_of_the_reduced_chi_square_only_where_rungs_scatter_beyond_their_own(
        scatter, interval, over_dispersed):
    from scipy import stats as scipy_stats
    rungs = [rung(b, true_ms(b) * (1 + scatter * (-1) ** i), interval) for i, b in enumerate(BATCHES[:6])]
    sigmas = [interval * r.estimate.ms / scipy_stats.norm.ppf(0.975) for r in rungs]
    found = batch.fit(rungs, tolerance=0.10)
    assert found.rungs == 6
    assert (found.chi2_per_dof > 1) is over_dispersed
    half_a, half_c = wls_halves(rungs, sigmas, scaled=over_dispersed)
    assert found.a_high - found.a == pytest.approx(half_a, rel=1e-4)
    assert found.c_high - found.c == pytest.approx(half_c, rel=1e-4)
    absolute_a, _ = wls_halves(rungs, sigmas, scaled=False)
    growth = found.chi2_per_dof ** 0.5 if over_dispersed else 1.0
    assert (found.a_high - found.a) / absolute_a == pytest.approx(growth, rel=1e-4)


def fitted(a, a_half, c=0.1):
    return batch.Fit(a, a - a_half, a + a_half, c, c * 0.9, c * 1.1, 4, None, None, 1.0)


@pytest.mark.parametrize("native_a, native_half, gaps, expected", [
    (10.0, 1.0, (3.0, 1.2), batch.HOLDS),           # native's fixed cost larger, gap shrinks
    (10.0, 1.0, (1.2, 1.5), batch.FAILS),           # larger, but the gap grows with the batch
    (1.0, 0.5, (3.0, 1.2), batch.FAILS),            # native's fixed cost shown smaller
    (2.5, 1.0, (3.0, 1.2), batch.NOT_SHOWN),        # intervals of a overlap
])
def test_the_claims_verdict(native_a, native_half, gaps, expected):
    assert batch.verdict(fitted(native_a, native_half), fitted(2.0, 0.3), *gaps) == expected
    assert batch.verdict(None, fitted(2.0, 0.3), *gaps) == batch.NOT_MEASURED


def summary_of(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["status"] = frame.get("status", "ok")
    frame["repeats"], frame["ci_method"], frame["repeat_means"] = 1, "blocks", "[]"
    frame["ci_low_ms"], frame["ci_high_ms"] = frame.estimate_ms * 0.98, frame.estimate_ms * 1.02
    return frame


def ladder_rows(framework: str, a: float, c: float) -> list[dict]:
    return [{"model": "bert", "task": "predict", "precision": "float32", "framework": framework, "batch_size": b,
             "estimate_ms": a + c * b} for b in (1, 4, 16, 64)]


def test_verdicts_on_a_cpu_are_marked_and_the_fastest_column_change_is_bracketed():
    summary = summary_of(ladder_rows("native-torch-eager", 8.0, 0.1) + ladder_rows("keras3-jax", 2.0, 0.25))
    fits = batch.fits(summary, 0.1)
    found = batch.verdicts(summary, fits, {("bert", "predict", "float32"): 64}, ["native-torch-eager"],
                           ["keras3-jax"], on_gpu=False)
    assert list(found.verdict) == ["holds (CPU: the pipeline's check)"]
    assert found.at[0, "best Keras 3"] == "keras3-jax"
    # native: 8.1, 8.4, 9.6, 14.4; keras: 2.25, 3, 6, 18: keras fastest up to 16, native from 64
    assert found.at[0, "fastest column changes"] == "keras3-jax -> native-torch-eager between bs 16 and bs 64"
    on_gpu = batch.verdicts(summary, fits, {("bert", "predict", "float32"): 64}, ["native-torch-eager"],
                            ["keras3-jax"], on_gpu=True)
    assert list(on_gpu.verdict) == ["holds"]


@pytest.mark.parametrize("interval, said", [
    (0.02, "a -> b between bs 1 and bs 64"),                          # 17.6..18.4 against 14.1..14.7
    (0.15, "a -> b between bs 1 and bs 64 (not shown to differ)"),    # 15.3..20.7 against 12.2..16.6
])
def test_a_change_of_the_fastest_column_is_shown_only_where_the_intervals_at_the_upper_rung_separate_them(
        interval, said):
    per_column = {"a": [rung(1, 2.0, 0.02), rung(64, 18.0, interval)],
                  "b": [rung(1, 8.0, 0.02), rung(64, 14.4, interval)]}
    assert batch.fastest_changes(per_column) == said


def test_an_out_of_memory_error_is_oom_in_every_frameworks_words():
    class OutOfMemoryError(RuntimeError):         # torch.OutOfMemoryError's name
        pass

    class XlaRuntimeError(RuntimeError):
        pass

    assert runner.out_of_memory(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert runner.out_of_memory(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert runner.out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert runner.out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    try:
        try:
            raise OutOfMemoryError("x")
        except OutOfMemoryError as inner:
            raise ValueError("Keras re-raised it") from inner
    except ValueError as outer:
        assert runner.out_of_memory(outer)
    assert not runner.out_of_memory(ValueError("shapes (2, 3) and (4, 5) do not align"))


def reraised_inside_except(inner: BaseException) -> BaseException:
    """What Keras does where it re-raises inside an `except` without `from`: the backend's error is the new one's
    __context__ only (implicit chaining; __cause__ is None)."""
    try:
        try:
            raise inner
        except type(inner):
            raise ValueError("Keras re-raised it")         # noqa: B904 (the implicit chaining is the point)
    except ValueError as outer:
        return outer


def test_an_oom_that_keras_reraises_without_from_is_still_oom_and_a_chain_without_one_is_not():
    """The chain is followed through __context__ as well as __cause__: an OutOfMemoryError re-raised implicitly is
    oom (the batch study's ladder stops there); the same chain around an error that is no OOM is not."""
    class OutOfMemoryError(RuntimeError):
        pass

    implicit = reraised_inside_except(OutOfMemoryError("x"))
    assert implicit.__cause__ is None and isinstance(implicit.__context__, OutOfMemoryError)
    assert runner.out_of_memory(implicit)
    unrelated = reraised_inside_except(KeyError("layer_norm"))
    assert unrelated.__cause__ is None and isinstance(unrelated.__context__, KeyError)
    assert not runner.out_of_memory(unrelated)


def test_an_oom_record_reads_oom_not_failed():
    spec = matrix.spec(CONFIG, "tiny", "bert", "fit", 64, "float32", "native-torch-eager", "strict")
    record = cell.new_result(spec, {}, "oom", cell.error_info("OutOfMemoryError", "CUDA out of memory"))
    assert record.text() == "oom: OutOfMemoryError" and flat.row(record)["status"] == "oom"


def test_a_rung_above_an_oom_rung_is_not_run_and_says_which_batch_did():
    spec = matrix.spec(CONFIG, "tiny", "bert", "fit", 64, "float32", "native-torch-eager", "strict")
    oom = cell.new_result(spec, {}, "oom", cell.error_info("OutOfMemoryError", "CUDA out of memory"))
    assert launch.ladder_stopped(oom) == cell.error_info(
        "LadderStopped", "not run: batch 64 already ran out of memory (OutOfMemoryError)")
    assert launch.ladder_stopped(cell.new_result(spec, {}, "failed", cell.error_info("RuntimeError", "x"))) is None
    assert launch.ladder_stopped(None) is None


# ---------------------------------------------------------------- the plan

def study_config(**ladder) -> dict:
    config = copy.deepcopy(CONFIG)
    config["suite"] = "tiny"
    config["batch_study"]["ladders"]["tiny"].update(ladder)
    return config


def test_the_tiny_ladder_plans_its_rungs_in_its_columns_and_chains_only_above_the_rows_own_batch():
    config = study_config(rows={"bert": {"precisions": ["float32"], "fit": [1, 32, 64, 128], "predict": [1, 256]}})
    cells = matrix.batch_cells(config)
    assert {c.framework for c in cells} == {"native-torch-eager", "native-torch-compiled", "keras3-jax"}
    assert sorted({(c.task, c.batch_size) for c in cells}) == [("fit", 1), ("fit", 32), ("fit", 64), ("fit", 128),
                                                               ("predict", 1), ("predict", 256)]
    by_batch = {(c.task, c.batch_size): c for c in cells if c.framework == "keras3-jax"}
    assert matrix.previous_rung(config, by_batch["fit", 1]) is None
    assert matrix.previous_rung(config, by_batch["fit", 32]) is None          # the row's own batch
    assert matrix.previous_rung(config, by_batch["fit", 64]).batch_size == 32
    assert matrix.previous_rung(config, by_batch["fit", 128]).batch_size == 64
    own = {c.cell_id for c in matrix.cells(config)}
    assert {c.cell_id for c in cells if c.batch_size in (32, 256)} <= own


@pytest.mark.parametrize("rungs, message", [
    ([1, 0, 4], "config key batch_study.ladders.tiny.rows.bert.fit[1]: 0 is not a batch size; allowed: integers from 1"),
    ([1, -2], "config key batch_study.ladders.tiny.rows.bert.fit[1]: -2 is not a batch size; allowed: integers from 1"),
    ([1, 2.5], "config key batch_study.ladders.tiny.rows.bert.fit[1]: 2.5 is not a batch size; allowed: integers from 1"),
    ([1, "8"], "config key batch_study.ladders.tiny.rows.bert.fit[1]: '8' is not a batch size; allowed: integers from 1"),
    ([1, 4, 4], "config key batch_study.ladders.tiny.rows.bert.fit[2]: batch 4 is listed twice; allowed: each batch size once"),
])
def test_a_bad_rung_is_one_line_naming_it(rungs, message):
    config = study_config(rows={"bert": {"precisions": ["float32"], "fit": rungs}})
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(config, REPO / "schemas" / "config.schema.yaml")
    assert str(error.value) == message


def test_the_ladder_runs_under_its_profiles_only_and_an_unknown_profile_is_one_line():
    config = study_config()
    config["profiles"] = ["strict", "tuned"]
    assert {c.profile for c in matrix.batch_cells(config)} == {"strict"}       # batch_study.profiles: [strict]
    config["batch_study"]["profiles"] = None
    assert {c.profile for c in matrix.batch_cells(config)} == {"strict", "tuned"}
    config["batch_study"]["profiles"] = ["strict", "tunned"]
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(config, REPO / "schemas" / "config.schema.yaml")
    assert str(error.value).startswith("config key batch_study.profiles[1] (see profile_defs): 'tunned' is not "
                                       "defined; allowed: anchor, strict, tuned")


@pytest.mark.parametrize("rows, message", [
    ({"bert": {"precisions": ["float32"], "generate": [1, 2]}},
     "config key batch_study.ladders.tiny.rows.bert (a task of bert, or precisions): 'generate' is not defined; allowed: fit, predict"),
    ({"bert": {"precisions": ["bfloat16"], "fit": [1, 2]}},
     "config key batch_study.ladders.tiny.rows.bert.precisions[0] (bert's precisions): 'bfloat16' is not defined; allowed: float32, mixed_bfloat16, mixed_float16, tf32"),
    ({"bart": {"precisions": ["float32"], "fit": [1, 2]}},
     "config key batch_study.ladders.tiny.rows (see model_defs): 'bart' is not defined; allowed: "),
])
def test_a_ladder_the_model_does_not_have_is_one_line(rows, message):
    config = study_config(rows=rows)
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(config, REPO / "schemas" / "config.schema.yaml")
    assert str(error.value).startswith(message)


@pytest.mark.workflow     # the workflow's plan, in process (12 s)
def test_a_planned_study_has_its_rungs_and_its_tables(tmp_path):
    """The real workflow, planned in process: the tiny suite's ladder cells and one study job per profile."""
    found = plan("-n", "--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "frameworks=[native-torch-eager,keras3-jax]",
                 "models=[bert]", "precisions=[float32]", cwd=REPO)
    assert found.ok, found.log[-2000:]
    cells = found.outputs("results/cells/tiny/strict/bert/")
    for task, b in (("fit", 1), ("fit", 4), ("fit", 16), ("predict", 1), ("predict", 16), ("predict", 64)):
        assert f"results/cells/tiny/strict/bert/{task}/bs{b}/float32/keras3-jax.r1.json" in cells
    assert not any("native-torch-compiled" in c for c in cells)        # a ladder column not selected: not run
    assert found.counts()["batch_study"] == 1


# ---------------------------------------------------------------- the device-busy share beside the fixed cost


def test_busy_time_is_the_union_of_the_devices_activities():
    # two streams overlapping (0-4 and 2-5 count as 0-5), a gap, then one copy inside a kernel (counted once)
    assert batch_busy([(0, 4), (2, 5), (7, 9), (7.5, 8)]) == pytest.approx(7.0)
    assert batch_busy([]) == 0.0


def batch_busy(intervals):
    from kbench.instruments import timing
    return timing.busy_ms(intervals)


class FakeProfiler:
    """A device profiler on a fake clock: its start-up costs `startup_ms` (in the warm step), each profiled step
    costs the device `busy_ms` of kernels and the host `host_ms`, plus `overhead_ms` of the profiler's own per-step
    cost; warm's activities are discarded (reported as torch's schedule does: run's only). stopped: it reports
    itself stopped; empty: it returns no activity."""

    def __init__(self, now, busy_ms=3.0, host_ms=1.0, overhead_ms=1.0, startup_ms=50.0, stopped=None, empty=False):
        self.now, self.busy_ms, self.host_ms, self.overhead_ms = now, busy_ms, host_ms, overhead_ms
        self.startup_ms, self.stopped, self.empty, self.profiling, self.calls = startup_ms, stopped, empty, False, []
        self.steps = 0

    def step(self):           # what a step costs, profiled or not
        self.steps += 1
        self.now[0] += (self.busy_ms + self.host_ms + (self.overhead_ms if self.profiling else 0)) / 1e3

    def __call__(self, warm, run):
        from kbench.instruments import timing
        self.profiling = True
        self.now[0] += self.startup_ms / 1e3
        warm()
        self.calls.append("warm")
        start = self.now[0] * 1e3
        run()
        self.calls.append("run")
        self.profiling = False
        per_step = self.busy_ms + self.host_ms + self.overhead_ms
        steps = round((self.now[0] * 1e3 - start) / per_step)
        intervals = [] if self.empty else [(start + per_step * i + self.host_ms + self.overhead_ms,
                                            start + per_step * (i + 1)) for i in range(steps)]
        return timing.Profiled(intervals, self.stopped)


def test_the_busy_share_is_busy_time_per_step_over_the_unprofiled_windows_ms_per_step():
    """Each step: 1 ms of host work, then a 3 ms kernel: 4 ms/step in the (unprofiled) window. Profiled, each step
    costs 1 ms more (the profiler's per-launch cost: Inductor's profiled launch path on torch), and its start-up 50 ms.
    The share is the kernels' 3 ms per step over the window's 4 ms/step (75%), not over the profiled 5 ms/step (60%,
    which would read a compiled column less busy than an eager one); the profiled ms/step is kept beside it as the
    profiler's overhead; one warm profiled step ran first, outside the profiled wall."""
    from kbench.instruments import timing
    now = [0.0]
    profiler = FakeProfiler(now)
    found = timing.device_busy(profiler.step, lambda out: None, 5, profiler, window_ms_per_step=4.0,
                               clock=lambda: now[0])
    assert profiler.calls == ["warm", "run"] and profiler.steps == 1 + 5
    assert found["profiled_ms_per_step"] == pytest.approx(5.0) and found["profiler_overhead"] == pytest.approx(1.25)
    assert found["busy_ms_per_step"] == pytest.approx(3.0) and found["window_ms_per_step"] == 4.0
    assert found["share"] == pytest.approx(0.75)
    assert found["activities"] == 5 and found["warm_steps"] == 1


@pytest.mark.parametrize("busy, share", [(20.5, 1.0), (19.5, 0.975)])
def test_the_busy_share_is_capped_at_one_where_the_profilers_activities_outlast_the_window(busy, share):
    """The profiler's clock is not the window's: activities it dates from before the first step, or a last copy it
    closes after the sync, can add up to more busy time per step than the window's 4 ms/step. The device was busy
    throughout, not 102.5% of it; just under, the share is the exact ratio."""
    from kbench.instruments import timing
    now = [0.0]

    def step():
        now[0] += 0.004

    def activities(warm, run):
        warm()
        start = now[0] * 1e3
        run()
        return timing.Profiled([(start - 0.5, start + 10), (start + 8, start + busy - 0.5)])   # overlapping: busy ms

    found = timing.device_busy(step, lambda out: None, 5, activities, 4.0, clock=lambda: now[0])
    assert found["busy_ms"] == pytest.approx(busy)
    assert found["share"] == pytest.approx(share)


@pytest.mark.parametrize("stopped, empty, reason", [
    ("Kineto stopped collecting device activities while the steps ran", False,
     "the device profiler stopped collecting early: Kineto stopped"),
    (None, True, "the device profiler recorded no device activity in 5 profiled steps")])
def test_a_profiler_that_stopped_early_or_saw_nothing_gives_no_share_never_zero(stopped, empty, reason):
    """Kineto stops at its CUPTI buffer limit without raising: its activities are then short of the steps, and a
    share from them would be too low. An empty list would read 0.0, a measured idle device. Both: no share, and why;
    the profiled ms/step is still kept."""
    from kbench.instruments import timing
    now = [0.0]
    profiler = FakeProfiler(now, stopped=stopped, empty=empty)
    found = timing.device_busy(profiler.step, lambda out: None, 5, profiler, 4.0, clock=lambda: now[0])
    assert found["share"] is None and found["reason"].startswith(reason)
    assert found["profiled_ms_per_step"] == pytest.approx(5.0)


class _Backend:
    name = "torch"

    def __init__(self, kind, activities):
        self.kind, self.activities = kind, activities

    def device(self):
        return {"kind": self.kind}


def test_a_cell_without_a_device_profiler_says_why_and_a_failing_profiler_never_fails_the_cell():
    spec = matrix.spec(CONFIG, "tiny", "bert", "fit", 32, "float32", "native-torch-eager")
    spec = spec.replace(steps=dataclasses.replace(spec.steps, timed=3))
    workload = type("W", (), {"step": staticmethod(lambda: None)})()
    on_cpu = runner.device_busy(spec, _Backend("cpu", None), workload, lambda out: None, 4.0)
    assert on_cpu["share"] is None and "a CPU step is host work throughout" in on_cpu["reason"]

    def broken(warm, run):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
    failed = runner.device_busy(spec, _Backend("gpu", broken), workload, lambda out: None, 4.0)
    assert failed["share"] is None and "CUPTI_ERROR_NOT_INITIALIZED" in failed["reason"]


def test_a_cells_busy_share_is_over_its_windows_ms_per_step_and_its_host_memory_is_read_before_profiling(
        tmp_path, monkeypatch):
    """In process, a synthetic cell whose backend has a (fake) device profiler: the share's denominator is the cell's
    own window (its timing's mean ms/step), and the host's peak memory is the one read before the profiler ran (a
    profiler imports its own modules and parses its events: an eager cell's memory would read inflated)."""
    from kbench import adapters
    from kbench.adapters import synthetic
    from kbench.stacks import lockcheck
    from test_launch import synthetic_spec
    profiled = []

    def activities(warm, run):
        from kbench.instruments import timing
        warm()
        run()
        profiled.append(True)
        return timing.Profiled([(0.0, 1.0)])

    class Profiling:
        MODELS, __name__ = synthetic.MODELS, "kbench.adapters.profiling"
        backend = staticmethod(lambda: dataclasses.replace(synthetic.backend(), activities=activities))
        prepare = staticmethod(synthetic.prepare)
    monkeypatch.setattr(adapters, "load", lambda name: Profiling)
    monkeypatch.setattr(runner, "peak_rss_bytes", lambda: (3 if profiled else 1) * 2**30)
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lockcheck.installed().items())))
    monkeypatch.setenv("KBENCH_LOCK", str(lock))
    result = runner.run(synthetic_spec(timed=4), {"runtime": "test"})
    assert result.status == "ok", result.error
    busy = result.timing["device_busy"]
    assert busy["window_ms_per_step"] == pytest.approx(result.timing["mean_ms"])
    assert busy["share"] == pytest.approx(min(1.0, 1.0 / 4 / result.timing["mean_ms"]))
    assert profiled and result.memory["peak_host_rss_bytes"] == 2**30


def test_the_study_table_shows_busy_shares_only_where_a_rung_measured_one():
    rows = ladder_rows("native-torch-eager", 8.0, 0.1) + ladder_rows("keras3-jax", 2.0, 0.25)
    for r in rows:
        r["device_busy_share"] = 0.25 if r["framework"] == "native-torch-eager" else None
        r["text"] = f"{r['estimate_ms']:.2f}"
    table = batch.study_table(summary_of(rows), ["native-torch-eager", "keras3-jax"])
    assert list(table["native-torch-eager device busy"]) == ["25%"] * 4
    assert list(table["keras3-jax device busy"]) == ["not measured"] * 4
    for r in rows:
        r["device_busy_share"] = None
    on_cpu = batch.study_table(summary_of(rows), ["native-torch-eager", "keras3-jax"])
    assert not [c for c in on_cpu.columns if "busy" in c]
