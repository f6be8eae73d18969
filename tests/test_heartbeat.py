"""Long steps show progress (kbench.heartbeat): a long command's output fills its log while it runs, and a line
reaches the terminal every interval with what it is doing (the log's last line), how long so far and what its last
run took; the image and venv rules run their builds through it, and the launcher runs one on every cell's log. The
commands here are sleep-based stand-ins for a build, their seconds scaled down (interval 0.1 s)."""
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, SNAKEMAKE
from kbench import heartbeat
from kbench.stacks import images
from test_launch import driver_environment, run, synthetic_spec  # noqa: F401 (a fixture)

INTERVAL = 0.1
# A build's stand-in: a step line, a silent stretch (the lock's install), the next step, its end (about 0.7 s)
BUILD = ("import time\n"
         "print('STEP 1/3: FROM sha256:base', flush=True)\n"
         "time.sleep(0.3)\n"
         "print('STEP 2/3: RUN uv pip sync /opt/kbench/stack.lock', flush=True)\n"
         "time.sleep(0.3)\n"
         "print('STEP 3/3: COMMIT localhost/kbench/synthetic:cpu', flush=True)\n"
         "time.sleep(0.1)\n")


class Terminal:
    """Where the heartbeat writes, each line with when it came and how large the log was then."""

    def __init__(self, log: Path):
        self.log, self.lines, self.lock = log, [], threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            for line in filter(None, text.splitlines()):
                self.lines.append((time.monotonic(), line, self.log.stat().st_size if self.log.exists() else 0))

    def flush(self) -> None:
        pass


def test_a_builds_log_fills_while_it_runs_and_a_line_reaches_the_terminal_every_interval(tmp_path):
    log = tmp_path / "logs" / "images" / "synthetic.cpu.log"
    terminal = Terminal(log)
    started = time.monotonic()
    status = heartbeat.run([sys.executable, "-c", BUILD], log, "image synthetic.cpu", interval_s=INTERVAL,
                           timeout_s=30, out=terminal)
    ended = time.monotonic()
    assert status == 0
    beats = [(at, line, size) for at, line, size in terminal.lines if line.startswith("[kbench] image synthetic.cpu: ")]
    assert len(beats) >= 4 and len(beats) == len(terminal.lines), terminal.lines
    # the log is not empty while the build runs: every line saw it written, and says which step it is on
    assert all(size > 0 and at < ended for at, _, size in beats)
    assert any("; STEP 1/3: FROM" in line for _, line, _ in beats)
    assert any("; STEP 2/3: RUN uv pip sync" in line for _, line, _ in beats)
    # at the interval: the first one interval in, none further apart than the interval (and scheduling's slack)
    times = [started] + [at for at, _, _ in beats]
    assert max(b - a for a, b in zip(times, times[1:])) < INTERVAL + 0.5, times
    assert re.search(r": \d+ s so far; ", beats[0][1]) and "its last run took" not in beats[0][1]
    assert log.read_text().splitlines() == ["STEP 1/3: FROM sha256:base", "STEP 2/3: RUN uv pip sync "
                                            "/opt/kbench/stack.lock", "STEP 3/3: COMMIT localhost/kbench/synthetic:cpu"]


def test_the_next_run_quotes_how_long_the_last_successful_one_took(tmp_path):
    log = tmp_path / "synthetic.cpu.log"
    quick = [sys.executable, "-c", "import time; print('building', flush=True); time.sleep(0.3)"]
    assert heartbeat.run(quick, log, "image", interval_s=INTERVAL, timeout_s=30, out=Terminal(log)) == 0
    took = heartbeat.earlier_seconds(log)
    assert heartbeat.took_path(log) == tmp_path / "synthetic.cpu.took.json" and 0.25 < took < 5
    terminal = Terminal(log)
    failing = [sys.executable, "-c", "import sys, time; print('half way', flush=True); time.sleep(0.6); sys.exit(3)"]
    assert heartbeat.run(failing, log, "image", interval_s=INTERVAL, timeout_s=30, out=terminal) == 3
    assert "(its last run took 0 s); half way" in terminal.lines[0][1] or "(its last run took 1 s); half way" \
        in terminal.lines[0][1], terminal.lines
    assert heartbeat.earlier_seconds(log) == took           # a failed run is no estimate of a build


