"""A lock bump as groups of packages that can move on their own, found by the resolver (kbench.lifecycle.bisect's unit), and
the locks in between: the old lock with some groups at their new versions.

Every lock here is compiled as scripts/lock-envs compiles envs/*.lock (uv pip compile --generate-hashes, Python 3.11,
manylinux x86_64), from a generated `.in` of exact pins, so each is a real hash-locked lock a venv or an image
installs with --require-hashes.

How the groups are found, for each changed package P (a new version, or added, or removed):
  1. exact: the old lock's pins with P alone at its new version. If that resolves to exactly the old lock plus P's
     new version, P moves alone.
  2. Otherwise (the resolver refuses, or pulls in or changes another changed package), free: P at its new version,
     every other changed package unpinned but held between its old and new version, the old lock as the resolver's
     preference (the -o file uv starts from). The changed packages the resolver moved are P's group (jax with
     jaxlib). A removed package the resolver keeps pulling in goes with the changed packages that require it (the
     old lock's `# via` lines); where nothing smaller is found, every change is one group.
Groups that share a package are one group, and each group with more than one package is tried again as a whole
(step 1 with all of it at its new versions) until every group resolves on the old lock on its own.
Every attempt's .in, constraints and lock (or the resolver's refusal) stay under the work folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from kbench.stacks import envs, lockcheck

# As scripts/lock-envs compiles every lock (tests/test_bisect.py checks the two agree).
COMPILE_FLAGS = ("--quiet", "--generate-hashes", "--python-version", envs.PYTHON,
                 "--python-platform", "x86_64-manylinux_2_28")


class Unresolvable(Exception):
    """The resolver found no lock for these requirements; the message is its own explanation."""


class ResolverError(RuntimeError):
    """uv could not resolve at all (no network, a missing --find-links folder): no answer about the packages."""


@dataclass(frozen=True)
class Change:
    package: str
    old: str | None             # None: not in the old lock (added by the bump)
    new: str | None             # None: not in the new lock (removed by the bump)

    def text(self) -> str:
        return f"{self.package} {self.old or '(none)'} -> {self.new or '(none)'}"


@dataclass
class Group:
    id: str                     # g1, g2, ... in package order
    changes: list[Change]
    how: list[str]              # how the resolver formed it: one line per attempt

    @property
    def packages(self) -> list[str]:
        return [c.package for c in self.changes]

    def to_json(self) -> dict:
        return {"id": self.id, "packages": {c.package: {"old": c.old, "new": c.new} for c in self.changes},
                "how": self.how}


def changes(old: dict[str, str], new: dict[str, str]) -> list[Change]:
    """Every package whose version differs between two locks' pins (kbench.stacks.lockcheck.pinned), by name."""
    return [Change(name, old.get(name), new.get(name)) for name in sorted({*old, *new})
            if old.get(name) != new.get(name)]


@dataclass(frozen=True)
class Resolver:
    """uv pip compile as scripts/lock-envs runs it; find_links: folders of wheels to resolve from besides the index
    (packages not on an index, e.g. local builds), the same a venv of the lock installs with."""
    find_links: tuple[str, ...] = ()

    def __post_init__(self):        # absolute: uv runs in each lock's folder
        object.__setattr__(self, "find_links", tuple(str(Path(f).resolve()) for f in self.find_links))

    def compile(self, requirements: list[str], constraints: list[str], lock: Path,
                prefer: Path | None = None) -> dict[str, str]:
        """requirements and constraints as lines; writes <lock stem>.in (and .constraints.txt) beside the lock;
        prefer: a lock whose pins the resolver keeps where it can. Returns the lock's pins."""
        lock.parent.mkdir(parents=True, exist_ok=True)
        source = lock.with_suffix(".in")
        source.write_text("".join(f"{line}\n" for line in requirements))
        argv = [envs.uv_binary(), "pip", "compile", *COMPILE_FLAGS,
                *(a for folder in self.find_links for a in ("--find-links", str(folder)))]
        if constraints:
            constrained = lock.with_suffix(".constraints.txt")
            constrained.write_text("".join(f"{line}\n" for line in constraints))
            argv += ["--constraints", constrained.name]
        for stale in (lock, lock.with_suffix(".refused.txt")):
            stale.unlink(missing_ok=True)
        if prefer:
            shutil.copyfile(prefer, lock)       # uv prefers the versions of the file it writes
        # relative names, so the lock's header reads like one of envs/
        env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1")}
        proc = subprocess.run([*argv, source.name, "-o", lock.name], cwd=lock.parent, capture_output=True, text=True,
                              env=env)
        if proc.returncode != 0:
            lock.unlink(missing_ok=True)
            message = " ".join(proc.stderr.split()).removeprefix("error: ")
            if "No solution found" not in message:
                raise ResolverError(f"uv pip compile in {lock.parent} failed: {message[:600]}")
            lock.with_suffix(".refused.txt").write_text(proc.stderr)
            explanation = message.removeprefix("No solution found when resolving dependencies").strip(" :")
            raise Unresolvable(explanation.removeprefix("cause:").strip()[:600])
        return lockcheck.pinned(lock.read_text())


def expected_pins(old: dict[str, str], bump: list[Change], applied: set[str]) -> dict[str, str]:
    """The old lock with the applied packages at their new versions (absent where the bump removes them)."""
    pins = dict(old)
    for change in bump:
        if change.package in applied:
            pins.pop(change.package, None)
            if change.new:
                pins[change.package] = change.new
    return pins


def differences(got: dict[str, str], want: dict[str, str]) -> list[str]:
    return [f"{name} {want.get(name) or '(none)'} -> {got.get(name) or '(none)'}"
            for name in sorted({*got, *want}) if got.get(name) != want.get(name)]


