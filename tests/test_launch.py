"""The launcher always leaves one result JSON: ok, or failed with the reason, whatever the cell process does."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbench.contract import cell
from kbench.instruments import compile_cache
from kbench.machine import runtimes
from kbench.contract.spec import CellSpec
from kbench.run import launch


def synthetic_spec(fault=None, task="fit", timed=5, **task_options):
    return CellSpec.from_dict({
            "cell_id": f"test/synthetic/{task}/bs4/synthetic", "suite": "test", "profile": "strict", "size": "tiny",
            "model": "synthetic",
            "task": task, "batch_size": 4, "framework": "synthetic", "precision": "float32",
            "framework_def": {"stack": "driver", "adapter": "synthetic", "env": {}, "jit_compile": False}, "env": {},
            "dtypes": {"weights": "float64", "compute": "float64", "loss_scaling": False},
            "accelerator": "cpu", "settings": {"tf32": "off", "warmup": 1, "jit_compile": False},
            "arch": {"matrix_size": 64}, "inputs": {}, "task_options": {"fault": fault, **task_options},
            "steps": {"warmup": 1, "timed": timed, "blocks": min(timed, 5)}, "seed": 0})


@pytest.fixture
def driver_environment(tmp_path):
    """The test's own venv stands in for a stack environment (it has NumPy, all the synthetic adapter needs), with
    a lock of exactly what it holds."""
    from kbench.stacks import lockcheck
    lock = tmp_path / "driver-venv.lock"
    lock.write_text("".join(f"{name}=={version}\n" for name, version in sorted(lockcheck.installed().items())))
    record = tmp_path / "environment.json"
    record.write_text(json.dumps({"stack": "driver", "kind": "venv", "prefix": str(Path(sys.executable).parents[1]),
                                  "lock": str(lock)}))
    return record


def run(tmp_path, environment, spec, timeout_s=60):
    return launch.run_cell(spec, "host", environment, tmp_path / "cell.json", tmp_path / "cell.log",
                           launch.Options(timeout_s=timeout_s))


@pytest.mark.parametrize("task_options, error_type", [
    ({"lora_rank": 4, "trainable": 0}, "LoRANotApplied"),           # Keras 2's enable_lora: nothing trainable
    ({"lora_rank": 4, "trainable": 2 * 64 * 64}, "LoRANotApplied"),  # LoRA that froze nothing: a full fine-tune
    ({"trainable": 0}, "NothingToTrain"),
])
def test_fit_that_trains_the_wrong_parameters_fails_before_timing(tmp_path, driver_environment, task_options,
                                                                  error_type):
    spec = synthetic_spec("step")        # any step that ran would fail the cell with "injected failure in a step"
    spec.task_options.update(task_options)
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "failed" and result.error["type"] == error_type, result.error
    assert result.timing is None
    assert result.params == {"total": 2 * 64 * 64, "trainable": task_options["trainable"]}


def test_lora_fit_with_only_adapter_parameters_trainable_runs(tmp_path, driver_environment):
    spec = synthetic_spec()
    spec.task_options.update(lora_rank=4, trainable=512)
    assert run(tmp_path, driver_environment, spec).status == "ok"


def test_fit_records_its_loss_at_the_first_and_last_timed_step(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result.status == "ok"
    losses = result.loss
    assert set(losses) == {"first_timed_step", "last_timed_step"} and 0 < losses["first_timed_step"] < 65504


def test_fit_whose_float16_loss_overflows_is_failed_with_its_losses(tmp_path, driver_environment):
    """Injected overflow: the synthetic fit's float16 loss goes past 65504 and becomes inf."""
    result = run(tmp_path, driver_environment, synthetic_spec("overflow"))
    assert result.status == "failed" and result.error["type"] == "NonFiniteLoss"
    assert result.error["message"] == "non-finite loss: first timed step inf, last timed step inf"
    assert result.timing is None and result.loss["last_timed_step"] == float("inf")


def test_the_runner_times_the_device_work_behind_each_step(tmp_path, driver_environment):
    """Each step queues 20 ms on the synthetic asynchronous device and returns at once: only the backend's own sync
    brings that work into the window. A runner that timed with any other sync would report ~0 ms."""
    result = run(tmp_path, driver_environment, synthetic_spec(task="predict", timed=10, device_ms=20))
    assert result.status == "ok", result.error
    timing = result.timing
    assert 20 <= timing["mean_ms"] < 40 and timing["window_ms"] >= 200
    assert result.provenance["sync"] == "synthetic device queue join"


def test_cells_record_the_dtypes_their_steps_ran_in(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec(task="predict"))
    assert (result.numerics["weights_dtype"], result.numerics["compute_dtype"]) == ("float64", "float64")
    assert result.numerics["tf32"] == "off" and result.numerics["probe"]["observed_class"] == "fp32"


def test_the_record_has_the_dtypes_the_steps_ran_in_and_a_mismatch_fails_the_cell(tmp_path, driver_environment):
    """The spec says float64 (its precision's dtypes); the workload computes in float32. The record must carry what
    the steps ran in (never the spec's dtypes copied), and the cell is failed: its time is not the precision's."""
    spec = synthetic_spec(dtype="float32")
    result = run(tmp_path, driver_environment, spec)
    assert (result.numerics["weights_dtype"], result.numerics["compute_dtype"]) == ("float32", "float32")
    assert result.status == "failed" and result.error["type"] == "PrecisionMismatch", result.error
    assert result.error["message"] == ("precision float32 names weights float64 and compute float64, but the steps "
                                       "ran in weights float32 and compute float32")
    assert result.timing is None


def test_a_cell_without_a_lock_to_check_is_failed(tmp_path, driver_environment):
    """An environment that names no lock (an image built without KBENCH_LOCK, a venv record without its lock)
    cannot show which versions its number came from."""
    record = json.loads(driver_environment.read_text())
    del record["lock"]
    driver_environment.write_text(json.dumps(record))
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result.status == "failed" and result.error["type"] == "LockUnchecked", result.error
    assert result.provenance.get("lock_check") is None and result.timing is None


@pytest.mark.parametrize("breakdown", [0, 3])
def test_the_timer_calls_the_backends_sync_to_close_every_block(tmp_path, driver_environment, breakdown):
    """Counted in the record: once before the warm-up, once per warm-up step, once per synced block; the steps
    profiled after the window (a breakdown by kind) sync apart, not in the timer's count."""
    spec = synthetic_spec(timed=10)
    spec = spec.replace(steps=dataclasses.replace(spec.steps, breakdown=breakdown))
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "ok", result.error
    assert result.evidence["sync_blocks"] == 5 and result.evidence["sync_calls"] == 1 + 1 + 5
    assert (result.breakdown or {}).get("closes") is (True if breakdown else None)
    assert result.timing["block_steps"] == [2] * 5
    assert sum(result.timing["block_ms"]) == pytest.approx(result.timing["window_ms"])


def test_a_cells_log_says_what_it_is_doing_and_nothing_inside_the_timed_window(tmp_path, driver_environment):
    """A slow cell is seen to move: its log names each phase (lock, device, build, each warm-up step, the window
    with the time it should take, the result), and no line falls between the window's opening and closing ones."""
    spec = synthetic_spec(timed=10)
    spec = spec.replace(steps=dataclasses.replace(spec.steps, warmup=2))
    assert run(tmp_path, driver_environment, spec).status == "ok"
    lines = [line.split("] ", 1)[1] for line in (tmp_path / "cell.log").read_text().splitlines()
             if line.startswith("[kbench ")]
    expected = ["test/synthetic/fit/bs4/synthetic: synthetic in host; checking the packages against the lock",
                "numpy on cpu (cpu); building the model", "model built: 8,192 parameters (8,192 trainable); 2 warm-up",
                "warm-up step 1/2: ", "warm-up step 2/2: ", "timed window: 10 steps in 5 synced blocks, about ",
                "timed window closed after ", "ok"]
    assert len(lines) == len(expected) and all(map(str.startswith, lines, expected)), lines

    failing = synthetic_spec("step")
    assert run(tmp_path, driver_environment, failing).status == "failed"
    assert (tmp_path / "cell.log").read_text().splitlines()[-1].split("] ", 1)[1].startswith(
        "failed: RuntimeError: injected failure in a step"), (tmp_path / "cell.log").read_text()[-2000:]


def test_a_cell_that_asks_for_a_gpu_and_gets_a_cpu_fails_before_building(tmp_path, driver_environment, monkeypatch):
    """In process (the launcher's own GPU preflight would stop it first on this host): the device check comes before
    the model is built, so the step that would fail the cell never runs."""
    from kbench.run import runner
    monkeypatch.setenv("KBENCH_LOCK", json.loads(driver_environment.read_text())["lock"])
    spec = synthetic_spec("step")
    spec = spec.replace(accelerator="gpu")
    result = runner.run(spec, {"runtime": "test"})
    assert result.status == "failed" and result.error["type"] == "NoAccelerator"
    assert result.error["message"].startswith("the cell asks for a GPU (gpu), but numpy runs on cpu")
    assert result.params is None and result.timing is None


