"""JAX against NumPy (kbench.studies.jax_numpy, kbench.results.jax_numpy_tables): the verdict on made-up timings, agreement that
fails a wrong result, the config's checks (the job itself runs in the e2e podman run, tests/test_e2e.py)."""
import numpy as np
import pandas as pd
import pytest

from conftest import CONFIG, REPO
from kbench.contract import cell
from kbench.plan import config_check, matrix
from kbench.studies import jax_numpy
from kbench.results import jax_numpy_tables as tables
from kbench.results.context import Records
from conftest import run_context
from test_launch import driver_environment  # noqa: F401 (a fixture)

SCHEMA = REPO / "schemas" / "config.schema.yaml"
CLAIM = CONFIG["jax_numpy"]["claim"]
STEPS = {"warmup": 1, "timed": 4, "blocks": 2}


def side(ms, half):
    return {"ms": ms, "low": ms - half, "high": ms + half, "first_ms": 100.0}


def row(size, numpy_ms, jax_ms, half=0.0, status="ok"):
    return {"workload": "w", "size": size, "numpy": side(numpy_ms, half * numpy_ms), "jax": side(jax_ms, half * jax_ms),
            "rel": 1e-7, "tolerance": 1e-6, "status": status}


@pytest.mark.parametrize("rows, expected", [
    ([row(10, 1.0, 1.0), row(100, 30.0, 1.0, half=0.1)], tables.HOLDS),           # 30x, interval 24.5x-36.7x
    ([row(10, 1.0, 1.0), row(100, 5.0, 1.0, half=0.1)], tables.FAILS),            # at most 5x
    ([row(100, 10.0, 1.0, half=0.2)], tables.NOT_SHOWN),                          # 6.7x-15x straddles 10x
    ([row(100, 50.0, 1.0, status="mismatch")], tables.NOT_MEASURED),              # fast but wrong: no speedup
    ([row(10, 2.0, 1.0), row(100, 50.0, 1.0, status="mismatch")], tables.FAILS),  # the wrong size is not counted
    ([], tables.NOT_MEASURED),
])
def test_the_verdict_reads_the_ratio_and_its_interval_against_the_claim(rows, expected):
    state, reason = tables.verdict(rows, CLAIM["speedup"])
    assert state == expected, reason
    if any(r["status"] == "mismatch" for r in rows) and state != tables.NOT_MEASURED:
        assert "not counted: 100 (mismatch)" in reason


def test_not_shown_names_the_size_whose_interval_straddles_the_claim():
    """The tiny CI run's elementwise row: its best point (0.86x at 10^7, interval 0.71x-1.02x) lies below the claim;
    the size that leaves it open is 1000 (0.38x, interval 0.16x-12.6x)."""
    small = {**row(1000, 0.02, 0.0522), "numpy": side(0.02, 0.0034), "jax": side(0.0522, 0.0501)}
    rows = [small, {**row(10**7, 146.9, 171.7), "numpy": side(146.9, 16.0), "jax": side(171.7, 13.0)}]
    state, reason = tables.verdict(rows, CLAIM["speedup"])
    assert state == tables.NOT_SHOWN and "at 1000 the ratio's interval" in reason, reason


def test_a_ratio_without_intervals_is_read_at_its_point():
    no_interval = row(100, 20.0, 1.0)
    no_interval["jax"].update(low=None, high=None)
    assert tables.ratio_range(no_interval) == (20.0, None, None)
    assert tables.verdict([no_interval], 10)[0] == tables.HOLDS
    assert tables.verdict([no_interval], 30)[0] == tables.FAILS


def result_with(rows, status="ok", error=None):
    job = {"cell_id": "tiny/jax_numpy", "job": "jax_numpy", "suite": "tiny"}
    found = cell.new_result(job, {}, status, error)
    found.jax_numpy = {"rows": rows, "device": {"platform": "cpu", "kind": "cpu", "count": 1}, "host_cpus": 2}
    return found


