"""The GPU check's failure modes, with fake interpreters and a fake nvidia-smi: an import that crashes or hangs costs
only its own package, a probe that hangs or runs off the GPU says so within the deadline, an nvidia-smi that fails
is one line, and a dist-info without a Name is no package."""
import os
import sys
import time

import pytest

from kbench.stacks import envs, lockcheck
from kbench.gpucheck import check as gpucheck


def fake_python(tmp_path, body: str) -> str:
    """An interpreter that does `body` (sh) first, then is this Python."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def test_one_import_that_crashes_the_interpreter_costs_only_its_own_package(tmp_path):
    """Importing tensorflow and then triton in one process segfaults (tensorflow issue 124205): here any process
    importing tensorflow among other packages dies by SIGSEGV. NumPy still reads found."""
    python = fake_python(tmp_path, 'case " $* " in *" tensorflow "*" yaml "*) kill -SEGV $$;; esac')
    found, unknown = gpucheck.installed(python)
    assert found["numpy"] and found["yaml"] and unknown == {}
    assert found["tensorflow"] is None          # alone it imports (here: it is not installed), no crash


@pytest.mark.workflow     # processes that hang until their budget ends
def test_an_import_that_hangs_is_named_and_the_rest_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(gpucheck, "IMPORT_S", 1)
    monkeypatch.setattr(gpucheck, "ONE_IMPORT_S", 1)
    python = fake_python(tmp_path, 'case " $* " in *" torch "*) exec sleep 60;; esac')
    found, unknown = gpucheck.installed(python)
    assert unknown == {"torch": "import hung past 1 s"} and found["numpy"] and found["torch"] is None


def test_the_imports_take_at_most_half_the_default_deadline():
    """The imports' budget must leave the probes and cells time: 600 s of imports under a 480 s deadline left none."""
    assert gpucheck.import_budget(gpucheck.DEADLINE_S) <= gpucheck.DEADLINE_S / 2
    assert gpucheck.import_budget(60) == 30


@pytest.mark.workflow     # processes that hang until their budget ends
def test_imports_that_all_hang_end_within_their_budget(tmp_path, monkeypatch):
    """An interpreter on which every import hangs: the together process, then one per package, all within the
    budget; what the budget did not reach says so."""
    monkeypatch.setattr(gpucheck, "ONE_IMPORT_S", 2)
    python = fake_python(tmp_path, 'case " $* " in *" -c "*"sys.argv[1:]"*) exec sleep 60;; esac')
    started = time.monotonic()
    found, unknown = gpucheck.installed(python, budget_s=4)
    assert time.monotonic() - started < 4 + 3, unknown
    assert set(unknown) == set(gpucheck.PACKAGES) and not any(found.values())
    assert unknown["pynvml"] == "not imported: the imports' 4 s were spent"


