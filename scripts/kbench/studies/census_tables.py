"""Parameter counts of every model/task in every framework at one size, built as the cells build them but never run,
and the parity flag of kbench.results.tables: the check for sizes a CPU cannot run (paper Gemma has 8.5 B parameters).

    .venv/bin/kbench census --size paper [--runtime podman|host] [--frameworks a,b]

Needs the stacks' environments (results/images/*.json for podman, results/environments/*.json for host: any
snakemake run with that runtime makes them). One process per framework (kbench.studies.census, started by
kbench.run.launch like a cell) counts; this writes results/census/<size>.{csv,md} and prints the table.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from kbench import files
from kbench.machine import environment_records
from kbench.machine.host import REPO
from kbench.plan import matrix
from kbench.results import tables
from kbench.run import launch


def census(config: dict, framework: str, size: str, runtime: str, results: Path) -> list[dict]:
    suite = next(name for name, suite in config["suites"].items() if suite["size"] == size)
    rows = [(c.model, c.task) for c in matrix.cells({**config, "frameworks": [framework], "profiles": ["strict"]}, suite)
            if not c.not_applicable]
    # Batch size 1 and the model's first precision: parameter counts depend on neither, and the inputs stay small.
    specs = [matrix.spec(config, suite, model, task, 1, config["model_defs"][model]["precisions"][0], framework)
             for model, task in dict.fromkeys(rows)]
    if not specs:
        return []
    stack = matrix.stack_of(config, framework)
    environment = environment_records.read(results / environment_records.path(runtime, stack, config["accelerator"]))
    out = results / "census" / size / f"{framework}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = launch.command(runtime, environment, out, module="kbench.studies.census", name=f"kbench-census-{framework}")
    subprocess.run(argv, input=json.dumps([s.to_dict() for s in specs]), text=True, check=True,
                   env=launch.process_env(runtime, environment),
                   cwd=REPO, stdout=subprocess.DEVNULL)
    by_id = {spec.cell_id: spec for spec in specs}
    return [{**{k: getattr(by_id[c["cell_id"]], k) for k in ("model", "task", "precision", "framework")}, "batch_size": 1,
             "params_total": c.get("total"), "params_trainable": c.get("trainable"), "error": c.get("error")}
            for c in files.read_json(out)["counts"]]


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--runtime", default="podman", choices=["host", "podman"])
    parser.add_argument("--frameworks", help="comma-separated (default: config.yaml's)")
    parser.add_argument("--models", help="comma-separated (default: config.yaml's)")
    parser.add_argument("--config", default=str(REPO / "config.yaml"))
    args = parser.parse_args(argv)
    config = yaml.safe_load(Path(args.config).read_text())
    config["accelerator"] = "cpu"
    if args.models:
        config["models"] = args.models.split(",")
    frameworks = args.frameworks.split(",") if args.frameworks else config["frameworks"]
    results = REPO / config["results_dir"]
    long = pd.DataFrame([row for fw in frameworks for row in census(config, fw, args.size, args.runtime, results)])
    table = tables.params_table(long, frameworks).reset_index().drop(columns="batch_size")
    errors = long.dropna(subset=["error"])
    (results / "census" / f"{args.size}.csv").write_text(table.to_csv(index=False))
    markdown = table.to_markdown(index=False) + "\n"
    if not errors.empty:
        markdown += "\nNot built:\n" + "".join(f"- {r.framework} {r.model} {r.task}: {r.error}\n"
                                                for r in errors.itertuples())
    (results / "census" / f"{args.size}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