def test_tables_give_every_size_and_a_verdict_per_workload(tmp_path):
    rows = [dict(row(256, 2.0, 1.0, half=0.1), workload="matmul"),
            dict(row(1000, 40.0, 1.0, half=0.1), workload="elementwise"),
            {"workload": "mlp", "size": 32, "status": "failed", "error": "MemoryError: "}]
    workloads = {name: {"why": f"why {name}"} for name in ("matmul", "elementwise", "mlp")}
    tables.build(Records(jax_numpy=(result_with(rows),)),
                 run_context(tmp_path, None, jax_numpy={"claim": CLAIM, "workloads": workloads}))
    table = pd.read_csv(tmp_path / "jax_numpy.csv")
    assert table["numpy/jax x"].tolist()[:2] == [2.0, 40.0] and table.agreement[2].startswith("failed: MemoryError")
    claims = pd.read_csv(tmp_path / "jax_numpy_claim.csv").set_index("workload")
    assert claims.verdict.to_dict() == {"matmul": tables.FAILS, "elementwise": tables.HOLDS,
                                        "mlp": tables.NOT_MEASURED}
    assert claims.reason["matmul"].endswith("why matmul") and (claims.device == "jax: cpu (cpu); numpy: host CPU (2 "
                                                                                "cores)").all()
    text = (tmp_path / "jax_numpy.md").read_text()
    assert CLAIM["quote"] in text and "NumPy stays on the host" in text


def test_a_failed_job_measures_nothing(tmp_path):
    failed = result_with([], "failed", cell.error_info("LockMismatch", "jax 0.9 installed"))
    claims = tables.claim_table(failed, CLAIM, {"matmul": {"why": "x"}})
    assert claims.verdict.tolist() == [tables.NOT_MEASURED] and "LockMismatch" in claims.reason[0]


@pytest.mark.parametrize("workload, size", [("matmul", 64), ("elementwise", 1000), ("reduction", 64), ("mlp", 8)])
def test_agreement_passes_the_same_program_and_fails_a_wrong_one(workload, size):
    """The timing and comparison path of the job, with NumPy on both sides: the same program agrees; one whose
    result is off by 1e-4 relative (far above float32 rounding, far below a visible bug) is a mismatch."""
    widths = [16, 32, 4]
    same = jax_numpy.program(workload, np)
    def wrong(*arrays):
        out = same(*arrays)
        return tuple(o * np.float32(1 + 1e-4) for o in out) if isinstance(out, tuple) else out * np.float32(1 + 1e-4)
    for fn, status in ((same, "ok"), (wrong, "mismatch")):
        found = jax_numpy.run_size(workload, size, STEPS, np.random.default_rng(0), widths, fn, list, lambda out: None)
        assert found["status"] == status, found
        assert found["numpy"]["ms"] > 0 and found["jax"]["low"] is not None and "output" not in found["jax"]


def test_the_tolerance_grows_with_the_contraction():
    assert jax_numpy.tolerance("matmul", 4096, []) == 4 * jax_numpy.tolerance("matmul", 256, [])
    assert jax_numpy.relative_error(np.ones(3), np.ones(4)) == float("inf")


def study(config):
    return config["jax_numpy"]


@pytest.mark.parametrize("mutate, message", [
    (lambda c: study(c).update(framework="keras4"), "config key jax_numpy.framework: 'keras4' is not a column"),
    (lambda c: study(c)["suites"].update(huge=study(c)["suites"]["tiny"]), "config key jax_numpy.suites.huge: not a suite"),
    (lambda c: study(c)["suites"]["tiny"]["sizes"].update(fft=[8]), "config key jax_numpy.suites.tiny.sizes"),
    (lambda c: study(c)["suites"]["tiny"]["sizes"].update(matmul=[0]), "config key jax_numpy.suites.tiny.sizes.matmul.0"),
    (lambda c: study(c)["claim"].pop("quote"), "config key jax_numpy.claim"),
    (lambda c: study(c)["workloads"].pop("mlp"), "config key jax_numpy.suites"),
])
def test_bad_study_config_gets_one_error_naming_the_key(config, mutate, message):
    mutate(config)
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(config, SCHEMA)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_study_is_planned_where_its_column_runs(config):
    assert matrix.jax_numpy_planned(config, "tiny")
    assert not matrix.jax_numpy_planned({**config, "frameworks": ["keras2"]}, "tiny")
    job = jax_numpy.job({**config, "accelerator": "cpu"}, "tiny")
    assert job["workloads"] == config["jax_numpy"]["suites"]["tiny"]["sizes"] and job["env"]["KERAS_BACKEND"] == "jax"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("workload, size", [("matmul", 64), ("reduction", 64)])
