"""The one table of model families: what each benchmarked model is, registered by its own module
(kbench/models/<family>.py) and refused at import where a fact is missing, so no stage falls back silently.

A family module ends with `FAMILY = family.register(...)`, giving every fact in REQUIRED:

    name                   the model's name in config.yaml (model_defs.<name>)
    about                  one line: what it is, after which published model
    tasks                  the tasks it has a step for (fit, predict, generate)
    libraries              {library: arch -> that library's constructor arguments} (keras-hub, transformers, ...)
    inputs                 {task: (spec, rng) -> {name: array}}: the cell's inputs, drawn once in the Keras layout;
                           every column runs on them (kbench.adapters.build draws them, the builders convert)
    flops                  {task: (spec, tally) -> None}: the model FLOPs of one step (kbench.models.tally)
    contraction_and_depth  spec -> (K, D): the longest contraction and the products in sequence, which set the
                           equivalence check's float32 tolerance
    example                {task: what one example of the step is} (the throughput table's unit)

and where it has them: `layouts` (the module of its weight mappings onto the other columns,
kbench.models.mappings.<module>: MAPPINGS, DERIVED, KERAS2_ORDER), `networks` (adapter -> the network a column
builds under the name, where libraries differ). Pure Python: no framework is imported here.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Callable, Mapping

REQUIRED = ("name", "about", "tasks", "libraries", "inputs", "flops", "contraction_and_depth", "example")
PER_TASK = ("inputs", "flops", "example")


class MissingFact(Exception):
    """A family module that leaves out a fact every stage needs."""


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    about: str
    tasks: tuple[str, ...]
    libraries: Mapping[str, Callable[[dict], dict]]
    inputs: Mapping[str, Callable]
    flops: Mapping[str, Callable]
    contraction_and_depth: Callable[[dict], tuple[int, int]]
    example: Mapping[str, str]
    layouts: ModuleType | None = None
    networks: Callable[[str | None], str] | None = field(default=None)

    def draw(self, spec, rng) -> dict:
        """The cell's inputs, from its rng, in the Keras layout."""
        return self.inputs[spec.task](spec, rng)

    def network(self, adapter: str | None) -> str:
        """The network a column builds under the model's name (ResNet-50: v1 or v1.5), else the model's name."""
        return self.networks(adapter) if self.networks else self.name


def register(**facts) -> Family:
    """The family, once every fact in REQUIRED is given (and every per-task fact names every task)."""
    name = facts.get("name") or "(unnamed)"
    for fact in REQUIRED:
        if not facts.get(fact):
            raise MissingFact(f"model family {name!r} is missing the fact {fact!r} (every family gives: "
                              f"{', '.join(REQUIRED)})")
    for fact in PER_TASK:
        for task in facts["tasks"]:
            if task not in facts[fact]:
                raise MissingFact(f"model family {name!r} is missing the fact {fact!r} for its task {task!r}")
    frozen = {k: MappingProxyType(dict(v)) if isinstance(v, dict) else v for k, v in facts.items()}
    return Family(**{**frozen, "tasks": tuple(facts["tasks"])})


_FAMILIES: dict[str, Family] = {}


def families() -> dict[str, Family]:
    """Every registered family by name: each module of kbench.models that defines FAMILY (found, not listed)."""
    if not _FAMILIES:
        for module in family_modules():
            found = importlib.import_module(module).FAMILY
            _FAMILIES[found.name] = found
    return _FAMILIES


def family_modules() -> list[str]:
    """The modules of kbench.models that register a family (read from their source: `FAMILY = ` at the top)."""
    from kbench import models
    found = []
    for info in pkgutil.iter_modules(models.__path__):
        path = f"{models.__path__[0]}/{info.name}.py"
        if not info.ispkg and "\nFAMILY = " in open(path).read():
            found.append(f"kbench.models.{info.name}")
    return sorted(found)


def of(model: str) -> Family:
    """The family of a model, or a ValueError naming it and the registered ones."""
    try:
        return families()[model]
    except KeyError:
        raise ValueError(f"model {model!r} has no family module (kbench/models/<family>.py); registered: "
                         f"{', '.join(sorted(families()))}") from None


def known(model: str, task: str) -> bool:
    return model in families() and task in families()[model].tasks
