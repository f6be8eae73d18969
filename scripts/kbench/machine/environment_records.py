"""Environment records: what a stack's cells ran in (a venv, a podman image, the same image loaded into docker or
built into a SIF), written by the environment/image rules and read by the launcher, the report and verify.

Every record names its stack and lock digest; `identity` says which field pins the environment a cell ran in.
"""
from __future__ import annotations

from pathlib import Path

from kbench import files
from kbench.machine import runtimes

# kind -> the field that identifies the environment: an image by its ID (docker loads and SIFs carry the ID of the
# podman image they came from), a venv by the digest of the lock it was installed from.
IDENTITY = {"image": "id", "docker": "id", "sif": "id", "venv": "lock_sha256",
            "preinstalled": "packages_sha256"}   # an interpreter the host had: by what it has installed


def path(runtime: str, stack: str, accelerator: str) -> str:
    """Where a runtime's environment record of a stack lives, relative to results_dir (the rules write it, cells depend
    on it): kbench.machine.runtimes.RUNTIMES says, per runtime."""
    return runtimes.resolve(runtime).record_path(stack, accelerator)


def identity(record: dict) -> tuple[str, str | None]:
    key = IDENTITY[record["kind"]]
    return key, record.get(key)


def read(record_path: str | Path) -> dict:
    return files.read_json(record_path)


def write(record_path: str | Path, record: dict) -> None:
    files.write_json(record_path, record)
