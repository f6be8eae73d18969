"""XLA's compile against the host's driver: on a driver whose CUDA is older than XLA's ptxas (R550/R560 with CUDA
12.8/12.9's ptxas) XLA compiles its kernels one at a time, so a JAX or TensorFlow-XLA cold first step depends on the
host's driver. The cell records both versions where it compiles with XLA on a GPU (first_step.xla_compile), and the
first_step table flags the run (§, and its long CSV)."""
import importlib.metadata
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from kbench.gpu import cuda
from kbench.results import first_step_tables
from kbench.run import runner
from test_first_step import STEADY, record
from test_launch import synthetic_spec

FAKE_NVML = Path(__file__).parent / "fake_nvml"


@pytest.mark.parametrize("driver, ptxas, serial", [
    ("12.9", "12.9", False),        # the same CUDA: XLA links with the driver, in parallel
    ("12.8", "12.9", True),         # one minor older (R570 with CUDA 12.9's ptxas): serial
    ("12.4", "12.9", True),         # R550
    ("13.0", "12.9", False),        # newer
    ("12.10", "12.9", False),       # versions as numbers, not as text
])
def test_xla_compiles_serially_only_where_the_drivers_cuda_is_older_than_its_ptxas(driver, ptxas, serial):
    assert cuda.xla_serial_compile(driver, ptxas) is serial


def test_the_ptxas_version_is_the_nvcc_wheels_else_the_ptxas_on_path_else_none(monkeypatch):
    """The wheel the JAX and TensorFlow GPU locks install (nvidia-cuda-nvcc-cu12==12.9.86): 12.9. Without it, a
    ptxas on PATH (a preinstalled interpreter's toolkit) by its --version. Neither: nothing."""
    installed = {}

    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setattr(cuda.importlib.metadata, "version", version)
    said = "ptxas: NVIDIA (R) Ptx optimizing assembler\nCuda compilation tools, release 12.8, V12.8.93\n"
    run = lambda argv, **kw: types.SimpleNamespace(stdout=said, argv=argv)      # noqa: E731
    installed["nvidia-cuda-nvcc-cu12"] = "12.9.86"
    assert cuda.ptxas_cuda(run, lambda name: "/opt/cuda/bin/ptxas") == ("12.9", "nvidia-cuda-nvcc-cu12 12.9.86")
    installed.clear()
    assert cuda.ptxas_cuda(run, lambda name: "/opt/cuda/bin/ptxas") == ("12.8", "/opt/cuda/bin/ptxas --version")
    assert cuda.ptxas_cuda(run, lambda name: None) is None


def spec(backend: str, jit: bool = True, accelerator: str = "gpu"):
    adapter = {"tensorflow-keras2": "keras2", "torch-native": "native_torch"}.get(backend, "keras3")
    base = synthetic_spec()
    return base.replace(accelerator=accelerator, env={"KERAS_BACKEND": backend} if adapter == "keras3" else {},
                        framework_def={**base.framework_def, "adapter": adapter},
                        settings={**base.settings, "jit_compile": jit})


def gpu_facts(driver_cuda: str | None = "12.4") -> dict:
    return {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "nvml": {"cuda_driver_version": driver_cuda}}


@pytest.mark.parametrize("cell, facts, driver, serial", [
    (spec("jax"), gpu_facts("12.4"), "12.4", True),               # R550 under CUDA 12.9's ptxas
    (spec("jax"), gpu_facts("12.9"), "12.9", False),              # R575: the same CUDA
    (spec("jax", jit=False), gpu_facts("12.4"), "12.4", True),    # JAX op by op compiles each op with XLA too
    (spec("tensorflow"), gpu_facts("12.4"), "12.4", True),        # Keras 3 on TensorFlow under jit_compile
    (spec("tensorflow-keras2"), gpu_facts("12.4"), "12.4", True),  # Keras 2 under jit_compile
    (spec("jax"), gpu_facts(None), None, None),                   # no NVML: nothing to compare, no flag
])
def test_a_cell_compiling_with_xla_on_a_gpu_records_the_drivers_cuda_against_its_ptxas(monkeypatch, cell, facts,
                                                                                        driver, serial):
    monkeypatch.setattr(cuda, "ptxas_cuda", lambda: ("12.9", "nvidia-cuda-nvcc-cu12 12.9.86"))
    assert runner.xla_compile(cell, facts) == {"driver_cuda": driver, "ptxas_cuda": "12.9",
                                               "ptxas_from": "nvidia-cuda-nvcc-cu12 12.9.86", "serial_compile": serial}


