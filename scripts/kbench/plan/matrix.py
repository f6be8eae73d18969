"""Which cells exist: config -> (profile x model x task x batch x precision x framework) for the chosen suite, each
runnable or n/a, and the resolved spec a cell process gets (its settings: the profile's, after the departures that
profile keeps).

The JSON schema (schemas/config.schema.yaml) checks shapes; this module checks names, in one place: that every name
used in one section is defined in another (or in kbench.precision), and that the files a name stands for exist (each
selected stack's lock, each adapter's module). Every message names the key, the bad value and what is allowed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from kbench import precision, records
from kbench.host import REPO

TASKS = ("fit", "predict", "generate")
GELU_MODELS = ("bert",)     # whose feed-forward GELU is a setting (settings.gelu)


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Cell:
    suite: str
    profile: str                          # a key of profile_defs: whose settings the cell runs with
    model: str
    task: str
    batch_size: int
    precision: str                        # a kbench.precision name: float32, bfloat16, mixed_float16, mixed_bfloat16
    framework: str
    not_applicable: str | None = None     # the reason, when the framework cannot run this model/task

    @property
    def cell_id(self) -> str:
        return (f"{self.suite}/{self.profile}/{self.model}/{self.task}/bs{self.batch_size}/{self.precision}/"
                f"{self.framework}")


def _require(name, known, key: str) -> None:
    if name not in known:
        raise ConfigError(f"config key {key}: {name!r} is not defined; allowed: {', '.join(map(str, sorted(known)))}")


def check_references(config: dict, repo: Path = REPO) -> None:
    if config["runtime"] not in ("auto", *records.PATHS):
        raise ConfigError(f"config key runtime: {config['runtime']!r} is not allowed; allowed: "
                          f"{', '.join(('auto', *records.PATHS))}")
    suites, frameworks, models = config["suites"], config["framework_defs"], config["model_defs"]
    _require(config["suite"], suites, "suite")
    size = suites[config["suite"]]["size"]
    for i, framework in enumerate(config["frameworks"]):
        _require(framework, frameworks, f"frameworks[{i}] (see framework_defs)")
    for i, model in enumerate(config["models"]):
        _require(model, models, f"models[{i}] (see model_defs)")
        _require(size, models[model]["sizes"], f"model_defs.{model}.sizes (suite {config['suite']!r})")
    for i, name in enumerate(config["precisions"]):
        _require(name, precision.PRECISIONS, f"precisions[{i}]")
    for model, model_def in models.items():
        for i, name in enumerate(model_def["precisions"]):
            _require(name, precision.PRECISIONS, f"model_defs.{model}.precisions[{i}]")
    _require(config["precision_study"]["baseline"], precision.PRECISIONS, "precision_study.baseline")
    adapters = sorted(p.stem for p in (repo / "scripts" / "kbench" / "adapters").glob("[!_]*.py"))
    for framework in config["frameworks"]:
        definition = frameworks[framework]
        _require(definition["adapter"], adapters, f"framework_defs.{framework}.adapter")
        lock = f"envs/{definition['stack']}.{config['accelerator']}.lock"
        if not (repo / lock).is_file():
            raise ConfigError(f"config key framework_defs.{framework}.stack: {definition['stack']!r} has no lock "
                              f"{lock} for accelerator {config['accelerator']!r}; stacks with one: "
                              f"{', '.join(stacks_with_lock(config['accelerator'], repo))}")
    for i, rule in enumerate(config["not_applicable"]):
        _require(rule["framework"], frameworks, f"not_applicable[{i}].framework")
        _require(rule["model"], models, f"not_applicable[{i}].model")
        tasks = models[rule["model"]]["tasks"]
        if not any(fnmatch(task, rule["task"]) for task in tasks):
            raise ConfigError(f"config key not_applicable[{i}].task: {rule['task']!r} matches no task of "
                              f"{rule['model']}; allowed: {', '.join(tasks)} or a pattern such as '*'")
        if "precision" in rule:
            _require(rule["precision"], models[rule["model"]]["precisions"], f"not_applicable[{i}].precision")
    for i, claim in enumerate(config["precision_study"]["claims"]):
        _require(claim.get("baseline", config["precision_study"]["baseline"]), precision.PRECISIONS,
                 f"precision_study.claims[{i}].baseline")
        _require(claim["model"], models, f"precision_study.claims[{i}].model")
        _require(claim["task"], models[claim["model"]]["tasks"], f"precision_study.claims[{i}].task")
    for i, profile in enumerate(config["profiles"]):
        _require(profile, config["profile_defs"], f"profiles[{i}] (see profile_defs)")
    _require(config["equivalence"]["reference"], frameworks, "equivalence.reference (see framework_defs)")
    for i, model in enumerate(config["equivalence"].get("models") or []):
        _require(model, models, f"equivalence.models[{i}]")
    for i, rule in enumerate(config["equivalence"]["differences"]):
        _check_patterns(rule, config, f"equivalence.differences[{i}]")
    for i, rule in enumerate(config["not_compilable"]):
        _check_patterns(rule, config, f"not_compilable[{i}]")
    for departure in config["departures"]:
        key = f"departures[{departure['id']}]"
        for profile in departure["kept_by"]:
            _require(profile, config["profile_defs"], f"{key}.kept_by")
        for j, rule in enumerate(departure.get("applies", [])):
            _check_patterns(rule, config, f"{key}.applies[{j}]")


def matches(pattern: str | None, name: str) -> bool:
    """A cell pattern: fnmatch, with "|" between alternatives; missing means every name."""
    return pattern is None or any(fnmatch(name, alternative) for alternative in pattern.split("|"))


def _check_patterns(rule: dict, config: dict, key: str) -> None:
    """A pattern that matches no defined name never applies: a typo would silently change nothing."""
    for field, known in (("framework", config["framework_defs"]), ("model", config["model_defs"]),
                         ("task", TASKS)):
        if not any(matches(rule.get(field), name) for name in known):
            raise ConfigError(f"config key {key}.{field}: {rule[field]!r} matches nothing; allowed: "
                              f"{', '.join(sorted(known))}, patterns such as '*' or 'a|b'")


def stacks_with_lock(accelerator: str, repo: Path = REPO) -> list[str]:
    return sorted(p.name.removesuffix(f".{accelerator}.lock") for p in (repo / "envs").glob(f"*.{accelerator}.lock"))


def not_applicable_reason(config: dict, model: str, task: str, framework: str,
                          precision_name: str | None = None) -> str | None:
    gpu_only = precision_name and precision.PRECISIONS[precision_name].gpu_only
    if gpu_only and config["accelerator"] == "cpu":
        return gpu_only
    for rule in config["not_applicable"]:
        if (rule["framework"] == framework and rule["model"] == model and fnmatch(task, rule["task"])
                and rule.get("precision", precision_name) == precision_name):
            return rule["reason"]
    return None


def cells(config: dict, suite: str | None = None) -> list[Cell]:
    """Every cell of `suite` (default: the configured one) for the selected models and frameworks."""
    suite = suite or config["suite"]
    check_references({**config, "suite": suite})
    found = []
    for model in config["models"]:
        model_def = config["model_defs"][model]
        precisions = [p for p in model_def["precisions"] if p in config["precisions"]]
        size_def = model_def["sizes"][config["suites"][suite]["size"]]
        for task, task_def in model_def["tasks"].items():
            for batch_size in size_def.get("batch_sizes", {}).get(task, task_def["batch_sizes"]):
                for name in precisions:
                    for framework in config["frameworks"]:
                        found.append(Cell(suite, "", model, task, batch_size, name, framework,
                                          not_applicable_reason(config, model, task, framework, name)))
    return [dataclasses.replace(c, profile=profile) for profile in config["profiles"] for c in found]


def repeats(config: dict, suite: str) -> int:
    """How many fresh processes run each cell: config `repeats`, else the suite's own."""
    return config["repeats"] or config["suites"][suite]["repeats"]


