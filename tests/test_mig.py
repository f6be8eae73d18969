"""A MIG instance as a cell sees it, on constructed NVML trees (tests/fake_nvml: KBENCH_FAKE_NVML_TREE): in a
container handed one instance (podman's CDI nvidia.com/gpu=0:1, docker's --gpus device=MIG-...) there is no
CUDA_VISIBLE_DEVICES, and NVML's device 0 is the instance's parent GPU, in MIG mode, with the instance among its MIG
devices; on the host (and in apptainer) CUDA_VISIBLE_DEVICES=MIG-... names it. Either way the cell's device is the
instance: the identity check compares the instance's UUID with the lease, and the window monitor measures no energy,
clocks or temperature on it (the whole GPU's, its other instances' work included) and says why."""
import json
import sys
from pathlib import Path

import pytest

from test_launch import synthetic_spec

FAKE_NVML = Path(__file__).parent / "fake_nvml"
PARENT = "GPU-a100"
NAME = "NVIDIA A100-SXM4-40GB"


def tree(*instances, mig=True) -> str:
    """One A100 whose MIG devices are `instances` by MIG device index (None: an index that holds no device this
    process sees); mig=False: a whole GPU, MIG mode off."""
    return json.dumps([{"uuid": PARENT, "name": NAME, **({"mig": list(instances)} if mig else {})}])


@pytest.fixture
def fake_nvml(monkeypatch):
    """The fake NVML importable as pynvml, and no CUDA_VISIBLE_DEVICES (a container's view); a test sets the tree."""
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sys.modules.pop("pynvml", None)
    yield monkeypatch
    sys.modules.pop("pynvml", None)


def gpu_cell(tmp_path, monkeypatch, lease: list[str], leased_uuids: list[str]):
    """One synthetic GPU cell in process (its framework reports no UUID, as JAX, TensorFlow and Paddle), leased
    `lease` by the launcher, which knew it as `leased_uuids`."""
    from kbench.run import runner
    from kbench.stacks import lockcheck
    monkeypatch.setenv("KBENCH_SYNTHETIC_GPU", "1")
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lockcheck.installed().items())))
    monkeypatch.setenv("KBENCH_LOCK", str(lock))
    return runner.run(synthetic_spec(build_s=0).replace(accelerator="gpu"),
                      {"runtime": "podman", "launcher": {"gpus_allocated": lease, "gpu_uuids": leased_uuids}})


@pytest.mark.parametrize("leased, status", [("MIG-2", "ok"), ("MIG-3", "failed")])
def test_a_container_cell_on_a_mig_instance_is_checked_against_its_lease_by_the_instances_uuid(
        tmp_path, fake_nvml, leased, status):
    """podman's CDI 0:1: the container sees GPU-a100 in MIG mode and, at MIG device index 1, the one instance it was
    handed. Leased that instance: ok, checked, the instance's UUID from NVML (not the parent's, which failed every
    JAX, TensorFlow and Paddle cell). Leased another instance: DeviceMismatch naming both."""
    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree(None, "MIG-2"))
    result = gpu_cell(tmp_path, fake_nvml, ["0:1"], [leased])
    assert result.status == status, result.error
    if status == "failed":
        assert result.error["type"] == "DeviceMismatch"
        assert "MIG-2" in result.error["message"] and "MIG-3" in result.error["message"]
        return
    identity = result.provenance["device_identity"]
    assert identity["checked"] is True and identity["mig"] is True and identity["uuid"] == "MIG-2"
    assert identity["uuid_from"] == "NVML, the MIG device under the visible GPU"
    facts = result.provenance["device_facts"]["nvml"]
    assert facts["mig_instance"] is True and facts["mig_parent_uuid"] == PARENT and facts["index"] == 0
    assert facts["name"] == f"{NAME} MIG 3g.20gb" and facts["memory_total_bytes"] == 20 * 2**30
    assert facts["mig_instances_seen"] == ["MIG-2"]


