"""The GPU check's acceptance steps (kbench.gpucheck.steps), each on both sides of what it decides: passed
on a record or host that holds, FAILED on one that does not, not measured where the host lacks what it needs. The
whole check with these steps runs in tests/test_gpucheck.py (a fake nvidia-smi, the synthetic stack)."""
import os

import pytest

from kbench.contract import cell
from kbench.machine import host
from kbench.gpucheck import check as gpucheck, steps as steps_of
from kbench.plan import matrix

from conftest import CONFIG
from test_host import NOBODY, shared_folder  # noqa: F401  (a fixture)
from test_launch import fake_devices, fake_topology, gpus_on_bus

UUID = "GPU-8f4c1a2b-0000-1111-2222-333344445555"
OTHER = "GPU-00000000-9999-8888-7777-666655554444"


def passed(row):
    return row["status"] == steps_of.PASSED


def failed(row, *words):
    return row["status"].startswith("FAILED: ") and all(w in row["status"] for w in words)


# ---------------------------------------------------------------- CPU shares by core

@pytest.fixture
def sixteen_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))


def test_the_launchers_shares_pass_on_two_sockets_with_hyperthreads(tmp_path, sixteen_cpus):
    sysfs = fake_topology(tmp_path / "sys", gpu_nodes=(1, 1, 0, 0))
    row = steps_of.cpu_shares_step(gpus_on_bus(4), sysfs)
    assert passed(row), row
    assert row["figures"].startswith("GPU 0 (node 1): CPUs 4-5,12-13; GPU 1 (node 1): CPUs 6-7,14-15"), row


@pytest.mark.parametrize("shares, words", [
    ([[0, 8, 1, 9], [2, 10, 3, 11], [4, 12, 5, 13], [5, 13, 6, 14]], ["a CPU is in two shares"]),
    ([[0, 1, 2, 3], [8, 9, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]], ["core 0,8 is split between shares"]),
    ([[0, 8, 1, 9], [2, 10, 3, 11], [4, 12, 5, 13], [6, 14]], ["shares of [2, 4] CPUs"]),
    ([[0, 8, 1, 9], [2, 10, 3, 11], [4, 12, 5, 13], [6, 14, 7, 15]], ["GPU 0's share is off its NUMA node 1"]),
    ([[0, 8, 1], [2, 10, 3, 11], [4, 12, 5, 13], [6, 14, 7, 15]], ["core 1,9 is split between shares"]),   # one, none
])
def test_shares_that_overlap_split_a_core_differ_in_size_or_leave_their_node_fail(tmp_path, sixteen_cpus, monkeypatch,
                                                                                  shares, words):
    """The launcher's layout replaced by a wrong one, one fault each: the step names it."""
    sysfs = fake_topology(tmp_path / "sys", gpu_nodes=(1, 1, 0, 0))
    monkeypatch.setattr(steps_of.launch, "cpu_shares", lambda devices, sysfs=None: shares)
    row = steps_of.cpu_shares_step(gpus_on_bus(4), sysfs)
    assert failed(row, *words), row


def test_a_gpu_left_off_its_split_node_fails_and_the_split_layout_passes(tmp_path, monkeypatch):
    """NPS4 in small (8 nodes of 2 cores, 2 GPUs on each of nodes 0-3): the second GPU of a pair given a GPU-less node
    used to pass; its node could hold a share for each of its GPUs."""
    sysfs = fake_topology(tmp_path / "sys", sockets=8, cores=2, threads=1, gpu_nodes=(0, 0, 1, 1, 2, 2, 3, 3))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert passed(steps_of.cpu_shares_step(gpus_on_bus(8), sysfs))
    left = [[0, 1], [8, 9], [2, 3], [10, 11], [4, 5], [12, 13], [6, 7], [14, 15]]
    monkeypatch.setattr(steps_of.launch, "cpu_shares", lambda devices, sysfs=None: left)
    assert failed(steps_of.cpu_shares_step(gpus_on_bus(8), sysfs), "GPU 1's share is off its NUMA node 0, whose 2 "
                                                                   "cores give each of its 2 GPUs 1")