@pytest.mark.parametrize("accelerator", ["gpu", "gpu-cuda12"])
def test_a_gpu_cell_of_either_cuda_that_runs_on_the_cpu_is_refused(accelerator, monkeypatch):
    """Every GPU accelerator (gpu, gpu-cuda12: the CUDA 12 locks) asks for a GPU: a framework that fell back to the
    CPU under either is refused, not timed as a GPU cell; a CPU cell on the CPU, or a GPU cell on a GPU, goes on."""
    from kbench.run import runner
    from kbench.adapters import NoAccelerator, synthetic
    monkeypatch.delenv("KBENCH_SYNTHETIC_GPU", raising=False)
    spec = synthetic_spec().replace(accelerator=accelerator)
    with pytest.raises(NoAccelerator, match=rf"asks for a GPU \({accelerator}\), but numpy runs on cpu"):
        runner.check_device(spec, synthetic.backend())
    runner.check_device(spec.replace(accelerator="cpu"), synthetic.backend())
    monkeypatch.setenv("KBENCH_SYNTHETIC_GPU", "1")
    runner.check_device(spec, synthetic.backend())


@pytest.mark.parametrize("losses", [
    {"first_timed_step": 2.3, "last_timed_step": float("inf")},       # diverged during the window
    {"first_timed_step": float("nan"), "last_timed_step": 2.1},
    {"first_timed_step": float("-inf"), "last_timed_step": float("nan")},
])
def test_a_fit_with_any_non_finite_timed_loss_is_failed(losses):
    """One non-finite loss of the two read is enough: the window timed broken arithmetic."""
    from kbench.run import runner
    with pytest.raises(runner.NonFiniteLoss, match="non-finite loss: first timed step"):
        runner.check_losses(losses)
    runner.check_losses({"first_timed_step": 2.3, "last_timed_step": 2.1})
    runner.check_losses(None)                   # a predict cell reads no loss


class Compiling:
    """A compiled step and its framework's counters: the first warm-up step compiles forward and backward (2
    graphs), the second one more; recompile: the steps (counted from 0) that compile again."""
    def __init__(self, recompile=()):
        self.counters, self.calls, self.recompile = {"graphs": 0, "graph_breaks": 0}, 0, set(recompile)

    def step(self):
        self.counters["graphs"] += {0: 2, 1: 1}.get(self.calls, int(self.calls in self.recompile))
        self.calls += 1
        return 1.0

    def compile_counters(self):
        return dict(self.counters)


@pytest.mark.parametrize("recompile, in_window", [((), 0), ((3,), 1)])
def test_compiles_in_the_window_are_counted_from_the_windows_start_not_the_processs(recompile, in_window):
    """A compiled cell compiles in its warm-up (3 graphs before the window): a window that compiled nothing has 0
    compiles in it (no flag), one that recompiled in its second step has 1."""
    from kbench.instruments import timing
    from kbench.run import runner
    compiling = Compiling(recompile)
    window = runner.Window(compiling)
    timing.measure(compiling.step, lambda out: None, 2, 4, on_window=window)
    found = window.evidence()["compiles"]
    assert found["before_window"] == {"graphs": 3, "graph_breaks": 0}
    assert found["in_window"] == {"graphs": in_window, "graph_breaks": 0}


def test_a_gpu_cell_on_a_host_without_a_driver_fails_at_launch(tmp_path, driver_environment):
    spec = synthetic_spec()
    spec = spec.replace(accelerator="gpu")
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "failed" and result.error["type"] == "PreflightFailed"
    assert "no NVIDIA driver here" in result.error["message"]


