"""Snakemake's own command line, parsed and run in this process: what a plan-only test needs (which jobs a dry run
or a `--touch` would run, and why) without a Snakemake subprocess per question.

The arguments go through `snakemake.cli.parse_args` and `args_to_api`, the code path of the `snakemake` command, so
a plan here is the plan the CLI makes; the first one in a process costs about 4 s (importing Snakemake, building the
first DAG), each further one about 1 s. Real runs (jobs executed, the onstart preflight) stay with the CLI in
conftest.snakemake: only `-n`, `--touch`, `--summary` and `--lint` go through here."""
from __future__ import annotations

import collections
import contextlib
import io
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conftest import NO_EQUIVALENCE, REPO

PLAN_ONLY = {"-n", "--dry-run", "--dryrun", "--touch", "-t", "--summary", "-S", "--detailed-summary", "-D", "--lint"}


@dataclass
class Plan:
    ok: bool
    jobs: list = field(default_factory=list)        # the jobs a run would run: (rule, outputs, reason)
    error: str = ""                                  # a Snakefile's sys.exit message, or Snakemake's own error
    log: str = ""                                    # what Snakemake and the Snakefile printed
    threads: dict = field(default_factory=dict)      # each job's first output -> the threads it asks for

    def counts(self) -> dict[str, int]:
        """Rule -> jobs, and the total, as Snakemake's "Job stats" table."""
        counts = collections.Counter(rule for rule, _, _ in self.jobs)
        return {**counts, "total": len(self.jobs)} if self.jobs else {}

    def outputs(self, prefix: str = "") -> list[str]:
        return [path for _, outputs, _ in self.jobs for path in outputs if path.startswith(prefix)]

    def reasons(self) -> list[str]:
        return [reason for _, _, reason in self.jobs]

    @property
    def nothing_to_do(self) -> bool:
        return self.ok and not self.jobs


@contextlib.contextmanager
def _working_directory(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def plan(*args: str, cwd: Path = REPO, equivalence: bool = False) -> Plan:
    """The jobs `snakemake ARGS` would run from `cwd` (ARGS must include -n, --touch, --summary or --lint).
    equivalence: as in conftest.snakemake (False adds tests/fixtures/no_equivalence.yaml before the caller's files)."""
    from snakemake import cli
    from snakemake.api import DAGApi
    from snakemake.executors import touch

    args = list(args)
    if not PLAN_ONLY & set(args):
        raise ValueError(f"dag.plan only plans: give one of {sorted(PLAN_ONLY)} (a real run is conftest.snakemake)")
    if not equivalence and "--configfile" in args:
        args.insert(args.index("--configfile") + 1, str(NO_EQUIVALENCE))
    elif not equivalence:
        args += ["--configfile", str(NO_EQUIVALENCE)]
    workflows = []
    execute = DAGApi.execute_workflow

    def keep_workflow(self, *a, **kw):
        workflows.append(self.workflow_api._workflow)
        return execute(self, *a, **kw)

    printed = io.StringIO()
    DAGApi.execute_workflow = keep_workflow
    # --touch sleeps 0.1 s before each job so that outputs come out newer than inputs; 5 ms is more than the
    # kernel's timestamp granularity (a jiffy) and makes a 500-job touch take seconds, not a minute
    touch.Executor.SLEEPING_TIME, sleeping = 0.005, touch.Executor.SLEEPING_TIME
    try:
        with _working_directory(cwd), contextlib.redirect_stderr(printed), contextlib.redirect_stdout(printed):
            parser, parsed = cli.parse_args(["--snakefile", str(REPO / "Snakefile"), *args])
            try:
                ok, error = cli.args_to_api(parsed, parser), ""
            except SystemExit as exit_:           # the Snakefile's one-line config error
                ok, error = False, str(exit_.code)
    finally:
        DAGApi.execute_workflow, touch.Executor.SLEEPING_TIME = execute, sleeping
    log = printed.getvalue()
    if not ok and not error:
        error = log.strip().splitlines()[-1] if log.strip() else "snakemake failed"
    jobs, threads = [], {}
    if workflows and workflows[-1].dag is not None:
        dag = workflows[-1].dag
        needed = list(dag.needrun_jobs(exclude_finished=False))
        jobs = [(job.rule.name, [str(f) for f in job.output], str(dag.reason(job))) for job in needed]
        threads = {str(job.output[0]): job.threads for job in needed if job.output}
    return Plan(ok, jobs, error, log, threads)