def test_fewer_cpus_than_gpus_and_no_gpu_are_not_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert steps_of.cpu_shares_step(fake_devices(2), tmp_path / "no-sysfs")["status"].startswith(
        "not measured: fewer CPUs (1) than GPUs (2)")
    assert steps_of.cpu_shares_step([])["status"] == "not measured: no GPU listed"


# ---------------------------------------------------------------- a second account's lease

@pytest.fixture
def as_root():
    if os.geteuid() != 0 or host.python_for(NOBODY) is None:
        pytest.skip("acting as a second account needs root and a Python that uid 65534 can run")


def test_a_second_account_takes_is_refused_and_takes_again(as_root, shared_folder):  # noqa: F811
    row = steps_of.second_account_lease_step(fake_devices(1), leases=shared_folder)
    assert passed(row), row
    assert row["figures"].startswith("uid 65534 on GPU 0: refused while this process held it, taken after;"), row
    assert row["figures"].endswith("mode 666"), row          # made by this account for every account


def test_a_lease_this_process_does_not_really_hold_fails(as_root, shared_folder, monkeypatch):  # noqa: F811
    """flock made a no-op in this process: the second account takes the GPU while it is 'held'."""
    monkeypatch.setattr(steps_of.fcntl, "flock", lambda fd, how: None)
    row = steps_of.second_account_lease_step(fake_devices(1), leases=shared_folder)
    assert failed(row, "while held: taken, expected refused"), row


def test_a_lock_file_another_account_cannot_open_fails(as_root, shared_folder):  # noqa: F811
    """A lock file an older launcher made 0600 under root's umask locks the second account out of that GPU."""
    path = steps_of.launch.lease_path("GPU-fake-0", shared_folder)
    path.touch()
    path.chmod(0o600)
    row = steps_of.second_account_lease_step(fake_devices(1), leases=shared_folder)
    assert failed(row, "while held: error: PermissionError", "after: error: PermissionError"), row
    path.chmod(0o644)       # read-only is all the launcher's open needs (kbench.machine.host.open_lock)
    assert passed(steps_of.second_account_lease_step(fake_devices(1), leases=shared_folder))


def test_an_account_that_is_not_root_cannot_act_as_a_second_one(monkeypatch):
    monkeypatch.setattr(steps_of.os, "geteuid", lambda: 1000)
    row = steps_of.second_account_lease_step(fake_devices(1))
    assert row["status"] == "not measured: this account is uid 1000, not root: it cannot act as another", row


# ---------------------------------------------------------------- a process started as a cell is

def launched(runtime="preinstalled", given=(2, 3), seen=(2, 3), pinning="affinity", leased=UUID, nvml_uuid=UUID,
             torch_uuid=None, status="ok", gpu_uuids=None):
    job = {"cell_id": f"gpucheck/launched/{runtime}", "job": "gpucheck_launched", "accelerator": "gpu",
           "framework_def": {"stack": "synthetic"}}
    context = {"runtime": runtime, "launcher": {"cpus_allocated": list(given) if given else None,
                                                "cpu_pinning": pinning, "gpus_allocated": [leased],
                                                **({"gpu_uuids": gpu_uuids} if gpu_uuids else {})}}
    result = cell.new_result(job, context, status, None if status == "ok" else cell.error_info("Timeout", "late"))
    result.evidence = {"cpus": list(seen), "nvml": {"uuid": nvml_uuid}, "torch_uuid": torch_uuid,
                       "cuda_visible_devices": leased}
    return result


NOT_DELEGATED = host.Delegation(False, "user@1000.service/cgroup.controllers: cpu io memory pids")


def test_a_process_on_the_cpus_it_was_given_passes_and_says_how_it_was_pinned():
    row = steps_of.pinning_step(launched("podman", pinning="client affinity"), NOT_DELEGATED)
    assert passed(row) and row["step"] == "CPU pinning (podman)", row
    assert row["figures"].startswith("client affinity; given CPUs 2-3, ran on 2-3; cpuset not delegated"), row


