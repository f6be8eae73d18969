"""The run's facts page for the report: suite, host, the devices the cells saw, and the image (or venv) of every
stack with its ID and lock digest."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess

import pandas as pd

from kbench.contract import cell
from kbench.results.context import Records, RunContext, Table


def host_facts() -> dict:
    """The machine the workflow ran on (cells in containers report the container's hostname instead)."""
    facts = {"hostname": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
             "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        facts["gpus"] = subprocess.run(query, capture_output=True, text=True).stdout.strip().splitlines()
    else:
        facts["gpus"] = []
    return facts


def build(records: Records, run: RunContext) -> None:
    """Every cell of the suite, and the environment records of the stacks they ran in."""
    suite, results, out = run.suite, list(records.cells), run.tables_dir / OUTPUT
    environments = pd.DataFrame([{k: r.get(k) for k in ("stack", "kind", "image", "id", "lock_sha256", "prefix")}
                                 for r in records.environments])
    host = host_facts()
    devices = sorted({r.provenance.get("device") for r in results if r.provenance.get("device")})
    commits = sorted({r.provenance.get("git_commit") for r in results if r.provenance.get("git_commit")})
    runtimes = sorted({r.provenance.get("runtime") for r in results if r.provenance.get("runtime")})
    summary = pd.DataFrame([("suite", suite), ("cells", len(results)),
                            ("ok / failed / n/a", " / ".join(str(sum(r.status == s for r in results))
                                                            for s in cell.STATUSES)),
                            ("host", host["hostname"]), ("platform", host["platform"]), ("cpus", host["cpus"]),
                            ("memory GiB", host["memory_gib"]), ("GPUs", ", ".join(host["gpus"]) or "none"),
                            ("devices the cells saw", ", ".join(devices)), ("runtime", ", ".join(runtimes)),
                            ("git commit", ", ".join(commits))], columns=["fact", "value"])
    out.write_text("<html><body><h2>Run</h2>\n" + summary.to_html(index=False, border=0)
                   + "\n<h2>Images and environments</h2>\n" + environments.to_html(index=False, border=0, na_rep="")
                   + "\n</body></html>\n")


OUTPUT = "run_facts.html"
TABLE = Table(rule="run_facts", outputs=(OUTPUT,), build=build, category="Run", reads=("cells", "environments"),
              per_profile=False, rebuilt=False)      # the host's facts: not the records'
