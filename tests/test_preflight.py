"""The GPU host check, against faked nvidia-smi, docker and CDI outputs, the workflow refusing a GPU run on this
CPU-only machine before any build, and the GPUs a run may use (an exported CUDA_VISIBLE_DEVICES, inside and outside
a SLURM job)."""
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, snakemake
from kbench.machine import host
from kbench.gpu import cuda, preflight
from kbench.run import launch

TORCH_STACKS = ["native-torch", "keras3-torch"]
ALL_STACKS = ["native-torch", "keras2", "keras3-jax", "keras3-tensorflow", "keras3-torch"]
CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n"


def fake_host(tmp_path, driver="580.95.05", tools=("podman", "docker", "apptainer", "nvidia-smi"), cdi=True,
              docker_runtimes='{"io.containerd.runc.v2":{},"nvidia":{}}', ldconfig="libnvidia-ml.so.1 => /usr/lib",
              files=(preflight.PODMAN_INIT,), podman="4.3.1", spec=None):
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    if cdi:
        (cdi_dir / "nvidia.yaml").write_text(spec or CDI_SPEC)
    outputs = {"nvidia-smi": f"0, NVIDIA H100 80GB HBM3, {driver}, GPU-1234\n",
               "docker": docker_runtimes + "\n", "ldconfig": ldconfig, "podman": f"podman version {podman}\n"}
    return preflight.Host(which=lambda tool: f"/usr/bin/{tool}" if tool in tools else None,
                          run=lambda argv: outputs[argv[0]], cdi_dirs=(str(cdi_dir),), exists=lambda p: p in files)


def test_a_good_gpu_host_passes(tmp_path):
    for runtime in ("podman", "docker", "apptainer", "host"):
        assert preflight.problems(runtime, "gpu", ALL_STACKS, fake_host(tmp_path)) == []


def test_no_driver_is_named_with_its_fix(tmp_path):
    host = fake_host(tmp_path, tools=("podman",), cdi=False)
    found = preflight.problems("podman", "gpu", ALL_STACKS, host)
    assert found[0].startswith("accelerator gpu: no NVIDIA driver here (`nvidia-smi` is not on PATH)")
    assert "nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes" in found[1]


def test_a_driver_older_than_a_stacks_cuda_names_the_stack_and_the_cuda12_locks(tmp_path):
    """R535 runs the CUDA 12.9 jax/tf locks but not torch 2.13's CUDA 13: the torch stacks are named, with the
    lock set that runs there."""
    found = preflight.problems("podman", "gpu", ALL_STACKS, fake_host(tmp_path, driver="535.183.01"))
    assert [p.split(":")[0] for p in found] == ["stack native-torch", "stack keras3-torch"]
    assert "NVIDIA driver 535.183.01 is older than 580.65.06, the oldest that runs CUDA 13.0" in found[0]
    assert "--config accelerator=gpu-cuda12" in found[0]
    assert preflight.problems("podman", "gpu-cuda12", ALL_STACKS, fake_host(tmp_path, driver="535.183.01")) == []
    assert len(preflight.problems("podman", "gpu-cuda12", ALL_STACKS, fake_host(tmp_path, driver="470.57.02"))) == 5


def test_podman_without_a_cdi_spec_gets_the_nvidia_ctk_command(tmp_path):
    found = preflight.problems("podman", "gpu", TORCH_STACKS, fake_host(tmp_path, cdi=False))
    assert len(found) == 1 and found[0].startswith("podman: no CDI spec names nvidia.com/gpu")
    assert "sudo nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes " \
           "--output=/etc/cdi/nvidia.yaml" in found[0]


def test_docker_without_the_nvidia_runtime_and_apptainer_without_driver_libraries(tmp_path):
    docker = preflight.problems("docker", "gpu", TORCH_STACKS, fake_host(tmp_path, docker_runtimes='{"runc":{}}'))
    assert len(docker) == 1 and "nvidia-ctk runtime configure --runtime=docker" in docker[0]
    apptainer = preflight.problems("apptainer", "gpu", TORCH_STACKS, fake_host(tmp_path, ldconfig=""))
    assert len(apptainer) == 1 and apptainer[0].startswith("apptainer: --nv would bind no NVIDIA libraries")


