"""Bisect a lock bump: which group of the packages it moved moved a cell.

    kbench bisect --stack S --accelerator A --old-lock OLD --new-lock NEW --cell CELL_ID
        [--repeats 3] [--runtime host|podman] [--out DIR] [--config config.yaml] [--find-links DIR ...]

CELL_ID is a cell as the workflow names it (tiny/strict/bert/fit/bs32/float32/native-torch-eager), its spec built by
kbench.plan.matrix from the config as rule cell builds it.

The bump's changed packages become groups that can only move together, as the resolver says (kbench.stacks.lockgroups:
jax with jaxlib). A step is the old lock with some groups at their new versions: its own hash-locked lock (compiled
as scripts/lock-envs compiles envs/), its own environment (host: a venv, kbench.stacks.envs, uv hardlinks from its cache;
podman: an image, kbench.stacks.images, tagged by the lock's digest and kept), and the cell run `repeats` times through
kbench.run.launch.run_cell: ordinary cell records, one folder per step under --out (steps/<step>/cells/...). Repeats are
interleaved across the steps of a round (repeat 1 of every step, then repeat 2, ...), so a drift of the machine
(another job starting) falls on every step alike.

The decision rule. Two steps differ when Welch's t-test on their repeat means (kbench.results.stats.welch_p, the test
kbench.lifecycle.compare runs between two runs) gives p < 0.05; each test stands alone (no adjustment over the steps); a step's
share is (step - old) / (new - old), in ms/step.
  1. The endpoints first (old and new). If they do not differ, the verdict is "no significant change between the
     endpoints" and nothing else runs: a change that N repeats cannot tell from noise is not bisected.
  2. Each group alone on the old lock. A group explains the change when its step differs from old, in the change's
     direction, and does not differ from new or moves most of the change (share > 50%): it is named. Two or more
     such groups: each moves the cell alone (either is enough), and all are named.
  3. No group explains it, but two or more each differ from old in its direction, by a tenth of the change or more:
     they each move part of it. Their groups together are one more step; if it explains the change, the verdict
     names them as parts (with shares).
  4. Otherwise every pair of groups is a step (two groups that interact: neither moves the cell alone, both do).
     A pair that explains the change is named as an interaction.
  5. Nothing explains it: the verdict says so, with the groups that moved part of it; three or more groups may
     interact, or the change is too small for N repeats to place.
A group that moves the cell the other way is shown in the table, never named. At alpha 0.05 a group with no effect
differs from old in about 5% of bisects, but cannot explain the change: its step then also differs from new.
A step fails (the cell failed, the environment did not build, the resolver refused that combination of groups) as
itself: it is shown, named at the end of the verdict, and the verdict rests on the other steps. A failed endpoint
stops the bisect.

Cost: every step is N repeats of the cell (N fresh processes) plus one environment; with k groups at most
2 + k + 1 + k(k-1)/2 steps. Resolving the groups costs about 2 resolver runs per changed package.

Writes OUT/bisect.json (kbench.lifecycle.bisect.Bisect: the groups and how each was found, every step's lock, environment,
repeat means, estimate, p-values against old and new, share; the verdict) and OUT/bisect.md, and prints the
verdict line.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kbench.contract.spec import CellSpec
from kbench.contract import cell
from kbench import files
from kbench.machine.host import REPO
from kbench.plan import config_check, matrix
from kbench.results import flat, stats
from kbench.run import launch
from kbench.stacks import envs, images, lock_name, lockcheck, lockgroups

RUNTIMES = ("host", "podman")
MOST = 0.5          # a group that moves more than half the change explains it, even where it differs from new
PART = 0.1          # a smaller share than this is no part of the change, whatever its p-value (a false alarm's size)


class BisectError(ValueError):
    """A bisect that cannot start: one line naming what is wrong."""


@dataclass
class Step:
    name: str                       # old, new, g2, g1+g3
    groups: list[str]               # the groups at their new versions
    lock: str | None = None
    lock_sha256: str | None = None
    environment: dict | None = None     # the environment record (kbench.stacks.envs / kbench.stacks.images)
    records: list[str] = field(default_factory=list)    # its cell records, one per repeat
    repeat_means: list[float] = field(default_factory=list)
    estimate: dict | None = None        # ms, low, high, method (kbench.results.stats.estimate)
    p_vs_old: float | None = None
    p_vs_new: float | None = None
    share: float | None = None          # (ms - old ms) / (new ms - old ms)
    status: str = "ok"                  # ok | failed: <why> | unresolvable: <the resolver's words>

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.repeat_means)

    @property
    def ms(self) -> float | None:
        return self.estimate["ms"] if self.estimate else None


@dataclass
class Verdict:
    kind: str           # no-change | group | each | parts | interaction | unexplained | failed
    text: str
    groups: list[str]   # the groups the verdict names (for an interaction or parts: all of them together)


@dataclass
class Bisect:
    """bisect.json: everything the verdict rests on."""
    stack: str
    accelerator: str
    cell: str
    spec_digest: str
    runtime: str
    repeats: int
    alpha: float
    old_lock: dict                  # path, sha256
    new_lock: dict
    groups: list[lockgroups.Group]
    steps: list[Step] = field(default_factory=list)
    verdict: Verdict | None = None

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["groups"] = [g.to_json() for g in self.groups]
        data["steps"] = [dataclasses.asdict(s) for s in self.steps]
        data["verdict"] = dataclasses.asdict(self.verdict) if self.verdict else None
        return data


# ---------------------------------------------------------------- the cell

def cell_spec(config: dict, cell_id: str, stack: str, accelerator: str) -> dict:
    """The spec rule cell gives the cell (kbench.plan.matrix), on this accelerator; the cell must run in the stack."""
    parts = cell_id.split("/")
    if len(parts) != 7 or not parts[4].startswith("bs") or not parts[4][2:].isdigit():
        raise BisectError(f"cell {cell_id!r} is not suite/profile/model/task/bs<batch>/precision/framework "
                          "(e.g. tiny/strict/bert/fit/bs32/float32/native-torch-eager)")
    suite, profile, model, task, batch, precision_name, framework = parts
    config = {**config, "accelerator": accelerator, "models": [model], "frameworks": [framework],
              "precisions": [precision_name], "profiles": [profile]}
    try:
        found = {c.cell_id: c for c in matrix.cells(config, suite)}
    except matrix.ConfigError as error:
        raise BisectError(f"cell {cell_id}: {error}") from error
    if cell_id not in found:
        raise BisectError(f"{cell_id} is not a cell of suite {suite!r}; its {model} {framework} cells: "
                          f"{', '.join(sorted(found)) or 'none'}")
    if found[cell_id].not_applicable:
        raise BisectError(f"{cell_id} is n/a ({found[cell_id].not_applicable}): nothing to time")
    if matrix.stack_of(config, framework) != stack:
        raise BisectError(f"{cell_id} runs in stack {matrix.stack_of(config, framework)!r}, not {stack!r}")
    return matrix.spec(config, suite, model, task, int(batch[2:]), precision_name, framework, profile)


# ---------------------------------------------------------------- steps: lock, environment, repeats

class Bench:
    """Makes and runs the steps, each once: a step is named by the groups it applies."""

    def __init__(self, config: dict, spec: CellSpec, stack: str, runtime: str, repeats: int, out: Path,
                 resolver: lockgroups.Resolver, old_lock: Path, new_lock: Path, groups: list[lockgroups.Group]):
        self.config, self.spec, self.stack, self.runtime, self.repeats = config, spec, stack, runtime, repeats
        self.out, self.resolver, self.old_lock, self.new_lock, self.groups = out, resolver, old_lock, new_lock, groups
        self.old_pins = lockcheck.pinned(old_lock.read_text())
        self.bump = lockgroups.changes(self.old_pins, lockcheck.pinned(new_lock.read_text()))
        self.steps: dict[frozenset[str], Step] = {}
        self.after_round = lambda: None     # run() writes what is measured so far: a long bisect shows its progress

    def name(self, applied: frozenset[str]) -> str:
        if not applied:
            return "old"
        if len(applied) == len(self.groups):
            return "new"
        return "+".join(g.id for g in self.groups if g.id in applied)

    def measure(self, rounds: list[frozenset[str]]) -> list[Step]:
        """Prepare the steps not yet made, then run their repeats interleaved; returns the steps in order."""
        fresh = []
        for applied in rounds:
            if applied not in self.steps:
                self.steps[applied] = self._prepare(applied)
                fresh.append(self.steps[applied])
        for repeat in range(1, self.repeats + 1):
            for step in fresh:
                if step.status == "ok":
                    self._run(step, repeat)
        for step in fresh:
            if step.status == "ok":
                results = [cell.read(path) for path in step.records]
                estimate = stats.estimate(step.repeat_means, [flat.row(r)["block_means"] for r in results])
                step.estimate = {"ms": estimate.ms, "low": estimate.low, "high": estimate.high,
                                 "method": estimate.method}
        self.after_round()
        return [self.steps[applied] for applied in rounds]

    def _prepare(self, applied: frozenset[str]) -> Step:
        name = self.name(applied)
        folder = self.out / "steps" / name
        step = Step(name, [g.id for g in self.groups if g.id in applied])
        lock = folder / lock_name(self.stack, self.spec.accelerator)
        folder.mkdir(parents=True, exist_ok=True)
        if name in ("old", "new"):          # the user's own locks, byte for byte
            lock.write_bytes((self.old_lock if name == "old" else self.new_lock).read_bytes())
        else:
            packages = {p for g in self.groups if g.id in applied for p in g.packages}
            try:
                lockgroups.lock_with(self.resolver, self.old_pins, self.bump, packages, lock)
            except lockgroups.Unresolvable as refusal:
                step.status = f"unresolvable: {refusal}"
                return step
        step.lock, step.lock_sha256 = str(lock), envs.sha256_file(lock)
        print(f"bisect: step {name}: building its environment ({self.runtime})", flush=True)
        try:
            step.environment = self._environment(lock, folder)
        except (subprocess.CalledProcessError, OSError) as error:
            step.status = f"failed: environment: {error}"
        return step

    def _environment(self, lock: Path, folder: Path) -> dict:
        accelerator = self.spec.accelerator
        if self.runtime == "host":
            return envs.build(self.stack, accelerator, lock, folder / "venv", folder / "environment.json",
                              self.resolver.find_links)
        containers = self.config["containers"]
        base = Path(self.config["results_dir"]) / "images" / "base.json"
        return images.build_stack(self.stack, accelerator, base, containers["source_date_epoch"],
                                  Path(containers["uv_cache"]), folder / "environment.json", lock=lock)

    def _run(self, step: Step, repeat: int) -> None:
        folder = self.out / "steps" / step.name
        limits = self.config["containers"].get("limits") or {}
        path = folder / "cells" / f"{self.spec.cell_id}.r{repeat}.json"
        result = launch.run_cell(self.spec, self.runtime, folder / "environment.json", path,
                                 folder / "logs" / f"{self.spec.cell_id}.r{repeat}.log",
                                 launch.Options(timeout_s=self.config["cell_timeout_minutes"] * 60, repeat=repeat,
                                                memory_mb=limits.get("memory_mb"), cpus=limits.get("cpus")))
        step.records.append(str(path))
        if result.mean_ms is None:
            step.status = result.text()         # failed: <type>, or unsupported: <why>
            return
        step.repeat_means.append(result.mean_ms)
        print(f"bisect: step {step.name} repeat {repeat}: {result.mean_ms:.3f} ms/step", flush=True)


# ---------------------------------------------------------------- the decision rule

def compare_to_endpoints(step: Step, old: Step, new: Step) -> None:
    if not step.ok:
        return
    if step is not old:
        step.p_vs_old = stats.welch_p(old.repeat_means, step.repeat_means)
    if step is not new:
        step.p_vs_new = stats.welch_p(new.repeat_means, step.repeat_means)
    step.share = (step.ms - old.ms) / (new.ms - old.ms) if new.ms != old.ms else None


def explains(step: Step, alpha: float) -> bool:
    """Differs from old in the change's direction, and is not told from new or moves most of the change."""
    if not step.ok or step.share is None or step.share <= 0 or step.p_vs_old is None or step.p_vs_old >= alpha:
        return False
    return step.p_vs_new is None or step.p_vs_new >= alpha or step.share > MOST


