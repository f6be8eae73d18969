"""Keras 2 adapter: tf.keras from tf-keras (TF_USE_LEGACY_KERAS=1, framework_defs.keras2.env), keras-nlp 0.12.1 (BERT,
Mistral), keras-cv 0.9.0 (SAM, StableDiffusion v1.4), the newest releases with a Keras 2 path, and
tf.keras.applications (ResNet-50). The cell's precision is a tf.keras mixed-precision policy.

Same models, inputs and step kinds as the Keras 3 adapter (kbench.adapters._keras): one train_on_batch, one
tf.function(jit_compile) forward call, or one generate call. What Keras 2 cannot run is n/a in config.yaml (Gemma);
what it runs wrongly is caught by the runner (enable_lora leaves nothing trainable on Keras 2).
"""
from __future__ import annotations

import os

from kbench.contract.spec import CellSpec
from kbench.models import bert, decoder, mistral, resnet50, sam
from kbench.adapters import Backend, _hooks, _keras, for_tasks

from kbench.adapters._packages import KERAS2 as _PACKAGES


def backend() -> Backend:
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise RuntimeError("keras2 adapter needs TF_USE_LEGACY_KERAS=1 (else tf.keras is Keras 3)")
    return Backend(name="tensorflow", package_versions=lambda: _hooks.package_versions(_PACKAGES),
                   **_hooks.tf_hooks())


def prepare(spec: CellSpec) -> dict:
    import tensorflow as tf
    return _keras.prepare(tf.keras, spec)


def load_reference(workload, arrays, spec: CellSpec) -> dict:
    """Keras 3's weights into keras-nlp's and keras-cv's Keras 2 models: the same order and shapes for BERT, ResNet-50
    and Stable Diffusion; SAM's encoders list theirs in another order (kbench.models.mappings: KERAS2_ORDER)."""
    from kbench.models import mappings
    order = mappings.keras2_order(spec.model, spec.task)
    return _keras.load_reference(workload, order(arrays, workload.model) if order else arrays, spec)


# ---------------------------------------------------------------- models

def _bert(spec, inputs):
    import keras_nlp
    import tensorflow as tf
    dropout = _keras.check_dropout(spec)
    backbone = keras_nlp.models.BertBackbone(**bert.keras_hub_kwargs(spec.arch), **dropout)
    model = keras_nlp.models.BertClassifier(backbone, num_classes=spec.arch["num_classes"], preprocessor=None,
                                            **dropout)
    x, y = inputs["x"], inputs["labels"]
    if spec.task == "predict":
        return _predict(model, x, spec, evidence=_keras.bert_gelu(backbone))
    return _keras.fit(tf.keras, model, x, y, spec, _keras.optimizer(tf.keras, spec, "adamw"),
                      _keras.logits_ce(tf.keras), _to_device, evidence=_keras.bert_gelu(backbone))


def _resnet50(spec, inputs):
    import tensorflow as tf
    model = tf.keras.applications.ResNet50(**resnet50.keras_applications_kwargs(spec.arch))
    return _keras.fit(tf.keras, model, inputs["images"], inputs["labels"], spec, _keras.optimizer(tf.keras, spec, "sgd"),
                      _keras.logits_ce(tf.keras), _to_device)


def _mistral(spec, inputs):
    import keras_nlp
    import tensorflow as tf
    backbone = keras_nlp.models.MistralBackbone(**mistral.keras_hub_kwargs(spec.arch))
    model = keras_nlp.models.MistralCausalLM(backbone, preprocessor=None)
    if spec.task == "generate":
        return _keras.generate(model, decoder.keras_prompt(spec, inputs["prompt"]), spec, _to_device)
    backbone.enable_lora(rank=spec.task_options["lora_rank"])
    x, y, sample_weight = inputs["x"], inputs["targets"], inputs["sample_weight"]
    return _keras.fit(tf.keras, model, x, y, spec, _keras.optimizer(tf.keras, spec, "adamw"),
                      _keras.logits_ce(tf.keras), _to_device, sample_weight=sample_weight)


def _sam(spec, inputs):
    import tensorflow as tf
    from keras_cv.src.models import ViTDetBackbone
    from keras_cv.src.models.segmentation.segment_anything import (SAMMaskDecoder, SAMPromptEncoder,
                                                                   SegmentAnythingModel, TwoWayTransformer)
    kw = sam.keras_cv_kwargs(spec.arch)
    image_encoder = ViTDetBackbone(**kw["image_encoder"])
    images = inputs["images"]
    if spec.task == "fit":   # the anchor trains the image encoder alone against a random embedding
        return _keras.fit(tf.keras, image_encoder, images, inputs["target"], spec,
                          _keras.optimizer(tf.keras, spec, "adam"), tf.keras.losses.MeanSquaredError(), _to_device,
                          output="image_embedding")
    model = SegmentAnythingModel(
        backbone=image_encoder, prompt_encoder=SAMPromptEncoder(**kw["prompt_encoder"]),
        mask_decoder=SAMMaskDecoder(**kw["mask_decoder"], transformer=TwoWayTransformer(**kw["transformer"])))
    return _predict(model, sam.keras_prompts(spec, images, inputs["points"]), spec, select=_keras.sam_masks)


def _stable_diffusion(spec, inputs):
    from kbench.adapters import _keras_sd
    return _keras_sd.build(spec, inputs, _predict, _to_device)


MODELS = {"bert": for_tasks(_bert, "fit", "predict"), "mistral": for_tasks(_mistral, "fit", "generate"),
          "sam": for_tasks(_sam, "fit", "predict"), "stable_diffusion": for_tasks(_stable_diffusion, "fit", "predict"),
          "resnet50": {"fit": _resnet50}}


# ---------------------------------------------------------------- the forward step

def _predict(model, x, spec, output="logits", select=None, evidence=None):
    """model(x, training=False) in one tf.function, as Keras's predict_step runs it, without predict()'s per-call
    data-adapter setup and copy back to numpy."""
    import tensorflow as tf
    forward = tf.function(lambda x: model(x, training=False), jit_compile=spec.settings["jit_compile"])
    x = _to_device(x)
    return _keras.workload(model, lambda: forward(x), spec,
                           lambda: {"jit_compile": _keras.compiled(forward), **(evidence or {})},
                           outputs=_keras.outputs_of(lambda: forward(x), output, select))


def _to_device(tree):
    """Tensors on the default device, made once in build() (an eager identity moves host constants to the GPU)."""
    import tensorflow as tf
    return tf.nest.map_structure(lambda a: None if a is None else tf.identity(tf.convert_to_tensor(a)), tree)
