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
import sys


def _verify(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.lifecycle import archive
    return archive.command("verify", argv, parser)


def _sign(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.lifecycle import archive
    return archive.command("sign", argv, parser)


def _compare(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.lifecycle import compare
    return compare.main(argv, parser)


def _history(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.lifecycle import history
    return history.main(argv, parser)


def _bisect(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.lifecycle import bisect
    return bisect.main(argv, parser)


def _snakemake_options(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """resume's and retry-failed's arguments: Snakemake's options, the run's own, passed on as given."""
    parser.usage = "%(prog)s [snakemake options: the run's own, e.g. --cores all --config suite=tiny]"
    parser.allow_abbrev = False         # Snakemake's own long options pass on whole, never read as --help
    return parser.parse_known_args(argv)[1]


def _resume(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.run import recover
    return recover.main(["resume", *_snakemake_options(argv, parser)])


def _retry_failed(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.run import recover
    return recover.main(["retry-failed", *_snakemake_options(argv, parser)])


def _gpucheck(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.gpucheck import check
    return check.main(argv, parser)


def _gpu_stacks(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.gpucheck import stacks
    return stacks.main(argv, parser)


def _census(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.studies import census_tables
    return census_tables.main(argv, parser)


def _bench_overhead(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.harness import bench_overhead
    return bench_overhead.main(argv, parser)


def _bench_images(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.harness import bench_images
    return bench_images.main(argv, parser)


def _breakdown_overhead(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.harness import breakdown_overhead
    return breakdown_overhead.main(argv, parser)


def _warm_window(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench.harness import warm_window
    return warm_window.main(argv, parser)


def _layout(argv: list[str], parser: argparse.ArgumentParser) -> int:
    from kbench import layout
    return layout.main(argv, parser)


# name -> (what it does, in one line; the call). The order is the listing's: a run's archive and history, recovery,
# a GPU host, the studies and the harness's own checks. `kbench --help` lists them in 80 columns, a line each.
COMMANDS = {
    "verify": ("Check a run archive: manifest, signature, cells, tables", _verify),
    "sign": ("Sign a run archive's manifest with an SSH key", _sign),
    "compare": ("Compare two runs cell by cell: ms/step, change, verdict", _compare),
    "history": ("The history of runs: ingest, query in SQL, changes", _history),
    "bisect": ("Find which package group of a lock bump moved a cell", _bisect),
    "resume": ("Rerun what a killed run left unfinished (its options)", _resume),
    "retry-failed": ("Rerun exactly the cells whose record says failed", _retry_failed),
    "gpucheck": ("The ten-minute check of a new GPU host (NumPy, PyYAML)", _gpucheck),
    "gpu-stacks": ("Build every GPU lock's image and try it on this CPU", _gpu_stacks),
    "census": ("Parameter counts of every model and column at a size", _census),
    "bench-overhead": ("The runner's ms/step against a bare loop's (<= 1.02)", _bench_overhead),
    "bench-images": ("Image build times, same-ID rebuilds, container start-up", _bench_images),
    "breakdown-overhead": ("Does the breakdown by kind move a cell's ms/step?", _breakdown_overhead),
    "warm-window": ("Does a warm compile cache move a cell's ms/step?", _warm_window),
    "layout": ("The package's wings, their imports, layout problems", _layout),
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
