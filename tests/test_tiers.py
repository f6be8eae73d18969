"""tests/run_tiers.py's report of each tier's time against its share of CI's 40 minutes."""
import importlib.util
import os
import subprocess
import sys
import time

from conftest import REPO

spec = importlib.util.spec_from_file_location("run_tiers", REPO / "tests" / "run_tiers.py")
run_tiers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_tiers)


def span_of(seconds: float):
    span = run_tiers.Span()
    span.started = time.monotonic() - seconds
    return span


def test_a_tier_within_its_budget_says_its_share_and_one_past_it_says_over():
    assert run_tiers.against_budget("unit", span_of(45)) == "(50% of its 90 s budget)"
    assert run_tiers.against_budget("unit", span_of(95)).endswith(": OVER)")
    assert sum(run_tiers.BUDGET_S.values()) <= 36 * 60        # room for .ci/run's packages and bootstrap in 40 min


def test_the_background_builds_run_below_the_tiers_priority_and_their_children_too():
    child = "import os, subprocess, sys; print(subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'], "\
            "capture_output=True, text=True).stdout.strip())"
    proc = run_tiers.in_background([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert int(out) == min(19, os.nice(0) + run_tiers.BACKGROUND_NICENESS) and run_tiers.BACKGROUND_NICENESS >= 10
