"""What the Keras 3 and Keras 2 adapters do alike, written once and given the `keras` module (Keras 3) or `tf.keras`
(Keras 2): set-up, optimizers and losses, parameter counts, observed dtypes, and the fit and generate workloads.
Both versions run the same step kinds: one train_on_batch, one compiled forward call, one generate call."""
from __future__ import annotations

import numpy as np

from kbench.contract.spec import CellSpec
from kbench.contract import precision
from kbench.adapters import Workload, dtype_name


def prepare(keras, spec: CellSpec) -> dict:
    """The cell's dtype policy (process-global, so set on every build) and the weight-init seed."""
    # a fresh session: auto-numbered layer and weight names start again, so a model's weight paths are the same in
    # every process that builds it (the equivalence check's reference names its weights by them)
    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(precision.keras_policy(spec.dtypes))
    keras.utils.set_random_seed(spec.seed)
    return {}


def optimizer(keras, spec: CellSpec, kind: str):
    """kind: adamw | adam | sgd (momentum 0.9); the configured learning rate, the native cells' kinds."""
    learning_rate, o = spec.task_options["learning_rate"], spec.task_options["optimizers"][kind]
    built = {"adamw": lambda: keras.optimizers.AdamW(learning_rate=learning_rate, **o),
             "adam": lambda: keras.optimizers.Adam(learning_rate=learning_rate, **o),
             "sgd": lambda: keras.optimizers.SGD(learning_rate=learning_rate, **o)}[kind]()
    if spec.dtypes.loss_scaling:
        # Dynamic loss scaling: gradients of a float16 forward pass underflow without it. Keras 3's compile() would
        # wrap it too; doing it here makes both Keras versions do the same, visibly.
        built = keras.mixed_precision.LossScaleOptimizer(built)
    return built