@pytest.mark.parametrize("result, status", [
    (launched(seen=range(16)), "FAILED: ran on CPUs 0-15, given 2-3 (affinity)"),
    (launched(status="failed"), "FAILED: the process did not run: failed: Timeout"),
    (launched(given=None, pinning="none"), "not measured: no CPU share (fewer CPUs than GPUs)"),
])
def test_a_process_off_its_share_fails_and_one_without_a_share_is_not_measured(result, status):
    assert steps_of.pinning_step(result, NOT_DELEGATED)["status"] == status


DEVICES = [{"index": "0", "uuid": OTHER}, {"index": "1", "uuid": UUID}]


@pytest.mark.parametrize("result", [launched(), launched(torch_uuid=UUID.removeprefix("GPU-"), nvml_uuid=None),
                                    launched("podman", leased="1")])
def test_the_launched_process_on_its_leased_gpu_passes_by_uuid_or_by_cdi_index(result):
    assert passed(steps_of.launched_device_step(result, DEVICES))


@pytest.mark.parametrize("result, status", [
    (launched(nvml_uuid=OTHER), f"FAILED: leased {UUID}, ran on {OTHER}"),
    (launched("podman", leased="0"), f"FAILED: leased {OTHER}, ran on {UUID}"),
    (launched(torch_uuid=OTHER.removeprefix("GPU-")), f"FAILED: leased {UUID}, ran on {OTHER.removeprefix('GPU-')}"),
    (launched(nvml_uuid=None), "not measured: the process saw no GPU UUID (no torch with a GPU, no NVML)"),
    # a lease by an index no listed GPU has, whose UUID the launcher did not know: nothing to hold the process to
    (launched("podman", leased="5"), f"FAILED: leased 5, whose UUID nothing knows (no GPU listed as 5, none the "
                                     f"launcher knew), ran on {UUID}"),
])
def test_the_launched_process_on_another_gpu_fails(result, status):
    assert steps_of.launched_device_step(result, DEVICES)["status"] == status


def test_a_slurm_job_on_gpu_5_of_a_node_with_constrained_devices_passes_by_the_uuid_its_lease_knew():
    """SLURM gave the job the node's GPU 5; with ConstrainDevices its nvidia-smi lists that GPU as 0 alone. The
    container runtime is handed the node's index "5"; the launcher knew its UUID from the job's own listing."""
    view = [{"index": "0", "uuid": UUID}]
    assert passed(steps_of.launched_device_step(launched("podman", leased="5", gpu_uuids=[UUID]), view))
    assert steps_of.launched_device_step(launched("podman", leased="5", gpu_uuids=[OTHER]), view)["status"] == \
        f"FAILED: leased {OTHER}, ran on {UUID}"


# ---------------------------------------------------------------- the conv probe

def probe(framework, mode, matmul="fp32", conv="fp32", error=None):
    return {"framework": framework, "TF32 mode": mode, "float32 matmul is": matmul, "float32 conv is": conv,
            "error": error}


def test_float32_convs_and_matmuls_with_tf32_off_pass():
    row = steps_of.conv_probe_step([probe("torch", "off"), probe("torch", "on", "tf32", "tf32"), probe("jax", "off")])
    assert passed(row) and row["figures"] == "torch: matmul fp32, conv fp32; jax: matmul fp32, conv fp32", row


@pytest.mark.parametrize("probes, status", [
    ([probe("torch", "off"), probe("jax", "off", conv="tf32")], "FAILED: jax: conv is tf32 with TF32 off"),
    ([probe("torch", "off", matmul="tf32")], "FAILED: torch: matmul is tf32 with TF32 off"),
    ([probe("torch", "off", conv=None), probe("torch", "on", "tf32", "tf32")],
     "not measured: no conv probe ran with TF32 off"),
    ([probe("jax", "off", error="ran on cpu")], "not measured: no conv probe ran with TF32 off"),
])
def test_a_conv_below_float32_with_tf32_off_fails(probes, status):
    assert steps_of.conv_probe_step(probes)["status"] == status


# ---------------------------------------------------------------- the cells' records