def test_a_non_finite_output_never_agrees(workload, size, bad):
    """One NaN or infinite element in JAX's output (an overflow, a 0/0): a mismatch, never a speedup. NaN is the
    sly one: its error is NaN, and max(0.0, nan) is 0.0."""
    widths = [16, 32, 4]
    same = jax_numpy.program(workload, np)

    def broken(*arrays):
        out = same(*arrays)
        first = (out[-1] if isinstance(out, tuple) else out).copy()
        first.flat[1] = bad
        return (*out[:-1], first) if isinstance(out, tuple) else first
    found = jax_numpy.run_size(workload, size, STEPS, np.random.default_rng(0), widths, broken, list, lambda out: None)
    assert found["status"] == "mismatch" and found["rel"] == float("inf"), found
    expected = np.ones(4, np.float32)
    assert jax_numpy.relative_error(np.array([1, bad, 1, 1], np.float32), expected) == float("inf")
    assert jax_numpy.relative_error((expected, np.array([bad, 1], np.float32)), (expected, np.ones(2))) == float("inf")


def test_the_rules_script_starts_the_job_on_every_cpu_of_the_host(monkeypatch):
    """scripts/run_jax_numpy.py hands the launcher Options.host_cpus: its job gets every CPU, not a GPU's share
    (kbench.run.launch.gpu_lease; tests/test_launch.py starts such a job under a lease)."""
    import runpy
    from types import SimpleNamespace
    from kbench.run import launch
    started = []
    monkeypatch.setattr(launch, "run_cell", lambda *args: started.append(args))
    snakemake = SimpleNamespace(params=SimpleNamespace(job={"cell_id": "tiny/jax_numpy"}, runtime="podman"),
                                input=SimpleNamespace(environment="images/keras3-jax.gpu.json"),
                                output=SimpleNamespace(json="jax_numpy/tiny/result.json"), log=["jax_numpy.log"],
                                resources=SimpleNamespace(cell_timeout_s=600))
    runpy.run_path(str(REPO / "scripts" / "run_jax_numpy.py"), init_globals={"snakemake": snakemake})
    (options,) = [args[-1] for args in started]
    assert options.host_cpus and options.module == "kbench.studies.jax_numpy" and options.timeout_s == 600


@pytest.mark.parametrize("accelerator, platform, refused", [("gpu", "cpu", True), ("gpu", "gpu", False),
                                                            ("cpu", "cpu", False)])
def test_a_job_that_claims_a_gpu_on_jaxs_cpu_fails_with_the_cells_device_check(accelerator, platform, refused,
                                                                                driver_environment, monkeypatch):
    """In process, JAX faked (the driver has none): a GPU job whose JAX runs on its CPU would time the CPU against
    NumPy; it fails with the cells' own NoAccelerator (kbench.run.runner.check_device) before any workload runs."""
    import json
    import sys
    import types
    monkeypatch.setenv("KBENCH_LOCK", json.loads(driver_environment.read_text())["lock"])
    device = types.SimpleNamespace(platform=platform, device_kind="NVIDIA H100" if platform == "gpu" else "cpu")
    jnp = types.SimpleNamespace()
    fake = types.SimpleNamespace(__version__="0.0-fake", numpy=jnp, devices=lambda: [device], device_count=lambda: 1,
                                 config=types.SimpleNamespace(update=lambda *a: None))
    monkeypatch.setitem(sys.modules, "jax", fake)
    monkeypatch.setitem(sys.modules, "jax.numpy", jnp)
    # no workloads (the check comes before them), no environment variables (job_run sets them in this process)
    job = {**jax_numpy.job({**CONFIG, "accelerator": accelerator}, "tiny"), "workloads": {}, "env": {}}
    result = jax_numpy.run(job, {"runtime": "test"})
    if refused:
        assert result.status == "failed" and result.error["type"] == "NoAccelerator", result.error
        assert result.error["message"].startswith("the job asks for a GPU (gpu), but jax runs on cpu (cpu)")
    else:
        assert result.status == "ok", result.error
    assert result.provenance["device"] == device.device_kind