def stack_of(config: dict, framework: str) -> str:
    return config["framework_defs"][framework]["stack"]


def adapter_of(config: dict, framework: str) -> str:
    return config["framework_defs"][framework]["adapter"]


def keras3_frameworks(config: dict) -> list[str]:
    return [f for f in config["frameworks"] if adapter_of(config, f) == "keras3"]


def cell_env(config: dict, framework: str, cell_settings: dict) -> dict:
    """The cell process's environment: every cell's, the framework's, on a GPU the framework's GPU settings (memory
    policy, no silent CPU fall-back), and NVIDIA_TF32_OVERRIDE=0 where TF32 is off (it reaches cuBLAS and cuDNN
    before any framework loads; each framework's own switches are set in the cell)."""
    definition = config["framework_defs"][framework]
    gpu = definition.get("gpu_env", {}) if config["accelerator"] != "cpu" else {}
    tf32 = {"NVIDIA_TF32_OVERRIDE": "0"} if cell_settings["tf32"] == "off" else {}
    return {**config["cell_env"], **definition["env"], **gpu, **tf32}


def settings(config: dict, profile: str, model: str, task: str, framework: str) -> dict:
    """A cell's settings: config `settings` and its framework's jit_compile, then, in list order, every departure its
    profile keeps that applies to the cell; a cell its framework cannot compile runs uncompiled in any profile."""
    base = config["settings"]
    jit = config["framework_defs"][framework]["jit_compile"]
    resolved = {"tf32": base["tf32"], "warmup": base["warmup"], "sync_blocks": base["sync_blocks"], "jit_compile": jit}
    if "lora_rank" in config["model_defs"][model]["tasks"][task]:
        resolved["lora_dtype"] = base["lora_dtype"]
    if model in GELU_MODELS:
        resolved["gelu"] = base["gelu"]
    for departure in config["departures"]:
        if profile in departure["kept_by"]:
            for rule in departure.get("applies", []):
                if all(matches(rule.get(k), v) for k, v in (("framework", framework), ("model", model), ("task", task))):
                    resolved.update(rule.get("settings", {}))
    for rule in config["not_compilable"]:
        if all(matches(rule.get(k), v) for k, v in (("framework", framework), ("model", model), ("task", task))):
            resolved.update(jit_compile=False, not_compilable=rule["reason"])
    if adapter_of(config, framework) == "native_torch":      # where torch.compile goes (Keras compiles the step)
        resolved.setdefault("compile_site", base["compile_site"][task])
        if not resolved["jit_compile"]:
            resolved["compile_site"] = "none"
    else:
        resolved.pop("compile_site", None)
    return resolved


