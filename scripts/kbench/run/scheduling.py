"""The one place that adjusts Snakemake's own job scheduler for this workflow (called from the Snakefile's onstart).

Snakemake's default job rate limit (`--max-jobs-per-timespan 100/1s`) re-arms a one-second timer at the end of every
scheduling round, and every job's end starts one more round with a timer of its own, so the timers add up: after N
jobs the scheduler wakes about N times a second, each time hashing every ready job's inputs (Snakemake 9.27; the
release on every job's end is snakemake/snakemake#3744). By the 94th job of the tiny suite the Snakemake process
used 53% of one core of two (938 s of CPU in 1771 s), taken from the cells. This workflow's jobs are few and long,
so the default limit is dropped; a limit a user gives (command line or profile) stays.
"""
from __future__ import annotations

DEFAULT_LIMIT = (100, 1)        # --max-jobs-per-timespan's default: 100 jobs per 1 s
DROPPED = ("Snakemake's default job rate limit (--max-jobs-per-timespan 100/1s) is off for this run: its timers "
           "wake the scheduler once a second per finished job (kbench.run.scheduling)")


def drop_default_rate_limit(scheduler) -> bool:
    """Remove the scheduler's job rate limiter where it is Snakemake's default; True if it did."""
    limiter = getattr(scheduler, "job_rate_limiter", None)
    if limiter is None or (limiter.max_jobs, limiter.timespan) != DEFAULT_LIMIT:
        return False
    scheduler.job_rate_limiter = None
    return True
