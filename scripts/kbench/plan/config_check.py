"""Every bad config gets one short message before any job: where (the file and line, or the key path), the bad value,
and what is allowed. No traceback, no schema dump.

check() runs in the Snakefile before the workflow is built: YAML syntax and emptiness (config.yaml), shapes (the JSON
schema, best error only, reworded), names and cross-references (kbench.plan.matrix.check_references), the paths config
names (results_dir), meaningless combinations (LoRA on a task without LoRA, a selection that runs no cell), and the
well-formedness of every lock the selected cells would build from (each requirement pinned with a sha256 hash).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import jsonschema
import yaml

from kbench import files
from kbench.machine.host import REPO
from kbench.plan import matrix
from kbench.stacks import lock_id, lock_path



class ConfigError(ValueError):
    """One line: where, what, what is allowed."""


def read_text(path: Path, expected: str) -> str:
    """A config or lock file's text, or a ConfigError naming it: missing, a folder, unreadable, empty, not text."""
    try:
        return files.read_text(path, expected)
    except files.BadFile as error:
        raise ConfigError(str(error)) from None


def load_yaml(path: Path) -> dict:
    """config.yaml as data, or a ConfigError naming the file and line (Snakemake's own message names neither)."""
    text = read_text(path, "expected the benchmark's config in YAML, like config.yaml in the repository")
    for number, line in enumerate(text.splitlines(), 1):
        if "\t" in line[:len(line) - len(line.lstrip())]:
            raise ConfigError(f"{path}, line {number}: a tab in the indentation; YAML indents with spaces only")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(error, 'problem', None) or error}") from error
    if data is None:
        raise ConfigError(f"{path}: empty; it must hold the benchmark's config (see the one in the repository)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {type(data).__name__} at the top; it must be a mapping of config keys")
    return data


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def schema_message(error: jsonschema.ValidationError) -> str:
    """The schema's best error as one line: the key path, the bad value (short), what is allowed."""
    key, value = _key(error.absolute_path), error.instance
    shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) <= 60 else f"a {type(value).__name__}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        where = f"config key {key}." if error.absolute_path else "config key "
        return (f"{where}{extra[0] if extra else '?'} is not a known key; allowed: {', '.join(allowed)}")
    if error.validator == "required":
        return f"config key {key}: {error.message}"
    if error.validator == "enum":
        return f"config key {key}: {shown} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    return f"config key {key}: {shown}: {error.message.split(' is ', 1)[-1] if ' is ' in error.message else error.message}"


def check_schema(config: dict, schema_path: Path) -> None:
    schema = yaml.safe_load(schema_path.read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(schema_message(error))


def check_paths(config: dict) -> None:
    results = config["results_dir"]
    if re.search(r"[{}]", results):
        raise ConfigError(f"config key results_dir: {results!r} has braces, which Snakemake reads as wildcards; "
                          "allowed: a plain path")
    path = Path(results)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"config key results_dir: {results!r} is a file; allowed: a folder (made if missing)")
    existing = next(p for p in [path, *path.absolute().parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise ConfigError(f"config key results_dir: {results!r} cannot be made ({existing} is not a writable "
                          "folder); allowed: a writable path")


def check_combinations(config: dict) -> None:
    for model, model_def in config["model_defs"].items():
        causal_lm = "generate" in model_def["tasks"]
        for task, task_def in model_def["tasks"].items():
            if "lora_rank" in task_def and not (causal_lm and task == "fit"):
                raise ConfigError(f"config key model_defs.{model}.tasks.{task}.lora_rank: LoRA applies to the fit "
                                  "of a causal LM (a model with a generate task) only; allowed: remove it")
    if not matrix.cells(config):
        raise ConfigError(
            f"the selection runs no cell: models {config['models']} at precisions {config['precisions']} (each "
            "model runs the selected precisions it lists: "
            + "; ".join(f"{m}: {', '.join(config['model_defs'][m]['precisions'])}" for m in config["models"])
            + "); allowed: a precision some selected model lists")


def check_jax_numpy(config: dict) -> None:
    """The JAX-against-NumPy study's names point at things that exist (kbench.studies.jax_numpy)."""
    study = config["jax_numpy"]
    if study["framework"] not in config["framework_defs"]:
        raise ConfigError(f"config key jax_numpy.framework: {study['framework']!r} is not a column; allowed: "
                          f"{', '.join(config['framework_defs'])}")
    for suite, entry in study["suites"].items():
        if suite not in config["suites"]:
            raise ConfigError(f"config key jax_numpy.suites.{suite}: not a suite; allowed: {', '.join(config['suites'])}")
        for workload in entry["sizes"]:
            if workload not in study["workloads"]:
                raise ConfigError(f"config key jax_numpy.suites.{suite}.sizes.{workload}: not in jax_numpy.workloads; "
                                  f"allowed: {', '.join(study['workloads'])}")


def check_first_step(config: dict) -> None:
    """Each eager twin pairs a compiled column with an uncompiled one (kbench.results.first_step_tables pays the
    compile back against it)."""
    defs = config["framework_defs"]
    for compiled, eager in config["first_step"]["eager_twin"].items():
        for name, wanted in ((compiled, True), (eager, False)):
            if name not in defs:
                raise ConfigError(f"config key first_step.eager_twin.{compiled}: {name!r} is not a column; allowed: "
                                  f"{', '.join(defs)}")
            if defs[name]["jit_compile"] is not wanted:
                raise ConfigError(f"config key first_step.eager_twin.{compiled}: {name!r} is "
                                  f"{'not ' if wanted else ''}compiled (framework_defs.{name}.jit_compile); allowed: "
                                  "a compiled column as the key, an uncompiled one as its value")


_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?==\S+")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def check_lock(lock: Path) -> None:
    """Every requirement of a lock pinned (name==version) with at least one well-formed sha256 hash: an edited hash
    line is named here, not GBs into an image build."""
    requirement, hashes, line_of = None, 0, 0

    def close():
        if requirement and not hashes:
            raise ConfigError(f"{lock}, line {line_of}: {requirement} has no --hash=sha256:<64 hex digits>; "
                              f"regenerate the lock (scripts/lock-envs {lock_id(lock)})")
    text = read_text(lock, "expected a hash-locked lock, as scripts/lock-envs writes them")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().removesuffix("\\").strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash"):
            if not _HASH.match(line):
                raise ConfigError(f"{lock}, line {number}: {line!r} is not --hash=sha256:<64 hex digits>; "
                                  f"regenerate the lock (scripts/lock-envs {lock_id(lock)})")
            hashes += 1
            continue
        close()
        if not _REQUIREMENT.match(line):
            raise ConfigError(f"{lock}, line {number}: {line!r} is not a pinned requirement (name==version); "
                              f"regenerate the lock (scripts/lock-envs {lock_id(lock)})")
        requirement, hashes, line_of = line.split()[0], 0, number
    close()


def check(config: dict, schema_path: Path, repo: Path = REPO) -> None:
    check_schema(config, schema_path)
    try:
        matrix.check_references(config, repo)
    except matrix.ConfigError as error:
        raise ConfigError(str(error)) from error
    check_paths(config)
    check_combinations(config)
    check_jax_numpy(config)
    check_first_step(config)
    for stack in sorted({matrix.stack_of(config, f) for f in config["frameworks"]}):
        check_lock(lock_path(stack, config["accelerator"], repo))