def test_a_gpu_cell_in_a_slurm_job_without_a_gpu_fails_instead_of_taking_every_gpu(tmp_path, driver_environment,
                                                                                  monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    spec = synthetic_spec()
    spec = spec.replace(accelerator="gpu")
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "failed" and result.error["type"] == "LaunchError"
    assert "SLURM job 7 has no GPU allocated; a GPU cell needs one (profiles/slurm: set-resources cell: gpu: 1)" in \
        result.error["message"]


def test_a_float32_cell_whose_matmul_is_tf32_is_failed(tmp_path, driver_environment):
    spec = synthetic_spec()
    spec = spec.replace(env={"KBENCH_SYNTHETIC_MATMUL": "tf32"})      # a framework that left TF32 on despite the switches
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "failed" and result.error["type"] == "ReducedPrecision", result.error
    assert result.numerics["probe"]["observed_class"] == "tf32" and result.timing is None
    spec.settings["tf32"] = "library-default"            # the anchor's setting: recorded, the cell runs
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "ok" and result.numerics["probe"]["observed_class"] == "tf32"


def test_a_float32_cell_whose_convolution_is_tf32_is_failed_though_its_matmul_is_float32(tmp_path,
                                                                                         driver_environment):
    """A framework whose switch reaches its matmuls but not its convolutions (JAX's F32_F32_F32 dot preset): the
    convolution probe beside the matmul probe fails the float32 cell."""
    spec = synthetic_spec()
    spec = spec.replace(env={"KBENCH_SYNTHETIC_CONV": "tf32"})
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "failed" and result.error["type"] == "ReducedPrecision", result.error
    assert result.error["message"].startswith("float32 convolution probe says tf32")
    probe = result.numerics["probe"]
    assert probe["observed_class"] == "fp32" and probe["conv_class"] == "tf32" and result.timing is None


def test_the_first_losses_survive_steps_that_reuse_their_output_memory(tmp_path, driver_environment):
    """A CUDA-graph replay overwrites the tensors the last replay returned: the synthetic fit returns one buffer
    that every step overwrites, and the workload keeps a copy of the first."""
    result = run(tmp_path, driver_environment, synthetic_spec(reuse_output=True))
    assert result.status == "ok", result.error
    assert result.loss["first_timed_step"] != result.loss["last_timed_step"]


def test_predict_records_no_loss(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec(task="predict"))
    assert result.status == "ok" and result.loss is None


def test_host_command_runs_the_runner_in_the_stack_python():
    argv = launch.command("host", {"prefix": "/envs/keras3-jax.cpu"}, Path("out.json"))
    assert argv == ["/envs/keras3-jax.cpu/bin/python", "-m", "kbench.run.runner", "--out", "out.json"]


def test_unknown_runtime_names_the_allowed_ones():
    with pytest.raises(ValueError, match="runtime .lxc. is not supported; allowed: host, preinstalled, podman, docker, apptainer"):
        launch.command("lxc", {}, Path("out.json"))


HOST, PODMAN = runtimes.resolve("host"), runtimes.resolve("podman")
IMAGE = {"id": "sha256:" + "ab" * 32, "sif": "/images/keras3-jax.gpu.sif"}
OUT = Path("/work/results/cells/tiny/bert/fit/bs32/float32/keras3-jax.json")
MOUNTS = [f"{launch.REPO}/scripts:/opt/kbench/scripts:ro",
          "/work/results/cells/tiny/bert/fit/bs32/float32:/kbench/out:rw"]
INNER = ["python", "-m", "kbench.run.runner", "--out", "/kbench/out/keras3-jax.json"]


@pytest.mark.parametrize("gpu", [False, True])
def test_podman_runs_the_image_by_id_offline_with_cdi_gpus(gpu):
    argv = launch.command("podman", IMAGE, OUT, gpu=gpu, name="kbench-x")
    assert argv[:10] == ["podman", "run", "--rm", "-i", "--init", "--name", "kbench-x", "--network", "none",
                         f"--label=kbench.out={OUT.parent}"]
    assert [a.removeprefix("--volume=") for a in argv if a.startswith("--volume=")] == MOUNTS
    assert "--ulimit" in argv and any(a.startswith("nofile=") for a in argv)
    assert ("nvidia.com/gpu=all" in argv) == gpu and "--gpus" not in argv
    assert argv[-6:] == [IMAGE["id"], *INNER]


@pytest.mark.parametrize("gpu", [False, True])
def test_docker_uses_gpus_flag(gpu):
    argv = launch.command("docker", IMAGE, OUT, gpu=gpu, name="kbench-x")
    assert argv[:10] == ["docker", "run", "--rm", "-i", "--init", "--name", "kbench-x", "--network", "none",
                         f"--label=kbench.out={OUT.parent}"]
    assert (argv[argv.index("--gpus") + 1] == "all") if gpu else "--gpus" not in argv
    assert "--ulimit" in argv and any(a.startswith("nproc=") for a in argv)
    assert "nvidia.com/gpu=all" not in argv and argv[-6:] == [IMAGE["id"], *INNER]


@pytest.mark.parametrize("gpu", [False, True])
def test_apptainer_runs_the_sif_contained_without_network(gpu):
    argv = launch.command("apptainer", IMAGE, OUT, gpu=gpu)
    assert argv[:7] == ["apptainer", "exec", "--containall", "--cleanenv", "--net", "--network", "none"]
    assert argv[argv.index("--bind") + 1] == ",".join(MOUNTS)
    assert ("--nv" in argv) == gpu
    assert argv[-6:] == [IMAGE["sif"], *INNER]


def test_podman_gets_the_shipped_containers_conf_and_host_the_lock():
    assert launch.process_env("podman")["CONTAINERS_CONF"].endswith("containers/containers.conf")
    host = launch.process_env("host", {"lock": "envs/keras3-jax.cpu.lock"})
    assert host["KBENCH_LOCK"] == str(launch.REPO / "envs" / "keras3-jax.cpu.lock")


def test_ok_cell_has_the_contract_fields(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result.status == "ok", result.error
    timing = result.timing
    assert len(timing["step_ms"]) == timing["n"] == 5 and len(timing["warmup_ms"]) == 1
    assert timing["mean_ms"] == pytest.approx(sum(timing["step_ms"]) / 5)
    assert timing["examples_per_s"] == pytest.approx(4 * 1e3 / timing["mean_ms"])
    assert result.params == {"total": 2 * 64 * 64, "trainable": 2 * 64 * 64}
    assert result.memory["peak_host_rss_bytes"] > 10 * 2**20
    prov = result.provenance
    assert prov["runtime"] == "host" and prov["device"] == "cpu" and "numpy" in prov["packages"]
    assert prov["python"].startswith("3.") and prov["hostname"] and prov["git_commit"]
    assert result.spec_digest == cell.spec_digest(synthetic_spec())
    assert cell.read(tmp_path / "cell.json") == result


@pytest.mark.parametrize("fault, error_type, message", [
    ("raise", "RuntimeError", "injected failure"),
    ("exit", "ProcessExit", "exited with status 3"),
    ("killed", "Killed", "SIGKILL (out of memory? the kernel's OOM killer sends it)"),
    ("segv", "Killed", "SIGSEGV (a crash in native code)"),
])
def test_failures_become_failed_cells(tmp_path, driver_environment, fault, error_type, message):
    result = run(tmp_path, driver_environment, synthetic_spec(fault))
    assert result.status == "failed" and result.timing is None
    assert result.error["type"] == error_type and message in result.error["message"]


def test_a_batch_that_does_not_fit_is_oom_not_failed(tmp_path, driver_environment):
    """The framework's own out-of-memory error: status oom (the batch study's ladder stops there), with its words."""
    result = run(tmp_path, driver_environment, synthetic_spec("device-oom"))
    assert result.status == "oom" and result.timing is None
    assert result.error["type"] == "OutOfMemoryError" and "CUDA out of memory" in result.error["message"]


def left_behind(marker="kbench-synthetic-child") -> list[int]:
    """PIDs of processes whose command line holds the marker (the synthetic cell's child, a test's own paths)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.workflow     # processes waited on past a timeout
def test_a_hanging_cell_is_killed_at_the_timeout_with_its_children(tmp_path, driver_environment):
    """The cell hangs after starting a child of its own (as compile workers are): the timeout kills both."""
    assert left_behind() == []
    result = run(tmp_path, driver_environment, synthetic_spec("hang-child"), timeout_s=3)
    assert result.status == "failed" and result.error["type"] == "Timeout"
    assert "process group was killed" in result.error["message"]
    assert left_behind() == []


@pytest.mark.parametrize("breakage, message", [
    ("no podman", "LaunchError: the cell process could not be started: LaunchError: `podman` is not on PATH"),
    ("unreadable record", "LaunchError: the cell process could not be started: JSONDecodeError"),
    ("missing record", "LaunchError: the cell process could not be started: FileNotFoundError"),
])
def test_a_launcher_error_is_a_failed_cell(tmp_path, driver_environment, monkeypatch, breakage, message):
    """What stops the launcher before the cell starts is the cell's failure, with the reason; the run goes on."""
    runtime, record = "host", driver_environment
    if breakage == "no podman":
        runtime, record = "podman", tmp_path / "image.json"
        record.write_text(json.dumps({"stack": "driver", "kind": "image", "id": "sha256:0"}))
        monkeypatch.setenv("PATH", str(tmp_path))
    elif breakage == "unreadable record":
        driver_environment.write_text("{\"stack\": ")
    else:
        driver_environment.unlink()
    result = launch.run_cell(synthetic_spec(), runtime, record, tmp_path / "cell.json", tmp_path / "cell.log",
                             launch.Options(timeout_s=60))
    assert result.status == "failed"
    assert f"{result.error['type']}: {result.error['message']}".startswith(message), result.error
    assert cell.read(tmp_path / "cell.json") == result


def kill_driver_mid_cell(tmp_path, driver_environment, slow_removal_s=0.0):
    """A stand-in Snakemake (a script named snakemake) starts the launcher, which starts a hanging cell with a child;
    SIGKILL to the stand-in leaves the launcher an orphan, whose watchdog must kill the cell's group. slow_removal_s:
    removing the cell takes that long after its group is dead (as removing a container does), the window in which
    the launcher's main thread, its wait returned, once wrote a failed record. Returns the launcher's PIDs."""
    assert left_behind() == []
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import json, sys, threading, time\nfrom kbench.run import launch\n"
        "kill = launch._Stop.kill\n"           # slow only where the watchdog (not the main thread) removes the cell
        "launch._Stop.kill = lambda self: (kill(self), threading.current_thread() is threading.main_thread() or "
        f"time.sleep({slow_removal_s}))\n"
        f"launch.run_cell(json.loads(sys.argv[1]), 'host', {str(driver_environment)!r}, {str(tmp_path / 'cell.json')!r},"
        f" {str(tmp_path / 'cell.log')!r}, launch.Options(timeout_s=600))\n")
    driver = tmp_path / "snakemake"
    driver.write_text(f"#!/bin/bash\n{sys.executable} {launcher} '{json.dumps(synthetic_spec('hang-child').to_dict())}' &\nwait\n")
    driver.chmod(0o755)
    proc = subprocess.Popen([str(driver)], env={**os.environ, "PYTHONPATH": str(launch.REPO / "scripts")},
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not left_behind() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(), (tmp_path / "cell.log").read_text()
    launcher_pids = left_behind(str(launcher))
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30 + slow_removal_s
    while (left_behind() or left_behind(str(launcher))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert launcher_pids and left_behind() == [] and left_behind(str(launcher)) == []
    return launcher_pids


def test_a_killed_driver_takes_its_running_cell_along(tmp_path, driver_environment):
    """The watchdog kills the cell's group, and the launcher exits without writing a record (the next run redoes
    the cell)."""
    kill_driver_mid_cell(tmp_path, driver_environment)
    assert not (tmp_path / "cell.json").exists()


@pytest.mark.workflow     # processes waited on past a timeout
def test_a_killed_driver_leaves_no_record_however_long_removing_the_cell_takes(tmp_path, driver_environment):
    """The race behind an occasional finished-looking record: the cell's group is dead, so the main thread's wait
    returns while the watchdog is still removing the cell. The main thread must never go on to write a record."""
    kill_driver_mid_cell(tmp_path, driver_environment, slow_removal_s=3.0)
    assert not (tmp_path / "cell.json").exists()


def test_an_attempt_kept_on_a_disk_that_fills_midway_is_whole_or_absent(tmp_path, monkeypatch):
    """A full disk while the record and log are kept under attempts/: the error goes up (the job fails, and a rerun
    redoes it), and attempts/ holds no truncated copy; with room again both copies are whole."""
    import errno
    out, log = tmp_path / "cell.json", tmp_path / "cell.log"
    out.write_text(json.dumps({"cell_id": "x", "status": "ok", "timing": {"block_ms": list(range(500))}}))
    log.write_text("step\n" * 2000)

    def full_disk(source, target, **kwargs):
        data = Path(source).read_bytes()
        Path(target).write_bytes(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(launch.shutil, "copyfile", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        launch._keep_attempt(out, log)
    assert sorted(p.name for p in (tmp_path / "attempts").iterdir()) == []
    monkeypatch.undo()
    launch._keep_attempt(out, log)
    kept = {p.name.split(".")[1]: p.read_bytes() for p in (tmp_path / "attempts").iterdir()}
    assert kept == {"json": out.read_bytes(), "log": log.read_bytes()}


@pytest.mark.workflow     # processes waited on past a timeout
def test_a_cell_waits_for_its_previous_process_to_let_go(tmp_path, driver_environment):
    """A resumed run never overlaps the same cell still running from before: the launcher holds a lock per cell."""
    import fcntl
    import threading
    with open(tmp_path / ".cell.json.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=run, args=(tmp_path, driver_environment, synthetic_spec()))
        worker.start()
        worker.join(3)
        assert worker.is_alive() and not (tmp_path / "cell.json").exists()
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(60)
    assert cell.read(tmp_path / "cell.json").status == "ok"


def test_an_environment_that_drifted_from_its_lock_fails_the_cell(tmp_path, driver_environment):
    lock = tmp_path / "stack.lock"
    lock.write_text("numpy==0.0.1 \\\n    --hash=sha256:00\nkeras==3.15.1\n")
    record = json.loads(driver_environment.read_text())
    driver_environment.write_text(json.dumps({**record, "lock": str(lock)}))
    result = run(tmp_path, driver_environment, synthetic_spec())
    assert result.status == "failed" and result.error["type"] == "LockDrift"
    message = result.error["message"]
    assert "numpy: lock 0.0.1, installed" in message and "keras==3.15.1 in the lock but not installed" in message
    assert "installed but not in the lock" in message and message.index("numpy:") < message.index("keras==")


def test_a_preinstalled_interpreter_records_its_drift_from_the_lock_instead_of_failing(tmp_path):
    """Runtime preinstalled (an HPC module, a vendor image): kbench.stacks.envs records the interpreter as found, the cell
    runs in it and records how it differs from the stack's lock."""
    from kbench.stacks import envs
    lock = tmp_path / "stack.lock"
    lock.write_text("numpy==0.0.1 \\\n    --hash=sha256:00\n")
    record = envs.record_preinstalled("driver", "cpu", lock, sys.executable, tmp_path / "preinstalled.json")
    assert record["kind"] == "preinstalled" and record["packages"]["numpy"] != "0.0.1"
    assert record["drift"][0].startswith("numpy: lock 0.0.1, installed ")
    result = launch.run_cell(synthetic_spec(), "preinstalled", tmp_path / "preinstalled.json", tmp_path / "cell.json",
                             tmp_path / "cell.log", launch.Options(timeout_s=60))
    assert result.status == "ok", result.error
    check = result.provenance["lock_check"]
    assert check["result"] == "drift" and check["differences"][0].startswith("numpy: lock 0.0.1, installed ")


def test_unsupported_task_is_reported_not_failed(tmp_path, driver_environment):
    result = run(tmp_path, driver_environment, synthetic_spec(task="generate"))
    assert result.status == "unsupported"
    assert result.error["message"] == "synthetic adapter has no synthetic generate (it runs: synthetic fit/predict)"


def test_image_transport_commands_for_hosts_without_podman():
    from kbench.stacks import images
    archive, sif = Path("/r/images/keras3-jax.gpu.oci.tar"), Path("/r/images/keras3-jax.gpu.sif")
    assert images.sif_command(archive, sif) == ["apptainer", "build", "--force", str(sif),
                                                "oci-archive:///r/images/keras3-jax.gpu.oci.tar"]
    assert images.docker_load_command(archive) == ["docker", "load", "--quiet", "--input", str(archive)]


def test_image_build_is_pinned_offline_of_the_image_and_reproducible():
    from kbench.stacks import images
    tag = images.stack_tag("keras3-jax", "gpu", "sha256:" + "0123456789abcdef" * 4)
    assert tag == "localhost/kbench/keras3-jax:gpu-0123456789abcdef"
    argv = images.build_command("keras3-jax", "gpu", "sha256:base", 1735689600, Path("/cache"), tag)
    assert argv[argv.index("--timestamp") + 1] == "1735689600"
    assert "SOURCE_DATE_EPOCH=1735689600" in argv and "BASE_IMAGE=sha256:base" in argv
    assert "--volume=/cache:/uvcache" in argv and argv[-1] == str(images.REPO / "envs")   # context: locks only
    assert any(a.startswith("--volume=/etc/ssl/certs/ca-certificates.crt:") and a.endswith(":ro") for a in argv)


def test_a_host_cell_gets_an_allow_listed_environment_and_records_what_can_change_a_measurement(
        tmp_path, driver_environment, monkeypatch):
    """A stray XLA_FLAGS in the driver's shell never reaches a host cell; what the cell does see of the variables
    that steer frameworks (the spec's own here) is in its provenance."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = synthetic_spec()
    spec = spec.replace(env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    result = run(tmp_path, driver_environment, spec)
    assert result.status == "ok", result.error
    assert result.provenance["environment_variables"] == {"TF_CPP_MIN_LOG_LEVEL": "2"}


def test_a_cell_writes_into_a_staging_folder_of_its_own(tmp_path, driver_environment, monkeypatch):
    """The one folder a container cell may write is fresh per cell (not the row folder its siblings share); the
    launcher moves the result into place and removes the folder."""
    seen = []

    def spy(runtime, environment, out, options, gpu=False):
        seen.append(out)
        return command(runtime, environment, out, options, gpu)
    command = runtimes.Runtime.command
    monkeypatch.setattr(runtimes.Runtime, "command", spy)
    assert run(tmp_path, driver_environment, synthetic_spec()).status == "ok"
    assert seen[0].parent.parent == tmp_path and seen[0].parent.name.startswith(".staging-kbench-")
    assert not seen[0].parent.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
        ".cell.json.lock"]


def test_a_base_rebuild_names_the_debian_packages_that_changed(tmp_path):
    from kbench.stacks import images
    history = tmp_path / "base.history.json"
    first = {"id": "sha256:1", "manifest_sha256": "sha256:a", "manifest": ["libc6=2.36-9+deb12u9", "python3=3.11.2-1"]}
    assert images._remember(history, first) is None
    second = {"id": "sha256:2", "manifest_sha256": "sha256:b",
              "manifest": ["g++=4:12.2.0-3", "libc6=2.36-9+deb12u10"]}
    assert images._remember(history, second) == ["libc6: 2.36-9+deb12u9 -> 2.36-9+deb12u10", "+g++=4:12.2.0-3",
                                                 "-python3=3.11.2-1"]
    assert images._remember(history, second) == []
    assert [build["id"] for build in json.loads(history.read_text())] == ["sha256:1", "sha256:2", "sha256:2"]


@pytest.mark.parametrize("returncode, memory_limit_mb, message", [
    (139, None, "cell process killed by SIGSEGV (a crash in native code)"),       # a container runtime's 128+n
    (-11, None, "cell process killed by SIGSEGV (a crash in native code)"),       # a host process's -n
    (134, None, "cell process killed by SIGABRT (an abort in native code)"),
    (137, None, "cell process killed by SIGKILL (out of memory? the kernel's OOM killer sends it)"),
    (137, 512, "cell process killed by SIGKILL (out of memory? the container's limit is 512 MiB)"),
    (3, None, "cell process exited with status 3"),
])
def test_exit_statuses_are_decoded(returncode, memory_limit_mb, message):
    assert launch.exit_failure(returncode, memory_limit_mb)["message"] == message


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_a_container_the_kernel_oom_killed_reads_oom_and_stops_the_ladder(tmp_path, monkeypatch, runtime):
    """The container's client exits 137 and its inspect says State.OOMKilled: the cell is `oom` (as a framework's own
    out-of-memory error), so the batch study's next rung is not run; a plain SIGKILL without OOMKilled stays failed."""
    tool = tmp_path / "bin" / runtime
    tool.parent.mkdir()
    tool.write_text(f"""#!/bin/sh
case "$1" in
  run) cat >/dev/null; exit 137 ;;
  inspect) cat {tmp_path}/oom_killed ;;
esac
exit 0
""")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    record = tmp_path / "image.json"
    record.write_text(json.dumps({"kind": "image", "id": "sha256:aa"}))
    (tmp_path / "oom_killed").write_text("true\n")
    result = launch.run_cell(synthetic_spec(), runtime, record, tmp_path / "cell.json", tmp_path / "cell.log",
                             launch.Options(timeout_s=30, memory_mb=256))
    assert (result.status, result.error["type"]) == ("oom", "OutOfMemory"), result.error
    assert result.error["message"] == "the kernel killed the cell for memory (container OOMKilled)"
    assert launch.ladder_stopped(result)["message"] == ("not run: batch 4 already ran out of memory (OutOfMemory)")
    (tmp_path / "oom_killed").write_text("false\n")
    result = launch.run_cell(synthetic_spec(), runtime, record, tmp_path / "cell.json", tmp_path / "cell.log",
                             launch.Options(timeout_s=30, memory_mb=256))
    assert (result.status, result.error["type"]) == ("failed", "Killed") and launch.ladder_stopped(result) is None


@pytest.mark.parametrize("runtime, flags", [
    ("podman", ["--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=3"]),
    ("docker", ["--gpus", '"device=1,3"']),
    ("apptainer", ["--nv", "--env", "CUDA_VISIBLE_DEVICES=1,3"]),
])
def test_a_slurm_job_hands_only_its_allocation_to_the_container(runtime, flags, monkeypatch):
    """SLURM gave GPUs 1 and 3 and CPUs 4-5: the container gets those GPUs (not every GPU of the node), and in
    podman/docker those CPUs, its memory limit the job's."""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_STEP_GPUS", "1,3")
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {5, 4})
    assert launch.allocated_gpus() == ["1", "3"] and launch.allocated_cpus() == [4, 5]
    argv = launch.command(runtime, IMAGE, OUT, gpu=True, gpus=launch.allocated_gpus(), memory_mb=6000,
                          cpuset=launch.allocated_cpus())
    position = argv.index(flags[0])
    assert argv[position:position + len(flags)] == flags
    assert "nvidia.com/gpu=all" not in argv and "all" not in argv
    if runtime != "apptainer":
        assert "--memory=6000m" in argv and "--cpuset-cpus=4,5" in argv


@pytest.fixture
def fake_podman(tmp_path, monkeypatch):
    """A podman stand-in: `image exists` answers from a file that `load` writes (the archive's content is the ID
    it holds), and each load is logged."""
    tool = tmp_path / "bin" / "podman"
    tool.parent.mkdir()
    tool.write_text(f"""#!/bin/bash
case "$1 $2" in
  "image exists") grep -qx "$3" {tmp_path}/storage 2>/dev/null ;;
  "load --quiet") echo "$4" >> {tmp_path}/loads; cat "$4" >> {tmp_path}/storage ;;
esac
""")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    return tmp_path


@pytest.fixture
def account(tmp_path, monkeypatch):
    """The launcher as uid 1000 on a fake cgroup v2 tree whose user manager systemd gave `controllers`
    (tests/test_host.py's fake_cgroup), read by the real kbench.machine.host.cpuset_delegation."""
    from test_host import USER, fake_cgroup
    read = launch.host.cpuset_delegation

    def given(controllers: str) -> None:
        cgroup, own = fake_cgroup(tmp_path / "cgroup", controllers)
        monkeypatch.setattr(launch.host, "cpuset_delegation", lambda: read(uid=USER, cgroup=cgroup, own=own))
    return given


@pytest.mark.parametrize("listed, uuids, device", [
    (None, [], "gpu: unknown"),         # no nvidia-smi here: the lease's UUID and device are not known
    ("0, NVIDIA H100 80GB HBM3, 580.95.05, GPU-zero, 00000000:07:00.0\n"
     "2, NVIDIA H100 80GB HBM3, 580.95.05, GPU-two, 00000000:9A:00.0\n", ["GPU-two"], "gpu: NVIDIA H100 80GB HBM3"),
])
def test_a_gpu_cell_in_a_slurm_job_starts_its_container_with_the_allocation(fake_podman, tmp_path, monkeypatch,
                                                                           account, listed, uuids, device):
    """The wiring from the job's environment to the container's command line: GPU 2 and CPU 3 of the node, the
    job's memory; not every GPU of the node. Where the node's nvidia-smi lists GPU 2, the record knows it by UUID
    (what the runner's identity check expects) and by model (the compile cache's key); where it cannot, the record
    says so (no cache is seeded from or for it, and the identity check says it could not compare)."""
    account("cpuset cpu io memory pids")
    if listed is not None:
        smi = fake_podman / "bin" / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || printf '{listed}'\n")
        smi.chmod(0o755)
    (fake_podman / "storage").write_text("sha256:aa\n")
    record = tmp_path / "image.json"
    record.write_text(json.dumps({"kind": "image", "id": "sha256:aa"}))
    monkeypatch.setattr(launch, "_preflight", lambda spec, runtime: None)      # no driver on this host
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("SLURM_STEP_GPUS", "2")
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {3})
    spec = synthetic_spec()
    spec = spec.replace(accelerator="gpu")
    result = launch.run_cell(spec, "podman", record, tmp_path / "cell.json", tmp_path / "cell.log",
                             launch.Options(timeout_s=60, memory_mb=6000))
    argv = (tmp_path / "cell.log").read_text().splitlines()[0].split()
    assert argv[:3] == ["$", "podman", "run"]
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=2" and argv.count("--device") == 1
    assert "--memory=6000m" in argv and "--cpuset-cpus=3" in argv
    assert result.provenance["launcher"] == {"node": socket.gethostname(), "gpus_allocated": ["2"],
                                             "cpus_allocated": [3], "cpu_pinning": "cpuset", "slurm_job_id": "9",
                                             "gpu_uuids": uuids, "device": device}


def test_a_cpu_cell_in_a_slurm_job_with_a_gpu_records_the_jobs_allocation(fake_podman, tmp_path, monkeypatch):
    """The GPU lease gives a CPU cell no GPU; the record still names what the scheduler gave its job."""
    (fake_podman / "storage").write_text("sha256:aa\n")
    record = tmp_path / "image.json"
    record.write_text(json.dumps({"kind": "image", "id": "sha256:aa"}))
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0})
    result = launch.run_cell(synthetic_spec(), "podman", record, tmp_path / "cell.json", tmp_path / "cell.log",
                             launch.Options(timeout_s=60))
    assert "--device" not in (tmp_path / "cell.log").read_text().splitlines()[0]
    assert result.provenance["launcher"]["gpus_allocated"] == ["1"]


def test_a_node_without_the_image_loads_its_archive_once_and_checks_the_id(fake_podman):
    archive = fake_podman / "keras3-jax.gpu.oci.tar"
    archive.write_text("sha256:aa\n")
    launch.ensure_image(PODMAN, {"id": "sha256:aa"}, archive)
    launch.ensure_image(PODMAN, {"id": "sha256:aa"}, archive)      # now there: no second load
    assert (fake_podman / "loads").read_text().splitlines() == [str(archive)]
    with pytest.raises(launch.LaunchError, match=f"{archive} loaded on .* does not hold the recorded image sha256:bb"):
        launch.ensure_image(PODMAN, {"id": "sha256:bb"}, archive)
    with pytest.raises(launch.LaunchError, match="image sha256:cc is not in podman's storage on .*, and no archive"):
        launch.ensure_image(PODMAN, {"id": "sha256:cc"}, None)


# ---------------------------------------------------------------- the GPU lease, in process

def fake_devices(gpus: int = 2) -> list[dict]:
    return [{"index": str(i), "name": "NVIDIA H100 80GB HBM3", "driver_version": "580.95.05", "uuid": f"GPU-fake-{i}"}
            for i in range(gpus)]


@pytest.fixture
def gpu_host(tmp_path, monkeypatch):
    """A host with two GPUs and no scheduler allocation, its lease locks in tmp_path (not the host-wide /tmp)."""
    rows = "".join(f"{d['index']}, {d['name']}, {d['driver_version']}, {d['uuid']}\n" for d in fake_devices())
    for name in ("SLURM_JOB_ID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(launch, "LEASES", tmp_path)
    monkeypatch.setattr(launch.host, "SYSFS", tmp_path / "no-sysfs")        # no topology: the CPUs in order
    from kbench.gpu import preflight
    return preflight.Host(run=lambda argv: rows)


def test_gpu_cells_side_by_side_each_lease_a_gpu_of_their_own_and_a_third_waits(gpu_host, tmp_path):
    """Two cells at once get the two GPUs, one each; a third waits until one lets go and then gets that one. The
    lock is a file per GPU UUID, so another run on the host (here: this test holding GPU-fake-0's) counts too."""
    import contextlib
    import fcntl
    import queue
    import threading
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(synthetic_spec(), HOST, gpu_host) as none:
        assert none is None                                     # a CPU cell takes no GPU
    def lease():
        return launch.gpu_lease(spec, HOST, gpu_host, poll_s=0.01)
    leases = contextlib.ExitStack()
    first = leases.enter_context(lease())
    with lease() as second:
        assert (first, second) == (["GPU-fake-0"], ["GPU-fake-1"])
        got, done = queue.Queue(), threading.Event()

        def third():
            with lease() as gpus:
                got.put(gpus)
                done.wait(5)
        waiting = threading.Thread(target=third, daemon=True)
        waiting.start()
        with pytest.raises(queue.Empty):
            got.get(timeout=0.2)                                # every GPU taken: it waits
        leases.close()                                          # the first cell ends
        assert got.get(timeout=5) == ["GPU-fake-0"]
        done.set()
        waiting.join(5)
    with open(tmp_path / "kbench-gpu-GPU-fake-0.lock", "w") as other_run:
        fcntl.flock(other_run, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with launch.gpu_lease(spec, PODMAN, gpu_host) as gpus:
            assert gpus == ["1"]                                # podman names it by index (CDI)


def test_a_host_gpu_cell_sees_only_the_gpu_it_leased(gpu_host, tmp_path, monkeypatch):
    """The lease's GPU reaches the cell process as CUDA_VISIBLE_DEVICES (the cell's interpreter here: a script that
    reads its payload and writes down what it was handed), and the record names it."""
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\ncat >/dev/null\nprintf "%s" "${{CUDA_VISIBLE_DEVICES-unset}}" > {tmp_path}/seen\n')
    python.chmod(0o755)
    record = tmp_path / "environment.json"
    record.write_text(json.dumps({"stack": "synthetic", "kind": "venv", "prefix": str(tmp_path / "env")}))
    monkeypatch.setattr(launch, "_preflight", lambda spec, runtime: None)         # no driver on this host
    monkeypatch.setattr(launch.preflight, "Host", lambda: gpu_host)
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, HOST, gpu_host):             # another cell holds GPU-fake-0
        result = launch.run_cell(spec, "host", record, tmp_path / "cell.json", tmp_path / "cell.log",
                                 launch.Options(timeout_s=30))
    assert (tmp_path / "seen").read_text() == "GPU-fake-1"
    assert result.provenance["launcher"]["gpus_allocated"] == ["GPU-fake-1"]
    # what the identity check expects and what a compile cache built here is built for: the leased GPU's own facts
    assert result.provenance["launcher"]["gpu_uuids"] == ["GPU-fake-1"]
    assert result.provenance["launcher"]["device"] == compile_cache.device_key(fake_devices()[1])
    assert result.status == "failed" and result.error["type"] == "NoResult", result.error     # the stand-in writes no record


def test_a_host_or_preinstalled_cell_gets_the_variables_that_find_the_gpu(monkeypatch):
    """Where the driver's libraries or the Python come from the environment (a Kubernetes node mounts the driver under
    /usr/local/nvidia, an HPC `module load` sets LD_LIBRARY_PATH, CUDA_HOME and PYTHONPATH), the cell process gets
    them; a stray XLA_FLAGS still does not, and a venv cell takes no outside PYTHONPATH (the lock is its packages)."""
    found = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "CUDA_HOME": "/opt/cuda-12.4",
             "TRITON_LIBCUDA_PATH": "/usr/local/nvidia/lib64", "PYTHONPATH": "/opt/modules/torch/site-packages",
             "XLA_FLAGS": "--xla_gpu_autotune_level=0"}
    for name, value in found.items():
        monkeypatch.setenv(name, value)
    scripts = str(launch.REPO / "scripts")
    preinstalled = launch.process_env("preinstalled", {"lock": "envs/keras3-jax.gpu.lock"}, gpus=["GPU-1"])
    assert {k: preinstalled[k] for k in ("LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_LIBCUDA_PATH")} == {
        k: found[k] for k in ("LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_LIBCUDA_PATH")}
    assert preinstalled["PYTHONPATH"] == f"{scripts}:/opt/modules/torch/site-packages"
    assert "XLA_FLAGS" not in preinstalled and preinstalled["CUDA_VISIBLE_DEVICES"] == "GPU-1"
    venv = launch.process_env("host", {"lock": "envs/keras3-jax.gpu.lock"})
    assert venv["PYTHONPATH"] == scripts and venv["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"


@pytest.mark.parametrize("runtime", ["host", "preinstalled"])
def test_a_host_cell_gets_the_cuda_toolkit_and_ptxas_paths_where_the_host_sets_them_and_none_where_it_does_not(
        monkeypatch, runtime):
    """An HPC `module load cuda` sets CUDA_PATH, and Triton finds its ptxas through TRITON_PTXAS_PATH where the
    wheel's own does not match the driver, and Triton's first compile builds with the host's CC/CXX (a conda
    Python's compilers): a cell process in the driver's environment gets them as the host has them, and no made-up
    value where the host has none."""
    toolkit = {"CUDA_PATH": "/opt/cuda-12.4", "TRITON_PTXAS_PATH": "/opt/cuda-12.4/bin/ptxas",
               "CC": "/opt/conda/bin/x86_64-conda-linux-gnu-cc", "CXX": "/opt/conda/bin/x86_64-conda-linux-gnu-c++"}
    for name, value in toolkit.items():
        monkeypatch.setenv(name, value)
    kept = launch.process_env(runtime, {"lock": "envs/native-torch.gpu.lock"}, gpus=["GPU-1"])
    assert {k: kept.get(k) for k in toolkit} == toolkit
    for name in toolkit:
        monkeypatch.delenv(name)
    absent = launch.process_env(runtime, {"lock": "envs/native-torch.gpu.lock"}, gpus=["GPU-1"])
    assert not set(toolkit) & set(absent) and absent["CUDA_VISIBLE_DEVICES"] == "GPU-1"


def test_a_device_the_adapter_refuses_is_unsupported_before_anything_runs_on_it(driver_environment, monkeypatch):
    """Paddle 2.6.2's GPU wheel has no kernels for compute capability 9.0 (and dlopens an unversioned libcublas.so):
    the runner's float32 matmul probe would fail first and the cell read `failed`. The adapter's refuse() runs
    before the probe, so the cell is `unsupported` with the adapter's reason."""
    from kbench import adapters
    from kbench.adapters import synthetic
    from kbench.run import runner

    class Refusing:
        MODELS, __name__ = synthetic.MODELS, "kbench.adapters.refusing"

        @staticmethod
        def backend():
            def matmul(a, b):
                raise OSError("libcublas.so: cannot open shared object file")
            return synthetic.backend().__class__(**{**vars(synthetic.backend()), "matmul": matmul})

        @staticmethod
        def refuse(spec):
            raise adapters.NotSupported("paddlepaddle-gpu==2.6.2 has no kernels for compute capability 9.0")

        prepare = staticmethod(synthetic.prepare)
    monkeypatch.setattr(adapters, "load", lambda name: Refusing)
    monkeypatch.setenv("KBENCH_LOCK", json.loads(driver_environment.read_text())["lock"])
    result = runner.run(synthetic_spec(), {"runtime": "test"})
    assert result.status == "unsupported", result.error
    assert result.error["message"] == "paddlepaddle-gpu==2.6.2 has no kernels for compute capability 9.0"


def test_a_paddle_gpu_venv_gets_unversioned_cuda_library_names_first_on_its_library_path(tmp_path, monkeypatch):
    """paddlepaddle-gpu 2.6.2 dlopens libcublas.so, which its nvidia-*-cu11 wheels ship as libcublas.so.11 only: the
    venv gets a folder of unversioned links, and its cells get that folder first on LD_LIBRARY_PATH."""
    from kbench.stacks import envs
    for package, library in (("cublas", "libcublas.so.11"), ("cudnn", "libcudnn.so.8"), ("cudnn", "libcudnn_ops.so.8")):
        folder = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "nvidia" / package / "lib"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / library).write_text("")
    links = envs.cuda_links(tmp_path / "venv", tmp_path / "venv" / "cuda-links")
    assert sorted(p.name for p in links.iterdir()) == ["libcublas.so", "libcudnn.so", "libcudnn_ops.so"]
    assert (links / "libcublas.so").resolve().name == "libcublas.so.11"
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    env = launch.process_env("host", {"lock": "envs/paddle.gpu.lock", "library_path": str(links)})
    assert env["LD_LIBRARY_PATH"] == f"{links}:/usr/local/nvidia/lib64"


@pytest.mark.parametrize("lock, linked", [
    ("envs/paddle.gpu.lock", True), ("envs/paddle.gpu-cuda12.lock", True),
    ("envs/paddle.cpu.lock", False),            # paddlepaddle, the CPU wheel: no CUDA library to link
    ("envs/native-torch.gpu.lock", False),      # torch loads its nvidia-* libraries by their versioned names
])
def test_a_venv_built_from_a_committed_lock_gets_cuda_links_only_where_the_lock_pins_paddlepaddle_gpu(
        tmp_path, monkeypatch, lock, linked):
    """The venv build's own condition, read on the real locks (uv stubbed): a package name it misspells would leave
    the Paddle GPU venvs without their links, and their cells without cuBLAS."""
    from kbench.stacks import envs
    ran = []

    def run(argv, **kwargs):
        ran.append(argv[1:3])
        return subprocess.CompletedProcess(argv, 0, stdout="3.11.2\n", stderr="")
    monkeypatch.setattr(envs, "uv_binary", lambda: "uv")
    monkeypatch.setattr(envs.subprocess, "run", run)
    stack, accelerator = Path(lock).name.removesuffix(".lock").split(".")
    environment = envs.build(stack, accelerator, launch.REPO / lock, tmp_path / "venv", tmp_path / "record.json")
    assert ran[:2] == [["venv", "--quiet"], ["pip", "sync"]]            # the lock went to uv as it is
    assert environment.get("library_path") == (str((tmp_path / "venv" / "cuda-links").resolve()) if linked else None)
    assert (tmp_path / "venv" / "cuda-links").is_dir() is linked
    assert json.loads((tmp_path / "record.json").read_text()).get("library_path") == environment.get("library_path")


def test_an_exported_cuda_visible_devices_narrows_the_lease_and_is_no_allocation(gpu_host, monkeypatch):
    """Outside SLURM a shell's CUDA_VISIBLE_DEVICES=1 is not a scheduler's allocation: cells still lease, from GPU 1
    only, so a second cell waits instead of running on the same GPU (Snakemake plans as many cells side by side as
    there are GPUs the cells may use, kbench.gpu.preflight.visible)."""
    import contextlib
    import threading
    from kbench.gpu import preflight
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert launch.allocated_gpus() is None
    assert [d["uuid"] for d in preflight.visible(preflight.gpus(gpu_host))] == ["GPU-fake-1"]
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, HOST, gpu_host, poll_s=0.01) as first:
        assert first == ["GPU-fake-1"]
        got = []
        waiting = threading.Thread(target=lambda: got.append(contextlib.ExitStack().enter_context(
            launch.gpu_lease(spec, HOST, gpu_host, poll_s=0.01))), daemon=True)
        waiting.start()
        waiting.join(0.3)
        assert got == []                        # the one GPU it may use is taken
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-7")
    with pytest.raises(launch.LaunchError, match="CUDA_VISIBLE_DEVICES=GPU-fake-7 names none of the GPUs"):
        with launch.gpu_lease(spec, HOST, gpu_host):
            pass


