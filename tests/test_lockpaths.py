"""A stack's lock path is spelled in one place, kbench.machine.lockpaths (envs/<stack>.<accelerator>.lock). The guard reads
every string literal of the Python the pipeline runs (scripts/kbench, scripts/*.py, rules/*.smk, the Snakefile;
docstrings and comments left out) and names each one that spells a stack's lock by hand."""
import io
import re
import tokenize

import pytest

from conftest import REPO
from kbench.machine import lockpaths
from kbench import stacks

OWNER = REPO / "scripts" / "kbench" / "machine" / "lockpaths.py"
FIELD = re.compile(r"\{([^{}]*)\}")
DOCUMENTED = {"def", "class", "async", "rule", "checkpoint"}     # the blocks whose first string is their docstring


def sources(repo=REPO) -> list:
    return sorted([*(repo / "scripts" / "kbench").rglob("*.py"), *(repo / "scripts").glob("*.py"),
                   *(repo / "rules").glob("*.smk"), repo / "Snakefile"])


def strings(text: str) -> list[tuple[int, str]]:
    """(line, source text) of every string literal but docstrings: a module's first string, and the first string
    of a def, class or rule block. Snakemake's files tokenize as Python does."""
    found, header, first, previous, skipping = [], [], True, None, False
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = token.type
        if kind in (tokenize.COMMENT, tokenize.NL):
            continue
        if kind == tokenize.STRING:
            if previous is None or skipping or (previous == tokenize.INDENT and header[:1] and header[0] in DOCUMENTED):
                skipping = True
            else:
                found.append((token.start[0], token.string))
        elif kind == tokenize.NEWLINE:
            skipping, first = False, True
        elif kind not in (tokenize.INDENT, tokenize.DEDENT):
            if first:
                header, first = [token.string], False
            skipping = False
        previous = kind
    return found


def hand_built(literal: str) -> bool:
    """A literal that spells a stack's lock: a .lock name built from a stack or an accelerator (an f-string's field, a
    rule's wildcard), or from any field under envs/; a <stack>.<accelerator>.lock name; a glob of locks; the suffix
    alone (in a field too: removesuffix('.lock')). Other lock files pass: a host's flock files
    (kbench-gpu-<uuid>.lock, .<file>.lock), a one-name scratch lock (exact.lock), the bootstrap and driver locks."""
    fields = FIELD.findall(literal)
    if any(hand_built(field) for field in fields):
        return True
    shown = FIELD.sub("\0", literal)
    names = re.findall(r"[^\s\"'(]*\.lock\b", shown)
    if names and any(re.search(r"stack|accelerator", field) for field in fields):
        return True
    for name in names:
        folder, _, file = name.rpartition("/")
        stem = file.removesuffix(".lock").removeprefix(".")
        if not stem or "*" in stem or "." in stem or ("\0" in stem and folder.endswith("envs")):
            return True
    return False


def hand_built_lock_paths(repo=REPO) -> list[str]:
    return [f"{path.relative_to(repo)}:{line}: {literal}" for path in sources(repo) if path != OWNER
            for line, literal in strings(path.read_text()) if hand_built(literal)]


def test_no_lock_path_is_spelled_outside_kbench_lockpaths():
    assert hand_built_lock_paths() == []


@pytest.mark.parametrize("literal", [
    'f"envs/{stack}.{accelerator}.lock"', '"envs/{stack}.{accelerator}.lock"', "f\"{self.stack}.{spec['accelerator']}.lock\"",
    'f".{accelerator}.lock"', '"*.lock"', 'f"*.{accelerator}.lock"', "'.lock'", '"envs/keras3-jax.cpu.lock"',
    "f\"{config['accelerator']}.lock\"", 'f"no envs/{unknown[0]}.lock"', "f\"lock-envs {lock.name.removesuffix('.lock')}\""])
def test_a_stacks_lock_spelled_by_hand_is_named(literal):
    assert hand_built(literal)


@pytest.mark.parametrize("literal", [
    '"/tmp/kbench-podman-build.lock"', "f\"kbench-gpu-{device['uuid']}.lock\"", 'f"/tmp/kbench-image-load-{runtime}.lock"',
    'f".{out.name}.lock"', '"exact.lock"', '"envs/bootstrap.lock"', '"kbench.lock_sha256"', 'f"{stack}.{accelerator}"'])
def test_other_lock_files_and_names_pass(literal):
    assert not hand_built(literal)


def test_docstrings_and_comments_are_not_read_but_every_other_string_is():
    text = ('"""envs/<stack>.<accelerator>.lock"""\n# f"{stack}.{accelerator}.lock"\n'
            'def f():\n    """envs/{stack}.{accelerator}.lock"""\n    return "a"\n'
            'rule r:\n    """doc"""\n    shell:\n        "first "\n        "second"\n')
    assert [literal for _, literal in strings(text)] == ['"a"', '"first "', '"second"']


def test_the_paths_and_the_globs(tmp_path):
    assert lockpaths.lock_path("keras3-jax", "gpu-cuda12") == REPO.joinpath("envs").relative_to(REPO) / \
        "keras3-jax.gpu-cuda12.lock"
    assert stacks.lock_path("{stack}", "{accelerator}", tmp_path) == tmp_path / "envs" / "{stack}.{accelerator}.lock"
    assert lockpaths.lock_id(tmp_path / "envs" / "paddle.gpu.lock") == "paddle.gpu"
    (tmp_path / "envs").mkdir()
    for name in ("paddle.gpu.lock", "paddle.cpu.lock", "synthetic.cpu.lock", "bootstrap.lock", "driver.lock",
                 "paddle.cpu.in"):
        (tmp_path / "envs" / name).write_text("")
    assert lockpaths.locks(tmp_path) == [("paddle", "cpu"), ("paddle", "gpu"), ("synthetic", "cpu")]
    assert lockpaths.locks(tmp_path, "cpu") == [("paddle", "cpu"), ("synthetic", "cpu")]
    assert all(lockpaths.lock_path(s, a, REPO).is_file() for s, a in lockpaths.locks(REPO))
    assert ("paddle", "gpu-cuda12") in lockpaths.locks(REPO)
