"""The one place that knows how a cell process starts: host venv, podman, docker or apptainer.

run_cell() turns (spec, environment record) into one process, feeds it the payload on stdin, sends its output to the
log, and guarantees a result JSON: a process that crashes, is killed or times out becomes a `failed` cell.
In a container the cell has no network, sees the repo's scripts/ read-only and writes only its result folder.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import uuid
from pathlib import Path

from kbench import cell, preflight, records

REPO = Path(__file__).resolve().parents[2]
RUNTIMES = ("host", "podman", "docker", "apptainer", "preinstalled")
CONTAINERS_CONF = REPO / "containers" / "containers.conf"
SCRIPTS_IN_IMAGE = "/opt/kbench/scripts"
OUT_IN_IMAGE = "/kbench/out"


def command(runtime: str, environment: dict, out: Path, gpu: bool = False, name: str = "kbench-cell",
            module: str = "kbench.runner") -> list[str]:
    """argv that runs `python -m module --out OUT` (kbench.runner for a cell) inside `environment` (a record of
    kbench.envs or kbench.images), the payload on its stdin."""
    if runtime == "host":
        return [str(Path(environment["prefix"]) / "bin" / "python"), "-m", module, "--out", str(out)]
    if runtime == "preinstalled":       # an interpreter the host already has (an HPC module, a vendor image)
        return [environment["python"], "-m", module, "--out", str(out)]
    inner = ["python", "-m", module, "--out", f"{OUT_IN_IMAGE}/{out.name}"]
    mounts = [(REPO / "scripts", SCRIPTS_IN_IMAGE, "ro"), (out.parent.resolve(), OUT_IN_IMAGE, "rw")]
    if runtime in ("podman", "docker"):
        argv = [runtime, "run", "--rm", "-i", "--name", name, "--network", "none"]
        argv += [f"--volume={src}:{dst}:{mode}" for src, dst, mode in mounts]
        if runtime == "podman":
            argv += ulimit_args() + (["--device", "nvidia.com/gpu=all"] if gpu else [])   # GPUs via CDI
        elif gpu:
            argv += ["--gpus", "all"]
        return argv + [environment["id"], *inner]
    if runtime == "apptainer":
        argv = ["apptainer", "exec", "--containall", "--cleanenv", "--net", "--network", "none",
                "--bind", ",".join(f"{src}:{dst}:{mode}" for src, dst, mode in mounts),
                "--env", f"PYTHONPATH={SCRIPTS_IN_IMAGE}"] + (["--nv"] if gpu else [])
        return argv + [environment["sif"], *inner]
    raise ValueError(f"runtime {runtime!r} is not supported; allowed: {', '.join(RUNTIMES)}")


def ulimit_args() -> list[str]:
    """podman's default open-file limit (1048576) is refused where the host's hard limit is lower: use the host's."""
    def hard(limit: int, cap: int) -> int:
        value = resource.getrlimit(limit)[1]
        return cap if value == resource.RLIM_INFINITY else min(value, cap)
    nofile, nproc = hard(resource.RLIMIT_NOFILE, 1048576), hard(resource.RLIMIT_NPROC, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def process_env(runtime: str, environment: dict | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KERAS_", "KBENCH_"))}
    env["PYTHONUNBUFFERED"] = "1"
    if runtime in ("host", "preinstalled"):
        env["PYTHONPATH"] = str(REPO / "scripts")
        if environment and environment.get("lock"):
            env["KBENCH_LOCK"] = str((REPO / environment["lock"]).resolve())   # images set their own
        if runtime == "preinstalled":
            env["KBENCH_LOCK_MODE"] = "record"      # its versions are what they are: recorded against the lock
    if runtime == "podman":
        env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
    return env


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def run_cell(spec: dict, runtime: str, environment_record: str | Path, out: str | Path, log: str | Path,
             timeout_s: float | None = None, repeat: int = 1) -> cell.CellResult:
    out, log = Path(out), Path(log)
    environment = records.read(environment_record)
    context = {"runtime": runtime, "environment": environment, "git_commit": git_commit(), "repeat": repeat}
    name = f"kbench-{uuid.uuid4().hex[:12]}"
    gpu = preflight.is_gpu(spec["accelerator"])
    argv = command(runtime, environment, out, gpu=gpu, name=name)
    out.unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    # This node's GPU, driver and runtime plumbing: on a cluster the submit host's check said nothing about them.
    problems = preflight.problems(runtime, spec["accelerator"], [spec["framework_def"]["stack"]]) if gpu else []
    if problems:
        failure = cell.error_info("PreflightFailed", "; ".join(problems))
        log.write_text("\n".join(problems) + "\n")
        cell.new_result(spec, context, "failed", failure, repeat).write(out)
        return cell.read(out)
    payload = json.dumps({"spec": spec, "context": context})
    with open(log, "w") as log_file:
        log_file.write(f"$ {' '.join(argv)}\n")
        log_file.flush()
        try:
            proc = subprocess.run(argv, input=payload, text=True, stdout=log_file, stderr=subprocess.STDOUT,
                                  env=process_env(runtime, environment), cwd=REPO, timeout=timeout_s)
            failure = None if proc.returncode == 0 else exit_failure(proc.returncode)
        except subprocess.TimeoutExpired:
            stop_container(runtime, name)
            failure = cell.error_info("Timeout", f"cell process exceeded {timeout_s:.0f} s and was killed")
    if failure or not out.exists():
        failure = failure or cell.error_info("NoResult", "cell process exited without writing a result")
        failure["detail"] = log.read_text()[-4000:]
        cell.new_result(spec, context, "failed", failure, repeat).write(out)
    return cell.read(out)


def stop_container(runtime: str, name: str) -> None:
    """Killing the podman/docker client leaves the container running: remove it by name."""
    if runtime in ("podman", "docker"):
        subprocess.run([runtime, "rm", "--force", name], capture_output=True, env=process_env(runtime))


def exit_failure(returncode: int) -> dict:
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return cell.error_info("Killed", f"cell process killed by {name}{hint}")
    if returncode == 137:   # 128 + SIGKILL, as container runtimes report it
        return cell.error_info("Killed", "cell process killed by SIGKILL (out of memory?)")
    return cell.error_info("ProcessExit", f"cell process exited with status {returncode}")
