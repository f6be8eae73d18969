"""Keras 3 adapter (keras + keras-hub + keras-cv; ResNet-50 from keras.applications), one module for the jax,
tensorflow and torch backends.

The backend is chosen by KERAS_BACKEND before keras is imported (framework_defs.<fw>.env). Models follow the anchor
(keras-benchmarks v0.0.5), built from config with random weights; each model's family module (kbench.models.<family>)
gives the constructor kwargs and draws the inputs.
A step is exactly one Keras call: train_on_batch, one compiled forward call, or one generate call.
"""
from __future__ import annotations

from kbench.contract.spec import CellSpec
from kbench.models import bert, decoder, gemma, llama, mistral, resnet50, sam
from kbench.adapters import Backend, _hooks, _keras, for_tasks

from kbench.adapters._packages import KERAS3 as _PACKAGES


def backend() -> Backend:
    import keras      # before TensorFlow: torch imported after TensorFlow segfaults (seen with torch 2.13, TF 2.21)
    name = keras.backend.backend()
    # TensorFlow shows up on every backend (keras-hub imports tensorflow-text): off the GPUs unless it is measured.
    hidden = name != "tensorflow" and _hooks.hide_gpus_from_tensorflow()
    hooks = {"jax": _hooks.jax_hooks, "tensorflow": _hooks.tf_hooks, "torch": _hooks.torch_hooks}[name]()
    return Backend(name=name, package_versions=lambda: _hooks.package_versions(_PACKAGES),
                   memory_policy={"tensorflow_hidden_from_gpus": hidden}, **hooks)


def prepare(spec: CellSpec) -> dict:
    import keras
    return _keras.prepare(keras, spec)


def load_reference(workload, arrays, spec: CellSpec) -> dict:
    """The reference's own weights, by path: every Keras 3 backend builds the same weights with the same paths (a
    session cleared per build), but not always in the same order (keras-hub's ViTDetBackbone makes its neck before
    its functional graph, vit_det_backbone.py: JAX lists the neck's weights first, torch after the graph's)."""
    from kbench.models import weights
    by_path = dict(arrays)
    paths = [weights.weight_path(w) for w in workload.model.weights]
    if len(by_path) != len(arrays) or sorted(paths) != sorted(by_path):
        raise ValueError(f"the model's weight paths are not the reference's: "
                         f"{sorted(set(paths) ^ set(by_path))[:5]}")
    return _keras.load_reference(workload, [(path, by_path[path]) for path in paths], spec)


# ---------------------------------------------------------------- models

def _bert(spec, inputs):
    import keras
    import keras_hub
    dropout = _keras.check_dropout(spec)
    backbone = keras_hub.models.BertBackbone(**bert.keras_hub_kwargs(spec.arch), **dropout)
    # compile=False: a keras-hub task compiles itself with accuracy, and a later compile(metrics=None) does not
    # remove it (Keras keeps tracking the first compile's metrics): the step would compute accuracy every time
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=spec.arch["num_classes"], preprocessor=None,
                                                compile=False, **dropout)
    x, y = inputs["x"], inputs["labels"]
    if spec.task == "predict":
        return _predict(model, x, spec, evidence=_keras.bert_gelu(backbone))
    return _keras.fit(keras, model, x, y, spec, _keras.optimizer(keras, spec, "adamw"), _keras.logits_ce(keras),
                      _to_device, evidence=_keras.bert_gelu(backbone))


def _resnet50(spec, inputs):
    import keras
    model = keras.applications.ResNet50(**resnet50.keras_applications_kwargs(spec.arch))
    return _keras.fit(keras, model, inputs["images"], inputs["labels"], spec, _keras.optimizer(keras, spec, "sgd"), _keras.logits_ce(keras),
                      _to_device)


def _causal_lm(cls_name: str, kwargs):
    """The builder of a keras-hub causal LM: the task class's name in keras_hub.models, the family's kwargs."""
    return for_tasks(lambda spec, inputs: _causal_lm_cell(spec, inputs, cls_name, kwargs), "fit", "generate")