def test_cells_side_by_side_outside_a_scheduler_each_get_their_gpus_share_of_the_cpus(gpu_host, monkeypatch):
    """Two GPUs, four CPUs: the cell on the first GPU gets CPUs 0-1, the other 2-3 (a container as --cpuset-cpus, a
    host process as its affinity), so cells side by side never share a core."""
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, PODMAN, gpu_host) as first, launch.gpu_lease(spec, PODMAN, gpu_host) as second:
        assert (first, first.cpus, second, second.cpus) == (["0"], [0, 1], ["1"], [2, 3])
    argv = launch.command("podman", IMAGE, OUT, gpu=True, gpus=second, cpuset=second.cpus)
    assert "--cpuset-cpus=2,3" in argv and argv[argv.index("--device") + 1] == "nvidia.com/gpu=1"


def fake_topology(root: Path, sockets: int = 2, cores: int = 4, threads: int = 2, gpu_nodes=()) -> Path:
    """A sysfs of `sockets` NUMA nodes of `cores` cores of `threads` threads, numbered as Linux numbers a two-socket
    host with hyperthreads: each socket's first threads (0-3, 4-7), then their siblings in the same order (8-11,
    12-15); gpu_nodes: the NUMA node of GPU i's PCI device (bus 0000:i:00.0)."""
    every = sockets * cores
    for socket_ in range(sockets):
        node = []
        for core in range(cores):
            siblings = [socket_ * cores + core + thread * every for thread in range(threads)]
            for cpu in siblings:
                topology = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
                topology.mkdir(parents=True)
                (topology / "core_cpus_list").write_text(",".join(map(str, siblings)) + "\n")
                (topology / "thread_siblings_list").write_text(",".join(map(str, siblings)) + "\n")
            node += siblings
        folder = root / "devices" / "system" / "node" / f"node{socket_}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(f"{socket_ * cores}-{socket_ * cores + cores - 1},"
                                        f"{every + socket_ * cores}-{every + socket_ * cores + cores - 1}\n")
    for gpu, node in enumerate(gpu_nodes):
        device = root / "bus" / "pci" / "devices" / f"0000:{gpu:02x}:00.0"
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
    return root


