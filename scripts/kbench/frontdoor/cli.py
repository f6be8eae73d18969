"""`kbench`: the commands a user runs beside Snakemake (which runs the benchmark itself), one subcommand each. The
driver venv has it as .venv/bin/kbench (scripts/bootstrap writes it: kbench.frontdoor.launcher); a Python without the
venv runs the same command as `python3 scripts/cli.py` from the repository root (the GPU check on a new host).

    kbench --help                 the subcommands, one line each
    kbench COMMAND --help         what it does, in one line, and its options

Each subcommand is one module's main, imported only when it runs: `kbench gpucheck` imports the GPU check and what
it needs (NumPy and PyYAML), never pandas or Snakemake. A bad argument is argparse's one line naming it (exit 2).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable


# Modules by name, imported when their command runs: frontdoor is kbench.layout's top wing, so every module is below
# it and a name kept as a string hides no wrong-way import from the layout check.
def _main(module: str) -> Callable[[list[str], argparse.ArgumentParser], int]:
    """The common call: the module's main(argv, parser), the module imported only when its command runs."""
    return lambda argv, parser: importlib.import_module(module).main(argv, parser)


def _archive(action: str) -> Callable[[list[str], argparse.ArgumentParser], int]:
    return lambda argv, parser: importlib.import_module("kbench.lifecycle.archive").command(action, argv, parser)


def _recover(action: str) -> Callable[[list[str], argparse.ArgumentParser], int]:
    """resume's and retry-failed's arguments: Snakemake's options, the run's own, passed on as given."""
    def call(argv: list[str], parser: argparse.ArgumentParser) -> int:
        parser.usage = "%(prog)s [snakemake options: the run's own, e.g. --cores all --config suite=tiny]"
        parser.allow_abbrev = False         # Snakemake's own long options pass on whole, never read as --help
        return importlib.import_module("kbench.run.recover").main([action, *parser.parse_known_args(argv)[1]])
    return call


# name -> (what it does, in one line; the call). The order is the listing's: a run's archive and history, recovery,
# a GPU host, the studies and the harness's own checks. `kbench --help` lists them in 80 columns, a line each.
COMMANDS = {
    "verify": ("Check a run archive: manifest, signature, cells, tables", _archive("verify")),
    "sign": ("Sign a run archive's manifest with an SSH key", _archive("sign")),
    "compare": ("Compare two runs cell by cell: ms/step, change, verdict", _main("kbench.lifecycle.compare")),
    "history": ("The history of runs: ingest, query in SQL, changes", _main("kbench.lifecycle.history")),
    "bisect": ("Find which package group of a lock bump moved a cell", _main("kbench.lifecycle.bisect")),
    "resume": ("Rerun what a killed run left unfinished (its options)", _recover("resume")),
    "retry-failed": ("Rerun exactly the cells whose record says failed", _recover("retry-failed")),
    "gpucheck": ("The ten-minute check of a new GPU host (NumPy, PyYAML)", _main("kbench.gpucheck.check")),
    "gpu-stacks": ("Build every GPU lock's image and try it on this CPU", _main("kbench.gpucheck.stacks")),
    "census": ("Parameter counts of every model and column at a size", _main("kbench.studies.census_tables")),
    "bench-overhead": ("The runner's ms/step against a bare loop's (<= 1.02)", _main("kbench.harness.bench_overhead")),
    "bench-images": ("Image build times, same-ID rebuilds, container start-up", _main("kbench.harness.bench_images")),
    "breakdown-overhead": ("Does the breakdown by kind move a cell's ms/step?",
                           _main("kbench.harness.breakdown_overhead")),
    "warm-window": ("Does a warm compile cache move a cell's ms/step?", _main("kbench.harness.warm_window")),
    "layout": ("The package's wings, their imports, layout problems", _main("kbench.layout")),
}


def listing() -> str:
    width = max(map(len, COMMANDS)) + 2
    return "\n".join(f"  {name:{width}}{summary}" for name, (summary, _) in COMMANDS.items())


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kbench", usage="%(prog)s [-h] COMMAND [ARGUMENTS ...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The commands beside Snakemake, which runs the benchmark (.venv/bin/snakemake).\n\ncommands:\n"
                    + listing(),
        epilog="`kbench COMMAND --help`: what the command does, and its options. Without the driver venv (a new\n"
               "GPU host), from the repository root: python3 scripts/cli.py COMMAND ...")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True, help=argparse.SUPPRESS)
    for name in COMMANDS:
        commands.add_parser(name, add_help=False)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    top = parser()
    top.parse_args(argv[:1])         # --help; or no command, or an unknown one: argparse's error naming it (exit 2)
    name = argv[0]
    summary, call = COMMANDS[name]
    return call(argv[1:], argparse.ArgumentParser(prog=f"kbench {name}", description=summary + "."))


if __name__ == "__main__":
    sys.exit(main())