def logits_ce(keras):
    """The classifiers' loss (BERT, Gemma, Mistral, ResNet-50); Keras losses compute in float32 under any policy."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def count(model) -> tuple[int, int]:
    """Parameters of the model the step trains or runs (LoRA fit: trainable counts the LoRA factors only)."""
    def size(weights):
        return int(sum(np.prod(w.shape) for w in weights))
    return size(model.weights), size(model.trainable_weights)


def dtypes(model) -> dict[str, str]:
    """What the model runs in: its variables' dtype and its dtype policy's compute dtype."""
    return {"weights": dtype_name(model.weights[0].dtype), "compute": dtype_name(model.compute_dtype)}


def compiled(function) -> bool:
    """Whether a step function is compiled: jax.jit (has .lower), tf.function with jit_compile, torch.compile (has
    _torchdynamo_orig_callable), looked for on the function and on what its closure holds (Keras and keras-hub
    wrap the compiled function in a plain one)."""
    def is_compiled(f) -> bool:
        return (hasattr(f, "lower") or bool(getattr(f, "_jit_compile", False))
                or hasattr(f, "_torchdynamo_orig_callable"))
    held = [c.cell_contents for c in (getattr(function, "__closure__", None) or ()) if _filled(c)]
    return function is not None and (is_compiled(function) or any(is_compiled(f) for f in held))


def _filled(closure_cell) -> bool:
    try:
        closure_cell.cell_contents
    except ValueError:          # an empty cell
        return False
    return True


def outputs_of(forward, name: str = "logits", select=None):
    """The equivalence check's view of a Keras forward (forward() -> the model's output in inference mode; a
    predict cell's own compiled step) as float32 NumPy, under `name` (select(raw) -> {name: array} where the
    output is a structure)."""
    def outputs() -> dict:
        raw = forward()
        found = select(raw) if select else {name: raw}
        return {k: np.asarray(_numpy(v), np.float32) for k, v in found.items()}
    return outputs


def _numpy(value):
    return value.numpy() if hasattr(value, "numpy") and not hasattr(value, "detach") else (
        value.detach().float().cpu().numpy() if hasattr(value, "detach") else np.asarray(value))


def workload(model, step, spec: CellSpec, evidence=dict, **extra) -> Workload:
    total, trainable = count(model)

    def observed() -> dict:
        found = evidence()
        lora = [w for w in model.trainable_weights if "lora" in getattr(w, "path", w.name)] if spec.task == "fit" else []
        if lora:
            found["lora_dtype"] = dtype_name(lora[0].dtype)
        return found
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=spec.batch_size,
                    dtypes=lambda: dtypes(model), evidence=observed, model=model, **extra)


def fit(keras, model, x, y, spec: CellSpec, optimizer, loss, to_device, sample_weight=None, output: str = "logits",
        evidence: dict | None = None) -> Workload:
    """One optimizer step per call: the base Model.train_on_batch, not fit() (whose per-call setup costs ~0.7 s on
    torch) and not keras-nlp 0.12.1's PipelineModel override (which fails on Keras 2 with dict inputs; with
    preprocessor=None it only adds the identity preprocessing). The step returns the loss."""
    # No metrics (keras-hub compiles accuracy by default): the native loop computes none, nor did the anchor.
    model.compile(optimizer=optimizer, loss=loss, metrics=None, weighted_metrics=None,
                  jit_compile=spec.settings["jit_compile"])
    x, y, sample_weight = to_device((x, y, sample_weight))
    logged = set()

    def step():
        logs = keras.Model.train_on_batch(model, x, y, sample_weight=sample_weight, return_dict=True)
        logged.update(logs)
        return logs["loss"]

    def observed() -> dict:     # what train_on_batch logged besides the loss: the metric work a step did
        # tf.keras 2 XLA-compiles its step inside a plain tf.function, in a function made anew on each call (no
        # closure holds it): there the model's own jit_compile decides, which compile() resolves to False where
        # XLA is unavailable.
        tf_keras = keras.Model.__module__.startswith("tf_keras")
        xla = bool(model.jit_compile) if tf_keras else compiled(model.train_function)
        return {"jit_compile": xla, "metrics": sorted(logged - {"loss"}), **(evidence or {})}
    return workload(model, step, spec, observed, outputs=outputs_of(lambda: model(x, training=False), output))


def generate(model, prompt, spec: CellSpec, to_device) -> Workload:
    """One greedy generate() call on the padded prompt (kbench.models.decoder.keras_prompt)."""
    x = to_device(prompt)
    model.compile(sampler="greedy", jit_compile=spec.settings["jit_compile"])
    p = spec.task_options["prompt_length"]

    def outputs() -> dict:      # the prompt's logits (a prefill) and the greedy tokens of one whole call
        prefill = {"token_ids": prompt["token_ids"][:, :p], "padding_mask": prompt["padding_mask"][:, :p]}
        return {"prefill_logits": np.asarray(_numpy(model(to_device(prefill), training=False)), np.float32),
                "tokens": np.asarray(model.generate(x, stop_token_ids=None)["token_ids"])[:, p:].astype(np.float32)}
    return workload(model, lambda: model.generate(x, stop_token_ids=None), spec,
                    lambda: {"jit_compile": compiled(model.generate_function)},
                    generated_tokens=generated_tokens(p), outputs=outputs)


def load_reference(workload: Workload, arrays, spec: CellSpec) -> dict:
    """The equivalence check's reference (Keras 3 weights, in their order) into a Keras model of the same weights:
    another Keras 3 backend, or Keras 2 where its model has the same weights in the same order."""
    from kbench.models import weights
    weights.assign_in_order(workload.model, arrays)
    return {}


def sam_masks(raw) -> dict:
    """A Keras SAM's outputs as segment-anything's multimask ones: its first mask and IoU (the single-mask output)
    left out."""
    return {"masks": raw["masks"][:, 1:], "iou": raw["iou_pred"][:, 1:]}


def bert_gelu(backbone) -> dict:
    """Which GELU a keras-hub / keras-nlp BERT's feed-forward runs, read from its first layer: keras-hub and keras-nlp
    always pass the tanh approximation (utils keras_utils.gelu_approximate)."""
    activation = backbone.transformer_layers[0]._feedforward_intermediate_dense.activation
    return {"gelu": "tanh" if "approximate" in getattr(activation, "__name__", "") else "exact"}


def check_dropout(spec: CellSpec) -> dict:
    """The equivalence check runs without dropout (each framework draws its own masks); the cells with the
    libraries' defaults."""
    return {"dropout": 0.0} if spec.equivalence else {}


def generated_tokens(prompt_length: int):
    """New tokens in a keras-hub/keras-nlp generate() output: the padding mask covers prompt and generated tokens."""
    def count_new(output) -> int:
        return int(np.asarray(output["padding_mask"]).sum()) - prompt_length * len(output["padding_mask"])
    return count_new