def gpus_on_bus(count: int) -> list[dict]:
    """GPUs as nvidia-smi lists them, with their PCI bus IDs as it writes them."""
    return [{**d, "pci_bus_id": f"00000000:{i:02X}:00.0"} for i, d in enumerate(fake_devices(count))]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 8])
def test_cpu_shares_are_whole_cores_and_keep_to_one_numa_node(tmp_path, monkeypatch, count):
    """Two sockets x 4 cores x 2 threads (CPUs 0-7, siblings 8-15), GPUs whose NUMA node is unknown: no two shares
    hold siblings of one core, all shares are the same number of cores, and each keeps to one node where the count
    allows (1 cell: all of them; 3 cells of 2 cores: two in node 0, one in node 1)."""
    sysfs = fake_topology(tmp_path / "sys")
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: set(range(16)))
    shares = launch.cpu_shares(fake_devices(count), sysfs)
    cores = [{c, c + 8} for c in range(8)]
    nodes = [set(range(0, 4)) | set(range(8, 12)), set(range(4, 8)) | set(range(12, 16))]
    for core in cores:
        assert sum(bool(core & set(share)) for share in shares) <= 1, (core, shares)
        assert all(core <= set(share) for share in shares if core & set(share)), (core, shares)
    assert len({len(share) for share in shares}) == 1 and len(shares[0]) == 2 * (8 // count)
    assert sum(map(len, shares)) == 2 * (8 // count) * count
    assert all(any(set(share) <= node for node in nodes) for share in shares) or count == 1, shares
    assert [launch.cpu_share(i, fake_devices(count), sysfs) for i in range(count)] == shares


def test_each_cell_gets_cores_of_its_gpus_numa_node(tmp_path, monkeypatch, gpu_host):
    """GPUs 0 and 1 hang off node 1, GPUs 2 and 3 off node 0 (sysfs numa_node of nvidia-smi's pci.bus_id): each
    cell's share is two whole cores of its GPU's node; the lease reads the bus ID from nvidia-smi."""
    from kbench.gpu import preflight
    sysfs = fake_topology(tmp_path / "sys", gpu_nodes=(1, 1, 0, 0))
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert launch.cpu_shares(gpus_on_bus(4), sysfs) == [[4, 5, 12, 13], [6, 7, 14, 15], [0, 1, 8, 9],
                                                        [2, 3, 10, 11]]
    monkeypatch.setattr(launch.host, "SYSFS", fake_topology(tmp_path / "sys2", gpu_nodes=(1, 0)))
    rows = "".join(f"{d['index']}, {d['name']}, {d['driver_version']}, {d['uuid']}, {d['pci_bus_id']}\n"
                   for d in gpus_on_bus(2))
    host = preflight.Host(run=lambda argv: rows)
    assert [d["pci_bus_id"] for d in preflight.gpus(host)] == ["00000000:00:00.0", "00000000:01:00.0"]
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, PODMAN, host) as first, launch.gpu_lease(spec, PODMAN, host) as second:
        assert (first, first.cpus) == (["0"], [4, 5, 6, 7, 12, 13, 14, 15])
        assert (second, second.cpus) == (["1"], [0, 1, 2, 3, 8, 9, 10, 11])


def test_a_numa_node_with_two_gpus_is_split_between_them(tmp_path, monkeypatch):
    """A DGX A100 in NPS4, in small: 8 nodes of 2 cores, 2 GPUs on each of nodes 0-3. Each GPU gets a core of its own
    node (a share shrinks to what its node gives each of its GPUs), none a GPU-less node 4-7."""
    sysfs = fake_topology(tmp_path / "sys", sockets=8, cores=2, threads=1, gpu_nodes=(0, 0, 1, 1, 2, 2, 3, 3))
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert launch.cpu_shares(gpus_on_bus(8), sysfs) == [[0], [1], [2], [3], [4], [5], [6], [7]]


def test_a_node_with_fewer_cores_left_than_a_share_gives_none_and_the_share_goes_elsewhere(tmp_path, monkeypatch):
    """Three GPUs on node 0 of two nodes of 2 cores: a node with more GPUs than cores cannot be split; shares of one
    core, two from node 0, the third from node 1, never a short one from node 0."""
    sysfs = fake_topology(tmp_path / "sys", sockets=2, cores=2, threads=1, gpu_nodes=(0, 0, 0))
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: set(range(4)))
    assert launch.cpu_shares(gpus_on_bus(3), sysfs) == [[0], [1], [2]]


