"""A GPU host faked on this CPU machine: nvidia-smi listing 4 GPUs, the synthetic stack pretending to a GPU, and a
fake NVML (tests/fake_nvml/pynvml.py). One cell per GPU, side by side; energy, clocks and slowdowns read around
the timed window."""
import copy
import datetime
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import CONFIG, REPO, snakemake
from kbench.contract import cell
from kbench.results import flat, tables

FAKE_NVML = Path(__file__).parent / "fake_nvml"
UUIDS = [f"GPU-fake-{i}" for i in range(4)]


def fake_gpu_host(folder: Path, gpus: int = 4) -> dict:
    """A bin folder whose nvidia-smi lists `gpus` H100s (driver 580), first on PATH: the environment to run in."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{i}, NVIDIA H100 80GB HBM3, 580.95.05, GPU-fake-{i}\\n" for i in range(gpus))
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def gpu_workflow(folder: Path, columns: int, build_s: float) -> list[str]:
    config = copy.deepcopy(CONFIG)
    env = {"KBENCH_SYNTHETIC_GPU": "1", "KBENCH_SYNTHETIC_BUILD_S": str(build_s)}
    names = [f"gpu-column-{i}" for i in range(columns)]
    config["framework_defs"].update({name: {"stack": "synthetic", "adapter": "synthetic", "env": env,
                                            "jit_compile": False} for name in names})
    config["model_defs"]["synthetic"] = {
        "precisions": ["float32"], "tasks": {"fit": {"batch_sizes": [4], "learning_rate": 1e-3}},
        "sizes": {"tiny": {"arch": {"matrix_size": 64}, "inputs": {}}}}
    config.update(models=["synthetic"], frameworks=names, precisions=["float32"], suite="tiny", accelerator="gpu",
                  runtime="host", cell_timeout_minutes=2)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for shared in ("envs", "scripts", "containers"):
        (folder / shared).symlink_to(REPO / shared)
    return ["--configfile", str(folder / "config.yaml")]


def utc(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


@pytest.mark.workflow
def test_a_host_with_four_gpus_runs_four_cells_at_once_each_on_its_own_gpu_and_a_fifth_waits(tmp_path):
    env = fake_gpu_host(tmp_path)
    options = gpu_workflow(tmp_path, columns=5, build_s=6)
    # five cores: Snakemake may start all five cells at once (a core each); the fifth must wait on the GPU lease
    proc = snakemake("--cores", "5", *options, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    results = [cell.read(p) for p in sorted((tmp_path / "results/cells").rglob("*.r1.json"))]
    assert len(results) == 5 and all(r.status == "ok" for r in results), [r.error for r in results]
    seen = [r.provenance["environment_variables"].get("CUDA_VISIBLE_DEVICES") for r in results]
    assert all(s in UUIDS for s in seen), seen                          # one GPU each, never every GPU
    assert [r.provenance["launcher"]["gpus_allocated"] for r in results] == [[s] for s in seen]
    assert all(r.provenance["device"] == f"synthetic GPU {s}" for r, s in zip(results, seen))
    spans = sorted((utc(r.provenance["started_utc"]), utc(r.provenance["finished_utc"]), s)
                   for r, s in zip(results, seen))
    first_four, fifth = spans[:4], spans[4]
    assert len({s for _, _, s in first_four}) == 4                      # four cells, four different GPUs ...
    assert max(start for start, _, _ in first_four) < min(end for _, end, _ in first_four)    # ... at once
    assert fifth[0] >= min(end for _, end, _ in first_four)          # the fifth waited for a GPU to be free


class WindowClock:
    """A fake clock that stands still but across the timed window, which lasts exactly `window_s` on it: the window
    monitor (kbench.gpu.nvml) and the fake NVML's energy counter both read it, so the energy of the window is 300 W x
    window_s whatever else the machine is doing (on a real clock a loaded machine moves it between the monitor's read
    of the counter and of the clock)."""

    def __init__(self, window_s: float):
        self.now, self.window_s = 1000.0, window_s

    def monotonic(self) -> float:
        return self.now

    def install(self, monkeypatch, fake_nvml) -> None:
        import types
        from kbench.gpu import nvml
        monkeypatch.setattr(nvml, "time", types.SimpleNamespace(monotonic=self.monotonic))
        monkeypatch.setattr(fake_nvml, "clock", self.monotonic)
        stop = nvml.WindowMonitor.stop

        def stop_after_the_window(monitor):
            self.now += self.window_s
            return stop(monitor)
        monkeypatch.setattr(nvml.WindowMonitor, "stop", stop_after_the_window)


def run_on_fake_nvml(tmp_path, monkeypatch, reasons: int, timed: int = 10, window_s: float | None = None):
    """One synthetic cell in process, on GPU-fake-2 of the fake NVML reporting these clock-event reasons; with
    window_s, its timed window lasts exactly that on a fake clock (WindowClock), else on the machine's."""
    sys.path.insert(0, str(FAKE_NVML))
    if window_s is not None:
        import pynvml
        WindowClock(window_s).install(monkeypatch, pynvml)
    monkeypatch.setenv("KBENCH_FAKE_NVML_REASONS", str(reasons))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-2")
    from test_launch import synthetic_spec
    from kbench.run import runner
    from kbench.stacks import lockcheck
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lockcheck.installed().items())))
    monkeypatch.setenv("KBENCH_LOCK", str(lock))
    try:
        result = runner.run(synthetic_spec(timed=timed, build_s=0), {"runtime": "test"})
    finally:
        sys.path.remove(str(FAKE_NVML))
        sys.modules.pop("pynvml", None)
    assert result.status == "ok", result.error
    return result