def gpu_cell(name="native-torch-eager", mean_ms=10.0, busy=None, identity=None, accelerator="gpu", status="ok"):
    spec = matrix.spec({**CONFIG, "accelerator": accelerator}, "smoke", "bert", "fit", 32, "float32", name, "strict")
    result = cell.new_result(spec, {"device_identity": identity}, status)
    result.timing = {"mean_ms": mean_ms, "device_busy": busy}
    return result


def busy(share=0.8, window=10.0, reason=None, overhead=1.25):
    return {"share": share, "window_ms_per_step": window, "profiler_overhead": overhead, "reason": reason}


NO_PROFILER = busy(None, reason="jax on gpu: no device profiler here")


def test_busy_shares_over_their_own_window_pass_and_unprofiled_columns_are_named():
    row = steps_of.busy_share_step([gpu_cell(busy=busy()), gpu_cell("keras3-jax", busy=NO_PROFILER),
                                    gpu_cell(accelerator="cpu", busy=busy(None))])
    assert passed(row), row
    assert row["figures"] == ("smoke/strict/bert/fit/bs32/float32/native-torch-eager: 80% busy, profiled x1.25; "
                              "no device profiler: keras3-jax")


@pytest.mark.parametrize("record, words", [
    (busy(window=12.5), ["share over 12.5 ms/step, not its window's 10.0"]),
    (busy(None, reason="the device profiler stopped collecting early: Kineto"), ["no share (the device profiler "
                                                                                 "stopped collecting early"]),
    (busy(None), ["no share (no reason given)"]),
    (busy(1.2), ["share 1.2"]),
    (busy(0.0), ["share 0.0"]),
])
def test_a_busy_share_over_another_window_missing_or_out_of_range_fails(record, words):
    assert failed(steps_of.busy_share_step([gpu_cell(busy=record)]), *words)


def test_busy_share_without_a_profiled_gpu_cell_is_not_measured():
    assert steps_of.busy_share_step([gpu_cell(status="failed")])["status"] == "not measured: no GPU cell ran"
    assert steps_of.busy_share_step([gpu_cell(busy=NO_PROFILER)])["status"] == \
        "not measured: no GPU cell with a device profiler ran"


def test_cells_that_checked_their_device_pass_and_one_that_did_not_fails():
    checked = {"checked": True, "uuid": UUID, "uuid_from": "torch's own device properties"}
    assert passed(steps_of.device_uuid_step([gpu_cell(identity=checked)]))
    row = steps_of.device_uuid_step([gpu_cell(identity=checked), gpu_cell("keras3-jax", identity={
        "checked": False, "reason": "no device UUID from the framework or NVML"})])
    assert row["status"] == ("FAILED: smoke/strict/bert/fit/bs32/float32/keras3-jax: no device UUID from the "
                             "framework or NVML"), row
    assert failed(steps_of.device_uuid_step([gpu_cell()]), "no device identity recorded")
    assert steps_of.device_uuid_step([])["status"] == "not measured: no GPU cell ran"


def test_a_failed_step_fails_the_check_and_one_not_measured_does_not():
    gpus = [{"index": "0", "uuid": UUID}]
    ok_cell = {"cell": "c", "status": "ok"}
    assert gpucheck.outcome(gpus, {}, [], [ok_cell], [steps_of.step("s", "not measured: no podman")])[0] == 0
    status, verdict = gpucheck.outcome(gpus, {}, [], [ok_cell], [steps_of.step("device UUID", "FAILED: x: y")])
    assert (status, verdict) == (1, "FAILED: 1 step(s): device UUID: x: y")


