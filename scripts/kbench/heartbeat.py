"""A long job's heartbeat: while it runs, a line on the terminal at least every 30 s saying what it is doing (the last
line of its log), how long it has run, and how long its last run took where that is on record; and its output in its
log as it comes, not at its end.

    python -m kbench.heartbeat --job NAME --log LOG -- COMMAND ...

runs COMMAND with its stdout and stderr into LOG (as `COMMAND > LOG 2>&1` would) and the heartbeat on its own
stderr, which Snakemake passes through to the terminal for a shell rule's job; it exits with COMMAND's status (128 + N
where a signal N ended it). A run that succeeded leaves its duration beside the log (LOG's stem + .took.json), which
the next run's heartbeat quotes: Snakemake removes a job's outputs and log before it runs the job again (so an image's
record is gone by then), never this. The image and venv rules run their builds through it; the cells' launcher
(kbench.run.launch) runs a Heartbeat on each cell's log, which the cell process writes itself.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# "at least every 30 s", with room for a slow wake-up; KBENCH_HEARTBEAT_S scales it down for the tests
INTERVAL_S = float(os.environ.get("KBENCH_HEARTBEAT_S") or 25.0)
TAIL_BYTES = 8192
SHOWN_CHARACTERS = 160


def seconds_text(seconds: float) -> str:
    """45 s, 4 min 49 s, 1 h 3 min."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def last_line(log: Path) -> str:
    """The log's last line with anything on it (a progress bar's carriage returns split lines too), cut short."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= SHOWN_CHARACTERS else lines[-1][:SHOWN_CHARACTERS - 3] + "..."


def took_path(log: Path) -> Path:
    return Path(log).with_name(Path(log).stem + ".took.json")


def earlier_seconds(log: Path) -> float | None:
    """How long this job's last successful run took, where one left its record."""
    try:
        seconds = json.loads(took_path(log).read_text())["seconds"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else None


def remember(log: Path, seconds: float) -> None:
    path = took_path(log)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"seconds": round(seconds, 1),
                                   "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    partial.replace(path)


class Heartbeat(threading.Thread):
    """Every interval_s until stopped, one line to `out`: `[kbench] JOB: 2 min 30 s so far (its last run took 4 min
    49 s; at most 60 min); <the log's last line>`. A daemon thread: it never keeps a process alive. As a context
    manager it starts on entry and stops (and is joined) on exit."""

    def __init__(self, job: str, log: Path, interval_s: float | None = None, expected_s: float | None = None,
                 limit_s: float | None = None, out=None, clock=time.monotonic):
        super().__init__(daemon=True, name=f"heartbeat {job}")
        self.job, self.log, self.expected_s, self.limit_s = job, Path(log), expected_s, limit_s
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.out, self.clock = out, clock
        self.started_at = clock()
        self.stopped = threading.Event()

    def line(self) -> str:
        notes = ([f"its last run took {seconds_text(self.expected_s)}"] if self.expected_s is not None else []) \
            + ([f"at most {seconds_text(self.limit_s)}"] if self.limit_s is not None else [])
        doing = last_line(self.log)
        return (f"[kbench] {self.job}: {seconds_text(self.clock() - self.started_at)} so far"
                + (f" ({'; '.join(notes)})" if notes else "") + f"; {doing or 'nothing in its log yet'}")

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            print(self.line(), file=self.out or sys.stderr, flush=True)

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.join()


class _Signalled(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run(argv: list[str], log: Path, job: str, interval_s: float | None = None, timeout_s: float | None = None,
        out=None) -> int:
    """COMMAND (argv) with its output into `log` and a Heartbeat beside it; its exit status (124 where timeout_s ran
    out and it was killed; 128 + N where signal N ended it, or this process got SIGTERM/SIGINT and passed it on)."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    expected, started = earlier_seconds(log), time.monotonic()

    def passed_on(signum, frame):
        raise _Signalled(signum)
    previous = {s: signal.signal(s, passed_on) for s in (signal.SIGTERM, signal.SIGINT)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        with open(log, "w") as output:
            proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
            with Heartbeat(job, log, interval_s, expected, out=out):
                try:
                    status = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    return 124
                except _Signalled as stop:
                    proc.send_signal(stop.signum)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    return 128 + stop.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if status == 0:
        remember(log, time.monotonic() - started)
    return 128 - status if status < 0 else status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="what the heartbeat calls the job (its rule and wildcards)")
    parser.add_argument("--log", required=True, type=Path, help="the job's log: the command's stdout and stderr")
    parser.add_argument("--interval", type=float, help=f"seconds between heartbeat lines (default {INTERVAL_S:g})")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (give it after --)")
    try:
        return run(command, args.log, args.job, args.interval)
    except OSError as error:            # a command that is not there, a log that cannot be written
        print(f"heartbeat: {args.job}: {error}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