def test_without_a_topology_or_with_fewer_cores_than_cells_the_cpus_go_in_order(tmp_path, monkeypatch):
    """No sysfs (a container's view): every CPU counts as a core, shares are the CPUs in order, as before. One core
    of two threads for two GPUs: a thread each (nothing better exists); fewer CPUs than cells: no share."""
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: set(range(6)))
    assert launch.cpu_shares(fake_devices(2), tmp_path / "none") == [[0, 1, 2], [3, 4, 5]]
    assert launch.cpu_shares(fake_devices(4), tmp_path / "none") == [[0], [1], [2], [3]]
    sysfs = fake_topology(tmp_path / "sys", sockets=1, cores=1, threads=2)
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1})
    assert launch.cpu_shares(fake_devices(2), sysfs) == [[0], [1]]
    assert launch.cpu_shares(fake_devices(3), sysfs) is None and launch.cpu_share(0, fake_devices(3), sysfs) is None


def run_under_the_second_gpus_lease(runtime: str, gpu_host, tmp_path, monkeypatch,
                                    options=launch.Options(timeout_s=30)) -> tuple[list[int], dict, str]:
    """A GPU cell started while another cell holds GPU-fake-0, so its lease is GPU-fake-1 with the second half of
    this process's CPUs. The process the launcher starts (the cell's interpreter on the host, the client on podman)
    is a stand-in that writes down the CPUs it may run on. Returns them, the record's launcher, the log's argv."""
    seen = tmp_path / "affinity"
    write_affinity = f'"{sys.executable}" -c "import os; print(sorted(os.sched_getaffinity(0)))" > {seen}'
    if runtime == "host":
        tool = tmp_path / "env" / "bin" / "python"
        record = {"stack": "synthetic", "kind": "venv", "prefix": str(tmp_path / "env")}
        script = f"#!/bin/sh\ncat >/dev/null\n{write_affinity}\n"
    else:
        tool = tmp_path / "bin" / runtime
        record = {"kind": "image", "id": "sha256:aa"}
        # `image exists` finds the image; only `run` starts the cell (inspect and rm answer nothing)
        script = f'#!/bin/sh\n[ "$1" = run ] || exit 0\ncat >/dev/null\n{write_affinity}\n'
        monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    tool.parent.mkdir(parents=True)
    tool.write_text(script)
    tool.chmod(0o755)
    (tmp_path / "environment.json").write_text(json.dumps(record))
    monkeypatch.setattr(launch, "_preflight", lambda spec, runtime: None)         # no driver on this host
    monkeypatch.setattr(launch.preflight, "Host", lambda: gpu_host)
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, runtimes.resolve(runtime), gpu_host):             # another cell holds GPU-fake-0
        result = launch.run_cell(spec, runtime, tmp_path / "environment.json", tmp_path / "cell.json",
                                 tmp_path / "cell.log", options)
    return json.loads(seen.read_text()), result.provenance["launcher"], (tmp_path / "cell.log").read_text()