def test_a_command_past_its_timeout_is_killed_and_reads_124(tmp_path):
    log = tmp_path / "hung.log"
    started = time.monotonic()
    assert heartbeat.run([sys.executable, "-c", "import time; time.sleep(60)"], log, "hung", interval_s=INTERVAL,
                         timeout_s=0.3, out=Terminal(log)) == 124
    assert time.monotonic() - started < 10 and not heartbeat.took_path(log).exists()


def test_the_command_line_runs_what_follows_its_double_dash_and_passes_its_status_on(tmp_path, capsys):
    log = tmp_path / "job.log"
    assert heartbeat.main(["--job", "j", "--log", str(log), "--interval", "5", "--", sys.executable, "-c",
                           "print('out'); import sys; print('err', file=sys.stderr); sys.exit(4)"]) == 4
    assert sorted(log.read_text().split()) == ["err", "out"]     # both streams into the log, as `> LOG 2>&1`
    assert capsys.readouterr().err == ""                            # nothing on the terminal of a short job
    assert heartbeat.main(["--job", "j", "--log", str(log), "--", str(tmp_path / "no-such-command")]) == 127
    assert "heartbeat: j: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        heartbeat.main(["--job", "j", "--log", str(log), "--"])
    assert stop.value.code == 2 and "no command to run" in capsys.readouterr().err


def test_what_the_line_says_is_the_logs_last_line_and_the_times_in_words(tmp_path):
    log = tmp_path / "x.log"
    assert heartbeat.last_line(log) == ""
    log.write_text("Resolved 80 packages\nDownloading torch (846.8MiB)\r Downloaded torch\n\n")
    assert heartbeat.last_line(log) == "Downloaded torch"
    log.write_text("x" * 500)
    assert heartbeat.last_line(log) == "x" * 157 + "..."
    assert [heartbeat.seconds_text(s) for s in (4.4, 59.6, 289, 3780)] == ["4 s", "1 min 0 s", "4 min 49 s",
                                                                           "1 h 3 min"]
    clock = iter([100.0, 250.0]).__next__
    beat = heartbeat.Heartbeat("cell a/b.r1", log, expected_s=289, limit_s=3600, clock=clock)
    assert beat.line() == f"[kbench] cell a/b.r1: 2 min 30 s so far (its last run took 4 min 49 s; at most 1 h 0 min); " \
                          f"{'x' * 157}..."


RULES = {"base_image": "images", "stack_image": "images", "export_image": "images", "docker_image": "images",
         "sif_image": "images", "environment": "environments"}


@pytest.mark.parametrize("rule", RULES)
def test_the_build_rules_run_under_the_heartbeat_which_writes_their_log(rule):
    text = (REPO / "rules" / f"{RULES[rule]}.smk").read_text()
    body = text.split(f"rule {rule}:", 1)[1].split("\nrule ", 1)[0]
    shell = "".join(re.findall(r'"(.*?)"\n', body.split("shell:", 1)[1]))
    assert shell.startswith("python -m kbench.heartbeat --job '") and " --log {log} -- python -m kbench.stacks." in shell
    assert "{log}" not in shell.split(" -- ", 1)[1]            # no redirect of its own: the heartbeat writes the log


def test_a_stack_images_build_prints_its_steps():
    """No --quiet: podman's steps and what they print go to stdout, the job's log (how the output is shown only: the
    recipe, which the image ID is made from, is not touched)."""
    argv = images.build_command("synthetic", "cpu", "sha256:base", 1735689600, Path("/cache"), "t")
    assert argv[0] == "build" and "--quiet" not in argv


