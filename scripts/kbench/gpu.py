"""The cell's GPU as the driver sees it, through NVML (nvidia-ml-py, in every stack's lock): which device (index,
UUID, name), the driver and the CUDA version it supports, and the device memory in use. Everything is None where NVML
is absent (a CPU cell, a host without the NVIDIA driver).

The cell's GPU is the first of CUDA_VISIBLE_DEVICES (an index or a UUID), else NVML's device 0: inside a container
that was handed one GPU (podman CDI, docker --gpus device=...) NVML sees only that one.
"""
from __future__ import annotations

import os


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:       # no bindings, no driver library, no device: nothing to report
        return None


def _handle(nvml):
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    if first.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(first)
    return nvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def facts() -> dict | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        handle = _handle(nvml)
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        return {"index": nvml.nvmlDeviceGetIndex(handle), "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                "name": _text(nvml.nvmlDeviceGetName(handle)),
                "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                "devices_seen": nvml.nvmlDeviceGetCount(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    except Exception as error:      # a driver/library mismatch is worth recording, not worth failing the cell for
        return {"error": f"{type(error).__name__}: {error}"}


def used_bytes() -> int | None:
    """Device memory in use on the cell's GPU (all processes: with one cell per GPU, the cell's own and the
    driver's context)."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(_handle(nvml)).used)
    except Exception:
        return None