def test_a_host_cell_under_a_lease_runs_on_its_share_of_the_cpus_only(gpu_host, tmp_path, monkeypatch):
    """The share is the process's affinity: a host process has no --cpuset-cpus, and without it would run on every
    CPU, beside the cell on the other GPU."""
    mine = sorted(os.sched_getaffinity(0))
    assert len(mine) >= 2, "two GPUs' shares need two CPUs to tell apart"
    second_half = mine[len(mine) // 2:2 * (len(mine) // 2)]
    affinity, launcher, log = run_under_the_second_gpus_lease("host", gpu_host, tmp_path, monkeypatch)
    assert launcher["gpus_allocated"] == ["GPU-fake-1"] and launcher["cpus_allocated"] == second_half
    assert affinity == second_half and affinity != mine and launcher["cpu_pinning"] == "affinity"
    assert "--cpuset-cpus" not in log


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_a_container_cell_under_a_lease_gets_its_share_as_a_cpuset_and_its_client_is_not_pinned(
        gpu_host, tmp_path, monkeypatch, account, runtime):
    """An account whose containers may have a cpuset (systemd delegates cpuset to it, or root): the container gets
    the share as --cpuset-cpus, and the client runs where it likes (docker's daemon starts the container anyway)."""
    account("cpuset cpu io memory pids")
    mine = sorted(os.sched_getaffinity(0))
    assert len(mine) >= 2, "two GPUs' shares need two CPUs to tell apart"
    second_half = mine[len(mine) // 2:2 * (len(mine) // 2)]
    affinity, launcher, log = run_under_the_second_gpus_lease(runtime, gpu_host, tmp_path, monkeypatch)
    assert launcher["cpus_allocated"] == second_half and launcher["cpu_pinning"] == "cpuset"
    assert affinity == mine
    argv = log.splitlines()[0].split()
    assert argv[:3] == ["$", runtime, "run"] and f"--cpuset-cpus={','.join(map(str, second_half))}" in argv
    assert "taskset" not in argv


def test_rootless_podman_without_the_cpuset_controller_pins_its_client_and_the_cell_instead(
        gpu_host, tmp_path, monkeypatch, account):
    """uid 1000, whose user manager systemd gave its default `cpu io memory pids`: --cpuset-cpus would stop the
    container ("controller `cpuset` is not available"), so the podman client runs on the share (conmon and the
    container inherit it), the cell's command in the image starts under taskset on the same CPUs (runc 1.2.7 and
    newer reset an inherited affinity), and the record says so. docker's daemon sets its cpuset whoever asks."""
    account("cpu io memory pids")
    mine = sorted(os.sched_getaffinity(0))
    assert len(mine) >= 2, "two GPUs' shares need two CPUs to tell apart"
    second_half = mine[len(mine) // 2:2 * (len(mine) // 2)]
    affinity, launcher, log = run_under_the_second_gpus_lease("podman", gpu_host, tmp_path, monkeypatch)
    assert launcher["cpus_allocated"] == second_half and launcher["cpu_pinning"] == "client affinity"
    assert affinity == second_half and affinity != mine
    argv = log.splitlines()[0].split()
    assert not [a for a in argv if a.startswith("--cpuset-cpus")], argv
    started = argv.index("sha256:aa")
    assert argv[started + 1:started + 5] == ["taskset", "--cpu-list", ",".join(map(str, second_half)), "python"]


def test_the_jax_numpy_job_gets_every_cpu_while_a_cell_gets_its_gpus_share(gpu_host, tmp_path, monkeypatch):
    """Two GPUs, four CPUs: a cell on the second GPU gets CPUs 2-3, the JAX-against-NumPy job (Options.host_cpus) all
    four with that GPU alone, so its NumPy half does not get slower on a host with more GPUs. Then started for real: the
    job's process runs on every CPU this one may use, and its record says so."""
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, HOST, gpu_host):                                   # another cell holds GPU-fake-0
        with monkeypatch.context() as m:
            m.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
            with launch.gpu_lease(spec, HOST, gpu_host) as cell_lease:
                assert (cell_lease, cell_lease.cpus) == (["GPU-fake-1"], [2, 3])
            with launch.gpu_lease(spec, HOST, gpu_host, host_cpus=True) as study_lease:
                assert (study_lease, study_lease.cpus) == (["GPU-fake-1"], [0, 1, 2, 3])
    mine = sorted(os.sched_getaffinity(0))
    affinity, launcher, _ = run_under_the_second_gpus_lease(
        "host", gpu_host, tmp_path, monkeypatch,
        launch.Options(timeout_s=30, module="kbench.studies.jax_numpy", host_cpus=True))
    assert affinity == mine and launcher["cpus_allocated"] == mine and launcher["gpus_allocated"] == ["GPU-fake-1"]
    cpu_job = launch.run_cell(synthetic_spec(), "host", tmp_path / "environment.json", tmp_path / "cpu.json",
                              tmp_path / "cpu.log", launch.Options(timeout_s=30, host_cpus=True))
    assert cpu_job.provenance["launcher"]["cpus_allocated"] == mine       # a CPU run: the CPUs it had, all of them


@pytest.mark.parametrize("listed, runtime, handed", [
    (["0", "1", "2", "3"], "host", ["GPU-fake-3"]),          # nvidia-smi names the node's GPU 3: by UUID
    (["0", "1", "2", "3"], "podman", ["3"]),                 # CDI names it by the node's index
    (["0"], "host", ["0"]),           # ConstrainDevices: the job sees its GPU as 0; SLURM's CUDA_VISIBLE_DEVICES says so
    (["0"], "podman", ["3"]),         # the container starts outside the job's cgroup: the node's number
])
def test_a_slurm_job_hands_each_runtime_the_gpu_as_it_sees_it(tmp_path, monkeypatch, listed, runtime, handed):
    """SLURM gave the node's GPU 3 (SLURM_JOB_GPUS=3) and set CUDA_VISIBLE_DEVICES=0 for the job: a process in the job
    (a constrained cgroup renumbers its GPUs from 0) must not get "3", which names no GPU it can see."""
    from kbench.gpu import preflight
    rows = "".join(f"{i}, NVIDIA H100 80GB HBM3, 580.95.05, GPU-fake-{int(i) if len(listed) > 1 else 3}\n"
                   for i in listed)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_GPUS", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("SLURM_STEP_GPUS", raising=False)
    host = preflight.Host(run=lambda argv: rows)
    spec = synthetic_spec().replace(accelerator="gpu")
    with launch.gpu_lease(spec, runtimes.resolve(runtime), host) as lease:
        assert lease == handed and lease.cpus is None


def test_an_apptainer_cell_gets_a_workdir_on_the_nodes_disk_and_it_goes_with_the_cell(tmp_path, monkeypatch):
    """--containall without --workdir puts /tmp and $HOME in a small tmpfs (Inductor's and Triton's caches of a
    compiled cell fill it): the cell gets a scratch folder under TMPDIR, removed when the cell ends."""
    tool = tmp_path / "bin" / "apptainer"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\ncat >/dev/null\nfor a; do case "$prev" in --workdir) '
                    f'[ -d "$a" ] && echo "$a" > {tmp_path}/workdir;; esac; prev=$a; done\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(launch.tempfile, "tempdir", None)          # read TMPDIR again
    record = tmp_path / "sif.json"
    record.write_text(json.dumps({"kind": "sif", "sif": "/images/x.sif", "id": "sha256:aa"}))
    launch.run_cell(synthetic_spec(), "apptainer", record, tmp_path / "cell.json", tmp_path / "cell.log",
                    launch.Options(timeout_s=30))
    workdir = Path((tmp_path / "workdir").read_text().strip())
    assert workdir.parent == tmp_path / "scratch" and not workdir.exists()
    assert launch.command("apptainer", IMAGE, OUT)[:7] == ["apptainer", "exec", "--containall", "--cleanenv", "--net",
                                                          "--network", "none"]


@pytest.mark.parametrize("given, dropped", [("100/1s", True), ("50/1m", False), ("100/2s", False), (None, False)])
def test_only_snakemakes_default_job_rate_limit_is_dropped(given, dropped):
    """Snakemake's own limiter (its default, 100/1s) re-arms a timer per finished job; a limit a user gave stays."""
    from types import SimpleNamespace
    from snakemake.scheduling.job_scheduler import JobRateLimiter
    from snakemake.settings.types import MaxJobsPerTimespan
    from kbench.run import scheduling
    limiter = JobRateLimiter(MaxJobsPerTimespan.parse_choice(given)) if given else None
    scheduler = SimpleNamespace(job_rate_limiter=limiter)
    assert scheduling.drop_default_rate_limit(scheduler) is dropped
    assert scheduler.job_rate_limiter is (None if dropped else limiter)