@pytest.mark.parametrize("cell, facts", [
    (spec("jax", accelerator="cpu"), {"kind": "cpu", "name": "cpu"}),     # no GPU: nothing
    (spec("tensorflow", jit=False), gpu_facts()),                          # TensorFlow without XLA
    (spec("tensorflow-keras2", jit=False), gpu_facts()),                   # Keras 2's SAM predict, as the anchor runs it
    (spec("torch"), gpu_facts()),                                          # Keras 3 on torch: Inductor, not XLA
    (spec("torch-native"), gpu_facts()),
])
def test_a_cell_that_does_not_compile_with_xla_on_a_gpu_records_nothing_of_it(monkeypatch, cell, facts):
    monkeypatch.setattr(cuda, "ptxas_cuda", lambda: ("12.9", "nvidia-cuda-nvcc-cu12 12.9.86"))
    assert runner.xla_compile(cell, facts) is None


def with_xla(result, driver, ptxas, serial):
    result.first_step["xla_compile"] = {"driver_cuda": driver, "ptxas_cuda": ptxas, "ptxas_from": "test",
                                        "serial_compile": serial}
    return result


def test_the_first_step_table_flags_a_run_whose_xla_compiled_serially_and_no_other():
    """Driver older: flagged (§, and the long CSV's columns); the same CUDA: the versions, no flag; no GPU (no
    xla_compile in the record): nothing."""
    older = with_xla(record("older", "cold", 30000.0, 100.0, STEADY), "12.4", "12.9", True)
    same = with_xla(record("same", "cold", 30000.0, 100.0, STEADY), "12.9", "12.9", False)
    cpu = record("cpu", "cold", 30000.0, 100.0, STEADY)
    long = first_step_tables.first_step_long([older, same, cpu], [], 0.1, {})
    by = {entry.framework: entry for _, entry in long.iterrows()}
    assert [bool(by[f][first_step_tables.XLA_SERIAL]) for f in ("older", "same", "cpu")] == [True, False, False]
    assert (by["older"].driver_cuda, by["older"].ptxas_cuda) == ("12.4", "12.9")
    assert (by["same"].driver_cuda, by["same"].ptxas_cuda) == ("12.9", "12.9")
    assert pd.isna(by["cpu"].driver_cuda) and pd.isna(by["cpu"].ptxas_cuda)
    assert first_step_tables.cell_text(by["older"]).endswith(
        "; XLA compiled serially: driver CUDA 12.4 older than ptxas 12.9 §")
    assert "§" not in first_step_tables.cell_text(by["same"]) and "§" not in first_step_tables.cell_text(by["cpu"])


def test_the_runner_puts_the_xla_record_in_the_cells_first_step(tmp_path, monkeypatch):
    """In process, the synthetic GPU on the fake NVML (driver CUDA 13.0), taken for a column compiling with XLA
    whose ptxas is CUDA 13.1's: the cell's first_step says so, and that XLA compiled serially."""
    from kbench.stacks import lockcheck
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    sys.modules.pop("pynvml", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-1")
    monkeypatch.setenv("KBENCH_SYNTHETIC_GPU", "1")
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lockcheck.installed().items())))
    monkeypatch.setenv("KBENCH_LOCK", str(lock))
    monkeypatch.setattr(runner, "compiles_with_xla", lambda spec: True)
    monkeypatch.setattr(cuda, "ptxas_cuda", lambda: ("13.1", "nvidia-cuda-nvcc 13.1.80"))
    try:
        result = runner.run(synthetic_spec(build_s=0).replace(accelerator="gpu"),
                            {"runtime": "test", "launcher": {"gpus_allocated": ["GPU-fake-1"]}})
    finally:
        sys.modules.pop("pynvml", None)
    assert result.status == "ok", result.error
    assert result.first_step["xla_compile"] == {"driver_cuda": "13.0", "ptxas_cuda": "13.1",
                                                "ptxas_from": "nvidia-cuda-nvcc 13.1.80", "serial_compile": True}
