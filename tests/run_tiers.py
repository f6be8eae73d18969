"""The README's test command: every tier, one after the other, each tier's wall time and the machine's CPU use
measured system-wide (/proc/stat: what containers and their conmon run counts too, not only pytest's children).

    .venv/bin/python tests/run_tiers.py [unit] [workflow] [e2e] [-- PYTEST ARGS]     (default: every tier)

With the e2e tier selected, the images and venvs it runs in are built in the background from the start
(tests/prebuild.py, log in $KBENCH_TEST_IMAGES/build.log), while the unit and workflow tiers run. Every tier runs
even when one before it failed; the exit status is that of the first tier that failed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = ("unit", "workflow", "e2e")
PYTEST = [sys.executable, "-m", "pytest", "-v", "-rs", "--durations=30"]
# The unit tier's tests are in-process and independent: one pytest-xdist worker per core. The workflow tier's
# Snakemake runs set their own cores and keep both busy (93% system-wide), so one test at a time. The e2e tier left
# a sixth of the CPU idle one test at a time (SLURM polling, container starts, downloads): two workers, a file each
# (test_e2e.py's runs share module fixtures, so that file stays on one worker; the cluster, fault, FLOP and host
# tests go to the other).
TIER_ARGS = {"unit": ["-n", "auto"], "e2e": ["-n", "2", "--dist", "loadfile"]}
# Each tier's share of CI's 40 minutes on a bare 2-core machine (.ci/run: about 4 minutes of system packages and
# bootstrap before them); a new study reuses a run CI already makes and adds at most 2 minutes to its tier. Printed
# against each tier's time at the end: a report, not a gate (a timed test would fail on a loaded machine).
BUDGET_S = {"unit": 90, "workflow": 8 * 60, "e2e": 26 * 60}


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot: busy is everything but idle and iowait."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


class Span:
    """Wall time and system-wide CPU use between its start and stop."""

    def __init__(self):
        self.started, self.ticks = time.monotonic(), cpu_ticks()

    def stop(self) -> str:
        busy, total = (now - then for now, then in zip(cpu_ticks(), self.ticks))
        wall = time.monotonic() - self.started
        cores = os.cpu_count() or 1
        share = busy / total if total else 0.0
        return (f"{wall:7.0f} s wall, CPU {100 * share:3.0f}% busy system-wide "
                f"({share * wall * cores / 60:.1f} of {wall * cores / 60:.1f} core-minutes)")


class DiskLow:
    """The least free space seen (every 5 s) on the filesystems the tiers write to (the checkout, the temp folder,
    podman's storage): a framework image's build holds about 3.5 times its size at its commit, so a run that ends in
    "no space left on device" shows how close it came, and a green one its margin."""

    def __init__(self):
        places = [REPO, Path(tempfile.gettempdir()), Path("/var/lib/containers")]
        self.places = {}
        for place in (p for p in places if p.exists()):
            self.places.setdefault(place.stat().st_dev, place)
        self.least = {dev: (self.free(p), "start") for dev, p in self.places.items()}
        self.tier = "start"
        threading.Thread(target=self.watch, daemon=True).start()

    @staticmethod
    def free(path: Path) -> float:
        return shutil.disk_usage(path).free / 2**30

    def watch(self):
        while True:
            time.sleep(5)
            for dev, path in self.places.items():
                self.least[dev] = min(self.least[dev], (self.free(path), self.tier))

    def report(self) -> str:
        return "; ".join(f"{path}: {self.free(path):.1f} GiB free now, {self.least[dev][0]:.1f} GiB at the least "
                         f"(during {self.least[dev][1]})" for dev, path in self.places.items())


# The image builds beside the unit and workflow tiers yield the CPU to them: at the same priority the unit tier took
# 89 s in CI's run of a machine holding the images (59 s alone) against its 90 s share.
BACKGROUND_NICENESS = 10


def in_background(command: list[str], **kwargs) -> subprocess.Popen:
    """A process below the tiers' priority (its children, podman's build steps among them, inherit it): a tier's
    time stays the tier's, and the builds take what the tiers leave."""
    return subprocess.Popen(command, preexec_fn=lambda: os.nice(BACKGROUND_NICENESS), **kwargs)

def against_budget(tier: str, span: Span) -> str:
    wall, budget = time.monotonic() - span.started, BUDGET_S[tier]
    return f"({wall / budget:.0%} of its {budget} s budget{'' if wall <= budget else ': OVER'})"


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    chosen = [t for t in (argv[:argv.index("--")] if "--" in argv else argv)] or list(TIERS)
    unknown = sorted(set(chosen) - set(TIERS))
    if unknown:
        print(f"run_tiers: unknown tier {unknown[0]!r}; allowed: {', '.join(TIERS)}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    builder = None
    if "e2e" in chosen and not env.get("KBENCH_TEST_IMAGES"):
        folder = Path(tempfile.mkdtemp(prefix="kbench-test-images-"))
        env["KBENCH_TEST_IMAGES"] = str(folder)
        log = open(folder / "build.log", "w")
        builder = in_background([sys.executable, str(REPO / "tests" / "prebuild.py"), str(folder)], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        print(f"run_tiers: building the e2e images in the background (log: {folder / 'build.log'})", flush=True)
    whole, report, status, disk = Span(), [], 0, DiskLow()
    print(f"run_tiers: disk at the start: {disk.report()}", flush=True)
    for tier in (t for t in TIERS if t in chosen):
        span, disk.tier = Span(), tier
        code = subprocess.run([*PYTEST, "-m", tier, *TIER_ARGS.get(tier, []), *extra], cwd=REPO, env=env).returncode
        report.append(f"{tier:9s} {span.stop()}  exit {code}  {against_budget(tier, span)}")
        status = status or (code if code != 5 else 0)       # 5: the selection held no test
        print(f"run_tiers: {report[-1]}", flush=True)
    if builder:
        builder.wait()
    print("run_tiers: time per tier", *report, f"{'all':9s} {whole.stop()}", sep="\n  ")
    print(f"run_tiers: disk: {disk.report()}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
