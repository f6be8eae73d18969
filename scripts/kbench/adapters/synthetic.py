"""A framework-free workload (a NumPy matmul) for checking the harness itself: launch, timing, failure paths.

spec["arch"]: {"matrix_size": N}; spec["task_options"].get("fault"): None | "raise" | "exit" | "abort" | "hang" |
"overflow" (a fit whose float16 loss overflows to inf, as an fp16 run without loss scaling can);
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
    scale = 1e6 if fault == "overflow" else 1.0     # float16's largest finite value is 65504

    def fit_step():     # a "loss" in float16, as a half-precision forward pass computes it
        return np.float16(np.square(a @ b).mean() * scale)
    return Workload(step=fit_step if spec["task"] == "fit" else lambda: a @ b, params_total=2 * n * n,
                    params_trainable=trainable, examples_per_step=spec["batch_size"])
