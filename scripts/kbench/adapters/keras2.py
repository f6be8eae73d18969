"""Keras 2 adapter: tf.keras from tf-keras (TF_USE_LEGACY_KERAS=1, framework_defs.keras2.env), keras-nlp 0.12.1 (BERT,
Mistral), keras-cv 0.9.0 (SAM, StableDiffusion v1.4), the newest releases with a Keras 2 path, and
tf.keras.applications (ResNet-50). The cell's precision is a tf.keras mixed-precision policy.

Same models, inputs (kbench.adapters._keras_data) and step kinds as the Keras 3 adapter: one train_on_batch, one
tf.function(jit_compile) forward call, or one generate call. What Keras 2 cannot run is n/a in config.yaml (Gemma);
what it runs wrongly is caught by the runner (enable_lora leaves nothing trainable on Keras 2).
"""
from __future__ import annotations

import os

import numpy as np

from kbench import models
from kbench.adapters import Backend, NotSupported, Workload, _hooks
from kbench.adapters import _keras_data as data
from kbench.adapters import _keras_fit

_PACKAGES = ("tensorflow", "tf-keras", "keras-nlp", "keras-cv")


def backend() -> Backend:
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise RuntimeError("keras2 adapter needs TF_USE_LEGACY_KERAS=1 (else tf.keras is Keras 3)")
    return Backend(name="tensorflow", package_versions=lambda: _hooks.package_versions(_PACKAGES),
                   **_hooks.tf_hooks())


def build(spec: dict) -> Workload:
    import tensorflow as tf
    builder = _BUILDERS.get(spec["model"])
    if builder is None or spec["task"] not in _TASKS[spec["model"]]:
        raise NotSupported(f"keras2 adapter has no {spec['model']} {spec['task']}")
    tf.keras.mixed_precision.set_global_policy(spec["precision"])   # the same policy names as Keras 3
    tf.keras.utils.set_random_seed(spec["seed"])
    return builder(spec, np.random.default_rng(spec["seed"]))


def _bert(spec, rng):
    import keras_nlp
    backbone = keras_nlp.models.BertBackbone(**models.keras_hub_bert_kwargs(spec["arch"]))
    model = keras_nlp.models.BertClassifier(backbone, num_classes=spec["arch"]["num_classes"], preprocessor=None)
    x, y = data.bert(spec, rng)
    if spec["task"] == "predict":
        return _predict(model, x, spec)
    return _fit(model, x, y, spec, _optimizer(spec, "adamw"), _logits_ce())


def _resnet50(spec, rng):
    import tensorflow as tf
    size = spec["arch"]["image_size"]
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(size, size, 3),
                                           classes=spec["arch"]["num_classes"], classifier_activation=None)
    x, y = data.images_and_labels(spec, rng)
    return _fit(model, x, y, spec, _optimizer(spec, "sgd"), _logits_ce())


def _mistral(spec, rng):
    import keras_nlp
    backbone = keras_nlp.models.MistralBackbone(**models.keras_hub_mistral_kwargs(spec["arch"]))
    model = keras_nlp.models.MistralCausalLM(backbone, preprocessor=None)
    if spec["task"] == "generate":
        x = _to_device(data.causal_lm_prompt(spec, rng))
        model.compile(sampler="greedy", jit_compile=spec["framework_def"]["jit_compile"])
        total, trainable = _count(model)
        return Workload(step=lambda: model.generate(x, stop_token_ids=None), params_total=total,
                        params_trainable=trainable, examples_per_step=spec["batch_size"],
                        dtypes=lambda: _keras_fit.dtypes(model),
                        generated_tokens=_keras_fit.generated_tokens(spec["task_options"]["prompt_length"]))
    backbone.enable_lora(rank=spec["task_options"]["lora_rank"])
    x, y, sample_weight = data.causal_lm_fit(spec, rng)
    return _fit(model, x, y, spec, _optimizer(spec, "adamw"), _logits_ce(), sample_weight=sample_weight)


