"""One adapter per framework family. An adapter answers one question: how does this framework build this
model and run one step of this task. It never times and never writes files (kbench.timing and kbench.runner do)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


class NotSupported(Exception):
    """The framework cannot run this model/task; the cell is reported as 'unsupported' with this reason."""


@dataclass
class Workload:
    step: Callable[[], Any]            # one benchmark step (train step, forward pass, generate call, denoising step);
    #                                    a train step returns its loss as a scalar that float() reads
    params_total: int
    params_trainable: int
    examples_per_step: int             # batch size as seen by the step
    tokens_per_step: int = 0           # generated tokens per step (generate tasks only)


@dataclass
class Backend:
    """Framework-level hooks shared by every model of a family."""
    name: str                          # the compute backend as results name it: jax, tensorflow, torch, numpy
    sync: Callable[[Any], None]        # block until the device finished the work behind a step's output
    device_name: Callable[[], str]
    peak_device_memory_bytes: Callable[[], int | None]
    package_versions: Callable[[], dict[str, str]]


def load(adapter_name: str):
    """Import kbench.adapters.<name>; it provides backend() -> Backend and build(spec) -> Workload."""
    return importlib.import_module(f"kbench.adapters.{adapter_name.replace('-', '_')}")
