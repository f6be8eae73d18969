"""The GPU host check, against faked nvidia-smi, docker and CDI outputs, and the workflow refusing a GPU run on this
CPU-only machine before any build."""
import time
from pathlib import Path

import pytest

from conftest import REPO, snakemake
from kbench import cuda, preflight

TORCH_STACKS = ["native-torch", "keras3-torch"]
ALL_STACKS = ["native-torch", "keras2", "keras3-jax", "keras3-tensorflow", "keras3-torch"]
CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n"


def fake_host(tmp_path, driver="580.95.05", tools=("podman", "docker", "apptainer", "nvidia-smi"), cdi=True,
              docker_runtimes='{"io.containerd.runc.v2":{},"nvidia":{}}', ldconfig="libnvidia-ml.so.1 => /usr/lib",
              files=(preflight.PODMAN_INIT,)):
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    if cdi:
        (cdi_dir / "nvidia.yaml").write_text(CDI_SPEC)
    outputs = {"nvidia-smi": f"0, NVIDIA H100 80GB HBM3, {driver}, GPU-1234\n",
               "docker": docker_runtimes + "\n", "ldconfig": ldconfig}
    return preflight.Host(which=lambda tool: f"/usr/bin/{tool}" if tool in tools else None,
                          run=lambda argv: outputs[argv[0]], cdi_dirs=(str(cdi_dir),), exists=lambda p: p in files)


def test_a_good_gpu_host_passes(tmp_path):
    for runtime in ("podman", "docker", "apptainer", "host"):
        assert preflight.problems(runtime, "gpu", ALL_STACKS, fake_host(tmp_path)) == []


def test_no_driver_is_named_with_its_fix(tmp_path):
    host = fake_host(tmp_path, tools=("podman",), cdi=False)
    found = preflight.problems("podman", "gpu", ALL_STACKS, host)
    assert found[0].startswith("accelerator gpu: no NVIDIA driver here (`nvidia-smi` is not on PATH)")
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in found[1]


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
    assert found[0].endswith("sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")


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


@pytest.mark.skipif(Path("/usr/bin/nvidia-smi").exists(), reason="a GPU host: the refusal is for hosts without one")
@pytest.mark.parametrize("runtime", ["podman", "docker", "host"])
def test_a_gpu_run_on_this_cpu_host_fails_in_seconds_before_any_build(tmp_path, runtime):
    started = time.monotonic()
    proc = snakemake("--cores", "all", "--config", f"runtime={runtime}", f"results_dir={tmp_path}", timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode != 0 and elapsed < 30, (elapsed, proc.stdout[-3000:])
    assert f"preflight: this host cannot run the selected cells (runtime {runtime}, accelerator gpu)" in proc.stdout
    assert "no NVIDIA driver here (`nvidia-smi` is not on PATH)" in proc.stdout
    assert not any((tmp_path / folder).exists() for folder in ("images", "environments", "cells"))