def _sam(spec, rng):
    import tensorflow as tf
    from keras_cv.src.models import ViTDetBackbone
    from keras_cv.src.models.segmentation.segment_anything import (SAMMaskDecoder, SAMPromptEncoder,
                                                                   SegmentAnythingModel, TwoWayTransformer)
    kw = models.keras_cv_sam_kwargs(spec["arch"])
    image_encoder = ViTDetBackbone(**kw["image_encoder"])
    images = data.sam_images(spec, rng)
    if spec["task"] == "fit":   # the anchor trains the image encoder alone against a random embedding
        return _fit(image_encoder, images, data.sam_embedding_target(spec, rng), spec, _optimizer(spec, "adam"),
                    tf.keras.losses.MeanSquaredError())
    model = SegmentAnythingModel(
        backbone=image_encoder, prompt_encoder=SAMPromptEncoder(**kw["prompt_encoder"]),
        mask_decoder=SAMMaskDecoder(**kw["mask_decoder"], transformer=TwoWayTransformer(**kw["transformer"])))
    return _predict(model, data.sam_prompts(spec, rng, images), spec)


def _stable_diffusion(spec, rng):
    import tensorflow as tf
    from kbench.adapters import _keras_sd
    kw = models.keras_cv_sd_kwargs(spec["arch"])
    if spec["task"] == "fit":   # the VAE image encoder up to layers[-3] (2*latent_channels moments), as the anchor
        encoder = _keras_sd.vae_encoder(**kw["vae_encoder"])
        model = tf.keras.Model(encoder.inputs, encoder.layers[-3].output)
        images, y = data.sd_fit(spec, rng)
        return _fit(model, images, y, spec, _optimizer(spec, "adam"), tf.keras.losses.MeanSquaredError())
    u = kw["unet"]
    model = _keras_sd.guided_denoising_step(_keras_sd.unet(**u))
    t_emb = _keras_sd.timestep_embedding(999, u["timestep_embedding_dim"], spec["batch_size"])
    return _predict(model, data.sd_predict(spec, rng, t_emb), spec)


_BUILDERS = {"bert": _bert, "mistral": _mistral, "sam": _sam, "stable_diffusion": _stable_diffusion,
             "resnet50": _resnet50}
_TASKS = {"bert": {"fit", "predict"}, "mistral": {"fit", "generate"}, "sam": {"fit", "predict"},
          "stable_diffusion": {"fit", "predict"}, "resnet50": {"fit"}}


# ---------------------------------------------------------------- shared step paths

def _fit(model, x, y, spec, optimizer, loss, sample_weight=None) -> Workload:
    import tensorflow as tf
    model.compile(optimizer=optimizer, loss=loss, jit_compile=spec["framework_def"]["jit_compile"])
    x, y, sample_weight = _to_device((x, y, sample_weight))
    # tf.keras's own Model.train_on_batch: keras-nlp 0.12.1's PipelineModel override converts dict inputs with
    # keras_core and fails on Keras 2; with preprocessor=None that override only adds the identity preprocessing.
    total, trainable = _count(model)
    # The step returns the loss (keras-nlp tasks compile with default metrics: the dict names it).
    return Workload(step=lambda: tf.keras.Model.train_on_batch(model, x, y, sample_weight=sample_weight,
                                                               return_dict=True)["loss"],
                    params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"],
                    dtypes=lambda: _keras_fit.dtypes(model))


def _optimizer(spec, kind):
    import tensorflow as tf
    return _keras_fit.optimizer(tf.keras, spec, kind)


def _logits_ce():
    import tensorflow as tf
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _predict(model, x, spec) -> Workload:
    """model(x, training=False) in one tf.function, as Keras's predict_step runs it, without predict()'s per-call
    data-adapter setup and copy back to numpy."""
    import tensorflow as tf
    forward = tf.function(lambda x: model(x, training=False), jit_compile=spec["framework_def"]["jit_compile"])
    x = _to_device(x)
    total, trainable = _count(model)
    return Workload(step=lambda: forward(x), params_total=total, params_trainable=trainable,
                    examples_per_step=spec["batch_size"], dtypes=lambda: _keras_fit.dtypes(model))


def _to_device(tree):
    """Tensors on the default device, made once in build() (an eager identity moves host constants to the GPU)."""
    import tensorflow as tf
    return tf.nest.map_structure(lambda a: None if a is None else tf.identity(tf.convert_to_tensor(a)), tree)


def _count(model) -> tuple[int, int]:
    def size(weights):
        return int(sum(np.prod(w.shape) for w in weights))
    return size(model.weights), size(model.trainable_weights)