def _causal_lm_cell(spec, inputs, cls_name, kwargs):
    import keras
    import keras_hub
    cls = getattr(keras_hub.models, cls_name)
    backbone = cls.backbone_cls(**kwargs(spec.arch))
    model = cls(backbone, preprocessor=None, compile=False)     # no default metrics (see _bert)
    if spec.task == "generate":
        return _keras.generate(model, decoder.keras_prompt(spec, inputs["prompt"]), spec, _to_device)
    backbone.enable_lora(rank=spec.task_options["lora_rank"])   # freezes everything but the LoRA factors
    x, y, sample_weight = inputs["x"], inputs["targets"], inputs["sample_weight"]
    return _keras.fit(keras, model, x, y, spec, _keras.optimizer(keras, spec, "adamw"), _keras.logits_ce(keras),
                      _to_device, sample_weight=sample_weight)


def _sam(spec, inputs):
    import keras
    import keras_hub
    kw = sam.keras_hub_kwargs(spec.arch)
    image_encoder = keras_hub.models.ViTDetBackbone(**kw["image_encoder"])
    images = inputs["images"]
    if spec.task == "fit":   # the anchor trains the image encoder alone against a random embedding
        return _keras.fit(keras, image_encoder, images, inputs["target"], spec,
                          _keras.optimizer(keras, spec, "adam"), keras.losses.MeanSquaredError(), _to_device,
                          output="image_embedding")
    backbone = keras_hub.models.SAMBackbone(
        image_encoder=image_encoder,
        prompt_encoder=keras_hub.layers.SAMPromptEncoder(**kw["prompt_encoder"]),
        mask_decoder=keras_hub.layers.SAMMaskDecoder(**kw["mask_decoder"]))
    model = keras_hub.models.SAMImageSegmenter(backbone, preprocessor=None)
    return _predict(model, sam.keras_prompts(spec, images, inputs["points"]), spec, select=_keras.sam_masks)


def _stable_diffusion(spec, inputs):
    from kbench.adapters import _keras_sd
    return _keras_sd.build(spec, inputs, _predict, _to_device)


MODELS = {"bert": for_tasks(_bert, "fit", "predict"), "gemma": _causal_lm("GemmaCausalLM", gemma.keras_hub_kwargs),
          "mistral": _causal_lm("MistralCausalLM", mistral.keras_hub_kwargs),
          "llama": _causal_lm("Llama3CausalLM", llama.keras_hub_kwargs), "sam": for_tasks(_sam, "fit", "predict"),
          "stable_diffusion": for_tasks(_stable_diffusion, "fit", "predict"), "resnet50": {"fit": _resnet50}}


# ---------------------------------------------------------------- the forward step

def _predict(model, x, spec, output="logits", select=None, evidence=None):
    x = _to_device(x)
    forward = _compiled_forward(model, x, spec.settings["jit_compile"])
    # the outputs read the model's weights as they are then (the step, on JAX, holds those of its build)
    current = _compiled_forward(model, x, spec.settings["jit_compile"], live=True)
    return _keras.workload(model, forward, spec, lambda: {"jit_compile": _keras.compiled(forward), **(evidence or {})},
                           outputs=_keras.outputs_of(current, output, select))


def _compiled_forward(model, x, jit, live=False):
    """model(x, training=False) as Keras's predict_step runs it (jax.jit / tf.function(jit_compile) / torch no_grad),
    called directly: predict_on_batch would add per call a copy of the outputs to host numpy and, on jax, a
    re-assignment of every model variable (and it fails on SAMImageSegmenter: 'tuple' has no attribute 'copy').
    On JAX the weights are taken once, at build (live: at each call, for the equivalence check's outputs)."""
    import keras
    name = keras.backend.backend()
    if name == "jax":
        import jax

        def state():
            return [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]

        def forward(tv, ntv, x):
            return model.stateless_call(tv, ntv, x, training=False)[0]
        forward = jax.jit(forward) if jit else forward
        if live:
            return lambda: forward(*state(), x)
        tv, ntv = state()
        return lambda: forward(tv, ntv, x)
    if name == "tensorflow":
        import tensorflow as tf
        forward = tf.function(lambda x: model(x, training=False), jit_compile=jit)   # graph mode even without XLA
        return lambda: forward(x)
    import torch

    def forward():
        with torch.no_grad():
            return model(x, training=False)
    return torch.compile(forward) if jit else forward


def _to_device(tree):
    """Backend tensors made once in build(), so no step pays a host-to-device copy of its batch."""
    import keras
    tree = keras.tree.map_structure(lambda a: None if a is None else keras.ops.convert_to_tensor(a), tree)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf   # TF creates constants on the host; an eager identity places them on the default GPU
        tree = keras.tree.map_structure(lambda a: None if a is None else tf.identity(a), tree)
    return tree
