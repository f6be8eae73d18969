"""The one place a check of one tiny cell in fresh processes, two sides alternating, gets its cell: the arguments
that name it (where its images are, model, task, batch, processes a side, runtime), its spec from config.yaml on a
CPU, and the environment record its processes start from (`kbench breakdown-overhead`,
`kbench warm-window`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from kbench.machine.host import REPO


def arguments(parser: argparse.ArgumentParser, pairs: int) -> None:
    parser.add_argument("--images", required=True, help="a run's results folder (its environment records)")
    parser.add_argument("--model", default="bert")
    parser.add_argument("--task", default="fit")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=pairs, help="processes per side (at least 2)")
    parser.add_argument("--runtime", default="podman")


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.pairs < 2:
        parser.error("--pairs: at least 2 processes per side, for an interval")
    return args


def config() -> dict:
    import yaml
    found = yaml.safe_load((REPO / "config.yaml").read_text())
    found["accelerator"] = "cpu"
    return found


def cell(config: dict, args, framework: str):
    """The tiny suite's spec of the cell in `framework` (its model's first precision), and its environment record."""
    from kbench.machine import runtimes
    from kbench.plan import matrix
    precision = config["model_defs"][args.model]["precisions"][0]
    spec = matrix.spec(config, "tiny", args.model, args.task, args.batch, precision, framework, "strict")
    stack = matrix.stack_of(config, framework)
    return spec, Path(args.images) / runtimes.resolve(args.runtime).record_path(stack, "cpu")
