"""Each adapter's packages, the one table of them: the distributions its cells record the versions of (a cell's
provenance), those of them its column cannot run without (the GPU check, kbench.gpucheck.check, skips a cell where
one does not import), and the module each imports as (the GPU-stack check, kbench.gpucheck.stacks, imports every
one a GPU lock pins inside its image). Imports no framework, nor anything else: the checks read it in the driver's
interpreter, the adapters in the cell's."""
from __future__ import annotations

# Per adapter (kbench/adapters/<adapter>.py), its distributions by pip's name, in the order its cells record them.
NATIVE_TORCH = ("torch", "torchvision", "transformers", "peft", "accelerate", "diffusers", "segment-anything")
KERAS3 = ("keras", "keras-hub", "keras-cv", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "torch")
KERAS2 = ("tensorflow", "tf-keras", "keras-nlp", "keras-cv")
PADDLE = ("paddlepaddle", "paddlepaddle-gpu", "paddlenlp", "ppdiffusers")
SYNTHETIC = ("numpy",)
PACKAGES = {"native_torch": NATIVE_TORCH, "keras3": KERAS3, "keras2": KERAS2, "paddle": PADDLE,
            "synthetic": SYNTHETIC}
# Of those, what the column cannot run without (an adapter not named here: nothing the GPU check looks for), and
# what a Keras 3 column needs for its backend besides (framework_defs.<fw>.env.KERAS_BACKEND).
REQUIRED = {"native_torch": ("torch", "transformers", "peft"), "keras3": ("keras", "keras-hub"),
            "keras2": ("tensorflow", "tf-keras", "keras-nlp"), "synthetic": ("numpy",)}
BACKEND_REQUIRED = {"jax": ("jax",), "torch": ("torch",), "tensorflow": ("tensorflow",)}
# The module a distribution imports as, where the two names differ.
MODULE = {"keras-hub": "keras_hub", "keras-cv": "keras_cv", "keras-nlp": "keras_nlp", "tf-keras": "tf_keras",
          "segment-anything": "segment_anything", "tensorflow-cpu": "tensorflow", "paddlepaddle": "paddle",
          "paddlepaddle-gpu": "paddle"}


def module(distribution: str) -> str:
    return MODULE.get(distribution, distribution)


def required_modules(adapter: str, keras_backend: str | None = None) -> tuple[str, ...]:
    """The modules a column of this adapter (and Keras backend) cannot run without."""
    return tuple(module(d) for d in REQUIRED.get(adapter, ()) + BACKEND_REQUIRED.get(keras_backend, ()))


def modules() -> dict[str, str]:
    """distribution -> module, every adapter's, each distribution once, in the order of PACKAGES."""
    return {d: module(d) for packages in PACKAGES.values() for d in packages}
