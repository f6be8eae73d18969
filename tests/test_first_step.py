"""Time to the first useful step: the steady-state detector, the compile cache's key and its cold and warm runs
(the synthetic stack "compiles" into its persistent cache: kbench.adapters.synthetic.Compiler), the warm-differs flag,
the payback against the eager column, and the table a reader sees."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from kbench.contract import cell
from kbench.instruments import compile_cache, timing
from kbench.claims import studies
from kbench.claims.evidence import Evidence
from kbench.results import first_step_tables
from kbench.results.context import Records
from conftest import run_context
from kbench.run import launch
from kbench.contract.spec import CellSpec
from test_launch import driver_environment, synthetic_spec  # noqa: F401 (a fixture)

# ---------------------------------------------------------------- the steady-state detector


@pytest.mark.parametrize("warmup, blocks, expected", [
    ([30000.0, 101.0, 99.0], [100.0, 98.0, 101.0, 99.0, 100.0], 2),     # a compile in the first step: steady at 2
    ([30000.0, 400.0, 250.0], [100.0, 98.0, 101.0, 99.0, 100.0], 4),    # an autotuner warming over the warm-up
    ([100.0, 99.0, 101.0], [100.0, 98.0, 101.0, 99.0, 100.0], 1),      # an eager column: steady from the start
    ([30000.0, 100.0, 300.0], [100.0, 98.0, 101.0, 99.0, 100.0], 4),     # one slow step between: two in a row needed
])
def test_the_steady_step_is_where_two_points_in_a_row_enter_the_band(warmup, blocks, expected):
    found = timing.steady_step(warmup, [b * 4 for b in blocks], [4] * len(blocks), band=0.1)
    assert found["steady_at_step"] == expected
    low, high = found["band_ms"]
    assert low == pytest.approx(90.0) and high == pytest.approx(110.0)


@pytest.mark.parametrize("warmup, expected", [([125.0, 125.0], 1), ([125.0 + 1e-9, 125.0], 2),
                                               ([75.0, 75.0], 1), ([75.0 - 1e-9, 75.0], 2)])
def test_a_point_on_the_bands_edge_is_in_it(warmup, expected):
    """Level 100, band 25%: 75 and 125 are steady, a hair beyond is not (the band's edges belong to it)."""
    blocks = [100.0] * 5
    found = timing.steady_step(warmup, blocks, [1] * 5, band=0.25)
    assert found["band_ms"] == [75.0, 125.0] and found["steady_at_step"] == expected


def test_the_steady_level_is_the_median_block_not_the_last():
    """A window whose last block stalled (a 160 ms hiccup) is steady at its median, 100 ms: the warm-up's 100s are
    steady from the start; measured against the last block they never would be."""
    found = timing.steady_step([100.0, 100.0], [100.0, 100.0, 100.0, 100.0, 160.0], [1] * 5, band=0.1)
    assert found["steady_at_step"] == 1 and found["band_ms"] == pytest.approx([90.0, 110.0])


def test_the_steady_step_counts_a_block_as_its_first_step():
    """The window's blocks stand for their steps: a window that settles only in its second block is steady at the
    second block's first step (3 warm-up steps, blocks of 4: step 8)."""
    blocks = [200.0, 100.0, 101.0, 99.0, 100.0]
    found = timing.steady_step([30000.0, 300.0, 250.0], [b * 4 for b in blocks], [4] * 5, band=0.1)
    assert found["steady_at_step"] == 8


def test_a_window_that_never_settles_has_no_steady_step_inside_its_own_spread():
    """Where the blocks spread wider than the band, the band is 3 scaled MADs: a noisy window is not called
    unsteady, and a first step far outside it is still not steady."""
    blocks = [100.0, 160.0, 70.0, 130.0, 90.0]
    found = timing.steady_step([5000.0], blocks, [1] * 5, band=0.1)
    assert found["band_ms"][1] - found["band_ms"][0] > 0.2 * 100
    assert found["steady_at_step"] == 2
    assert timing.steady_step([], [], [], 0.1) == {"steady_at_step": None, "band_ms": None}


def test_no_point_in_the_band_means_no_steady_step():
    assert timing.steady_step([5000.0], [100.0, 100.0], [1, 1], band=0.1, run=3)["steady_at_step"] == 2
    assert timing.steady_step([5000.0, 4000.0], [100.0], [1], band=0.1, run=2)["steady_at_step"] == 3


# ---------------------------------------------------------------- the cache's key


def test_a_cache_is_refused_from_another_lock_another_image_another_device_or_a_failed_run():
    """JAX's and Inductor's own keys hold the device: a cache from another GPU model misses silently (the record
    saying warm), TensorFlow's can load code built for another architecture; so the device is the key's too."""
    h100 = compile_cache.device_key({"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1"})
    own = {"status": "ok", "lock_sha256": "sha256:a", "image_id": "img1", "device": h100}
    assert compile_cache.refusal(dict(own), own) is None
    assert "another lock" in compile_cache.refusal({**own, "lock_sha256": "sha256:b"}, own)
    assert "another image" in compile_cache.refusal({**own, "image_id": "img2"}, own)
    assert "ended failed" in compile_cache.refusal({**own, "status": "failed"}, own)
    for other in ({"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-2"}, {"name": "NVIDIA A100-SXM4-40GB"},
                  {"name": "NVIDIA H100 80GB HBM3", "uuid": "MIG-3"}, None):
        found = compile_cache.refusal({**own, "device": compile_cache.device_key(other)}, own)
        assert found and found.startswith("its source ran on another device ("), (other, found)
    assert compile_cache.refusal({**own, "device": compile_cache.device_key({"name": "NVIDIA H100 80GB HBM3",
                                                                             "uuid": "GPU-9"})}, own) is None
    assert "not known" in compile_cache.refusal({k: v for k, v in own.items() if k != "device"}, own)
    assert "not known" in compile_cache.refusal({**own, "device": compile_cache.device_key({})},
                                                {**own, "device": compile_cache.device_key({})})
    assert compile_cache.device_key(None).startswith("cpu: ")


def test_each_compiled_framework_has_its_cache_and_an_uncompiled_cell_none():
    def spec(adapter, jit, env=None):
        return CellSpec.from_dict({**synthetic_spec().to_dict(), "framework_def": {"stack": "s", "adapter": adapter,
                                                                                   "env": env or {}, "jit_compile": jit},
                                   "env": env or {}, "settings": {"tf32": "off", "warmup": 1, "jit_compile": jit}})
    assert compile_cache.has_cache(spec("native_torch", True))
    assert not compile_cache.has_cache(spec("native_torch", False))
    assert compile_cache.why_none(spec("native_torch", False)) == "not compiled"
    assert not compile_cache.has_cache(spec("paddle", True))
    assert "Paddle has no persistent cache" in compile_cache.why_none(spec("paddle", True))
    jax = spec("keras3", True, {"KERAS_BACKEND": "jax"})
    assert compile_cache.env(jax.framework_def, jax.env, "/c")["JAX_COMPILATION_CACHE_DIR"] == "/c"
    tf = spec("keras3", True, {"KERAS_BACKEND": "tensorflow", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2"})
    assert compile_cache.env(tf.framework_def, tf.env, "/c")["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/c")
    assert compile_cache.beside("x/keras3-jax.r1.json") == Path("x/keras3-jax.r1.cache")


# ---------------------------------------------------------------- cold and warm, for real (the synthetic stack)


def compiled_spec(**options) -> CellSpec:
    spec = synthetic_spec(timed=10, compile_ms=600, **options)
    return spec.replace(settings={**spec.settings, "jit_compile": True},
                        framework_def={**spec.framework_def, "jit_compile": True})


def run(tmp_path, environment, spec, name, cache_from):
    return launch.run_cell(spec, "host", environment, tmp_path / f"{name}.json", tmp_path / f"{name}.log",
                           launch.Options(timeout_s=60, cache_from=cache_from))


def test_a_cold_run_keeps_its_cache_and_its_warm_twin_starts_from_a_copy(tmp_path, driver_environment):
    spec = compiled_spec()
    cold = run(tmp_path, driver_environment, spec, "c.r1", ())
    assert cold.status == "ok", cold.error
    kept = tmp_path / "c.r1.cache"
    assert kept.is_dir() and compile_cache.entries(kept) == 1
    found = cold.first_step
    assert found["cache"]["state"] == "cold" and found["cache"]["entries_before"] == 0
    assert found["cache"]["cache_misses"] == 1 and found["cache"]["cache_hits"] == 0
    assert found["programs"] == 1 and found["recompiles"] == 0
    assert found["import_s"] >= 0 and found["build_s"] >= 0
    assert cold.timing["first_step_ms"] > 600                      # it compiled in its first step
    warm = run(tmp_path, driver_environment, spec, "c.r1.warm", (str(tmp_path / "c.r1.json"),))
    assert warm.status == "ok", warm.error
    cache = warm.first_step["cache"]
    assert cache["state"] == "warm" and cache["seeded_from"][0].endswith("/c.r1.json") and cache["entries_before"] == 1
    assert cache["cache_hits"] == 1 and cache["cache_misses"] == 0
    assert warm.timing["first_step_ms"] < 300                       # it loaded the program instead
    assert not (tmp_path / "c.r1.warm.cache").exists()              # a warm run's copy is not kept
    assert warm.provenance["compile_cache"]["state"] == "warm"


def test_a_warm_run_whose_source_ran_in_another_lock_runs_cold_and_says_why(tmp_path, driver_environment):
    spec = compiled_spec()
    run(tmp_path, driver_environment, spec, "c.r1", ())
    source = cell.read(tmp_path / "c.r1.json")
    source.provenance["environment"]["lock_sha256"] = "sha256:another"
    source.write(tmp_path / "c.r1.json")
    warm = run(tmp_path, driver_environment, spec, "c.r1.warm", (str(tmp_path / "c.r1.json"),))
    cache = warm.first_step["cache"]
    assert cache["state"] == "cold" and cache["cache_hits"] == 0 and cache["cache_misses"] == 1
    assert "another lock" in cache["refused"][0]
    assert warm.timing["first_step_ms"] > 600


def test_a_warm_run_whose_source_compiled_for_another_device_runs_cold_and_says_why(tmp_path, driver_environment):
    """The cold run's record says what its cache was built for (the launcher's device key: here this host's CPU);
    a source from an A100 does not seed a run here, whatever its lock and image."""
    spec = compiled_spec()
    cold = run(tmp_path, driver_environment, spec, "c.r1", ())
    assert cold.provenance["launcher"]["device"] == compile_cache.device_key(None)
    cold.provenance["launcher"]["device"] = compile_cache.device_key({"name": "NVIDIA A100-SXM4-80GB"})
    cold.write(tmp_path / "c.r1.json")
    warm = run(tmp_path, driver_environment, spec, "c.r1.warm", (str(tmp_path / "c.r1.json"),))
    cache = warm.first_step["cache"]
    assert cache["state"] == "cold" and cache["cache_misses"] == 1
    assert "another device (gpu: NVIDIA A100-SXM4-80GB here cpu: " in cache["refused"][0]


def test_a_source_that_kept_no_cache_folder_seeds_nothing(tmp_path, driver_environment):
    """A cold run that ended ok but whose cache folder is gone (deleted, or never written): refused, not copied."""
    import shutil
    spec = compiled_spec()
    cold = run(tmp_path, driver_environment, spec, "c.r1", ())
    shutil.rmtree(tmp_path / "c.r1.cache")
    (tmp_path / "staging").mkdir()
    found = launch.seed_cache(tmp_path / "staging", (str(tmp_path / "c.r1.json"),), cold.provenance["environment"],
                              cold.provenance["launcher"]["device"])
    assert found["state"] == "cold" and found["refused"][0].endswith(": it kept no cache"), found
    assert compile_cache.entries(tmp_path / "staging" / launch.CACHE_NAME) == 0


def test_a_cell_without_a_cache_records_none(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec(), "e.r1", None)
    assert result.status == "ok" and result.first_step["cache"] is None
    assert not (tmp_path / "e.r1.cache").exists()


# ---------------------------------------------------------------- the table


def record(framework, state, first_ms, mean_ms, blocks, import_s=1.0, build_s=0.5, jit=True, hits=None, probe_s=0.3):
    spec = synthetic_spec().to_dict()
    spec.update(framework=framework, cell_id=f"test/strict/synthetic/fit/bs4/float32/{framework}",
                model="synthetic", precision="float32")
    result = cell.new_result(spec, {"runtime": "host"}, "ok")
    result.timing = {"n": 20, "mean_ms": mean_ms, "first_step_ms": first_ms, "warmup_ms": [first_ms, mean_ms],
                     "block_ms": [b * 4 for b in blocks], "block_steps": [4] * len(blocks),
                     "step_ms": [mean_ms] * 20}
    result.first_step = {"import_s": import_s, "probe_s": probe_s, "build_s": build_s, "programs": 2 if jit else 0,
                         "recompiles": 0, "graph_breaks": 0,
                         "parts": {"reported_by": "x", "compile_s": first_ms / 1e3 * 0.9} if jit else None,
                         "cache": {"state": state, "cache_hits": hits, "cache_misses": 0} if jit else None}
    return result


STEADY = [100.0, 101.0, 99.0, 100.0, 100.0]


def test_a_warm_twin_whose_window_differs_beyond_both_intervals_is_flagged():
    cold = record("c", "cold", 30000.0, 100.0, STEADY)
    same = record("c", "warm", 3000.0, 100.4, [100.5, 100.0, 101.0, 100.2, 100.3], hits=2)
    slower = record("c", "warm", 3000.0, 130.0, [130.0, 131.0, 129.0, 130.0, 130.0], hits=2)
    assert not first_step_tables.warm_differs(cold, same, 0.1)
    assert first_step_tables.warm_differs(cold, slower, 0.1)
    assert not first_step_tables.warm_differs(cold, slower, 0.35)       # apart, but by less than the floor
    assert not first_step_tables.warm_differs(cold, record("c", "warm", 3000.0, 130.0, [100.0, 170.0, 90.0, 160.0,
                                                                                         130.0]), 0.1)  # overlapping
    long = first_step_tables.first_step_long([cold], [slower], 0.1, {})
    warm_line = long[long.state == "warm"].iloc[0]
    assert bool(warm_line[first_step_tables.WARM_DIFFERS])
    assert "warm window differs" in first_step_tables.cell_text(warm_line)
    assert "pays back" not in first_step_tables.cell_text(warm_line)      # no eager twin: nothing said


@pytest.mark.parametrize("state, hits, misses, before, after, flagged", [
    ("warm", 3, 0, 5, 5, None),                                     # loaded every program
    ("warm", 2, 1, 5, 6, "warm, yet 1 cache misses: it compiled anew"),   # JAX or Inductor compiled one anew
    ("warm", None, None, 5, 5, None),                               # TensorFlow: nothing added, all loaded
    ("warm", None, None, 5, 7, "warm, yet it added 2 cache entries: it compiled anew"),
    ("cold", None, None, 0, 3, None),
    ("cold", None, None, 0, 0, "cold, and it persisted nothing"),   # its warm twin can only start cold
])
def test_a_runs_cache_counters_that_contradict_its_state_are_flagged(state, hits, misses, before, after, flagged):
    entry = {"state": state, "cache_hits": hits, "cache_misses": misses, "cache_added": after - before}
    entry = pd.Series(entry, dtype=object).replace({None: float("nan")})
    assert first_step_tables.cache_missed(entry) == flagged


def test_the_compile_pays_back_after_its_extra_wait_over_the_time_it_saves_per_step():
    """Compiled: 1.8 s + 30 s to its first step at 60 ms/step; eager: 1.8 s + 0.2 s at 100 ms/step: 29.8 s more wait,
    40 ms saved a step: 745 steps. Warm (3 s first step): 2.8 s / 40 ms = 70 steps."""
    eager = record("eager", None, 200.0, 100.0, STEADY, jit=False)
    compiled = record("compiled", "cold", 30000.0, 60.0, [60.0] * 5)
    warm = record("compiled", "warm", 3000.0, 60.0, [60.0] * 5, hits=2)
    long = first_step_tables.first_step_long([eager, compiled], [warm], 0.1, {"compiled": "eager"})
    by = {(e.framework, e.state): e for e in long.itertuples()}
    assert by[("compiled", "cold")].pays_back_after_steps == "745"
    assert by[("compiled", "warm")].pays_back_after_steps == "70"
    assert pd.isna(by[("eager", "cold")].pays_back_after_steps)
    slower = record("compiled", "cold", 30000.0, 120.0, [120.0] * 5)
    long = first_step_tables.first_step_long([eager, slower], [], 0.1, {"compiled": "eager"})
    assert long[long.framework == "compiled"].iloc[0].pays_back_after_steps == "never (not faster)"
    # exactly as fast: never pays back (and no division by a zero saving)
    same = record("compiled", "cold", 30000.0, 100.0, [100.0] * 5)
    long = first_step_tables.first_step_long([eager, same], [], 0.1, {"compiled": "eager"})
    assert long[long.framework == "compiled"].iloc[0].pays_back_after_steps == "never (not faster)"
    # 29.8 s over 70 ms saved: 425.7 steps, paid back after the 426th, not the 425th
    faster = record("compiled", "cold", 30000.0, 30.0, [30.0] * 5)
    long = first_step_tables.first_step_long([eager, faster], [], 0.1, {"compiled": "eager"})
    assert long[long.framework == "compiled"].iloc[0].pays_back_after_steps == "426"


def test_the_table_shows_cold_and_warm_with_their_parts(tmp_path):
    cold = record("c", "cold", 30000.0, 100.0, STEADY)
    warm = record("c", "warm", 3000.0, 100.0, STEADY, hits=2)
    settings = {"steady_band": 0.1, "eager_twin": {}, "warm_differs_by": 0.1, "warm_runs": True, "warm_cells": []}
    long = first_step_tables.build(Records(cells=(cold,), warm=(warm,)),
                                   run_context(tmp_path, "t", tmp_path, frameworks=("c",), first_step=settings))
    assert list(long.state) == ["cold", "warm"]
    assert long.iloc[0].to_first_step_s == pytest.approx(31.8)
    text = (tmp_path / "t" / "first_step.md").read_text()
    assert "cold 31.8 s (import 1.0, libraries 0.3, build 0.5, first step 30.0: compile 27.0)" in text
    assert "warm 4.8 s" in text and "2 cache hits" in text and "steady at step 2" in text
    assert (tmp_path / "t" / "first_step.png").stat().st_size > 0


def test_the_parts_before_the_first_step_add_up_to_the_time_to_it_and_one_not_recorded_leaves_it_unknown():
    """Import, libraries' start-up (the numerics probe), build and the first step, each on its own side of the sum:
    1.0 + 2.5 + 0.5 + 30.0. A record without probe_s (made before the probe was a part) has no time to its first
    step: summed without it, it would stand beside records that count it as if it started faster."""
    counted = record("c", "cold", 30000.0, 100.0, STEADY, import_s=1.0, probe_s=2.5, build_s=0.5)
    entry = first_step_tables.first_step_long([counted], [], 0.1, {}).iloc[0]
    assert entry.to_first_step_s == pytest.approx(34.0)
    assert (entry.import_s, entry.probe_s, entry.build_s, entry.first_step_s) == (1.0, 2.5, 0.5, 30.0)
    assert first_step_tables.cell_text(entry).startswith(
        "34.0 s (import 1.0, libraries 2.5, build 0.5, first step 30.0: compile 27.0)")
    older = record("c", "cold", 30000.0, 100.0, STEADY)
    del older.first_step["probe_s"]
    entry = first_step_tables.first_step_long([older], [], 0.1, {}).iloc[0]
    assert pd.isna(entry.to_first_step_s) and pd.isna(entry.probe_s)
    assert first_step_tables.cell_text(entry).startswith("n/a (a part not recorded) (import 1.0, build 0.5, first")


class ProbeClock:
    """time as kbench.run.runner reads it, whose perf_counter a fake probe moves on (offset; real time besides)."""

    def __init__(self):
        import time
        self.time, self.offset = time, 0.0

    def perf_counter(self) -> float:
        return self.time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(self.time, name)


def test_the_numerics_probes_libraries_start_up_is_its_own_part_counted_in_the_time_to_the_first_step(
        driver_environment, monkeypatch):
    """In process, on a fake clock: the probe's float32 matmul takes 4 s and its convolution 3 s (on a GPU, cuBLAS's
    and cuDNN's handles; for JAX, its first XLA compile). Both land in probe_s, none in the import or the build, and
    the table's time to the first step counts them."""
    from kbench import adapters
    from kbench.adapters import synthetic
    from kbench.run import runner
    clock = ProbeClock()

    def slow(probe, seconds):
        def run(*arrays):
            clock.offset += seconds
            return probe(*arrays)
        return run

    class SlowStart:
        MODELS, __name__, prepare = synthetic.MODELS, "kbench.adapters.slow_start", staticmethod(synthetic.prepare)

        @staticmethod
        def backend():
            backend = synthetic.backend()
            return backend.__class__(**{**vars(backend), "matmul": slow(backend.matmul, 4.0),
                                        "conv": slow(backend.conv, 3.0)})
    monkeypatch.setattr(adapters, "load", lambda name: SlowStart)
    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setenv("KBENCH_LOCK", json.loads(driver_environment.read_text())["lock"])
    result = runner.run(synthetic_spec(), {"runtime": "test"})
    assert result.status == "ok", result.error
    found = result.first_step
    assert 7.0 <= found["probe_s"] < 8.0, found
    assert found["import_s"] < 1.0 and found["build_s"] < 1.0, found
    entry = first_step_tables.first_step_long([result], [], 0.1, {}).iloc[0]
    assert entry.to_first_step_s == pytest.approx(found["import_s"] + found["probe_s"] + found["build_s"]
                                                  + result.timing["first_step_ms"] / 1e3)
    assert entry.to_first_step_s >= 7.0


def test_a_compiled_cell_whose_framework_keeps_no_cache_says_why_it_has_no_warm_run():
    def compiled(framework, adapter, jit):
        result = record(framework, "cold", 30000.0, 100.0, STEADY, jit=jit)
        result.spec = result.spec.replace(framework_def={**result.spec.framework_def, "adapter": adapter},
                                          settings={**result.spec.settings, "jit_compile": jit})
        return result
    static = compiled("static", "paddle", True)        # compiles, but Paddle keeps nothing across processes
    dygraph = compiled("dygraph", "paddle", False)     # does not compile: nothing to say
    cached = compiled("cached", "synthetic", True)     # has a cache; its twin simply did not run
    shown = first_step_tables.wide(first_step_tables.first_step_long([static, dygraph, cached], [], 0.1, {}),
                                   ["static", "dygraph", "cached"]).iloc[0]
    assert shown["static"].endswith(f"| warm n/a: {compile_cache.NO_CACHE['paddle']}")
    assert "warm" not in shown["dygraph"] and "warm" not in shown["cached"]



def test_a_compiled_cell_left_out_of_first_step_warm_cells_says_why_and_a_chosen_one_does_not():
    cached = record("cached", "cold", 30000.0, 100.0, STEADY)
    cached.spec = cached.spec.replace(framework_def={**cached.spec.framework_def, "adapter": "synthetic"},
                                      settings={**cached.spec.settings, "jit_compile": True})
    eager = record("eager", None, 200.0, 100.0, STEADY, jit=False)
    other = "mixed_bfloat16" if cached.spec.precision != "mixed_bfloat16" else "float32"
    left_out = [{"precision": other, "reason": "the study's own precisions"}]
    shown = first_step_tables.wide(first_step_tables.first_step_long([cached, eager], [], 0.1, {}, warm_cells=left_out),
                                   ["cached", "eager"]).iloc[0]
    assert shown["cached"].endswith("| warm n/a: not in first_step.warm_cells: the study's own precisions")
    assert "warm" not in shown["eager"]                 # does not compile: nothing to say
    chosen = [{"precision": cached.spec.precision, "reason": "its own"}]
    shown = first_step_tables.wide(first_step_tables.first_step_long([cached], [], 0.1, {}, warm_cells=chosen),
                                   ["cached"]).iloc[0]
    assert "warm" not in shown["cached"]

def test_the_compile_cost_verdict_holds_within_the_steps_and_fails_beyond():
    """745 steps to pay back (cold) against the anchor's 100 timed steps: does not hold; 70 (warm) alone: holds."""
    eager = record("eager", None, 200.0, 100.0, STEADY, jit=False)
    compiled = record("compiled", "cold", 30000.0, 60.0, [60.0] * 5)
    warm = record("compiled", "warm", 3000.0, 60.0, [60.0] * 5, hits=2)
    claim = {"steps": 100, "quote": "q"}
    long = first_step_tables.first_step_long([eager, compiled], [warm], 0.1, {"compiled": "eager"})

    def pays_back_within(claim, long):
        evidence = Evidence.given(run_context(".", "strict"), {first_step_tables.LONG: long})
        return studies.pays_back_within(claim, evidence)
    verdict, rests_on = pays_back_within(claim, long)
    assert verdict == "does not hold" and "pays back after 745 steps" in rests_on and "after 70 steps" in rests_on
    verdict, _ = pays_back_within(claim, long[long.state == "warm"])
    assert verdict == "holds"
    verdict, _ = pays_back_within({**claim, "steps": 745}, long)
    assert verdict == "holds"                                   # exactly at the limit pays back within it
    verdict, why = pays_back_within(claim, first_step_tables.first_step_long([eager], [], 0.1, {}))
    assert verdict == "not measured here" and "eager_twin" in why


# ---------------------------------------------------------------- the plan: which runs start from which caches


def tiny_config(**first_step):
    from conftest import CONFIG
    return {**CONFIG, "accelerator": "cpu", "models": ["bert"], "precisions": ["float32"],
            "first_step": {**CONFIG["first_step"], **first_step}}


def test_warm_twins_are_the_compiled_cells_with_a_cache_and_the_patterns_narrow_them():
    from kbench.plan import matrix
    every = {(c.framework, c.task) for c in matrix.warm_cells(tiny_config(), "tiny")}
    assert every == {(f, t) for f in ("native-torch-compiled", "keras2", "keras3-tensorflow", "keras3-jax",
                                      "keras3-torch") for t in ("fit", "predict")}   # not eager, not Paddle's
    narrowed = tiny_config(warm_cells=[{"framework": "keras3-jax", "model": "bert", "task": "fit", "reason": "one"}])
    assert [(c.framework, c.task) for c in matrix.warm_cells(narrowed, "tiny")] == [("keras3-jax", "fit")]
    assert matrix.warm_cells(tiny_config(warm_runs=False), "tiny") == []


@pytest.mark.parametrize("precision, twinned", [("float32", True), ("bfloat16", True), ("mixed_bfloat16", False),
                                                ("mixed_float16", False)])
def test_a_precision_pattern_narrows_the_twins_and_the_others_say_why(precision, twinned):
    from kbench.plan import matrix
    config = tiny_config(warm_cells=[{"precision": "float32|bfloat16", "reason": "the study's own precisions"}])
    config["precisions"] = [precision]
    config["models"] = ["bert", "gemma"]
    found = matrix.warm_cells(config, "tiny")
    assert bool(found) == twinned and all(c.precision == precision for c in found)
    why = matrix.not_warm_because(config["first_step"]["warm_cells"], "keras3-jax", "bert", "fit", precision)
    assert (why is None) == twinned
    assert twinned or why == "not in first_step.warm_cells: the study's own precisions"


def test_a_precision_pattern_that_matches_no_precision_is_refused():
    from kbench.plan import matrix
    with pytest.raises(matrix.ConfigError, match=r"first_step.warm_cells\[0\].precision: 'fp32' matches nothing"):
        matrix.check_references(tiny_config(warm_cells=[{"precision": "fp32", "reason": "a typo"}]))


def test_repeat_one_is_cold_later_repeats_and_equivalence_jobs_start_from_its_cache():
    from kbench.plan import matrix
    config = tiny_config()
    jax = next(c for c in matrix.cells(config, "tiny") if c.framework == "keras3-jax" and c.task == "fit")
    eager = next(c for c in matrix.cells(config, "tiny") if c.framework == "native-torch-eager")
    assert matrix.cache_sources(config, jax, 1) == [] and matrix.cache_sources(config, jax, 2) == [1]
    assert matrix.cache_sources(config, eager, 2) is None
    assert matrix.cache_sources(tiny_config(reuse_caches=False), jax, 2) == []
    used = matrix.equivalence_cache_cells(config, "tiny", "strict", "bert", "keras3-jax")
    assert sorted(c.task for c in used) == ["fit", "predict"]
    assert matrix.equivalence_cache_cells(config, "tiny", "strict", "bert", "native-torch-eager") == []
    assert matrix.equivalence_cache_cells(tiny_config(reuse_caches=False), "tiny", "strict", "bert", "keras3-jax") == []


def test_the_first_steps_parts_are_what_the_framework_spent_within_it_not_since_its_import():
    """Keras traces functions as it builds a model: the first step's trace and compile are what was added after the
    build; hit and miss counts are those by the first step's end."""
    from types import SimpleNamespace
    from kbench.run.runner import FirstStep
    reports = iter([{"reported_by": "x", "trace_s": 3.0, "compile_s": 1.0, "cache_hits": 2},
                    {"reported_by": "x", "trace_s": 3.5, "compile_s": 6.0, "cache_hits": 5}])
    first = FirstStep(SimpleNamespace(compile_times=lambda: next(reports), compile_counters=lambda: {"graphs": 1}),
                      None, import_s=1.0)
    first.before_steps()
    first.after_step(1)
    first.after_window()
    parts = first.record()["parts"]
    assert parts == {"reported_by": "x", "trace_s": 0.5, "compile_s": 5.0, "cache_hits": 5}
    assert FirstStep(SimpleNamespace(compile_times=dict, compile_counters=dict), None, 0.0).first_step_parts() is None


def test_retry_failed_names_a_failed_warm_twin_too(tmp_path):
    from kbench.run import recover
    paths = {}
    for name, status, rule in (("a.r1.json", "failed", "cell"), ("a.r1.warm.json", "failed", "warm_cell"),
                               ("b.r1.warm.json", "ok", "warm_cell"), ("t.csv", "failed", "tables")):
        paths[name] = tmp_path / name
        paths[name].write_text(json.dumps({"status": status}))
    summary = "\n".join(f"{paths[n]}\t-\t{rule}\tok" for n, rule in (("a.r1.json", "cell"), ("a.r1.warm.json",
                        "warm_cell"), ("b.r1.warm.json", "warm_cell"), ("t.csv", "tables")))
    assert recover.failed_cells(summary) == [str(paths["a.r1.json"]), str(paths["a.r1.warm.json"])]
