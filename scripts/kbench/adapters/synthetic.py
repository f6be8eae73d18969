"""A framework-free workload (a NumPy matmul) for checking the harness itself: launch, timing, failure paths.

spec["arch"]: {"matrix_size": N}; spec["task_options"].get("fault"): None | "raise" | "exit" | "abort" | "hang";
spec["task_options"].get("trainable"): how many of the 2*N*N parameters to report trainable (default all).
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np

from kbench.adapters import Backend, NotSupported, Workload


def backend() -> Backend:
    return Backend(name="numpy", sync=lambda _: None, device_name=lambda: "cpu",
                   peak_device_memory_bytes=lambda: None, package_versions=lambda: {"numpy": np.__version__})


def build(spec: dict) -> Workload:
    fault = spec["task_options"].get("fault")
    if spec["task"] == "generate":
        raise NotSupported("the synthetic workload has no generate task")
    if fault == "raise":
        raise RuntimeError("injected failure")
    if fault == "exit":
        os._exit(3)
    if fault == "abort":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        time.sleep(3600)
    n = spec["arch"]["matrix_size"]
    rng = np.random.default_rng(spec["seed"])
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    trainable = spec["task_options"].get("trainable", 2 * n * n)
    return Workload(step=lambda: a @ b, params_total=2 * n * n, params_trainable=trainable,
                    examples_per_step=spec["batch_size"])
