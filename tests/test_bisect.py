"""kbench.lifecycle.bisect on the synthetic stack (NumPy only, host venvs) with planted packages: small wheels made here,
resolved and installed with --find-links. kbench-plant-b sets the synthetic device's time per step at interpreter
start (a .pth file: 2 ms in 1.0, 8 ms in 1.1, a slower step); kbench-plant-a is inert in both versions; kbench-plant-c
2.0 requires kbench-plant-d >= 2.0, so the resolver can only move those two together. The decision rule itself is
tested on made-up repeat means (every verdict kind)."""
import base64
import hashlib
import itertools
import json
import re
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import CONFIG, REPO
from kbench.contract import cell
from kbench.lifecycle import bisect
from kbench.plan import config_check
from kbench.stacks import envs, images, lockcheck, lockgroups

CELL = "tiny/strict/synthetic/fit/bs4/float32/synthetic"
NUMPY = lockcheck.pinned((REPO / "envs" / "synthetic.cpu.lock").read_text())["numpy"]
DEVICE_MS = "import os; os.environ['KBENCH_SYNTHETIC_DEVICE_MS'] = '{}'\n"
OLD = {"a": "1.0", "b": "1.0", "c": "1.0", "d": "1.0"}


def wheel(folder: Path, name: str, version: str, requires=(), pth: str | None = None) -> Path:
    """A pure-Python wheel written by hand (fixed times: the same bytes, so the same hash, every time)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = {f"{dist}/__init__.py": f'__version__ = "{version}"\n',
                f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                    + "".join(f"Requires-Dist: {r}\n" for r in requires),
                f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kbench-tests\nRoot-Is-Purelib: true\n"
                                 "Tag: py3-none-any\n"}
    if pth:
        contents[f"{dist}.pth"] = pth        # site runs its import line at every interpreter start

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    contents[f"{info}/RECORD"] = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n"
                                         for path, text in contents.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in_wheel, text in contents.items():
            archive.writestr(zipfile.ZipInfo(name_in_wheel, (2025, 1, 1, 0, 0, 0)), text)
    return path


@pytest.fixture(scope="module")
def plants(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for version in ("1.0", "1.1"):
        wheel(folder, "kbench-plant-a", version)
    wheel(folder, "kbench-plant-b", "1.0", pth=DEVICE_MS.format(2))
    wheel(folder, "kbench-plant-b", "1.1", pth=DEVICE_MS.format(8))
    wheel(folder, "kbench-plant-c", "1.0", requires=["kbench-plant-d>=1.0"])
    wheel(folder, "kbench-plant-c", "2.0", requires=["kbench-plant-d>=2.0"])
    for version in ("1.0", "2.0"):
        wheel(folder, "kbench-plant-d", version)
    return folder


def lock(folder: Path, plants: Path, name: str, versions: dict[str, str]) -> Path:
    """A hash-locked lock of the synthetic stack's NumPy and the planted packages at these versions."""
    path = folder / f"{name}.lock"
    lockgroups.Resolver((str(plants),)).compile(
        [f"numpy=={NUMPY}", *(f"kbench-plant-{p}=={v}" for p, v in versions.items())], [], path)
    return path


