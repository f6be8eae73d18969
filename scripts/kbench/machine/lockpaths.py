"""Where a stack's lock lives: envs/<stack>.<accelerator>.lock, compiled by scripts/lock-envs from
envs/<stack>.<accelerator>.in. Every path, name and glob of a stack's lock is spelled here, and every module, rule
script and rule asks here (tests/test_lockpaths.py names a lock path spelled anywhere else). In ground because the GPU
preflight (kbench.gpu, below stacks) reads locks too; kbench.stacks re-exports it."""
from __future__ import annotations

import os
from pathlib import Path

ENVS = "envs"
SUFFIX = ".lock"


def lock_name(stack: str, accelerator: str) -> str:
    """<stack>.<accelerator>.lock, the file's name alone (a build context or a bisect step's folder holds it too)."""
    return f"{stack}.{accelerator}{SUFFIX}"


def lock_path(stack: str, accelerator: str, repo: str | os.PathLike | None = None) -> Path:
    """envs/<stack>.<accelerator>.lock: under repo where given, else relative to the repository (as the rules and the
    messages name it). Wildcards pass through: lock_path("{stack}", "{accelerator}") is the rules' pattern."""
    path = Path(ENVS, lock_name(stack, accelerator))
    return path if repo is None else Path(repo, path)


def lock_id(path: str | os.PathLike) -> str:
    """<stack>.<accelerator>: a lock's name less .lock, the name scripts/lock-envs takes to regenerate it."""
    return Path(path).name.removesuffix(SUFFIX)


def locks(repo: str | os.PathLike, accelerator: str = "*") -> list[tuple[str, str]]:
    """(stack, accelerator) of every stack's lock in repo's envs/ (of one accelerator where given), sorted. Stack and
    accelerator names hold no dot; the bootstrap and driver locks (no accelerator in their names) are no stack's."""
    found = (lock_id(path).split(".") for path in Path(repo, ENVS).glob(lock_name("*", accelerator)))
    return sorted((parts[0], parts[1]) for parts in found if len(parts) == 2)
