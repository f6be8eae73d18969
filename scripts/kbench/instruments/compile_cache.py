"""The one place that knows each framework's persistent compile cache: what switches it on, where it lives, and
whether a cell has one (a compiled cell of a framework that keeps its compiled programs across processes).

A cell's cache is a folder the launcher hands its process (kbench.run.launch): empty for a cold run, the folder its
process fills is then kept beside its record (`<cell>.r1.cache/`); a warm run (the cell's warm twin, a later repeat,
an equivalence job) gets a fresh copy of the cold runs' folders, so no run writes into another's. The record says which
(`first_step.cache`). The key is the record: a cache is only reused by a run of the same stack image and lock, on the
same kind of device (`refusal` below: the frameworks' own keys hold the device, so a cache from another GPU model
would miss silently while the record said warm, or, TensorFlow's, load code built for another architecture), so a
lock bump, or a node of another GPU model on a mixed SLURM partition, starts cold.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kbench.contract import cell
from kbench.machine import host

CACHE_SUFFIX = ".cache"          # beside a record: <stem>.cache/ (the launcher moves result.cache there)
STAGED = "result" + CACHE_SUFFIX  # in the process's staging folder


@dataclass(frozen=True)
class Cache:
    compiler: str                       # what fills it
    env: Callable[[str], dict]          # the variables that point the framework at a folder, set before its import
    docs: str                           # where the framework documents them


def _tf_flags(folder: str) -> dict:
    return {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={folder}"}


CACHES = {
    # every compile persisted: the defaults keep only compiles over 1 s, which on a CPU drops most of a step's
    "jax": Cache("XLA (JAX)", lambda folder: {"JAX_COMPILATION_CACHE_DIR": folder,
                                              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                                              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"},
                 "https://docs.jax.dev/en/latest/persistent_compilation_cache.html"),
    # Inductor's FX graph cache and AOTAutograd's cache (on by default in torch 2.13; set so a record says so), the
    # generated code and Triton's kernels all under one folder
    "torch": Cache("Inductor (torch.compile)", lambda folder: {"TORCHINDUCTOR_CACHE_DIR": folder,
                                                               "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
                                                               "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
                                                               "TRITON_CACHE_DIR": f"{folder}/triton"},
                   "https://docs.pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html"),
    "tensorflow": Cache("XLA (TensorFlow, jit_compile)", _tf_flags,
                        "https://openxla.org/xla/persisted_autotuning and TensorFlow's "
                        "tensorflow/compiler/jit/flags.cc (tf_xla_persistent_cache_directory)"),
    # the synthetic stack's stand-in (kbench.adapters.synthetic): a file per compiled shape
    "synthetic": Cache("synthetic", lambda folder: {"KBENCH_SYNTHETIC_CACHE_DIR": folder}, "kbench.adapters.synthetic"),
}
# Frameworks that compile but keep nothing across processes, and why (the record says it instead of a cache)
NO_CACHE = {"paddle": "paddle.jit.to_static (SOT) keeps its translations in the process: Paddle has no persistent "
                      "cache of them"}
# The compiler each adapter's cells run (Keras 3: its backend)
_ADAPTER_COMPILER = {"native_torch": "torch", "keras2": "tensorflow", "paddle": "paddle", "synthetic": "synthetic"}


def compiler(framework_def, env=None) -> str | None:
    """The framework whose compiler a column runs (its framework_def and env, a spec's or a job's): torch, jax,
    tensorflow, paddle or synthetic."""
    return _ADAPTER_COMPILER.get(framework_def["adapter"]) or (env or {}).get("KERAS_BACKEND")


def has_cache(spec) -> bool:
    """Whether a cell compiles into a persistent cache: compiled (its settings say so) by a framework with one."""
    return bool(spec.settings.get("jit_compile")) and compiler(spec.framework_def, spec.env) in CACHES


def why_none(spec) -> str:
    """Why a cell has no persistent cache."""
    if not spec.settings.get("jit_compile"):
        return "not compiled"
    found = compiler(spec.framework_def, spec.env)
    return NO_CACHE.get(found, f"{found}: no persistent compile cache known here")


def env(framework_def, own_env, folder: str) -> dict:
    """The variables that point a column's framework at `folder` (after any TF_XLA_FLAGS its own env sets); {} for a
    framework without a cache."""
    found = compiler(framework_def, own_env)
    if found not in CACHES:
        return {}
    variables = CACHES[found].env(folder)
    if "TF_XLA_FLAGS" in variables and (own_env or {}).get("TF_XLA_FLAGS"):
        variables["TF_XLA_FLAGS"] = f"{own_env['TF_XLA_FLAGS']} {variables['TF_XLA_FLAGS']}"
    return variables


def beside(record: str | os.PathLike) -> Path:
    """Where a cold run's cache is kept: beside its record (x.r1.json -> x.r1.cache)."""
    return cell.beside(record, STAGED)


def entries(folder: str | os.PathLike | None) -> int | None:
    """Files in a cache folder (None: no folder)."""
    if folder is None or not Path(folder).is_dir():
        return None
    return sum(len(names) for _, _, names in os.walk(folder))


def device_key(device: dict | None) -> str:
    """The device a cache's programs were compiled for, as the refusal compares it: a GPU's model as nvidia-smi names
    it (its memory is in the name: A100-SXM4-40GB and -80GB differ) and whether it is a MIG instance; on a CPU, the
    CPU's model (XLA and Inductor generate code for its instruction set). device: the leased GPU's facts
    (kbench.gpu.preflight.gpus), None for a CPU cell."""
    if device is None:
        return f"cpu: {host.cpu_model()}"
    mig = str(device.get("uuid", "")).startswith("MIG-") or device.get("mig")
    return f"gpu: {device.get('name') or 'unknown'}" + (" (MIG instance)" if mig else "")


def refusal(source: dict, own: dict) -> str | None:
    """Why a cache a source record's run filled must not seed this run (None: it may): another image, another lock,
    another kind of device (or one not known), or a source that did not finish ok. source, own: {"status",
    "lock_sha256", "image_id", "device"} of each run (device: device_key)."""
    if source.get("status") != "ok":
        return f"its source run ended {source.get('status')}"
    for key, name in (("lock_sha256", "lock"), ("image_id", "image")):
        if source.get(key) != own.get(key):
            return f"its source ran in another {name} ({source.get(key)} here {own.get(key)})"
    if not source.get("device") or not own.get("device") or "unknown" in (source["device"] + own["device"]):
        return f"the device it was compiled for is not known ({source.get('device')} here {own.get('device')})"
    if source["device"] != own["device"]:
        return f"its source ran on another device ({source['device']} here {own['device']})"
    return None