def test_a_missing_runtime_binary_is_named_for_cpu_runs_too(tmp_path):
    found = preflight.problems("docker", "cpu", ["keras3-jax"], fake_host(tmp_path, tools=("podman",)))
    assert found == ["`docker` is not on PATH, and the cells need it; install it (scripts/bootstrap installs podman "
                     "on Debian), or run the cells in venvs: --config runtime=host"]


def test_podman_without_the_init_every_cell_runs_under_is_named_for_cpu_runs_too(tmp_path):
    """`podman run --init` starts catatonit; where only tini satisfied podman's recommendation (docker.io brings
    it) every container cell exited 125 at start."""
    found = preflight.problems("podman", "cpu", [], fake_host(tmp_path, files=()))
    assert found == [f"podman: {preflight.PODMAN_INIT} is missing, and every cell runs with --init; install it: "
                     "apt-get install catatonit (scripts/bootstrap does)"]
    assert preflight.problems("podman", "cpu", [], fake_host(tmp_path)) == []


def test_cuda_requirement_is_read_from_each_lock():
    """The driver floors come from the locks' own CUDA pins (no hand-kept list of stacks)."""
    need = {stack: cuda.requirement((REPO / "envs" / f"{stack}.gpu.lock").read_text()) for stack in ALL_STACKS}
    assert {stack: (r.cuda, r.min_driver) for stack, r in need.items()} == {
        "native-torch": ("13.0", "580.65.06"), "keras3-torch": ("13.0", "580.65.06"),
        "keras2": ("12.9", "525.60.13"), "keras3-jax": ("12.9", "525.60.13"), "keras3-tensorflow": ("12.9", "525.60.13")}
    for stack in ALL_STACKS:
        assert cuda.requirement((REPO / "envs" / f"{stack}.gpu-cuda12.lock").read_text()).cuda.startswith("12.")
    assert cuda.requirement((REPO / "envs" / "keras3-jax.cpu.lock").read_text()) is None


NO_GPU_HERE = pytest.mark.skipif(Path("/usr/bin/nvidia-smi").exists(),
                                 reason="a GPU host: the refusal is for hosts without one")


@NO_GPU_HERE
@pytest.mark.parametrize("runtime", ["podman", "docker", "host"])
def test_this_cpu_host_is_refused_for_gpu_cells_in_every_runtime(runtime):
    """What the workflow's onstart calls (preflight.check) on this real host: one error naming the missing driver."""
    with pytest.raises(preflight.PreflightError) as error:
        preflight.check(runtime, "gpu", ["keras3-jax"], tools=set())
    text = str(error.value)
    assert f"preflight: this host cannot run the selected cells (runtime {runtime}, accelerator gpu)" in text
    assert "no NVIDIA driver here (`nvidia-smi` is not on PATH)" in text


