"""Recovering a run, in one command each:

    scripts/resume [snakemake options]         after the driver was killed (SIGKILL, a lost session): refuses while
                                               a Snakemake process still runs in this folder, else removes the stale
                                               lock and reruns what is incomplete or missing; finished cells stand
    scripts/retry-failed [snakemake options]   reruns exactly the cells whose record says failed (and the tables);
                                               their earlier records and logs stay in attempts/ beside them

The options are the run's own (--config ..., --profile ...), so the same cells are meant.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def running_here() -> list[int]:
    """Snakemake processes whose working folder is this one (other than this process and its ancestors)."""
    here, mine = Path.cwd().resolve(), {os.getpid(), os.getppid()}
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if int(proc.name) in mine or not any(a == b"snakemake" or a.endswith(b"/snakemake") for a in argv[:3]):
                continue
            if (proc / "cwd").resolve() == here:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def resume(options: list[str]) -> int:
    alive = running_here()
    if alive:
        print(f"resume: Snakemake is still running in {Path.cwd()} (pid {', '.join(map(str, alive))}); wait for it "
              "or stop it first", file=sys.stderr)
        return 1
    os.spawnv(os.P_WAIT, SNAKEMAKE, [SNAKEMAKE, *options, "--unlock"])
    os.execv(SNAKEMAKE, [SNAKEMAKE, *options, "--rerun-incomplete"])


def failed_cells(options: list[str]) -> list[str]:
    """The cell records of the run that say failed (from Snakemake's own list of the run's outputs)."""
    import subprocess
    summary = subprocess.run([SNAKEMAKE, *options, "--summary"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in summary.splitlines():
        fields = line.split("\t")
        if len(fields) > 2 and fields[2] == "cell" and Path(fields[0]).is_file():
            if json.loads(Path(fields[0]).read_text()).get("status") == "failed":
                found.append(fields[0])
    return found


def retry_failed(options: list[str]) -> int:
    failed = failed_cells(options)
    if not failed:
        print("retry-failed: no failed cell in this run")
        return 0
    print(f"retry-failed: rerunning {len(failed)} failed cell(s)")
    os.execv(SNAKEMAKE, [SNAKEMAKE, *options, "--forcerun", *failed])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"resume": resume, "retry-failed": retry_failed}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