def config_file(folder: Path) -> Path:
    """config.yaml with the synthetic model and column (as tests/test_faults.py runs them), results under folder."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["framework_defs"]["synthetic"] = {"stack": "synthetic", "adapter": "synthetic", "env": {},
                                             "jit_compile": False}
    config["model_defs"]["synthetic"] = {"precisions": ["float32"],
                                         "tasks": {"fit": {"batch_sizes": [4], "learning_rate": 1e-3}},
                                         "sizes": {"tiny": {"arch": {"matrix_size": 64}, "inputs": {}}}}
    config.update(models=["synthetic"], frameworks=["synthetic"], precisions=["float32"], accelerator="cpu",
                  runtime="host", results_dir=str(folder / "results"), cell_timeout_minutes=2)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_bisect(folder: Path, plants: Path, old: Path, new: Path, capsys) -> tuple[dict, str]:
    out = folder / "out"
    assert bisect.main(["--stack", "synthetic", "--accelerator", "cpu", "--old-lock", str(old), "--new-lock", str(new),
                        "--cell", CELL, "--repeats", "3", "--config", str(config_file(folder)),
                        "--find-links", str(plants), "--out", str(out)]) == 0
    return json.loads((out / "bisect.json").read_text()), capsys.readouterr().out


@pytest.mark.workflow
def test_bisect_names_the_one_group_that_slows_the_cell(tmp_path, plants, capsys):
    old = lock(tmp_path, plants, "old", OLD)
    new = lock(tmp_path, plants, "new", {"a": "1.1", "b": "1.1", "c": "2.0", "d": "2.0"})
    record, printed = run_bisect(tmp_path, plants, old, new, capsys)

    groups = {g["id"]: g for g in record["groups"]}
    assert {i: sorted(g["packages"]) for i, g in groups.items()} == {
        "g1": ["kbench-plant-a"], "g2": ["kbench-plant-b"], "g3": ["kbench-plant-c", "kbench-plant-d"]}
    assert groups["g3"]["packages"]["kbench-plant-c"] == {"old": "1.0", "new": "2.0"}
    # c and d: grouped by the resolver (c 2.0 refused on the old lock, d moved with it), not by name or order
    assert any("kbench-plant-c: not alone with exact pins" in line and "kbench-plant-d>=2.0" in line
               and "moved kbench-plant-d 1.0 -> 2.0" in line for line in groups["g3"]["how"]), groups["g3"]["how"]
    assert groups["g1"]["how"] == ["kbench-plant-a: resolves on the old lock at its new version (exact pins)"]

    verdict = record["verdict"]
    assert verdict["kind"] == "group" and verdict["groups"] == ["g2"], verdict
    assert printed.splitlines()[-1].startswith(f"bisect {CELL}: g2 (kbench-plant-b 1.0 -> 1.1) moves the cell")

    steps = {s["name"]: s for s in record["steps"]}
    assert list(steps) == ["old", "new", "g1", "g2", "g3"]          # one group explains it: no pairs are run
    ms = {name: step["estimate"]["ms"] for name, step in steps.items()}
    assert ms["g2"] - ms["old"] > 4 and ms["new"] - ms["old"] > 4          # b 1.1: 8 ms of device time, not 2
    new_pins = lockcheck.pinned(new.read_text())
    for step in steps.values():
        step_lock = Path(step["lock"])
        assert step_lock.parent == tmp_path / "out" / "steps" / step["name"]
        assert step["lock_sha256"] == envs.sha256_file(step_lock)
        config_check.check_lock(step_lock)                  # every requirement pinned and hashed
        moved = {p for g in step["groups"] for p in groups[g]["packages"]}
        assert lockcheck.pinned(step_lock.read_text()) == {
            name: (new_pins if name in moved else lockcheck.pinned(old.read_text()))[name] for name in new_pins}
        assert step["environment"]["lock_sha256"] == step["lock_sha256"]
        # the step's repeats are ordinary cell records, in the step's own folder, run in the step's environment
        assert len(step["records"]) == 3
        results = [cell.read(path) for path in step["records"]]
        assert all(Path(path).is_relative_to(tmp_path / "out" / "steps" / step["name"] / "cells")
                   for path in step["records"])
        assert [r.status for r in results] == ["ok"] * 3 and [r.repeat for r in results] == [1, 2, 3]
        assert all(r.cell_id == CELL and r.provenance["lock_check"]["result"] == "exact"
                   and r.provenance["environment"]["lock_sha256"] == step["lock_sha256"] for r in results)
        assert step["repeat_means"] == [r.mean_ms for r in results]
    assert steps["g2"]["p_vs_old"] < 0.05 and steps["old"]["p_vs_new"] < 0.05
    assert "| g2 | kbench-plant-b 1.0 -> 1.1 |" in (tmp_path / "out" / "bisect.md").read_text()


@pytest.mark.workflow
def test_a_bump_that_slows_nothing_stops_at_the_endpoints(tmp_path, plants, capsys):
    """b stays at 1.0: every step's device time is 2 ms. Welch at 0.05 calls about 5% of equal endpoints different
    (that is what alpha means): one fresh rerun, so this fails by chance about once in 400 runs, and every time
    where the bisect sees a change that is not there."""
    old = lock(tmp_path, plants, "old", OLD)
    new = lock(tmp_path, plants, "new", {"a": "1.1", "b": "1.0", "c": "2.0", "d": "2.0"})
    for attempt in (tmp_path / "first", tmp_path / "rerun"):
        attempt.mkdir()
        record, printed = run_bisect(attempt, plants, old, new, capsys)
        if record["verdict"]["kind"] == "no-change":
            break
    assert record["verdict"]["kind"] == "no-change", record["verdict"]
    assert printed.splitlines()[-1].startswith(f"bisect {CELL}: no significant change between the endpoints")
    assert [s["name"] for s in record["steps"]] == ["old", "new"]          # nothing else ran
    assert sorted(g["id"] for g in record["groups"]) == ["g1", "g2"]         # a; c with d


def test_locks_between_are_compiled_as_scripts_lock_envs_compiles_envs():
    script = " ".join((REPO / "scripts" / "lock-envs").read_text().replace("\\\n", " ").split())
    assert f"pip compile {' '.join(lockgroups.COMPILE_FLAGS)} " in script


def test_a_removed_package_goes_with_the_package_that_requires_it():
    lock_text = ("kbench-plant-c==1.0 \\\n    --hash=sha256:00\n    # via -r old.in\n"
                 "kbench-plant-f==1.0 \\\n    --hash=sha256:11\n    # via\n    #   kbench-plant-c\n    #   -r old.in\n"
                 "numpy==2.4.6 \\\n    --hash=sha256:22\n    # via kbench-plant-c\n")
    assert lockgroups.required_by(lock_text) == {"kbench-plant-c": set(), "kbench-plant-f": {"kbench-plant-c"},
                                                 "numpy": {"kbench-plant-c"}}


# ---------------------------------------------------------------- the decision rule on made-up repeat means

class MadeUpBench:
    """bisect.decide's view of a bench: each step's repeat means from a table (frozenset of group ids -> means)."""

    def __init__(self, means: dict[str, list[float]], groups: int = 3):
        self.groups = [lockgroups.Group(f"g{i}", [lockgroups.Change(f"p{i}", "1", "2")], []) for i in
                       range(1, groups + 1)]
        every = "+".join(g.id for g in self.groups)
        self.means = {frozenset() if k == "old" else frozenset((every if k == "new" else k).split("+")): v
                      for k, v in means.items()}
        self.repeats, self.steps, self.measured = 3, {}, []

    def measure(self, rounds):
        for applied in rounds:
            if applied not in self.steps:
                self.measured.append(applied)
                ms = self.means[applied]
                every = len(applied) == len(self.groups)
                name = "old" if not applied else "new" if every else "+".join(sorted(applied))
                self.steps[applied] = bisect.Step(name, sorted(applied), repeat_means=ms,
                                                  estimate={"ms": sum(ms) / len(ms), "low": None, "high": None,
                                                            "method": "repeats"})
        return [self.steps[applied] for applied in rounds]


OLD_MS, NEW_MS, HALF = [10.0, 10.1, 9.9], [20.0, 20.2, 19.8], [15.0, 15.1, 14.9]


@pytest.mark.parametrize("means, kind, named, measured", [
    ({"old": OLD_MS, "new": [10.05, 9.95, 10.1]}, "no-change", [], 2),
    ({"old": OLD_MS, "new": NEW_MS, "g1": OLD_MS, "g2": [19.9, 20.1, 20.0], "g3": OLD_MS}, "group", ["g2"], 5),
    # moves most of it (80%), though told from new: still the group; another that moves 5% is no part of it
    ({"old": OLD_MS, "new": NEW_MS, "g1": [18.0, 18.1, 17.9], "g2": [10.5, 10.6, 10.4], "g3": OLD_MS},
     "group", ["g1"], 5),
    ({"old": OLD_MS, "new": NEW_MS, "g1": NEW_MS, "g2": NEW_MS, "g3": OLD_MS}, "each", ["g1", "g2"], 5),
    ({"old": OLD_MS, "new": NEW_MS, "g1": HALF, "g2": [14.0, 14.1, 13.9], "g3": OLD_MS, "g1+g2": NEW_MS},
     "parts", ["g1", "g2"], 6),
    ({"old": OLD_MS, "new": NEW_MS, "g1": OLD_MS, "g2": OLD_MS, "g3": OLD_MS,
      "g1+g2": OLD_MS, "g1+g3": NEW_MS, "g2+g3": OLD_MS}, "interaction", ["g1", "g3"], 8),
    ({"old": OLD_MS, "new": NEW_MS, "g1": OLD_MS, "g2": OLD_MS, "g3": OLD_MS,
      "g1+g2": OLD_MS, "g1+g3": OLD_MS, "g2+g3": OLD_MS}, "unexplained", [], 8),
    # a group that moves the cell the other way is never named
    ({"old": OLD_MS, "new": NEW_MS, "g1": [5.0, 5.1, 4.9], "g2": NEW_MS, "g3": OLD_MS}, "group", ["g2"], 5),
])
def test_the_decision_rule(means, kind, named, measured):
    bench = MadeUpBench(means)
    verdict = bisect.decide(bench, 0.05)
    assert (verdict.kind, verdict.groups) == (kind, named), verdict.text
    assert len(bench.measured) == measured          # each step costs repeats: none is run that the rule needs not


def test_two_groups_that_only_move_the_cell_together_are_an_interaction():
    """With two groups their pair is the new lock itself: measured once, as the endpoint."""
    bench = MadeUpBench({"old": OLD_MS, "new": NEW_MS, "g1": OLD_MS, "g2": OLD_MS}, groups=2)
    verdict = bisect.decide(bench, 0.05)
    assert (verdict.kind, verdict.groups) == ("interaction", ["g1", "g2"]) and len(bench.measured) == 4


@pytest.mark.parametrize("groups", [1, 2, 3, 4])
def test_the_most_steps_announced_are_the_most_the_rule_can_run(groups):
    """All groups but the last move part of the change, their union does not explain it, no pair does: the longest
    path."""
    every = [f"g{i}" for i in range(1, groups + 1)]
    means = {"old": OLD_MS, "new": NEW_MS, **{g: [12.0, 12.1, 11.9] for g in every[:-1]}, every[-1]: OLD_MS,
             **{"+".join(c): OLD_MS for n in range(2, groups) for c in itertools.combinations(every, n)}}
    bench = MadeUpBench(means, groups)
    bisect.decide(bench, 0.05)
    assert len(bench.measured) == bisect.most_steps(groups)


def test_a_step_that_did_not_run_is_named_in_the_verdict():
    bench = MadeUpBench({"old": OLD_MS, "new": NEW_MS, "g1": OLD_MS, "g2": NEW_MS, "g3": OLD_MS})
    bench.measure([frozenset({"g3"})])[0].status = "unresolvable: kbench-plant-x==2 needs y"
    verdict = bisect.decide(bench, 0.05)
    assert verdict.kind == "group" and verdict.groups == ["g2"]
    assert verdict.text.endswith("; not measured: g3 (unresolvable: kbench-plant-x==2 needs y)")


def test_a_failed_endpoint_stops_the_bisect():
    bench = MadeUpBench({"old": OLD_MS, "new": NEW_MS})
    bench.measure([frozenset({"g1", "g2", "g3"})])[0].status = "failed: LockDrift"
    verdict = bisect.decide(bench, 0.05)
    assert verdict.kind == "failed" and "the new endpoint did not run: failed: LockDrift" in verdict.text


@pytest.mark.parametrize("cell_id, stack, message", [
    ("tiny/strict/synthetic/fit/bs4/float32", "synthetic", "is not suite/profile/model/task/bs<batch>"),
    ("tiny/strict/synthetic/fit/bs8/float32/synthetic", "synthetic", "is not a cell of suite 'tiny'"),
    (CELL, "keras3-jax", "runs in stack 'synthetic', not 'keras3-jax'"),
    ("tiny/strict/bert/fit/bs32/tf32/keras3-jax", "keras3-jax", "is n/a"),
])
def test_a_cell_that_cannot_be_bisected_is_named_in_one_line(tmp_path, cell_id, stack, message):
    config = bisect.load_config(config_file(tmp_path))
    with pytest.raises(bisect.BisectError, match=re.escape(message)):
        bisect.cell_spec(config, cell_id, stack, "cpu")


def test_the_cells_spec_is_the_one_rule_cell_gives_it(tmp_path):
    from kbench.plan import matrix
    config = bisect.load_config(config_file(tmp_path))
    spec = bisect.cell_spec(config, CELL, "synthetic", "cpu")
    assert spec == matrix.spec(config, "tiny", "synthetic", "fit", 4, "float32", "synthetic", "strict")


def test_an_image_build_reads_the_lock_it_is_given_from_a_context_of_its_own():
    argv = images.build_command("synthetic", "cpu", "sha256:base", 1735689600, Path("/cache"), "t",
                                context=Path("/tmp/ctx"))
    assert argv[-1] == "/tmp/ctx"


def step(share, p_vs_old, p_vs_new):
    return bisect.Step("g1", ["g1"], repeat_means=[1.0], estimate={"ms": 1.0}, share=share, p_vs_old=p_vs_old,
                       p_vs_new=p_vs_new)


def test_a_group_explains_the_change_only_told_from_old_and_in_its_direction():
    """Told from old (p < alpha), moving the same way as the change, and not told from new (or moving most of it)."""
    assert bisect.explains(step(0.9, 0.001, 0.6), 0.05)
    assert bisect.explains(step(0.8, 0.001, 0.001), 0.05)         # told from new, but moves most of the change
    assert not bisect.explains(step(0.6, 0.2, 0.3), 0.05)         # too noisy to tell from either endpoint
    assert not bisect.explains(step(0.9, 0.06, 0.9), 0.05)        # a share that old's noise could give
    assert not bisect.explains(step(-0.4, 0.001, 0.2), 0.05)      # moves the cell the other way
    assert not bisect.explains(step(0.3, 0.001, 0.001), 0.05)     # a part: told from both, less than most


def test_a_group_moves_part_only_from_a_tenth_of_the_change():
    assert bisect.moves_part(step(0.3, 0.001, 0.001), 0.05)
    assert not bisect.moves_part(step(0.05, 0.001, 0.001), 0.05)   # a false alarm's size, whatever its p-value
    assert not bisect.moves_part(step(-0.3, 0.001, 0.001), 0.05)
    assert not bisect.moves_part(step(0.3, 0.2, 0.001), 0.05)


def test_a_noisy_step_or_a_small_one_is_never_named():
    """g1's repeats spread over the whole change (p against old and new both large), g3 moves 5% of it: the verdict
    names g2 and neither of the others, not even as moving part."""
    bench = MadeUpBench({"old": OLD_MS, "new": NEW_MS, "g1": [8.0, 15.0, 22.0], "g2": [19.9, 20.1, 20.0],
                         "g3": [10.5, 10.6, 10.4]})
    verdict = bisect.decide(bench, 0.05)
    assert (verdict.kind, verdict.groups) == ("group", ["g2"]), verdict.text
    assert "also moving part" not in verdict.text, verdict.text
