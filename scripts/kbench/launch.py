"""The one place that knows how a cell process starts (host venv today; container runtimes plug in here).

run_cell() turns (spec, environment record) into one process, feeds it the payload on stdin, sends its output to the
log, and guarantees a result JSON: a process that crashes, is killed or times out becomes a `failed` cell.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from kbench import cell

REPO = Path(__file__).resolve().parents[2]
RUNTIMES = ("host",)


def command(runtime: str, environment: dict, out: Path) -> list[str]:
    """argv that runs kbench.runner for one cell inside `environment` (a record written by kbench.envs)."""
    if runtime == "host":
        return [str(Path(environment["prefix"]) / "bin" / "python"), "-m", "kbench.runner", "--out", str(out)]
    raise ValueError(f"runtime {runtime!r} is not supported; allowed: {', '.join(RUNTIMES)}")


def process_env(runtime: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KERAS_"))}
    env["PYTHONPATH"] = str(REPO / "scripts")
    env["PYTHONUNBUFFERED"] = "1"
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
             timeout_s: float | None = None) -> dict:
    out, log = Path(out), Path(log)
    environment = cell.read(environment_record)
    context = {"runtime": runtime, "environment": environment, "git_commit": git_commit()}
    argv = command(runtime, environment, out)
    out.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"spec": spec, "context": context})
    with open(log, "w") as log_file:
        log_file.write(f"$ {' '.join(argv)}\n")
        log_file.flush()
        try:
            proc = subprocess.run(argv, input=payload, text=True, stdout=log_file, stderr=subprocess.STDOUT,
                                  env=process_env(runtime), cwd=REPO, timeout=timeout_s)
            failure = None if proc.returncode == 0 else exit_failure(proc.returncode)
        except subprocess.TimeoutExpired:
            failure = cell.error_info("Timeout", f"cell process exceeded {timeout_s:.0f} s and was killed")
    if failure or not out.exists():
        failure = failure or cell.error_info("NoResult", "cell process exited without writing a result")
        failure["detail"] = log.read_text()[-4000:]
        cell.write_atomic(out, cell.new_result(spec, context, "failed", failure))
    return cell.read(out)


def exit_failure(returncode: int) -> dict:
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return cell.error_info("Killed", f"cell process killed by {name}{hint}")
    return cell.error_info("ProcessExit", f"cell process exited with status {returncode}")