def test_cells_read_energy_clocks_and_slowdowns_from_nvml_around_the_window(tmp_path, monkeypatch):
    """In process, against the fake NVML: 300 W on an H100 that reported a thermal slowdown and its software power
    cap in the window: the slowdown flags the number, the power cap is recorded and flags nothing. The window lasts
    2 s on a fake clock that the fake NVML's energy counter reads too: 600 J, exactly, on any machine's load."""
    from kbench.gpu import nvml
    result = run_on_fake_nvml(tmp_path, monkeypatch, 0x20 | 0x4 | 0x1,     # thermal, power cap, idle (no slowdown)
                              window_s=2 * nvml.MIN_ENERGY_WINDOW_S)
    facts = result.provenance["device_facts"]["nvml"]
    assert facts["uuid"] == "GPU-fake-2" and facts["name"] == "NVIDIA H100 80GB HBM3" and facts["index"] == 2
    energy = result.energy
    assert energy["slowdowns"] == ["thermal (software)"] and energy["power_capped"] is True
    assert energy["window_s"] == 2 * nvml.MIN_ENERGY_WINDOW_S and energy["energy_note"] is None
    assert energy["energy_j"] == pytest.approx(300 * energy["window_s"], rel=1e-6)
    assert energy["mean_power_w"] == pytest.approx(300, rel=1e-6)
    assert energy["sm_clock_mhz_mean"] == 1980 and energy["memory_clock_mhz_mean"] == 2619
    assert energy["temperature_c_max"] == 61 and energy["samples"] >= 1
    assert energy["processes_before_window"] == [{"pid": 4242, "used_bytes": 3 * 2**30}]    # in the cell's record
    assert energy["application_clocks_set"] is False and energy["application_sm_clock_mhz"] == 1980
    assert result.memory["nvml_processes_after_steps"] == [{"pid": 4242, "used_bytes": 3 * 2**30}]
    summary = tables.summary_table(flat.long_table([result]))
    row = summary.iloc[0]
    assert row.energy_j_per_step == pytest.approx(energy["energy_j"] / 10)
    assert row.cell_flags == "throttled: thermal (software)" and row.text.endswith(tables.FLAGGED)
    assert row.nvml_process_mib == 3072.0
    energy_table = tables.energy_table(summary).iloc[0]
    assert energy_table["slowdowns seen"] == "thermal (software)" and energy_table["at its power cap"]
    assert energy_table["mean W"] > 0