@NO_GPU_HERE
@pytest.mark.workflow
def test_a_gpu_run_on_this_cpu_host_fails_in_seconds_before_any_build(tmp_path):
    """The CLI smoke of the refusal: a real (not dry) run stops at the onstart preflight, before any job."""
    runtime = "podman"
    started = time.monotonic()
    proc = snakemake("--cores", "all", "--config", f"runtime={runtime}", f"results_dir={tmp_path}", timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode != 0 and elapsed < 30, (elapsed, proc.stdout[-3000:])
    assert f"preflight: this host cannot run the selected cells (runtime {runtime}, accelerator gpu)" in proc.stdout
    assert "no NVIDIA driver here (`nvidia-smi` is not on PATH)" in proc.stdout
    assert not any((tmp_path / folder).exists() for folder in ("images", "environments", "cells"))


def spec_text(version, extra=""):
    """A CDI spec as nvidia-ctk writes one: kind nvidia.com/gpu, device "0" (a digit: needs 0.5.0)."""
    return (f'cdiVersion: "{version}"\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n  containerEdits:\n'
            f'    deviceNodes:\n    - path: /dev/nvidia0\n{extra}containerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void]\n')


GIDS = "      additionalGids: [44]\n"       # what nvidia-ctk >= 1.19.1 adds for a group-owned node (/dev/dri)


@pytest.mark.parametrize("podman, version, extra, readable", [
    ("4.3.1", "0.5.0", "", True),              # Debian bookworm's podman and a toolkit before 1.19.1
    ("4.3.1", "0.6.0", "", False),             # measured: invalid version "0.6.0"
    ("4.3.1", "0.7.0", GIDS, False),           # toolkit 1.19.1+: unknown field "additionalGids"
    ("4.3.1", "0.5.0", GIDS, False),           # lowering the number alone does not help (strict parsing)
    ("4.9.3", "0.6.0", "", True),              # Ubuntu 24.04's podman reads 0.6.0 ...
    ("4.9.3", "0.7.0", GIDS, False),           # ... not 0.7.0 (nvidia-container-toolkit issue 1860)
    ("5.1.0", "0.7.0", GIDS, True),
    ("5.4.2", "0.8.0", GIDS, True),
])
def test_a_cdi_spec_is_checked_against_what_this_podman_reads(tmp_path, podman, version, extra, readable):
    host = fake_host(tmp_path, podman=podman, spec=spec_text(version, extra))
    found = preflight.problems("podman", "gpu", ["keras3-jax"], host)
    assert (found == []) is readable, found
    if not readable:
        assert len(found) == 1 and f"podman {podman}" in found[0]
        assert "--feature-flag no-additional-gids-for-device-nodes" in found[0] and "podman 5.1 or newer" in found[0]


@pytest.fixture(scope="module")
def env_image(tmp_path_factory):
    """An image holding only /usr/bin/env and the C library it runs on: what a CDI device's edits reach."""
    import shutil
    import subprocess
    import tarfile
    if not shutil.which("podman"):
        pytest.skip("needs podman (scripts/bootstrap installs it)")
    root = tmp_path_factory.mktemp("rootfs")
    tar = root / "rootfs.tar"
    with tarfile.open(tar, "w") as out:
        for path in ("/usr/bin/env", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
            out.add(Path(path).resolve(), arcname=path.lstrip("/"))
    tag = "localhost/kbench-test/env:latest"
    subprocess.run(["podman", "import", "--quiet", str(tar), tag], check=True, capture_output=True,
                   env=preflight_env())
    yield tag
    subprocess.run(["podman", "rmi", "--force", tag], capture_output=True, env=preflight_env())


def preflight_env():
    import os
    return {**os.environ, **launch.process_env("podman")}


@pytest.mark.parametrize("version, extra", [("0.5.0", ""), ("0.6.0", ""), ("0.7.0", GIDS), ("0.5.0", GIDS),
                                            ("0.8.0", "")])
def test_the_preflights_verdict_is_what_the_real_podman_does_with_the_spec(env_image, version, extra):
    """The installed podman against a fake CDI spec in /var/run/cdi (kind example.com/gpu, one device whose only
    edits are an environment variable and /dev/null): the preflight must call it readable exactly when podman
    resolves it."""
    import subprocess
    import uuid
    text = spec_text(version, extra).replace("nvidia.com/gpu", "example.com/gpu").replace(
        "    deviceNodes:\n    - path: /dev/nvidia0\n",
        "    env: [KBENCH_CDI_SEEN=yes]\n    deviceNodes:\n    - path: /dev/null\n")   # additionalGids sits under it
    yaml.safe_load(text)        # well-formed: podman's verdict is on the version and fields, not on a YAML error
    spec = Path("/var/run/cdi") / f"kbench-test-{uuid.uuid4().hex[:8]}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(text)
    try:
        proc = subprocess.run(["podman", "run", "--rm", "--network", "none", *host.ulimit_args(), "--device",
                               "example.com/gpu=0", env_image, "/usr/bin/env"], capture_output=True, text=True,
                              env=preflight_env(),
                              timeout=120)
    finally:
        spec.unlink()
    resolved = proc.returncode == 0 and "KBENCH_CDI_SEEN=yes" in proc.stdout
    assert resolved or "unresolvable CDI devices" in proc.stderr, proc.stderr
    verdict = preflight.cdi_problem(str(spec), text, preflight.podman_cdi_version(preflight.Host()))
    assert (verdict is None) == resolved, (verdict, proc.stderr)


def capability_host(tmp_path, capabilities, driver="580.95.05"):
    """fake_host whose nvidia-smi also answers the compute-capability query."""
    host = fake_host(tmp_path, driver=driver)
    listing = host.run

    def run(argv):
        if argv[0] == "nvidia-smi" and argv[1] == "--query-gpu=index,compute_cap":
            return "".join(f"{i}, {c}\n" for i, c in enumerate(capabilities))
        return listing(argv)
    return preflight.Host(which=host.which, run=run, cdi_dirs=host.cdi_dirs, exists=host.exists)


def test_the_paddle_gpu_stack_is_unsupported_on_hopper_and_runs_on_ampere_and_ada(tmp_path):
    """paddlepaddle-gpu 2.6.2 has sm_61/70/75/80/86 cubins and no PTX: an H100/H200 (9.0) runs none of its kernels;
    an A100 (8.0) and an L4 (8.9: sm_86 cubins run on 8.6 and later 8.x) do. The run is not refused for it (the
    other columns run): the preflight notes it, and the adapter refuses its cells with the same reason. Other
    stacks never ask."""
    hopper = capability_host(tmp_path, ["9.0"])
    assert preflight.problems("podman", "gpu", ["paddle"], hopper) == []
    found = preflight.notes("gpu", ["paddle"], hopper)
    assert found == ["stack paddle: envs/paddle.gpu.lock: GPU 0: paddlepaddle-gpu==2.6.2 is built with kernels for "
                     "sm_61, sm_70, sm_75, sm_80, sm_86 and no PTX: a GPU of compute capability 9.0 runs none of "
                     "them; its cells there read unsupported (the other columns run)"]
    for capabilities in (["8.0"], ["8.9"], ["7.0", "8.6"]):
        assert preflight.notes("gpu", ["paddle"], capability_host(tmp_path, capabilities)) == []
    mixed = preflight.notes("gpu-cuda12", ["paddle"], capability_host(tmp_path, ["8.0", "9.0"]))
    assert len(mixed) == 1 and "GPU 1: " in mixed[0] and "GPU 0" not in mixed[0]
    assert preflight.notes("gpu", ALL_STACKS, capability_host(tmp_path, ["9.0"])) == []
    assert cuda.kernel_refusal("paddlepaddle-gpu==2.6.2", (9, 0)).endswith("runs none of them")
    assert cuda.kernel_refusal("paddlepaddle-gpu==2.6.2", (8, 6)) is None
    assert cuda.kernel_refusal("paddlepaddle-gpu==2.6.2", (6, 0)) is not None      # sm_61 cubins need 6.1 or later
    assert cuda.kernel_refusal("torch==2.13.0", (9, 0)) is None                     # not listed: covers every GPU


def test_the_paddle_gpu_stack_names_its_cuda_11_8_driver_floor(tmp_path):
    need = cuda.requirement((REPO / "envs" / "paddle.gpu.lock").read_text())
    assert (need.cuda, need.min_driver) == ("11.8", "450.80.02")
    found = preflight.problems("podman", "gpu", ["paddle"], capability_host(tmp_path, ["8.0"], driver="440.33.01"))
    assert found == ["stack paddle: NVIDIA driver 440.33.01 is older than 450.80.02, the oldest that runs CUDA 11.8 "
                     "(envs/paddle.gpu.lock pins nvidia-cuda-runtime-cu11==11.8.89); update the NVIDIA driver"]


def test_a_driver_that_cannot_say_its_compute_capability_is_noted_for_the_paddle_stack(tmp_path):
    found = preflight.notes("gpu", ["paddle"], capability_host(tmp_path, ["[N/A]"]))
    assert len(found) == 1 and "nvidia-smi reported no compute capability" in found[0]


@pytest.mark.parametrize("devices, named", [
    ('- name: "GPU-1234"\n', "GPU-1234"),                         # nvidia-ctk --device-name-strategy=uuid
    ('- name: "0:0"\n- name: "0:1"\n', "0:0, 0:1"),               # MIG devices only
])
def test_a_cdi_spec_without_the_device_names_the_cells_ask_for_is_named(tmp_path, devices, named):
    """The cells ask podman for nvidia.com/gpu=<index>: a spec that names GPUs by UUID only, or MIG slices only,
    holds nvidia.com/gpu but none of those names, and every cell would fail to start."""
    spec = f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{devices}"
    found = preflight.problems("podman", "gpu", TORCH_STACKS, fake_host(tmp_path, spec=spec))
    assert found == [f"podman: the CDI specs name nvidia.com/gpu devices {named}, but the cells ask for "
                     "nvidia.com/gpu=0 (the GPU's index, as nvidia-smi numbers them): regenerate the spec with index "
                     "names: sudo nvidia-ctk cdi generate --device-name-strategy=index --output=/etc/cdi/nvidia.yaml"]
    assert preflight.problems("podman", "gpu", TORCH_STACKS, fake_host(tmp_path)) == []     # index names: fine


# ---------------------------------------------------------------- the GPUs a run may use

NODE = [{"index": str(i), "name": "NVIDIA H100 80GB HBM3", "driver_version": "580.95.05",
         "uuid": f"GPU-{i}b1e4c7a-93d2-4f60-8a15-2c7e0d9f6b3{i}"} for i in range(4)]


@pytest.mark.parametrize("allocation", ["SLURM_JOB_GPUS", "SLURM_STEP_GPUS"])
def test_inside_a_slurm_job_its_renumbered_cuda_visible_devices_filters_none_of_the_nodes_gpus(allocation):
    """SLURM gave the job the node's GPUs 2 and 3 and set CUDA_VISIBLE_DEVICES=0,1, the job's own numbering: read
    against the node's list it would pick GPUs 0 and 1, another job's. The allocation is the launcher's to read
    (kbench.run.launch.allocated_gpus); outside a job the same export narrows the node's GPUs to 0 and 1."""
    job = {"SLURM_JOB_ID": "7", allocation: "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert preflight.visible(NODE, job) == NODE
    assert preflight.visible(NODE, {"CUDA_VISIBLE_DEVICES": "0,1"}) == NODE[:2]
    assert preflight.visible(NODE, {}) == NODE


@pytest.mark.parametrize("exported, picked", [
    (f"{NODE[2]['uuid']},1", [2, 1]),      # a UUID and an index, in the order CUDA numbers them
    (NODE[3]["uuid"], [3]),
    ("GPU-00000000-0000-0000-0000-000000000000", []),      # names no GPU here: none (the lease names the export)
])
def test_an_exported_cuda_visible_devices_picks_gpus_by_uuid_as_by_index(exported, picked):
    """CUDA takes a GPU's UUID in CUDA_VISIBLE_DEVICES as it takes its index (a UUID does not change with the device
    order): the run may use the GPU either names, and none that neither names."""
    assert preflight.visible(NODE, {"CUDA_VISIBLE_DEVICES": exported}) == [NODE[i] for i in picked]


def test_podman_without_the_cpuset_controller_is_noted_with_what_an_admin_sets_once(tmp_path, capsys):
    """uid 1000 with systemd's default delegation (cpu io memory pids, no cpuset): a GPU run in podman is noted, not
    refused (the launcher pins the cells' clients instead, tests/test_launch.py), naming the controllers it read and
    the drop-in that delegates cpuset; docker, and an account that has cpuset, get no note."""
    from test_host import USER, fake_cgroup
    cgroup, own = fake_cgroup(tmp_path / "cgroup", "cpu io memory pids")
    gpu_host = fake_host(tmp_path)
    gpu_host.delegation = lambda: host.cpuset_delegation(uid=USER, cgroup=cgroup, own=own)
    (note,) = preflight.notes("gpu", TORCH_STACKS, gpu_host, runtime="podman")
    assert note.startswith(f"podman: this account's containers cannot be given a cpuset ({cgroup}/user.slice/"
                           f"user-{USER}.slice/user@{USER}.service/cgroup.controllers: cpu io memory pids)")
    assert ("/etc/systemd/system/user@.service.d/delegate.conf to `[Service]` `Delegate=cpu cpuset io memory pids` "
            "and runs `systemctl daemon-reload`") in note and "cpu_pinning: client affinity" in note
    assert preflight.notes("gpu", TORCH_STACKS, gpu_host, runtime="docker") == []
    assert preflight.notes("cpu", TORCH_STACKS, gpu_host, runtime="podman") == []
    preflight.check("podman", "gpu", TORCH_STACKS, gpu_host)
    assert f"preflight: note: {note}" in capsys.readouterr().err
    delegated, own = fake_cgroup(tmp_path / "delegated" / "cgroup", "cpuset cpu io memory pids")
    gpu_host.delegation = lambda: host.cpuset_delegation(uid=USER, cgroup=delegated, own=own)
    assert preflight.notes("gpu", TORCH_STACKS, gpu_host, runtime="podman") == []