def test_a_cell_on_a_mig_instance_says_energy_and_clocks_are_not_measured_and_a_whole_gpu_measures_them(
        tmp_path, fake_nvml):
    """On the instance: no energy, clocks, temperature or slowdowns (the parent's would count its other instances'
    work), and why, in the record; the memory in use is the instance's (2 GiB), not the GPU's (4 GiB). The same GPU
    with MIG mode off, leased whole: clocks sampled, its memory in use, and no MIG note."""
    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree(None, "MIG-2"))
    on_instance = gpu_cell(tmp_path, fake_nvml, ["0:1"], ["MIG-2"])
    assert on_instance.status == "ok", on_instance.error
    energy = on_instance.energy
    assert energy["energy_j"] is None and energy["mean_power_w"] is None and energy["samples"] == 0
    assert energy["energy_note"] == energy["clocks_note"] == (
        f"not measured on a MIG instance: NVML's energy counter, clocks, temperature and clock-event reasons are the "
        f"whole GPU's ({PARENT}), its other instances' work included")
    assert energy["sm_clock_mhz_mean"] is None and energy["temperature_c_max"] is None and energy["slowdowns"] == []
    assert energy["power_capped"] is None and energy["window_s"] > 0
    assert energy["processes_before_window"] == [{"pid": 4242, "used_bytes": 3 * 2**30}]
    assert on_instance.memory["nvml_used_bytes_after_steps"] == 2 * 2**30

    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree(mig=False))
    whole = gpu_cell(tmp_path, fake_nvml, ["0"], [PARENT])
    assert whole.status == "ok", whole.error
    assert whole.provenance["device_identity"]["mig"] is False
    assert whole.energy["sm_clock_mhz_mean"] == 1980 and whole.energy["samples"] >= 1
    assert "clocks_note" not in whole.energy and not str(whole.energy["energy_note"]).startswith("not measured")
    assert whole.memory["nvml_used_bytes_after_steps"] == 4 * 2**30
    assert "mig_instance" not in whole.provenance["device_facts"]["nvml"]


@pytest.mark.parametrize("leased, checked", [("MIG-3", None), ("MIG-2", False)])
def test_where_nvml_shows_several_instances_a_lease_outside_them_fails_and_one_among_them_is_not_checked(
        tmp_path, fake_nvml, leased, checked):
    """No CUDA_VISIBLE_DEVICES and two instances in sight (a cell run outside the launcher's narrowing): CUDA runs
    on one of them, and a framework without a UUID does not say which. A lease outside them cannot be the device:
    DeviceMismatch. A lease among them is not checked against the first one NVML lists, and says so."""
    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree("MIG-1", "MIG-2"))
    result = gpu_cell(tmp_path, fake_nvml, [leased], [leased])
    if checked is None:
        assert result.status == "failed" and result.error["type"] == "DeviceMismatch"
        assert "MIG-1, MIG-2" in result.error["message"] and leased in result.error["message"]
        return
    assert result.status == "ok", result.error
    identity = result.provenance["device_identity"]
    assert identity["checked"] is False and identity["reason"] == (
        "NVML shows 2 MIG instances, the leased MIG-2 among them, and numpy reports no UUID of the one CUDA runs "
        "on")


def test_a_mig_instance_named_in_cuda_visible_devices_is_read_as_the_instance_too(fake_nvml):
    """The host and apptainer: CUDA_VISIBLE_DEVICES=MIG-2 names the instance; its facts are the instance's, with its
    GPU beside them, and its window measures no energy. A GPU named by its GPU- UUID is the GPU, measured."""
    from kbench.gpu import nvml
    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree("MIG-1", "MIG-2"))
    fake_nvml.setenv("CUDA_VISIBLE_DEVICES", "MIG-2")
    facts = nvml.facts()
    assert facts["uuid"] == "MIG-2" and facts["mig_instance"] is True and facts["mig_parent_uuid"] == PARENT
    assert facts["mig_instances_seen"] is None and facts["mig_mode"] is True
    monitor = nvml.WindowMonitor()
    monitor.start()
    assert monitor.stop()["energy_note"].startswith("not measured on a MIG instance")
    fake_nvml.setenv("CUDA_VISIBLE_DEVICES", PARENT)
    facts = nvml.facts()
    assert facts["uuid"] == PARENT and "mig_instance" not in facts and facts["mig_mode"] is True
    assert nvml.WindowMonitor().not_measured is None


def test_a_gpu_in_mig_mode_without_an_instance_in_sight_is_the_whole_gpu_and_fails_its_lease(fake_nvml):
    """A container handed a MIG-mode GPU whole (no instance among its MIG devices): NVML's device is the GPU, MIG
    mode on, and the identity check refuses it (CUDA would run on an instance, not on the GPU)."""
    from kbench.gpu import nvml
    from kbench.run import runner
    fake_nvml.setenv("KBENCH_FAKE_NVML_TREE", tree())
    facts = nvml.facts()
    assert facts["uuid"] == PARENT and facts["mig_mode"] is True and "mig_instance" not in facts
    with pytest.raises(runner.DeviceMismatch, match=f"the launcher leased {PARENT}, a GPU in MIG mode"):
        runner.check_device_identity(synthetic_spec().replace(accelerator="gpu"), "jax",
                                     {"kind": "gpu", "name": NAME, "uuid": None, "nvml": facts},
                                     {"launcher": {"gpus_allocated": ["0"], "gpu_uuids": [PARENT]}})