def test_a_gpu_at_its_power_cap_is_not_a_throttled_cell(tmp_path, monkeypatch):
    """The software power cap alone (a heavy bf16 step on an H100/H200 at its power limit): recorded, no flag."""
    from kbench.gpu import nvml
    monkeypatch.setattr(nvml, "MIN_ENERGY_WINDOW_S", 0.0)
    result = run_on_fake_nvml(tmp_path, monkeypatch, 0x4)
    assert result.energy["slowdowns"] == [] and result.energy["power_capped"] is True
    row = tables.summary_table(flat.long_table([result])).iloc[0]
    assert row.cell_flags == "" and not row.text.endswith(tables.FLAGGED) and row.power_capped


def test_a_window_too_short_for_the_energy_counter_has_no_energy_and_says_why(tmp_path, monkeypatch):
    """NVML's energy counter moves in ~100 ms steps: a 0.1-1 s window (the smoke suite, the GPU check) would give
    J/step off by up to 100%; it gives none, with the reason, and the energy table leaves the cell out."""
    result = run_on_fake_nvml(tmp_path, monkeypatch, 0)
    energy = result.energy
    assert energy["window_s"] < 1.0 and energy["energy_j"] is None and energy["mean_power_w"] is None
    assert energy["energy_note"].startswith(f"no energy: the timed window lasted {energy['window_s']:.2f} s, under")
    summary = tables.summary_table(flat.long_table([result]))
    assert summary.iloc[0].energy_j_per_step is None or pd.isna(summary.iloc[0].energy_j_per_step)
    assert tables.energy_table(summary).empty


class ThrottledOnce:
    """An NVML whose clock-event reasons report a thermal slowdown on the first sample of the window only, and
    idle after it (the slowdown came and went mid-window)."""
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self):
        self.reads = 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self.reads += 1
        return 0x20 if self.reads == 1 else 0x1

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return 1000 * self.reads

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 61


def test_a_slowdown_anywhere_in_the_window_is_reported_though_gone_at_its_end(monkeypatch):
    """The window's reasons are OR-ed over every sample: a thermal slowdown seen only in the first sample still
    flags the cell."""
    import time
    from kbench.gpu import nvml
    monkeypatch.setattr(nvml, "SAMPLE_S", 0.001)
    monitor = nvml.WindowMonitor()
    monitor.nvml, monitor.handle = ThrottledOnce(), 0
    monitor.start()
    deadline = time.monotonic() + 5
    while monitor.nvml.reads < 4 and time.monotonic() < deadline:
        time.sleep(0.002)
    record = monitor.stop()
    assert record["samples"] >= 3
    assert record["slowdowns"] == ["thermal (software)"] and record["clock_event_reasons"] == 0x21


class SteadyCounter:
    """An NVML drawing a steady 300 W: its energy counter (mJ) is read at the window's start and at its end."""
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, window_s: float):
        self.readings = iter([0, round(300 * window_s * 1e3)])

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return next(self.readings)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 61


