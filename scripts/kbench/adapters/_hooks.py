"""Backend hooks shared by the adapters: device sync, device name and peak device memory for jax, tensorflow and
torch, and installed package versions. An adapter picks the hooks of the compute backend it runs on."""
from __future__ import annotations

import importlib.metadata


def package_versions(names) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def jax_hooks() -> dict:
    import jax
    dev = jax.devices()[0]

    def peak():
        stats = dev.memory_stats() if dev.platform != "cpu" else None
        return stats.get("peak_bytes_in_use") if stats else None
    return {"sync": jax.block_until_ready,   # non-array leaves (python floats from train_on_batch) pass through
            "sync_name": "jax.block_until_ready",
            "device_name": lambda: dev.device_kind if dev.platform != "cpu" else "cpu",
            "peak_device_memory_bytes": peak}


def tf_hooks() -> dict:
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    # GPU kernels run asynchronously; on a CPU eager execution is synchronous unless switched off.
    if gpus or not tf.config.experimental.get_synchronous_execution():
        sync, sync_name = (lambda _: tf.test.experimental.sync_devices()), "tf.test.experimental.sync_devices"
    else:
        sync, sync_name = (lambda _: None), "none: TensorFlow runs synchronously on this CPU"
    return {"sync": sync, "sync_name": sync_name,
            "device_name": lambda: tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
            if gpus else "cpu",
            "peak_device_memory_bytes": lambda: tf.config.experimental.get_memory_info("GPU:0")["peak"]
            if gpus else None}


def torch_hooks() -> dict:
    import torch
    cuda = torch.cuda.is_available()
    return {"sync": (lambda _: torch.cuda.synchronize()) if cuda else (lambda _: None),
            "sync_name": "torch.cuda.synchronize" if cuda else "none: torch runs synchronously on a CPU",
            "device_name": lambda: torch.cuda.get_device_name(0) if cuda else "cpu",
            "peak_device_memory_bytes": lambda: torch.cuda.max_memory_allocated() if cuda else None}