def moves_part(step: Step, alpha: float) -> bool:
    return (step.ok and step.share is not None and step.share >= PART and step.p_vs_old is not None
            and step.p_vs_old < alpha and not explains(step, alpha))


def describe(groups: list[lockgroups.Group], ids: list[str]) -> str:
    by_id = {g.id: g for g in groups}
    return " and ".join(f"{i} ({', '.join(c.text() for c in by_id[i].changes)})" for i in ids)


def figures(step: Step) -> str:
    tests = [f"p vs {side} {p:.3g}" for side, p in (("old", step.p_vs_old), ("new", step.p_vs_new)) if p is not None]
    share = f", {100 * step.share:.0f}% of the change" if step.share is not None else ""
    return f"{step.name} {step.ms:.3f} ms ({'; '.join(tests)}{share})"


def decide(bench: Bench, alpha: float) -> Verdict:
    """The verdict (the rule in the module docstring); steps that did not run are named in it: it rests on the
    others only."""
    verdict = _decide(bench, alpha)
    missing = [s for s in bench.steps.values() if not s.ok]
    if missing and verdict.kind != "failed":
        verdict.text += "; not measured: " + ", ".join(f"{s.name} ({s.status})" for s in missing)
    return verdict


def _decide(bench: Bench, alpha: float) -> Verdict:
    groups, everything = bench.groups, frozenset(g.id for g in bench.groups)
    old, new = bench.measure([frozenset(), everything])
    for step in (old, new):
        if not step.ok:
            return Verdict("failed", f"the {step.name} endpoint did not run: {step.status}", [])
    compare_to_endpoints(old, old, new)
    compare_to_endpoints(new, old, new)
    ends = f"old {old.ms:.3f} ms, new {new.ms:.3f} ms, Welch p {new.p_vs_old:.3g}"
    if new.p_vs_old >= alpha:
        return Verdict("no-change", f"no significant change between the endpoints ({ends} >= {alpha}, "
                                    f"{bench.repeats} repeats each)", [])
    singles = bench.measure([frozenset({g.id}) for g in groups])
    for step in singles:
        compare_to_endpoints(step, old, new)
    named = [s for s in singles if explains(s, alpha)]
    parts = [s for s in singles if moves_part(s, alpha)]
    also = f"; also moving part of it: {', '.join(figures(s) for s in parts)}" if parts else ""
    if len(named) == 1:
        return Verdict("group", f"{describe(groups, named[0].groups)} moves the cell: {figures(named[0])}; {ends}"
                                f"{also}", named[0].groups)
    if named:
        ids = [s.groups[0] for s in named]
        return Verdict("each", f"each of {describe(groups, ids)} moves the cell alone (either is enough): "
                               f"{', '.join(figures(s) for s in named)}; {ends}", ids)
    if len(parts) >= 2:
        together = bench.measure([frozenset(i for s in parts for i in s.groups)])[0]
        compare_to_endpoints(together, old, new)
        if explains(together, alpha):
            return Verdict("parts", f"{describe(groups, together.groups)} each move part of the change "
                                    f"({', '.join(figures(s) for s in parts)}); together they move it: "
                                    f"{figures(together)}; {ends}", together.groups)
    pairs = bench.measure([frozenset(pair) for pair in itertools.combinations([g.id for g in groups], 2)])
    for step in pairs:
        compare_to_endpoints(step, old, new)
    interacting = [s for s in pairs if explains(s, alpha)]
    if interacting:
        return Verdict("interaction", "no group alone moves the cell; "
                       + "; ".join(f"{describe(groups, s.groups)} do together (they interact): {figures(s)}"
                                   for s in interacting) + f"; {ends}",
                       sorted({i for s in interacting for i in s.groups}))
    return Verdict("unexplained", f"no group alone and no pair of groups explains the change ({ends}){also}; three "
                                  "or more groups may interact, or the change is too small for "
                                  f"{bench.repeats} repeats to place", [])


