"""Is the environment a cell runs in exactly its lock? Checked inside the cell process before anything is imported.

A drift (a missing, extra or different package) fails the cell with error type LockDrift: numbers from an environment
that is not the recorded one must not reach the tables.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import re
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
IGNORED = {"pip", "setuptools", "wheel"}   # installer tooling a venv may carry; never imported by a cell


class LockDrift(Exception):
    pass


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(lock_text: str) -> dict[str, str]:
    return {normalize(m[1]): m[2] for m in map(PIN.match, lock_text.splitlines()) if m}


def installed() -> dict[str, str]:
    """Every installed distribution by name (a dist-info without a Name, left by a broken install, is no package)."""
    return {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """Changed versions first, then missing packages, then extras: the likeliest cause of a drift leads."""
    changed = [f"{n}: lock {v}, installed {actual[n]}" for n, v in sorted(expected.items())
               if n in actual and actual[n] != v]
    missing = [f"{n}=={v} in the lock but not installed" for n, v in sorted(expected.items()) if n not in actual]
    extra = [f"{n}=={v} installed but not in the lock" for n, v in sorted(actual.items())
             if n not in expected and n not in IGNORED]
    return changed + missing + extra


def verify(lock_path: str | Path, mode: str = "fail") -> dict:
    """What was checked, for the record. mode "fail": raise LockDrift unless the installed packages are exactly the
    lock's; "record" (a preinstalled interpreter): the differences are recorded, not fatal."""
    text = Path(lock_path).read_text()
    expected = pinned(text)
    problems = differences(expected, installed())
    if problems and mode == "fail":
        raise LockDrift(f"environment differs from {lock_path}: " + "; ".join(problems[:20])
                        + (f"; and {len(problems) - 20} more" if len(problems) > 20 else ""))
    return {"lock": str(lock_path), "lock_sha256": "sha256:" + hashlib.sha256(text.encode()).hexdigest(),
            "packages": len(expected), "result": "drift" if problems else "exact", "differences": problems}