def monitored_window(monkeypatch, window_s: float) -> dict:
    """The record of a window that lasted exactly window_s on the monitor's clock (no sleeping: the clock is fake)."""
    import types
    from kbench.gpu import nvml
    clock = iter([1000.0, 1000.0 + window_s])
    monkeypatch.setattr(nvml, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    monitor = nvml.WindowMonitor()
    monitor.nvml, monitor.handle = SteadyCounter(window_s), 0
    monitor.start()
    return monitor.stop()


def test_a_window_just_under_the_energy_minimum_has_no_energy_and_one_just_over_it_has(monkeypatch):
    """Both sides of MIN_ENERGY_WINDOW_S, and of the bound behind it: NVML's counter moves in ~100 ms steps, so a
    window of fewer than ten steps would give J/step off by more than a tenth and must give none."""
    from kbench.gpu import nvml
    ten_counter_steps_s = 10 * 0.1
    for under in (0.99 * nvml.MIN_ENERGY_WINDOW_S, 0.99 * ten_counter_steps_s):
        record = monitored_window(monkeypatch, under)
        assert record["window_s"] == pytest.approx(under)
        assert record["energy_j"] is None and record["mean_power_w"] is None, under
        assert record["energy_note"] == (f"no energy: the timed window lasted {under:.2f} s, under the "
                                         f"{nvml.MIN_ENERGY_WINDOW_S:g} s the energy counter's ~100 ms steps resolve")
    over = 1.01 * nvml.MIN_ENERGY_WINDOW_S
    record = monitored_window(monkeypatch, over)
    assert record["energy_note"] is None
    assert record["energy_j"] == pytest.approx(300 * over, rel=1e-3)
    assert record["mean_power_w"] == pytest.approx(300, rel=1e-3)


# ---------------------------------------------------------------- the device a cell ran on is the one it leased

A = "8f4c6b2e-1d3a-4c5b-9e7f-0a1b2c3d4e5f"         # a device's UUID as torch prints it (no GPU- or MIG- prefix)
B = "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70"


def identity(lease, uuid=None, nvml_uuid=None, mig_mode=False, name="NVIDIA H100 80GB HBM3", accelerator="gpu",
             leased_uuids=None):
    """check_device_identity of a GPU cell whose framework reports `uuid` (None: it has none, as JAX and TensorFlow)
    and whose NVML names `nvml_uuid` for the visible device, leased `lease` by the launcher, which knew the leased
    GPUs' UUIDs as `leased_uuids` (None: it did not)."""
    from kbench.run import runner
    from test_launch import synthetic_spec
    facts = {"kind": "gpu", "name": name, "uuid": uuid,
             "nvml": {"uuid": nvml_uuid, "name": name, "mig_mode": mig_mode} if nvml_uuid else None}
    context = {"launcher": {"gpus_allocated": lease, **({"gpu_uuids": leased_uuids} if leased_uuids else {})}} \
        if lease is not None else {}
    return runner.check_device_identity(synthetic_spec().replace(accelerator=accelerator), "torch", facts, context)


@pytest.mark.parametrize("lease, uuid, nvml_uuid, leased_uuids", [
    ([f"GPU-{A}"], A, f"GPU-{A}", None),               # torch's own UUID, the lease by UUID (host, docker, apptainer)
    ([f"GPU-{A.upper()}"], A, None, None),              # any case; no NVML
    ([f"GPU-{A}"], None, f"GPU-{A}", None),             # JAX, TensorFlow: NVML's view of the visible device
    (["2"], A, f"GPU-{A}", [f"GPU-{A}"]),               # podman's lease by index: the UUID the launcher leased
    (["2"], None, f"GPU-{A}", [f"GPU-{A}"]),            # ... JAX, TensorFlow and Paddle there too
])
def test_a_cell_on_its_leased_device_passes_the_identity_check(lease, uuid, nvml_uuid, leased_uuids):
    found = identity(lease, uuid, nvml_uuid, leased_uuids=leased_uuids)
    assert found["checked"] is True and found["mig"] is False and found["leased"] == lease


@pytest.mark.parametrize("lease, uuid, nvml_uuid, leased_uuids, named", [
    ([f"GPU-{B}"], A, f"GPU-{A}", None, (A, f"GPU-{B}")),     # CUDA's fastest-first order picked another GPU
    ([f"GPU-{B}"], None, f"GPU-{A}", None, (f"GPU-{A}", f"GPU-{B}")),
    (["2"], A, f"GPU-{A}", [f"GPU-{B}"], (A, f"GPU-{B}")),    # torch in podman: not its own one GPU against itself
    (["2"], None, f"GPU-{A}", [f"GPU-{B}"], (f"GPU-{A}", f"GPU-{B}")),   # a JAX cell on an index lease: checked
])
def test_a_cell_on_another_device_than_its_lease_fails_naming_both(lease, uuid, nvml_uuid, leased_uuids, named):
    from kbench.run import runner
    with pytest.raises(runner.DeviceMismatch) as error:
        identity(lease, uuid, nvml_uuid, leased_uuids=leased_uuids)
    assert all(name in str(error.value) for name in named), str(error.value)


def test_a_mig_instance_leased_by_its_uuid_passes_and_is_named_mig_and_a_mig_gpu_leased_whole_fails():
    from kbench.run import runner
    found = identity([f"MIG-{A}"], A, f"MIG-{A}", name="NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    assert found["checked"] is True and found["mig"] is True
    with pytest.raises(runner.DeviceMismatch, match=f"the launcher leased GPU-{B}, a GPU in MIG mode"):
        identity([f"GPU-{B}"], None, f"GPU-{B}", mig_mode=True, name="NVIDIA A100-SXM4-40GB")


def test_nothing_to_compare_is_said_and_a_cpu_cell_has_no_identity_check():
    unleased = identity(None, A, f"GPU-{A}")
    assert unleased["checked"] is False and "no lease" in unleased["reason"]
    no_uuid = identity([f"GPU-{A}"], None, None)
    assert no_uuid["checked"] is False and "no device UUID" in no_uuid["reason"]
    unknown = identity(["2"], A, f"GPU-{A}")         # an index lease whose UUID the launcher did not know
    assert unknown["checked"] is False and unknown["reason"] == "the lease names GPU 2 and the launcher knew no " \
                                                                "UUID for it"
    assert identity([f"GPU-{A}"], A, f"GPU-{A}", accelerator="cpu") is None


@pytest.mark.parametrize("leased, status", [(["GPU-fake-2"], "ok"), (["GPU-fake-1"], "failed")])
def test_a_cell_whose_visible_gpu_is_not_its_lease_fails_with_device_mismatch(tmp_path, monkeypatch, leased, status):
    """In process, the synthetic GPU on the fake NVML: CUDA_VISIBLE_DEVICES names GPU-fake-2, the launcher's context
    says it leased `leased`. The check runs before the model is built."""
    from kbench.run import runner
    from kbench.stacks import lockcheck
    from test_launch import synthetic_spec
    sys.path.insert(0, str(FAKE_NVML))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-2")
    monkeypatch.setenv("KBENCH_SYNTHETIC_GPU", "1")
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lockcheck.installed().items())))
    monkeypatch.setenv("KBENCH_LOCK", str(lock))
    try:
        result = runner.run(synthetic_spec(build_s=0).replace(accelerator="gpu"),
                            {"runtime": "test", "launcher": {"gpus_allocated": leased}})
    finally:
        sys.path.remove(str(FAKE_NVML))
        sys.modules.pop("pynvml", None)
    assert result.status == status, result.error
    if status == "failed":
        assert result.error["type"] == "DeviceMismatch" and result.params is None
        assert "GPU-fake-2" in result.error["message"] and "GPU-fake-1" in result.error["message"]
    else:
        assert result.provenance["device_identity"]["checked"] is True


