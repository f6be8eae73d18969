"""Recovering a run, in one command each:

    kbench resume [snakemake options]          after the driver was killed (SIGKILL, a lost session): refuses while
                                               a Snakemake process still runs in this folder, else removes the stale
                                               lock and reruns what is incomplete or missing; finished cells stand
    kbench retry-failed [snakemake options]    reruns exactly the cells whose record says failed (and the tables);
                                               their earlier records and logs stay in attempts/ beside them

The options are the run's own (--config ..., --profile ...), so the same cells are meant.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kbench import files
from kbench.plan import config_check

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
CONFIG_OPTIONS = ("--configfile", "--configfiles")


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


def configfiles(options: list[str]) -> list[str]:
    """The config files among Snakemake options: --configfile A [B ...] (or --configfiles), --configfile=A."""
    found, taking = [], False
    for option in options:
        if option.startswith("-"):
            name, equals, value = option.partition("=")
            taking = name in CONFIG_OPTIONS and not equals
            found += [value] if name in CONFIG_OPTIONS and equals else []
        elif taking:
            found.append(option)
    return found


def check_configfiles(options: list[str]) -> None:
    """Snakemake answers a config file that is missing or not YAML with a traceback: each is read here first, and a
    bad one is named (config_check.ConfigError) before Snakemake starts."""
    for path in configfiles(options):
        config_check.load_yaml(Path(path))


def resume(options: list[str]) -> int:
    alive = running_here()
    if alive:
        print(f"resume: Snakemake is still running in {Path.cwd()} (pid {', '.join(map(str, alive))}); wait for it "
              "or stop it first", file=sys.stderr)
        return 1
    os.spawnv(os.P_WAIT, SNAKEMAKE, [SNAKEMAKE, *options, "--unlock"])
    os.execv(SNAKEMAKE, [SNAKEMAKE, *options, "--rerun-incomplete"])


# What to do about a cell record that is not whole: Snakemake reruns a cell whose record is missing.
CELL = "expected a cell record as the workflow writes it: remove it, and `kbench resume` reruns the cell"


def summary(options: list[str]) -> subprocess.CompletedProcess:
    """Snakemake's own list of the run's outputs."""
    return subprocess.run([SNAKEMAKE, *options, "--summary"], capture_output=True, text=True)


def failed_cells(summary_text: str) -> list[str]:
    """The cell records (a warm twin's too) in a --summary that say failed; a BadFile for one that is not a whole
    cell record."""
    found = []
    for line in summary_text.splitlines():
        fields = line.split("\t")
        if len(fields) > 2 and fields[2] in ("cell", "warm_cell") and Path(fields[0]).is_file():
            record = files.load_json(fields[0], CELL)
            if not isinstance(record, dict):
                raise files.BadFile(fields[0], f"a JSON {type(record).__name__}, not a cell record", CELL)
            if record.get("status") == "failed":
                found.append(fields[0])
    return found


def retry_failed(options: list[str]) -> int:
    listed = summary(options)
    if listed.returncode:                   # Snakemake's own words (a config error names its key)
        sys.stderr.write(listed.stderr or listed.stdout)
        return listed.returncode
    failed = failed_cells(listed.stdout)
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
    try:
        check_configfiles(argv[1:])
        return commands[argv[0]](argv[1:])
    except (config_check.ConfigError, files.BadFile) as error:
        return files.refuse(argv[0], error)


if __name__ == "__main__":
    sys.exit(main())