def test_a_running_cell_is_on_the_terminal_every_interval_and_its_log_names_each_phase(tmp_path, driver_environment,
                                                                                       monkeypatch, capsys):
    """The launcher's heartbeat on the cell's own log: a cell whose model takes half a second to build (a compile, a
    download, at the scale of this test) is seen on the terminal while it builds. The steps profiled after the
    window (a large model's can take minutes) get their line before they run, after the window's closing line: never
    inside the window."""
    import dataclasses
    monkeypatch.setattr(heartbeat, "INTERVAL_S", INTERVAL)
    spec = synthetic_spec(timed=4, build_s=0.5)
    spec = spec.replace(steps=dataclasses.replace(spec.steps, breakdown=3))
    assert run(tmp_path, driver_environment, spec).status == "ok"
    beats = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("[kbench] test/synthetic/fit/bs4/synthetic.r1: ")]
    assert len(beats) >= 3, beats
    assert all("so far (at most 1 min 0 s); " in line for line in beats), beats
    assert any(line.endswith("numpy on cpu (cpu); building the model") for line in beats), beats
    lines = [line.split("] ", 1)[1] for line in (tmp_path / "cell.log").read_text().splitlines()
             if line.startswith("[kbench ")]
    closed = next(i for i, line in enumerate(lines) if line.startswith("timed window closed after "))
    assert lines[closed + 1:] == ["after the window: the breakdown by kind (3 profiled steps, then their trace read)",
                                  "ok"], lines

FAKE_PODMAN = '''#!{python}
"""podman as the image build calls it, its build slow: no such image yet, a three-step build, an image after it."""
import json, os, sys, time
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    if "{{{{json .Labels}}}}" in args:
        sys.exit(125)
    print("[]" if "{{{{json .History}}}}" in args else json.dumps([{{"Id": "c" * 64, "Digest": None, "Size": 1}}]))
elif args[:1] == ["build"]:
    for i, step in enumerate(["FROM sha256:base", "COPY stack.lock", "RUN uv pip sync /opt/kbench/stack.lock"], 1):
        print(f"STEP {{i}}/3: {{step}}", flush=True)
        time.sleep(float(os.environ["FAKE_STEP_S"]))
    print("COMMIT", flush=True)
'''


@pytest.mark.workflow       # the real Snakemake CLI and its image rule, podman faked (about 10 s)
def test_snakemake_shows_a_running_image_build_on_the_terminal_and_its_log_fills(tmp_path):
    """Rule stack_image as a user's run starts it: while the (fake, 2.4 s) build runs, its log holds the steps so far
    and a heartbeat line reaches Snakemake's terminal every interval (0.3 s here, KBENCH_HEARTBEAT_S)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "podman").write_text(FAKE_PODMAN.format(python=sys.executable))
    (tmp_path / "bin" / "podman").chmod(0o755)
    for shared in ("envs", "scripts", "containers", "config.yaml"):
        (tmp_path / shared).symlink_to(REPO / shared)
    results = tmp_path / "results"
    (results / "images").mkdir(parents=True)
    (results / "images" / "base.json").write_text('{"kind": "base", "id": "sha256:' + "b" * 64 + '"}\n')
    log = results / "logs" / "images" / "synthetic.cpu.log"
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "KBENCH_HEARTBEAT_S": "0.3",
           "FAKE_STEP_S": "0.8"}
    driver = subprocess.Popen([SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), str(results / "images" /
                               "synthetic.cpu.json"), "--cores", "1", "--config", "accelerator=cpu", "runtime=podman",
                               f"results_dir={results}", "disk_check=False"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, deadline = [], time.monotonic() + 300
    try:
        for line in driver.stdout:
            seen.append((time.monotonic(), line.rstrip("\n"), log.read_text() if log.exists() else ""))
            assert time.monotonic() < deadline
        assert driver.wait(timeout=60) == 0, "\n".join(line for _, line, _ in seen)[-3000:]
    finally:
        driver.kill()
    beats = [(at, line, logged) for at, line, logged in seen if line.startswith("[kbench] image synthetic.cpu: ")]
    assert len(beats) >= 4, "\n".join(line for _, line, _ in seen)[-3000:]
    assert all(line.split("; ", 1)[1] in logged and logged for _, line, logged in beats)    # the log, while it ran
    assert any("; STEP 3/3: RUN uv pip sync" in line for _, line, _ in beats)
    times = [at for at, _, _ in beats]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.3 + 0.7, times
    assert log.read_text().startswith("STEP 1/3: FROM sha256:base\n")
    assert heartbeat.earlier_seconds(log) > 2