def test_application_clocks_and_the_processes_before_the_window_are_recorded(monkeypatch):
    """The fake NVML with its clocks held at a set application clock (reason 0x2, SM 1410 of a default 1980) and a
    second process (PID 777) on the GPU before the window, gone by its end: the record names both, and 0x2 is no
    slowdown."""
    sys.path.insert(0, str(FAKE_NVML))
    monkeypatch.setenv("KBENCH_FAKE_NVML_REASONS", str(0x2))
    monkeypatch.setenv("KBENCH_FAKE_NVML_APPLICATION_SM_MHZ", "1410")
    monkeypatch.setenv("KBENCH_FAKE_NVML_PIDS", "777")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-1")
    try:
        from kbench.gpu import nvml
        monitor = nvml.WindowMonitor()
        monitor.start()
        monkeypatch.setenv("KBENCH_FAKE_NVML_PIDS", "")
        record = monitor.stop()
    finally:
        sys.path.remove(str(FAKE_NVML))
        sys.modules.pop("pynvml", None)
    assert record["application_clocks_set"] is True and record["clock_event_reasons"] == 0x2
    assert record["slowdowns"] == [] and record["power_capped"] is False
    assert record["application_sm_clock_mhz"] == 1410 and record["default_application_sm_clock_mhz"] == 1980
    assert record["application_memory_clock_mhz"] == record["default_application_memory_clock_mhz"] == 2619
    assert record["processes_before_window"] == [{"pid": 4242, "used_bytes": 3 * 2**30},
                                                 {"pid": 777, "used_bytes": 2**30}]