def test_the_probe_runs_the_frameworks_conv_beside_its_matmul(monkeypatch, capsys):
    """The probe's code, run here with a framework's hooks faked (a float32 matmul, a conv that rounds through
    float16): its line carries the conv's class, and the table's row shows it."""
    import sys
    import types

    import numpy as np

    import kbench.adapters
    from kbench.instruments import numerics
    fake = types.ModuleType("kbench.adapters._hooks")
    fake.torch_hooks = fake.jax_hooks = lambda: {
        "set_tf32": lambda mode, dtype: {"mode": mode}, "device": lambda: {"kind": "gpu", "name": "fake"},
        "matmul": lambda a, b: a @ b, "conv": lambda x, w: numerics.conv_reference(x, w).astype(np.float16)}
    monkeypatch.setitem(sys.modules, "kbench.adapters._hooks", fake)
    monkeypatch.setattr(kbench.adapters, "_hooks", fake, raising=False)
    monkeypatch.setattr(sys, "argv", ["probe", "jax", "off"])
    exec(gpucheck.PROBE.format(scripts=str(host.REPO / "scripts"), size=64), {})
    line = capsys.readouterr().out.strip()
    result = __import__("json").loads(line.removeprefix("PROBE "))
    assert (result["observed_class"], result["conv_class"]) == ("fp32", "tf32"), result
    row = gpucheck.probe_row("jax", "off", result)
    assert (row["float32 matmul is"], row["float32 conv is"]) == ("fp32", "tf32")
    assert steps_of.conv_probe_step([row])["status"] == "FAILED: jax: conv is tf32 with TF32 off"


# ---------------------------------------------------------------- the first GPU run's fourth pass, on a lent GPU

H100 = [{"index": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "driver_version": "580", "pci_bus_id": "x"},
        {"index": "1", "name": "NVIDIA H100 80GB HBM3", "uuid": OTHER, "driver_version": "580", "pci_bus_id": "y"}]


def test_the_cache_step_passes_where_the_key_tells_gpu_models_apart_and_fails_where_it_does_not(monkeypatch):
    assert passed(steps_of.cache_across_models_step(H100))
    monkeypatch.setattr(steps_of.compile_cache, "device_key", lambda device: "gpu")      # the key blind to the GPU
    assert steps_of.cache_across_models_step(H100)["status"].startswith("FAILED: the key does not tell")


def test_the_index_lease_step_passes_where_the_check_holds_the_leased_uuid_and_fails_where_nvml_meets_itself(
        monkeypatch):
    assert passed(steps_of.index_lease_identity_step(H100))
    real = steps_of.runner.check_device_identity

    def against_itself(spec, framework, facts, context):      # the old fallback: NVML's view as the expectation
        context = {"launcher": {"gpus_allocated": context["launcher"]["gpus_allocated"],
                                "gpu_uuids": [facts["nvml"]["uuid"]]}}
        return real(spec, framework, facts, context)
    monkeypatch.setattr(steps_of.runner, "check_device_identity", against_itself)
    assert steps_of.index_lease_identity_step(H100)["status"].startswith("FAILED")


def test_the_slurm_step_resolves_the_last_gpu_in_both_views(monkeypatch):
    row = steps_of.slurm_allocation_step(H100)
    assert passed(row) and row["figures"] == f"GPU 1: node view {OTHER}, job view {OTHER}", row
    monkeypatch.setattr(steps_of.launch, "allocation_devices", lambda allocated, host=None: [])
    assert steps_of.slurm_allocation_step(H100)["status"].startswith("FAILED")


def test_the_mig_step_lists_instances_in_one_line_and_fails_a_mig_gpu_without_one():
    from kbench.gpu import preflight
    listing = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 3g.20gb     Device  0: (UUID: MIG-1)\n" \
              "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-b)\n"
    rows = "0, NVIDIA A100-SXM4-40GB, 580, GPU-a, x\n1, NVIDIA A100-SXM4-40GB, 580, GPU-b, y\n"

    def host_with(modes):
        return preflight.Host(run=lambda argv: listing if argv[1:] == ["-L"] else modes if "mig.mode.current" in
                              argv[1] else rows)
    row = steps_of.mig_step(host_with("0, Enabled\n1, Disabled\n"))
    assert passed(row) and row["figures"] == "0:0 NVIDIA A100-SXM4-40GB MIG 3g.20gb; 1 NVIDIA A100-SXM4-40GB", row
    assert steps_of.mig_step(host_with("0, Enabled\n1, Enabled\n"))["status"].startswith(
        "FAILED: GPU 1 in MIG mode with no MIG instance")


# ---------------------------------------------------------------- MIG in a container

MIG_LISTING = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n  MIG 3g.20gb     Device  0: (UUID: MIG-1)\n"
               "  MIG 3g.20gb     Device  1: (UUID: MIG-2)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-b)\n")