def test_the_cells_environment_is_the_one_the_packages_are_looked_for_in(tmp_path, monkeypatch):
    """A package on a module's PYTHONPATH is found, as a preinstalled cell imports it."""
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "keras_hub.py").write_text("__version__ = '9.9'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "modules"))
    found, _ = gpucheck.installed(sys.executable)
    assert found["keras_hub"] == "9.9"


def test_keras_is_imported_on_a_backend_the_interpreter_has(tmp_path, monkeypatch):
    """Keras 3 takes TensorFlow when KERAS_BACKEND is unset: a fake keras that imports its backend (as Keras does),
    on an interpreter with JAX and no TensorFlow, is found (and keras_hub, which imports keras, with it)."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "jax.py").write_text("__version__ = '0.0.1'\n")
    (modules / "keras.py").write_text("import importlib, os\n"
                                      "importlib.import_module(os.environ.get('KERAS_BACKEND', 'tensorflow'))\n"
                                      "__version__ = '3.99'\n")
    (modules / "keras_hub.py").write_text("import keras\n__version__ = '0.99'\n")
    monkeypatch.setenv("PYTHONPATH", str(modules))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    found, unknown = gpucheck.installed(sys.executable)
    assert found["tensorflow"] is None and found["jax"] == "0.0.1" and unknown == {}
    assert found["keras"] == "3.99" and found["keras_hub"] == "0.99"


@pytest.mark.workflow     # processes that hang until their budget ends
def test_a_probe_that_hangs_ends_within_the_time_left(tmp_path, monkeypatch):
    python = fake_python(tmp_path, "exec sleep 60")
    result = gpucheck.probe(python, "torch", "off", timeout_s=2)
    assert result == {"error": "timed out after 2 s"}


def test_a_jax_probe_runs_on_the_gpu_only_and_says_where_it_ran(tmp_path):
    """JAX gets JAX_PLATFORMS=cuda (no silent CPU fall-back), and a probe that reports a CPU device is an error row."""
    python = fake_python(tmp_path, 'echo "PROBE {\\"device_kind\\": \\"cpu\\", \\"device\\": \\"$JAX_PLATFORMS\\"}"; '
                                   'exit 0')
    result = gpucheck.probe(python, "jax", "off", timeout_s=20)
    assert result["device"] == "cuda" and result["error"] == "ran on cpu (cuda), not a GPU"


def test_an_nvidia_smi_that_fails_is_one_line(tmp_path, monkeypatch, capsys):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpucheck.listed_gpus() == []
    assert capsys.readouterr().out == ("GPUs (nvidia-smi): nvidia-smi failed: Failed to initialize NVML: "
                                       "Driver/library version mismatch\n")


@pytest.fixture
def nameless_dist_info(tmp_path, monkeypatch):
    """A site folder holding a dist-info whose METADATA has no Name (a broken install leaves them)."""
    site = tmp_path / "site"
    (site / "broken-1.0.dist-info").mkdir(parents=True)
    (site / "broken-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_dist_info_without_a_name_is_no_package(nameless_dist_info, tmp_path):
    assert "numpy" in lockcheck.installed()
    lock = tmp_path / "x.lock"
    lock.write_text("numpy==1.0 --hash=sha256:" + "0" * 64 + "\n")
    record = envs.record_preinstalled("x", "gpu", lock, sys.executable, tmp_path / "record.json")
    assert "numpy" in record["packages"] and None not in record["packages"]


@pytest.fixture
def launches(monkeypatch):
    """run_plan's cells recorded instead of started: the timeout each would get."""
    from kbench.run import launch
    started = []
    monkeypatch.setattr(launch, "run_cell", lambda spec, *args: started.append((spec.framework, args[-1].timeout_s)))
    monkeypatch.setattr(envs, "record_preinstalled", lambda *args: None)
    monkeypatch.setattr(gpucheck, "summary", lambda result: {"status": "ok"})
    return started


def gpu_config() -> dict:
    import yaml
    from conftest import REPO
    return {**yaml.safe_load((REPO / "config.yaml").read_text()), "accelerator": "gpu"}


@pytest.mark.parametrize("spare_s, started", [(-1, False), (1, True)])
def test_a_cell_starts_only_with_the_time_it_needs_left(tmp_path, launches, spare_s, started):
    """The native compiled BERT fit (the plan's first cell) needs CELL_START_S['compiled'] and the deadline's margin:
    with a second less left it reads 'not run: deadline' and is never started; with a second more it starts."""
    plan = gpucheck.PLAN[:1]
    need = gpucheck.CELL_START_S["compiled"] + gpucheck.STOP_S
    found = {p: "1" for p in ("torch", "transformers", "peft")}
    rows = gpucheck.run_plan(gpu_config(), plan, sys.executable, found, tmp_path, time.monotonic() + need + spare_s,
                             None)
    assert [row["status"] for row in rows] == ["ok" if started else "not run: deadline"]
    assert [framework for framework, _ in launches] == (["native-torch-compiled"] if started else [])
    assert all(timeout_s >= gpucheck.CELL_START_S["compiled"] for _, timeout_s in launches)


def test_a_cell_with_half_a_minute_left_is_not_started_where_it_needs_more(tmp_path, launches):
    """30 s left: the compiled cell (which needs minutes to compile) is not run, where it used to start and be killed
    at the deadline as failed: Timeout."""
    found = {p: "1" for p in ("torch", "transformers", "peft")}
    rows = gpucheck.run_plan(gpu_config(), gpucheck.PLAN[:1], sys.executable, found, tmp_path, time.monotonic() + 30,
                             None)
    assert rows[0]["status"] == "not run: deadline" and launches == []


def test_the_synthetic_plan_needs_its_build_time_to_start():
    config, _ = gpucheck.synthetic_config(gpu_config())
    assert gpucheck.start_s(config["framework_defs"]["synthetic-1"]) == 3 + gpucheck.SYNTHETIC_START_S


def test_a_host_without_a_gpu_exits_non_zero(tmp_path, monkeypatch, capsys):
    """No nvidia-smi, no framework: nothing ran on a GPU, so a script must not read a pass (exit 2, its own status)."""
    monkeypatch.setenv("PATH", str(tmp_path))           # no nvidia-smi; the interpreter is named by its full path
    status = gpucheck.main(["--python", sys.executable, "--out", str(tmp_path / "out"), "--deadline", "60"])
    assert status == gpucheck.NO_GPU == 2
    assert capsys.readouterr().out.splitlines()[-1] == ("gpucheck: FAILED: no GPU visible (nvidia-smi lists none, and "
                                                        "no probe or cell ran on one)")


GPU = [{"index": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-0", "driver_version": "580.95.05"}]
OK_CELL = {"cell": "bert fit bs32 float32 native-torch-compiled", "status": "ok"}


@pytest.mark.parametrize("unknown, probes, rows, status", [
    ({}, [], [OK_CELL, {"cell": "c", "status": "skipped: keras missing"}, {"cell": "d", "status": "not run: deadline"}],
     0),
    ({}, [], [OK_CELL, {"cell": "c", "status": "failed: Timeout"}], 1),
    ({}, [{"framework": "torch", "TF32 mode": "off", "error": "timed out after 300 s"}], [OK_CELL], 1),
    ({"tensorflow": "import crashed the interpreter (exit -11)"}, [], [OK_CELL], 1),
])
def test_any_step_that_fails_fails_the_check(unknown, probes, rows, status):
    """Skipped (a framework the interpreter lacks) and not run (the deadline) are no failures; a failed cell, a probe
    error or an import that crashed is."""
    found, verdict = gpucheck.outcome(GPU, unknown, probes, rows)
    assert found == status, verdict
    assert verdict.startswith("passed" if status == 0 else "FAILED: 1 step(s): ")


@pytest.fixture
def launched_specs(monkeypatch):
    """run_plan's cells recorded instead of started: each one's spec."""
    from kbench.run import launch
    started = []
    monkeypatch.setattr(launch, "run_cell", lambda spec, *args: started.append(spec))
    monkeypatch.setattr(envs, "record_preinstalled", lambda *args: None)
    monkeypatch.setattr(gpucheck, "summary", lambda result: {"status": "ok"})
    return started


def plan_cell(framework: str) -> tuple:
    return next(c for c in gpucheck.PLAN if c[4] == framework)


def test_the_plan_runs_the_other_profilers_gpu_traces(tmp_path, launched_specs):
    """Keras 3 on TensorFlow (XLA), Keras 2 as the anchor runs it (SAM predict without XLA) and Paddle, each profiled
    for its breakdown; the Keras 2 cell starts with an eager cell's time left, which a compiled one would not get."""
    found = {p: "1" for p in ("tensorflow", "tf_keras", "keras_nlp", "keras_cv", "keras", "keras_hub", "paddle",
                              "paddlenlp")}
    plan = [plan_cell("keras3-tensorflow"), plan_cell("keras2"), plan_cell("paddle-dygraph")]
    rows = gpucheck.run_plan(gpu_config(), plan, sys.executable, found, tmp_path, time.monotonic() + 600, None)
    assert [row["cell"] for row in rows] == ["bert fit bs32 float32 keras3-tensorflow",
                                             "sam predict bs4 float32 keras2 (anchor)",
                                             "bert fit bs32 float32 paddle-dygraph"], rows
    assert [(s.framework, s.profile, s.settings["jit_compile"]) for s in launched_specs] == [
        ("keras3-tensorflow", "strict", True), ("keras2", "anchor", False), ("paddle-dygraph", "strict", False)]
    assert all(s.steps.breakdown > 0 for s in launched_specs)
    launched_specs.clear()
    eager = gpucheck.CELL_START_S["eager"] + gpucheck.STOP_S + 1
    assert eager < gpucheck.CELL_START_S["compiled"] + gpucheck.STOP_S
    rows = gpucheck.run_plan(gpu_config(), plan[:2], sys.executable, found, tmp_path, time.monotonic() + eager, None)
    assert [row["status"] for row in rows] == ["not run: deadline", "ok"], rows


@pytest.mark.parametrize("absent, skipped", [("paddlenlp", "bert fit bs32 float32 paddle-dygraph"),
                                             ("paddle", "bert fit bs32 float32 paddle-dygraph"),
                                             ("keras_cv", "sam predict bs4 float32 keras2 (anchor)")])
def test_a_plan_cell_whose_models_package_is_missing_is_skipped_not_failed(tmp_path, launched_specs, absent, skipped):
    """Paddle's column names no required package (kbench.adapters._packages) and Keras 2's SAM is keras-cv's: the
    check looks for them itself, so that an interpreter without them skips the cell instead of failing it."""
    found = {p: "1" for p in ("tensorflow", "tf_keras", "keras_nlp", "keras_cv", "paddle", "paddlenlp")}
    rows = gpucheck.run_plan(gpu_config(), [plan_cell("keras2"), plan_cell("paddle-dygraph")], sys.executable,
                             {**found, absent: None}, tmp_path, time.monotonic() + 600, None)
    statuses = {row["cell"]: row["status"] for row in rows}
    assert statuses.pop(skipped) == f"skipped: {absent} missing" and set(statuses.values()) == {"ok"}, rows
    assert {"paddle", "paddlenlp", "keras_cv"} <= set(gpucheck.PACKAGES)       # looked for, and printed
