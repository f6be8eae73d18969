"""The front door: `kbench` (kbench.frontdoor.cli) lists every subcommand with what it does in one line, each
subcommand's --help opens with that line, a bad argument is one error naming it (exit 2), `kbench gpucheck` imports
nothing the GPU check cannot have (pandas, Snakemake, ...), and scripts/bootstrap puts the command into the venv
(kbench.frontdoor.launcher)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO
from kbench.frontdoor import cli, launcher

BLOCKED = ("pandas", "matplotlib", "scipy", "duckdb", "snakemake")


def run_main(argv, capsys) -> tuple[int, str, str]:
    try:
        status = cli.main(argv)
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


def test_kbench_help_lists_every_subcommand_with_one_line_of_what_it_does(capsys):
    status, out, _ = run_main(["--help"], capsys)
    assert status == 0
    listed = {line.split()[0]: line for line in out.split("commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()}
    assert list(listed) == list(cli.COMMANDS)
    assert set(cli.COMMANDS) >= {"verify", "compare", "history", "bisect", "resume", "retry-failed", "gpucheck"}
    for name, (summary, _) in cli.COMMANDS.items():
        assert listed[name].endswith(summary) and len(listed[name]) <= 80, listed[name]    # one line in 80 columns


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_subcommands_help_says_what_it_does_in_one_line(name, capsys):
    status, out, _ = run_main([name, "--help"], capsys)
    assert status == 0
    usage, description = out.split("\n\n")[:2]
    assert usage.startswith(f"usage: kbench {name} ")
    assert description == cli.COMMANDS[name][0] + "."


@pytest.mark.parametrize("argv, error", [
    ([], "kbench: error: the following arguments are required: COMMAND"),
    (["frobnicate"], "kbench: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (["--verbose"], "kbench: error: "),
    (["compare", "old.tar.gz"], "kbench compare: error: the following arguments are required: new"),
    (["compare", "a", "b", "--bogus"], "kbench compare: error: unrecognized arguments: --bogus"),
    (["bisect", "--repeats", "three"], "kbench bisect: error: argument --repeats: invalid int value: 'three'"),
    (["gpucheck", "--plan", "everything"], "kbench gpucheck: error: argument --plan: invalid choice: 'everything'"),
    (["history", "forget"], "kbench history: error: argument command: invalid choice: 'forget'"),
    (["verify"], "kbench verify: error: the following arguments are required: archive"),
])
def test_a_bad_argument_is_one_error_naming_it(argv, error, capsys):
    status, out, err = run_main(argv, capsys)
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: kbench") and lines[-1].startswith(error), err
    assert sum(": error: " in line for line in lines) == 1


def test_resume_and_retry_failed_pass_the_runs_own_snakemake_options_on(monkeypatch, capsys):
    from kbench.run import recover
    seen = []
    monkeypatch.setattr(recover, "main", lambda argv: seen.append(argv) or 0)
    options = ["--cores", "all", "--config", "suite=tiny", "accelerator=cpu", "-n", "--h", "results/x.csv"]
    assert cli.main(["resume", *options]) == 0 and cli.main(["retry-failed", *options]) == 0
    assert seen == [["resume", *options], ["retry-failed", *options]]      # --h is Snakemake's, not our --help


def test_kbench_gpucheck_imports_only_what_a_bare_gpu_host_has():
    """python3 scripts/cli.py gpucheck on a host whose Python has NumPy and PyYAML only: nothing on the way to the
    check (the command's listing, its dispatch, the check's parser) imports pandas, matplotlib, scipy, DuckDB or
    Snakemake, and `kbench --help` imports no wing at all."""
    code = ("import runpy, sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in BLOCKED)
            + "sys.argv = [sys.argv[1], *sys.argv[2:]]\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as stop:\n    assert stop.code in (0, None), stop.code\n"
            "print(sorted(m for m in sys.modules if m.startswith('kbench.')))\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    for argv, wings in ((["--help"], ["kbench.frontdoor", "kbench.frontdoor.cli"]), (["gpucheck", "--help"], None)):
        proc = subprocess.run([sys.executable, "-c", code, str(REPO / "scripts" / "cli.py"), *argv], env=env,
                              capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-2000:]
        imported = eval(proc.stdout.strip().splitlines()[-1])
        assert imported == wings if wings else "kbench.gpucheck.check" in imported, imported


def test_bootstrap_writes_the_kbench_launcher_into_the_venv(tmp_path):
    """The launcher bootstrap writes after the venv's sync: the venv's Python running scripts/cli.py, executable, the
    same command as `python3 scripts/cli.py`; written again over an old one."""
    venv = tmp_path / "venv with space"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "kbench").write_text("#!/bin/sh\nexit 3\n")          # a stale one, from a moved checkout
    path = launcher.write(venv)
    assert path == venv / "bin" / "kbench" and os.access(path, os.X_OK)
    assert path.read_text().splitlines()[-1] == f"exec '{venv.absolute()}/bin/python' {REPO}/scripts/cli.py \"$@\""
    proc = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "retry-failed" in proc.stdout and "gpucheck" in proc.stdout, proc.stderr
    bootstrap = (REPO / "scripts" / "bootstrap").read_text()
    sync, write = bootstrap.index("uv pip sync"), bootstrap.index("-m kbench.frontdoor.launcher .venv")
    assert sync < write                     # after the sync, so no run of bootstrap leaves the venv without it


def test_the_launcher_command_refuses_what_is_not_a_venv(tmp_path, capsys):
    assert launcher.main([str(tmp_path)]) == 2
    assert "usage: python -m kbench.frontdoor.launcher VENV" in capsys.readouterr().err
    assert not (tmp_path / "bin" / "kbench").exists()