MIG_ROWS = "0, NVIDIA A100-SXM4-40GB, 580, GPU-a, x\n1, NVIDIA A100-SXM4-40GB, 580, GPU-b, y\n"


def mig_host(listing=MIG_LISTING):
    from kbench.gpu import preflight
    return preflight.Host(run=lambda argv: listing if argv[1:] == ["-L"] else MIG_ROWS)


def test_the_mig_instance_leased_is_the_first_a_cell_may_lease_and_a_host_without_one_has_none(monkeypatch):
    for name in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    assert steps_of.mig_instance(mig_host())["uuid"] == "MIG-1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2")           # exported: the cells may lease only that one
    assert steps_of.mig_instance(mig_host())["index"] == "0:1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert steps_of.mig_instance(mig_host("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a)\n")) is None


def test_the_mig_cells_lease_is_the_instance_by_its_cdi_name_and_the_narrowing_ends_with_it(tmp_path, monkeypatch):
    """The launcher's own lease under lease_narrowed_to: podman gets the instance's CDI name (0:1), the record its
    MIG UUID; an exported CUDA_VISIBLE_DEVICES is back as it was after."""
    from kbench.machine.runtimes import RUNTIMES
    from test_launch import synthetic_spec
    for name in ("SLURM_JOB_ID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    monkeypatch.setattr(steps_of.launch, "LEASES", tmp_path)
    monkeypatch.setattr(steps_of.launch.host, "SYSFS", tmp_path / "no-sysfs")
    with steps_of.lease_narrowed_to("MIG-2"), steps_of.launch.gpu_lease(
            synthetic_spec().replace(accelerator="gpu"), RUNTIMES["podman"], host=mig_host()) as lease:
        assert lease.gpus == ["0:1"] and [d["uuid"] for d in lease.devices] == ["MIG-2"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-b"


NOT_ON_INSTANCE = ("not measured on a MIG instance: NVML's energy counter, clocks, temperature and clock-event "
                   "reasons are the whole GPU's (GPU-a), its other instances' work included")
MIG_INSTANCE = {"index": "0:1", "uuid": "MIG-2", "mig": True}


def mig_record(status="ok", leased="MIG-2", ran_on="MIG-2", checked=True, energy_note=NOT_ON_INSTANCE, clocks=None):
    """A synthetic GPU cell's record as the MIG step reads it: its lease, its identity check, its energy."""
    spec = matrix.spec({**CONFIG, "accelerator": "gpu"}, "smoke", "bert", "fit", 32, "float32", "keras3-jax",
                       "strict")
    context = {"runtime": "podman", "launcher": {"gpus_allocated": ["0:1"], "gpu_uuids": [leased]},
               "device_identity": {"checked": checked, "mig": True, "uuid": ran_on,
                                   "uuid_from": "NVML, the MIG device under the visible GPU"}}
    result = cell.new_result(spec, context, status, None if status == "ok" else cell.error_info(
        "DeviceMismatch", f"numpy runs on GPU-a, but the launcher leased {leased}"))
    result.energy = {"energy_j": None, "energy_note": energy_note, "sm_clock_mhz_mean": clocks}
    return result


def test_a_cell_on_a_mig_instance_checked_against_its_lease_and_measuring_no_energy_passes():
    row = steps_of.mig_container_step(mig_record(), MIG_INSTANCE)
    assert passed(row) and row["step"] == "MIG in a container", row
    assert row["figures"] == (f"leased 0:1 (MIG-2); ran on MIG-2 (NVML, the MIG device under the visible GPU); "
                              f"energy: {NOT_ON_INSTANCE}")


@pytest.mark.parametrize("record, words", [
    (mig_record("failed"), ["the cell did not run: failed: DeviceMismatch"]),       # read the parent GPU
    (mig_record(checked=False), ["its identity was not checked as a MIG instance"]),
    (mig_record(energy_note=None, clocks=1980.0), ["reports energy or clocks on the instance: the whole GPU's"]),
    (mig_record(energy_note=None), ["reports energy or clocks"]),        # nothing measured, and no reason said
    (mig_record(energy_note="no energy: the timed window lasted 0.20 s, under the 1 s the energy counter's ~100 ms "
                            "steps resolve", clocks=1980.0), ["reports energy or clocks"]),
])
def test_a_cell_on_a_mig_instance_that_fails_its_lease_or_reports_the_gpus_energy_fails(record, words):
    assert failed(steps_of.mig_container_step(record, MIG_INSTANCE), *words)


def test_a_host_without_a_mig_instance_or_the_image_or_a_mig_lease_is_not_measured():
    assert steps_of.mig_container_step(None, None) == {"step": "MIG in a container", "status": "not measured: no "
                                                       "MIG instance on this host", "figures": ""}
    assert steps_of.mig_container_step(None, MIG_INSTANCE, "deadline")["status"] == "not measured: deadline"
    assert steps_of.mig_container_step(mig_record(leased="GPU-a", ran_on="GPU-a"), MIG_INSTANCE)["status"] == \
        "not measured: the lease was GPU-a, no MIG instance (a SLURM job's allocation decides)"


def test_the_mig_step_passes_a_real_record_of_a_cell_on_a_constructed_mig_tree(tmp_path, monkeypatch):
    """The record the runner writes for a cell in a container handed MIG-2 (tests/test_mig.py's constructed NVML
    tree): the step passes it; leased another instance, the cell fails and so does the step."""
    from test_mig import FAKE_NVML, gpu_cell, tree
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("KBENCH_FAKE_NVML_TREE", tree(None, "MIG-2"))
    import sys
    sys.modules.pop("pynvml", None)
    try:
        ok, other = gpu_cell(tmp_path, monkeypatch, ["0:1"], ["MIG-2"]), gpu_cell(tmp_path, monkeypatch, ["0:1"],
                                                                                   ["MIG-3"])
    finally:
        sys.modules.pop("pynvml", None)
    assert passed(steps_of.mig_container_step(ok, MIG_INSTANCE))
    assert failed(steps_of.mig_container_step(other, MIG_INSTANCE), "DeviceMismatch")


# ---------------------------------------------------------------- the cells' breakdowns by kind

def profiled(framework="keras3-jax", model="bert", task="fit", batch=32, profile="strict", config=None, status="ok",
             **found):
    """A GPU cell whose breakdown is one the tables can use (an XLA cell's: its programs read), `found` replacing its
    fields."""
    spec = matrix.spec({**(config or CONFIG), "accelerator": "gpu"}, "smoke", model, task, batch, "float32",
                       framework, profile)
    result = cell.new_result(spec, {}, status)
    result.breakdown = {"steps": 3, "closes": True, "device": "gpu", "waiting_basis": "timed",
                        "per_step": {"step_ms": [10.0, 10.0, 10.0]}, "programs_read": 2, "xla_share": 0.9,
                        "read_from": {"program": 0.9, "name": 0.1}, **found}
    return result


# Keras 2 as the anchor runs SAM predict: without XLA, its kernels tied to their TensorFlow ops by their launchers
KERAS2_EAGER = dict(framework="keras2", model="sam", task="predict", batch=4, profile="anchor", programs_read=0,
                    xla_share=0.0, read_from={"launcher": 0.6, "name": 0.4})


def test_breakdowns_that_close_per_step_on_the_timed_basis_with_their_programs_and_ops_pass():
    cells = [profiled(), profiled("keras3-tensorflow"), profiled(**KERAS2_EAGER),
             profiled("native-torch-eager", programs_read=0, xla_share=0.0, read_from={"name": 1.0}),
             profiled("paddle-dygraph", programs_read=0, xla_share=0.0, read_from={"launcher": 0.3, "name": 0.7})]
    assert matrix.spec({**CONFIG, "accelerator": "gpu"}, "smoke", "sam", "predict", 4, "float32", "keras2",
                       "anchor").settings["jit_compile"] is False        # the anchor's Keras 2 without XLA
    row = steps_of.breakdown_step(cells)
    assert passed(row), row
    assert row["figures"].startswith("keras3-jax: closes, 3 steps, 2 XLA programs, read from program 90%, name 10%; "
                                     ), row
    assert "keras2: closes, 3 steps, 0 XLA programs, read from launcher 60%, name 40%" in row["figures"], row


@pytest.mark.parametrize("result, words", [
    (profiled(closes=False, why="no device activity recorded"), ["keras3-jax: does not close (no device activity "
                                                                 "recorded)"]),
    (profiled(closes=None), ["does not close (no reason given)"]),
    (profiled(per_step=None), ["per-step figures for no of its 3 steps"]),
    (profiled(per_step={"step_ms": [10.0, 10.0]}), ["per-step figures for 2 of its 3 steps"]),
    (profiled(waiting_basis="profiled"), ["waiting on the profiled basis, not the timed window's"]),
    (profiled(programs_read=0), ["keras3-jax: XLA programs not read (0 read, 90% of the ops' time"]),
    (profiled(read_from={"fusion name": 0.9, "name": 0.1}), ["XLA programs not read (2 read, 0% of the ops' time"]),
    (profiled("keras3-tensorflow", programs_read=0, read_from={"launcher": 1.0}), ["keras3-tensorflow: XLA programs "
                                                                                   "not read"]),
    (profiled("keras2", programs_read=0, xla_share=0.0, read_from={"launcher": 1.0}), ["keras2: XLA programs not "
                                                                                       "read"]),     # jit_compile
    (profiled("native-torch-eager", programs_read=0, xla_share=0.01, read_from={"name": 1.0}),
     ["native-torch-eager: XLA programs not read"]),                                                # xla_share
    (profiled(**{**KERAS2_EAGER, "read_from": {"name": 0.9, "scope": 0.1}}),
     ["keras2: kernels not tied to their ops (read by kernel name alone: name 90%, scope 10%)"]),
    (profiled("keras3-tensorflow", programs_read=0, xla_share=0.0, read_from={"name": 1.0}),
     ["keras3-tensorflow: XLA programs not read", "kernels not tied to their ops"]),
])
def test_a_breakdown_that_does_not_close_lacks_steps_or_timed_waiting_or_left_programs_or_ops_unread_fails(result,
                                                                                                       words):
    assert failed(steps_of.breakdown_step([profiled(), result]), f"{result.cell_id}: ", *words)


def test_a_tensorflow_kernel_tied_to_its_op_once_passes_and_a_torch_one_read_by_name_is_no_tensorflow_cell():
    """The tie's line: a launcher share of 1% ties Keras 2's kernels; torch's and Paddle's kernels read by name alone
    are not asked for one (their own linkage: External id, correlation id)."""
    assert passed(steps_of.breakdown_step([profiled(**{**KERAS2_EAGER, "read_from": {"launcher": 0.01,
                                                                                    "name": 0.99}})]))
    assert passed(steps_of.breakdown_step([profiled("native-torch-eager", programs_read=0, xla_share=0.0,
                                                    read_from={"name": 1.0})]))


def test_breakdowns_without_a_frameworks_gpu_trace_are_not_measured():
    """The synthetic stack pretends to a GPU (its trace has no device lanes: it never closes there), and a cell whose
    spec asked for no breakdown has none: both named, neither counted."""
    from kbench.gpucheck import check
    import yaml
    from conftest import REPO
    config, _ = check.synthetic_config({**yaml.safe_load((REPO / "config.yaml").read_text()), "accelerator": "gpu"})
    synthetic = profiled("synthetic-1", "synthetic", "fit", 4, config=config, closes=False)
    unprofiled = profiled()
    unprofiled.breakdown = None
    row = steps_of.breakdown_step([synthetic, unprofiled])
    assert row["status"] == "not measured: no GPU cell with a framework's breakdown ran", row
    assert row["figures"] == "no breakdown of a framework's GPU trace: synthetic-1, keras3-jax", row
    assert failed(steps_of.breakdown_step([synthetic, profiled(closes=False)]), "does not close")
    assert steps_of.breakdown_step([profiled(status="failed")]) == steps_of.step(
        "breakdown by kind", "not measured: no GPU cell ran")