def spec(config: dict, suite_name: str, model: str, task: str, batch_size: int, precision_name: str,
         framework: str, profile: str = "strict") -> dict:
    """The resolved cell config: everything the cell process needs, and nothing about where it runs."""
    suite = config["suites"][suite_name]
    model_def = config["model_defs"][model]
    size_def = model_def["sizes"][suite["size"]]
    task_options = {k: v for k, v in model_def["tasks"][task].items() if k != "batch_sizes"}
    if task == "fit":
        task_options["optimizers"] = config["optimizers"]
    cell_settings = settings(config, profile, model, task, framework)
    if precision.PRECISIONS[precision_name].tf32:        # the precision is a TF32 mode: it sets it in every profile
        cell_settings["tf32"] = precision.PRECISIONS[precision_name].tf32
    return {
        "cell_id": Cell(suite_name, profile, model, task, batch_size, precision_name, framework).cell_id,
        "suite": suite_name,
        "profile": profile,
        "size": suite["size"],
        "accelerator": config["accelerator"],
        "model": model,
        "task": task,
        "batch_size": batch_size,
        "framework": framework,
        "framework_def": config["framework_defs"][framework],
        "settings": cell_settings,
        "env": cell_env(config, framework, cell_settings),
        "precision": precision_name,
        "dtypes": precision.dtypes(precision_name),      # what the adapters read: never the name
        "arch": size_def["arch"],
        "inputs": size_def["inputs"],
        "task_options": task_options,
        "steps": {"warmup": cell_settings["warmup"], "timed": suite["steps"]["timed"],
                  "blocks": cell_settings["sync_blocks"]},
        "seed": config["seed"],
    }


# ---------------------------------------------------------------- the equivalence check's jobs

def equivalence_models(config: dict) -> list[str]:
    """The selected models the equivalence check runs for: config equivalence.models where given, else every one."""
    chosen = config["equivalence"].get("models")
    return [m for m in config["models"] if chosen is None or m in chosen]


def equivalence_frameworks(config: dict, suite: str, profile: str, model: str) -> list[str]:
    """The selected columns that run at least one cell of the model (the reference column runs its own job)."""
    return [f for f in config["frameworks"]
            if any(c.model == model and c.framework == f and not c.not_applicable and c.profile == profile
                   for c in cells(config, suite))]


def equivalence_job(config: dict, suite: str, profile: str, model: str, framework: str,
                    reference: bool = False) -> dict:
    """What an equivalence job process gets (kbench.equivalence.check): a cell spec per task and precision of the model
    runnable in the column, float32 first; reference: this job makes the reference (weights and outputs) instead of
    comparing.

    One batch size per task, its first configured: the check compares functions, and its reference holds one set of
    outputs per task. float32 is the check's own precision (every column against the reference, every other
    precision against the column's float32): where the model's precisions lack it (Gemma and Mistral run bfloat16
    only), the job adds a float32 spec of each task, so the configured precisions show their accuracy cost."""
    settings = config["equivalence"]
    runnable = [c for c in cells(config, suite) if c.model == model and c.framework == framework
                and c.profile == profile and not c.not_applicable]
    batch = {}
    for c in runnable:
        batch.setdefault(c.task, c.batch_size)
    found = [c for c in runnable if c.batch_size == batch[c.task]]
    found += [Cell(suite, profile, model, task, size, "float32", framework) for task, size in batch.items()
              if not any(c.task == task and c.precision == "float32" for c in found)]
    found.sort(key=lambda c: (c.precision != "float32", c.task, c.precision))
    specs = [spec(config, suite, c.model, c.task, c.batch_size, c.precision, c.framework, profile) for c in found]
    name = "reference" if reference else framework
    return {"cell_id": f"{suite}/{profile}/equivalence/{model}/{name}", "job": "equivalence", "suite": suite,
            "profile": profile, "model": model, "framework": framework, "accelerator": config["accelerator"],
            "framework_def": config["framework_defs"][framework],
            "env": specs[0]["env"] if specs else cell_env(config, framework, config["settings"]),
            "cells": specs, "reference": None if reference else "reference",
            "fit_steps": settings["fit_steps"], "differences": settings["differences"], "seed": config["seed"]}