def lock_with(resolver: Resolver, old: dict[str, str], bump: list[Change], applied: set[str], lock: Path) -> None:
    """The old lock with the applied packages at their new versions, as a hash-locked lock file; Unresolvable when
    the resolver refuses, or when its lock is not exactly that (it pulled in or changed another package)."""
    want = expected_pins(old, bump, applied)
    unapplied_added = [f"{c.package}=={c.new}" for c in bump if c.old is None and c.package not in applied]
    applied_removed = [f"{c.package}=={c.old}" for c in bump if c.new is None and c.package in applied]
    got = resolver.compile([f"{name}=={version}" for name, version in sorted(want.items())],
                           unapplied_added + applied_removed, lock)
    wrong = differences(got, want)
    if wrong:
        raise Unresolvable(f"the resolver also changed {', '.join(wrong)}")


def _free(resolver: Resolver, old: dict[str, str], bump: list[Change], applied: set[str], old_lock: Path,
          lock: Path) -> dict[str, str]:
    """The applied packages at their new versions, every other changed package free between its two versions, the
    old lock preferred: the resolver moves only what it must."""
    changed = {c.package: c for c in bump}
    requirements = [f"{name}=={version}" for name, version in sorted(expected_pins(old, bump, applied).items())
                    if name not in changed or name in applied]
    requirements += [c.package for c in bump if c.package not in applied and c.old]
    constraints = []
    for c in bump:
        if c.package in applied:
            constraints += [f"{c.package}=={c.old}"] if c.new is None else []
        elif c.old and c.new:
            low, high = sorted((c.old, c.new), key=Version)
            constraints.append(f"{c.package}>={low},<={high}")
        else:
            constraints.append(f"{c.package}=={c.old or c.new}")
    return resolver.compile(requirements, constraints, lock, prefer=old_lock)


def required_by(lock_text: str) -> dict[str, set[str]]:
    """package -> the packages that require it, from uv's `# via` lines (requirement files, `-r x.in`, left out)."""
    found: dict[str, set[str]] = {}
    current = None
    for line in lock_text.splitlines():
        pin = lockcheck.PIN.match(line)
        if pin:
            current = lockcheck.normalize(pin[1])
            found[current] = set()
            continue
        via = re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*$", line)
        if current and via and via[1] != "via":
            found[current].add(lockcheck.normalize(via[1]))
    return found


def moves_with(resolver: Resolver, old_lock: Path, bump: list[Change], applied: set[str],
               work: Path) -> tuple[set[str], str]:
    """The other changed packages that must move with the applied ones, and how the resolver said so."""
    old = lockcheck.pinned(old_lock.read_text())
    names = "+".join(sorted(applied))
    try:
        lock_with(resolver, old, bump, applied, work / "exact.lock")
        return set(), f"{names}: resolves on the old lock at {'its' if len(applied) == 1 else 'their'} new version" \
                      f"{'' if len(applied) == 1 else 's'} (exact pins)"
    except Unresolvable as refusal:
        reason = f"{names}: not alone with exact pins ({refusal})"
    others = {c.package for c in bump} - applied
    try:
        got = _free(resolver, old, bump, applied, old_lock, work / "free.lock")
    except Unresolvable as refusal:
        return others, f"{reason}; with the other changes free the resolver refused too ({refusal}): one group"
    changed = {c.package: c for c in bump}
    moved = {name for name in others if got.get(name) != changed[name].old}
    unmet = [name for name in applied if got.get(name) != changed[name].new]
    if unmet:       # a removed package something still requires: it goes with what requires it
        needing = {n for name in unmet for n in required_by(old_lock.read_text()).get(name, set()) if n in others}
        moved |= needing or others
        return moved, (f"{reason}; the resolver keeps {', '.join(sorted(unmet))}, required by "
                       f"{', '.join(sorted(needing)) or 'no single change'}: grouped with "
                       f"{', '.join(sorted(moved))}")
    moves = ", ".join(f"{name} {changed[name].old or '(none)'} -> {got.get(name) or '(none)'}"
                      for name in sorted(moved))
    return moved, f"{reason}; with the other changes free between their old and new versions the resolver moved " \
                  f"{moves or 'nothing else'}"


def find_groups(resolver: Resolver, old_lock: Path, new_lock: Path, work: Path) -> list[Group]:
    old, new = (lockcheck.pinned(p.read_text()) for p in (old_lock, new_lock))
    bump = changes(old, new)
    parent = {c.package: c.package for c in bump}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    def components() -> list[list[str]]:
        found: dict[str, list[str]] = {}
        for c in bump:
            found.setdefault(root(c.package), []).append(c.package)
        return sorted(found.values())

    attempts: list[tuple[list[str], str]] = []
    pending = [[c.package] for c in bump]
    tried: set[tuple[str, ...]] = set()
    while pending:
        members = pending.pop(0)
        tried.add(tuple(members))
        folder = f"{len(attempts) + 1:02d}-{members[0]}" + (f"+{len(members) - 1}" if len(members) > 1 else "")
        moved, note = moves_with(resolver, old_lock, bump, set(members), work / folder)
        attempts.append((members, note))
        for name in moved:
            parent[root(name)] = root(members[0])
        if not pending:     # merged groups are tried as wholes, until each resolves alone
            pending = [g for g in components() if len(g) > 1 and tuple(g) not in tried]
    by_name = {c.package: c for c in bump}
    return [Group(f"g{i}", [by_name[n] for n in members], [note for tried_members, note in attempts
                                                            if set(tried_members) <= set(members)])
            for i, members in enumerate(components(), 1)]