# ---------------------------------------------------------------- MIG: leased by its instances

MIG_LISTING = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)
  MIG 3g.20gb     Device  0: (UUID: MIG-1111)
  MIG 3g.20gb     Device  1: (UUID: MIG-2222)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)
"""
MIG_ROWS = "0, NVIDIA A100-SXM4-40GB, 580.95.05, GPU-aaaa, 00000000:07:00.0\n" \
           "1, NVIDIA A100-SXM4-40GB, 580.95.05, GPU-bbbb, 00000000:0F:00.0\n"


def mig_host():
    from kbench.gpu import preflight
    return preflight.Host(run=lambda argv: MIG_LISTING if argv[1:] == ["-L"] else MIG_ROWS)


def test_a_gpu_in_mig_mode_is_leased_by_its_instances_never_whole():
    """nvidia-smi --query-gpu lists parents only: CUDA runs on a MIG instance, never on such a GPU whole, so the
    lease picks among the instances (podman's CDI names them 0:0, 0:1; CUDA and docker by MIG- UUID)."""
    from kbench.gpu import preflight
    found = preflight.leasable(mig_host())
    assert [(d["index"], d["uuid"], d.get("mig", False)) for d in found] == [
        ("0:0", "MIG-1111", True), ("0:1", "MIG-2222", True), ("1", "GPU-bbbb", False)]
    assert found[0]["name"] == "NVIDIA A100-SXM4-40GB MIG 3g.20gb" and found[0]["parent"] == "GPU-aaaa"
    assert preflight.visible(found, {"CUDA_VISIBLE_DEVICES": "MIG-2222"}) == [found[1]]   # exported: kept, not lost


def test_slurms_mig_gres_leases_the_instance_it_names(monkeypatch):
    """SLURM's MIG gres numbers instances (its 0 is no GPU index) and names them in CUDA_VISIBLE_DEVICES: the lease
    is that instance, by the runtime's name for it, its facts the instance's."""
    from kbench.run import launch
    from kbench.machine.runtimes import RUNTIMES
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222")
    devices = launch.allocation_devices(["0"], mig_host())
    assert [d["uuid"] for d in devices] == ["MIG-2222"]
    assert launch.allocation_names(RUNTIMES["podman"], ["0"], mig_host()) == ["0:1"]
    assert launch.allocation_names(RUNTIMES["host"], ["0"], mig_host()) == ["MIG-2222"]


def test_a_slurm_job_with_constrained_devices_knows_its_gpu_by_uuid(monkeypatch):
    """SLURM gave the node's GPU 5; under ConstrainDevices the job's nvidia-smi lists it alone, as index 0: the lease's
    facts are that one GPU's (its UUID for the identity check and the compile cache), not "leased None"."""
    from kbench.gpu import preflight
    from kbench.run import launch
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    job_view = preflight.Host(run=lambda argv: "0, NVIDIA H100 80GB HBM3, 580.95.05, GPU-five, 00000000:9A:00.0\n")
    assert [d["uuid"] for d in launch.allocation_devices(["5"], job_view)] == ["GPU-five"]
    node_view = preflight.Host(run=lambda argv: "".join(f"{i}, NVIDIA H100 80GB HBM3, 580.95.05, GPU-{i}, x\n"
                                                        for i in range(8)))
    assert [d["uuid"] for d in launch.allocation_devices(["5"], node_view)] == ["GPU-5"]
    assert launch.allocation_devices(["5", "6"], job_view) == []          # not as many: not known