# ---------------------------------------------------------------- records

def markdown(record: Bisect) -> str:
    lines = [f"# Bisect: {record.cell}", "", f"**{record.verdict.text if record.verdict else 'running'}**", "",
             f"Stack {record.stack} ({record.accelerator}), runtime {record.runtime}, {record.repeats} repeats per "
             f"step, Welch's t at alpha {record.alpha}. Old lock {record.old_lock['path']} "
             f"({record.old_lock['sha256'][:19]}), new lock {record.new_lock['path']} "
             f"({record.new_lock['sha256'][:19]}).", "", "## Groups", "",
             "| group | packages | how the resolver formed it |", "|---|---|---|"]
    lines += [f"| {g.id} | {', '.join(c.text() for c in g.changes)} | {'<br>'.join(g.how)} |" for g in record.groups]
    lines += ["", "## Steps (the old lock with these groups at their new versions)", "",
              "| step | ms/step | 95% interval | p vs old | p vs new | share of the change | status | lock |",
              "|---|---|---|---|---|---|---|---|"]

    def number(value, spec):
        return "" if value is None else format(value, spec)
    for s in record.steps:
        e = s.estimate or {}
        interval = f"{e['low']:.3f} – {e['high']:.3f}" if e.get("low") is not None else ""
        share = "" if s.share is None else f"{round(100 * s.share):d}%"
        lines.append(f"| {s.name} | {number(e.get('ms'), '.3f')} | {interval} | {number(s.p_vs_old, '.3g')} | "
                     f"{number(s.p_vs_new, '.3g')} | {share} | {s.status} | {(s.lock_sha256 or '')[:19]} |")
    return "\n".join(lines) + "\n"


