"""Which cells exist: config -> (model x task x batch x precision x framework) for the chosen suite, each runnable
or n/a.

The JSON schema (schemas/config.schema.yaml) checks shapes and allowed values; this module checks what a schema
cannot: that names used in one section are defined in another.
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Cell:
    suite: str
    model: str
    task: str
    batch_size: int
    precision: str                        # a Keras dtype-policy name: float32, bfloat16, mixed_float16, mixed_bfloat16
    framework: str
    not_applicable: str | None = None     # the reason, when the framework cannot run this model/task

    @property
    def cell_id(self) -> str:
        return f"{self.suite}/{self.model}/{self.task}/bs{self.batch_size}/{self.precision}/{self.framework}"


def check_references(config: dict) -> None:
    def require(name: str, known, key: str) -> None:
        if name not in known:
            raise ConfigError(f"config key {key}: {name!r} is not defined; allowed: {', '.join(sorted(known))}")

    require(config["suite"], config["suites"], "suite")
    size = config["suites"][config["suite"]]["size"]
    for i, framework in enumerate(config["frameworks"]):
        require(framework, config["framework_defs"], f"frameworks[{i}] (see framework_defs)")
    for i, model in enumerate(config["models"]):
        require(model, config["model_defs"], f"models[{i}] (see model_defs)")
        require(size, config["model_defs"][model]["sizes"], f"model_defs.{model}.sizes (suite {config['suite']!r})")
    for i, rule in enumerate(config["not_applicable"]):
        require(rule["framework"], config["framework_defs"], f"not_applicable[{i}].framework")
        require(rule["model"], config["model_defs"], f"not_applicable[{i}].model")
    for i, claim in enumerate(config["precision_study"]["claims"]):
        require(claim["model"], config["model_defs"], f"precision_study.claims[{i}].model")
        require(claim["task"], config["model_defs"][claim["model"]]["tasks"], f"precision_study.claims[{i}].task")


def not_applicable_reason(config: dict, model: str, task: str, framework: str) -> str | None:
    for rule in config["not_applicable"]:
        if rule["framework"] == framework and rule["model"] == model and fnmatch(task, rule["task"]):
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
                for precision in precisions:
                    for framework in config["frameworks"]:
                        found.append(Cell(suite, model, task, batch_size, precision, framework,
                                          not_applicable_reason(config, model, task, framework)))
    return found


def stack_of(config: dict, framework: str) -> str:
    return config["framework_defs"][framework]["stack"]


def keras3_frameworks(config: dict) -> list[str]:
    return [f for f in config["frameworks"] if config["framework_defs"][f]["adapter"] == "keras3"]


def spec(config: dict, suite_name: str, model: str, task: str, batch_size: int, precision: str,
         framework: str) -> dict:
    """The resolved cell config: everything the cell process needs, and nothing about where it runs."""
    suite = config["suites"][suite_name]
    model_def = config["model_defs"][model]
    size_def = model_def["sizes"][suite["size"]]
    task_options = {k: v for k, v in model_def["tasks"][task].items() if k != "batch_sizes"}
    return {
        "cell_id": Cell(suite_name, model, task, batch_size, precision, framework).cell_id,
        "suite": suite_name,
        "size": suite["size"],
        "accelerator": config["accelerator"],
        "model": model,
        "task": task,
        "batch_size": batch_size,
        "framework": framework,
        "framework_def": config["framework_defs"][framework],
        "env": {**config["cell_env"], **config["framework_defs"][framework]["env"]},
        "precision": precision,
        "arch": size_def["arch"],
        "inputs": size_def["inputs"],
        "task_options": task_options,
        "steps": suite["steps"],
        "seed": config["seed"],
    }
