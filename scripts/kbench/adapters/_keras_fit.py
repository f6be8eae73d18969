"""The optimizer of a Keras fit, shared by the Keras 3 and Keras 2 adapters: the same kinds and hyperparameters as the
native PyTorch cells, and loss scaling for mixed_float16, the way Keras's mixed-precision guide does it."""
from __future__ import annotations

import numpy as np


def optimizer(keras, spec: dict, kind: str):
    """keras: the `keras` module (Keras 3) or `tf.keras` (Keras 2); kind: adamw | adam | sgd (momentum 0.9)."""
    learning_rate = spec["task_options"]["learning_rate"]
    built = {"adamw": lambda: keras.optimizers.AdamW(learning_rate=learning_rate),
             "adam": lambda: keras.optimizers.Adam(learning_rate=learning_rate),
             "sgd": lambda: keras.optimizers.SGD(learning_rate=learning_rate, momentum=0.9)}[kind]()
    if spec["precision"] == "mixed_float16":
        # Dynamic loss scaling: gradients of a float16 forward pass underflow without it. Keras 3's compile() would
        # wrap it too; doing it here makes both Keras versions do the same, visibly.
        built = keras.mixed_precision.LossScaleOptimizer(built)
    return built


def dtypes(model) -> dict[str, str]:
    """What the model runs in: its variables' dtype and its dtype policy's compute dtype (Keras 3 and tf.keras)."""
    from kbench.adapters import dtype_name
    return {"weights": dtype_name(model.weights[0].dtype), "compute": dtype_name(model.compute_dtype)}


def generated_tokens(prompt_length: int):
    """New tokens in a keras-hub/keras-nlp generate() output: the padding mask covers prompt and generated tokens."""
    def count(output) -> int:
        return int(np.asarray(output["padding_mask"]).sum()) - prompt_length * len(output["padding_mask"])
    return count