def write(record: Bisect, out: Path) -> None:
    files.write_json(out / "bisect.json", record.to_json())
    (out / "bisect.md").write_text(markdown(record))


def most_steps(groups: int) -> int:
    """Endpoints, each group alone, the parts together, every pair. With one or two groups all of them together is
    the new lock; with three, parts whose union is not the new lock are two, and their union is a pair."""
    return {1: 2, 2: 4, 3: 8}.get(groups, 2 + groups + 1 + groups * (groups - 1) // 2)


def default_out(config: dict, spec: CellSpec, old_lock: Path, new_lock: Path) -> Path:
    digests = "-".join(envs.sha256_file(p).removeprefix("sha256:")[:8] for p in (old_lock, new_lock))
    return Path(config["results_dir"]) / "bisect" / f"{spec.cell_id.replace('/', '-')}-{digests}"


def run(config: dict, stack: str, accelerator: str, old_lock: Path, new_lock: Path, cell_id: str, repeats: int,
        runtime: str, out: Path | None, find_links: tuple[str, ...] = ()) -> Bisect:
    if repeats < 2:
        raise BisectError(f"--repeats {repeats}: Welch's t-test needs 2 or more repeats a step")
    if runtime not in RUNTIMES:
        raise BisectError(f"--runtime {runtime!r}: allowed {', '.join(RUNTIMES)}")
    if runtime == "podman" and find_links:
        raise BisectError("--find-links reaches host venvs only: an image build installs from the index")
    for lock in (old_lock, new_lock):
        try:
            config_check.check_lock(lock)
        except config_check.ConfigError as error:       # missing, empty, not text, a line not pinned and hashed
            raise BisectError(str(error)) from error
    if out and out.exists() and not out.is_dir():
        raise BisectError(f"{out}: a file, not a folder (--out takes the folder for bisect.json and the steps)")
    spec = cell_spec(config, cell_id, stack, accelerator)
    if runtime == "podman" and not (Path(config["results_dir"]) / "images" / "base.json").exists():
        raise BisectError(f"no base image record {config['results_dir']}/images/base.json: build it first "
                          f"(.venv/bin/snakemake --cores 1 {config['results_dir']}/images/base.json)")
    out = (out or default_out(config, spec, old_lock, new_lock)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    resolver = lockgroups.Resolver(tuple(find_links))
    groups = lockgroups.find_groups(resolver, old_lock, new_lock, out / "resolve")
    if not groups:
        raise BisectError(f"{old_lock} and {new_lock} pin the same versions: nothing to bisect")
    for g in groups:
        print(f"bisect: group {g.id}: {', '.join(c.text() for c in g.changes)}", flush=True)
    print(f"bisect: {len(groups)} groups; at most {most_steps(len(groups))} steps of {repeats} repeats each",
          flush=True)
    record = Bisect(stack, accelerator, cell_id, cell.spec_digest(spec), runtime, repeats, stats.SIGNIFICANCE,
                    {"path": str(old_lock), "sha256": envs.sha256_file(old_lock)},
                    {"path": str(new_lock), "sha256": envs.sha256_file(new_lock)}, groups)
    bench = Bench(config, spec, stack, runtime, repeats, out, resolver, old_lock, new_lock, groups)

    def progress():
        record.steps = list(bench.steps.values())
        write(record, out)
    bench.after_round = progress
    record.verdict = decide(bench, stats.SIGNIFICANCE)
    progress()
    return record


def load_config(path: Path) -> dict:
    try:
        config = config_check.load_yaml(path)           # missing, empty, not text, not YAML: names the file
    except config_check.ConfigError as error:
        raise BisectError(str(error)) from error
    try:
        config_check.check_schema(config, REPO / "schemas" / "config.schema.yaml")
    except config_check.ConfigError as error:
        raise BisectError(f"{path}: {error}") from error
    return config


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--accelerator", required=True)
    parser.add_argument("--old-lock", required=True, type=Path)
    parser.add_argument("--new-lock", required=True, type=Path)
    parser.add_argument("--cell", required=True, help="e.g. tiny/strict/bert/fit/bs32/float32/native-torch-eager")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per step (default 3)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="host")
    parser.add_argument("--out", type=Path, help="default: <results_dir>/bisect/<cell>-<old>-<new lock digests>")
    parser.add_argument("--config", type=Path, default=REPO / "config.yaml")
    parser.add_argument("--find-links", action="append", default=[],
                        help="a folder of wheels to resolve and install from besides the index (repeatable; host)")
    args = parser.parse_args(argv)
    try:
        record = run(load_config(args.config), args.stack, args.accelerator, args.old_lock, args.new_lock, args.cell,
                     args.repeats, args.runtime, args.out, tuple(args.find_links))
    except (BisectError, lockgroups.ResolverError) as error:
        parser.exit(2, f"bisect: {error}\n")
    print(f"bisect {record.cell}: {record.verdict.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
