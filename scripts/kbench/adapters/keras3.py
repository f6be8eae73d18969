"""Keras 3 adapter (keras + keras-hub + keras-cv; ResNet-50 from keras.applications), one module for the jax,
tensorflow and torch backends.

The backend is chosen by KERAS_BACKEND before keras is imported (framework_defs.<fw>.env). Models follow the anchor
(keras-benchmarks v0.0.5), built from config with random weights; kbench.models gives the constructor kwargs.
A step is exactly one Keras call: train_on_batch, one compiled forward call, or one generate call.
"""
from __future__ import annotations

import numpy as np

from kbench import models
from kbench.adapters import Backend, NotSupported, Workload, _hooks
from kbench.adapters import _keras_data as data
from kbench.adapters import _keras_fit

_PACKAGES = ("keras", "keras-hub", "keras-cv", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "torch")


# ---------------------------------------------------------------- backend hooks

def backend() -> Backend:
    import keras
    name = keras.backend.backend()
    hooks = {"jax": _hooks.jax_hooks, "tensorflow": _hooks.tf_hooks, "torch": _hooks.torch_hooks}[name]()
    # tensorflow shows up on every backend: keras-hub imports it (tensorflow-text)
    return Backend(name=name, package_versions=lambda: _hooks.package_versions(_PACKAGES), **hooks)


# ---------------------------------------------------------------- build

def build(spec: dict) -> Workload:
    import keras
    builder = _BUILDERS.get(spec["model"])
    if builder is None:
        raise NotSupported(f"keras3 adapter has no model {spec['model']!r}")
    if spec["task"] not in _TASKS[spec["model"]]:
        raise NotSupported(f"keras3 adapter runs {spec['model']} for {sorted(_TASKS[spec['model']])}, "
                           f"not {spec['task']!r}")
    # The cell's precision is a Keras dtype policy: pure bfloat16 for the LLMs as the anchor (set_dtype_policy),
    # float32, or mixed_float16 / mixed_bfloat16. Set on every build, since it is process-global.
    keras.config.set_dtype_policy(spec["precision"])
    keras.utils.set_random_seed(spec["seed"])   # weight init
    rng = np.random.default_rng(spec["seed"])   # data: the same numbers on every backend
    return builder(spec, rng)


def _bert(spec, rng):
    import keras_hub
    backbone = keras_hub.models.BertBackbone(**models.keras_hub_bert_kwargs(spec["arch"]))
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=spec["arch"]["num_classes"], preprocessor=None)
    x, y = data.bert(spec, rng)
    if spec["task"] == "predict":
        return _predict(model, x, spec)
    return _fit(model, x, y, spec, _optimizer(spec, "adamw"), _logits_ce())


def _resnet50(spec, rng):
    import keras
    size = spec["arch"]["image_size"]
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=spec["arch"]["num_classes"],
                                        classifier_activation=None)
    x, y = data.images_and_labels(spec, rng)
    return _fit(model, x, y, spec, _optimizer(spec, "sgd"), _logits_ce())


def _causal_lm(spec, rng):
    import keras_hub
    cls, kwargs = {"gemma": (keras_hub.models.GemmaCausalLM, models.keras_hub_gemma_kwargs),
                   "mistral": (keras_hub.models.MistralCausalLM, models.keras_hub_mistral_kwargs)}[spec["model"]]
    backbone = cls.backbone_cls(**kwargs(spec["arch"]))
    model = cls(backbone, preprocessor=None)
    if spec["task"] == "generate":
        x = _to_device(data.causal_lm_prompt(spec, rng))
        model.compile(sampler="greedy", jit_compile=spec["framework_def"]["jit_compile"])
        total, trainable = _count(model)
        return Workload(step=lambda: model.generate(x, stop_token_ids=None), params_total=total,
                        params_trainable=trainable, examples_per_step=spec["batch_size"],
                        dtypes=lambda: _keras_fit.dtypes(model),
                        generated_tokens=_keras_fit.generated_tokens(spec["task_options"]["prompt_length"]))
    backbone.enable_lora(rank=spec["task_options"]["lora_rank"])   # freezes everything but the LoRA factors
    x, y, sample_weight = data.causal_lm_fit(spec, rng)
    return _fit(model, x, y, spec, _optimizer(spec, "adamw"), _logits_ce(), sample_weight=sample_weight)


def _sam(spec, rng):
    import keras
    import keras_hub
    kw = models.keras_hub_sam_kwargs(spec["arch"])
    image_encoder = keras_hub.models.ViTDetBackbone(**kw["image_encoder"])
    images = data.sam_images(spec, rng)
    if spec["task"] == "fit":   # the anchor trains the image encoder alone against a random embedding
        return _fit(image_encoder, images, data.sam_embedding_target(spec, rng), spec, _optimizer(spec, "adam"),
                    keras.losses.MeanSquaredError())
    backbone = keras_hub.models.SAMBackbone(
        image_encoder=image_encoder,
        prompt_encoder=keras_hub.layers.SAMPromptEncoder(**kw["prompt_encoder"]),
        mask_decoder=keras_hub.layers.SAMMaskDecoder(**kw["mask_decoder"]))
    model = keras_hub.models.SAMImageSegmenter(backbone, preprocessor=None)
    return _predict(model, data.sam_prompts(spec, rng, images), spec)


def _stable_diffusion(spec, rng):
    import keras
    from kbench.adapters import _keras_sd
    kw = models.keras_cv_sd_kwargs(spec["arch"])
    if spec["task"] == "fit":
        # As the anchor: the VAE image encoder up to layers[-3], the 3x3 conv giving 2*latent_channels moments.
        encoder = _keras_sd.vae_encoder(**kw["vae_encoder"])
        model = keras.Model(encoder.inputs, encoder.layers[-3].output)
        images, y = data.sd_fit(spec, rng)
        return _fit(model, images, y, spec, _optimizer(spec, "adam"), keras.losses.MeanSquaredError())
    # predict: one guided denoising step; the text encoder is not part of the step (random contexts, made once).
    u = kw["unet"]
    model = _keras_sd.guided_denoising_step(_keras_sd.unet(**u))
    t_emb = _keras_sd.timestep_embedding(999, u["timestep_embedding_dim"], spec["batch_size"])
    return _predict(model, data.sd_predict(spec, rng, t_emb), spec)


_BUILDERS = {"bert": _bert, "gemma": _causal_lm, "mistral": _causal_lm, "sam": _sam,
             "stable_diffusion": _stable_diffusion, "resnet50": _resnet50}
_TASKS = {"bert": {"fit", "predict"}, "gemma": {"fit", "generate"}, "mistral": {"fit", "generate"},
          "sam": {"fit", "predict"}, "stable_diffusion": {"fit", "predict"}, "resnet50": {"fit"}}


# ---------------------------------------------------------------- shared step paths

def _fit(model, x, y, spec, optimizer, loss, sample_weight=None) -> Workload:
    """One optimizer step per call: train_on_batch, not fit() (whose per-call setup costs ~0.7 s on torch). The step
    returns the loss (keras-hub tasks compile with their default metrics, so train_on_batch returns a list)."""
    model.compile(optimizer=optimizer, loss=loss, jit_compile=spec["framework_def"]["jit_compile"])
    x, y, sample_weight = _to_device((x, y, sample_weight))
    total, trainable = _count(model)
    return Workload(step=lambda: model.train_on_batch(x, y, sample_weight=sample_weight, return_dict=True)["loss"],
                    params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"],
                    dtypes=lambda: _keras_fit.dtypes(model))


def _optimizer(spec, kind):
    import keras
    return _keras_fit.optimizer(keras, spec, kind)


def _logits_ce():
    """The classifiers' loss (BERT, Gemma, Mistral, ResNet-50); Keras losses compute in float32 under any policy."""
    import keras
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _predict(model, x, spec) -> Workload:
    total, trainable = _count(model)
    return Workload(step=_compiled_forward(model, _to_device(x), spec["framework_def"]["jit_compile"]),
                    params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"],
                    dtypes=lambda: _keras_fit.dtypes(model))


def _compiled_forward(model, x, jit):
    """model(x, training=False) as Keras's predict_step runs it (jax.jit / tf.function(jit_compile) / torch no_grad),
    called directly: predict_on_batch would add per call a copy of the outputs to host numpy and, on jax, a
    re-assignment of every model variable (and it fails on SAMImageSegmenter: 'tuple' has no attribute 'copy')."""
    import keras
    name = keras.backend.backend()
    if name == "jax":
        import jax
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]

        def forward(tv, ntv, x):
            return model.stateless_call(tv, ntv, x, training=False)[0]
        forward = jax.jit(forward) if jit else forward
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


def _count(model) -> tuple[int, int]:
    """Parameters of the model the step trains or runs (LoRA fit: trainable counts the LoRA factors only)."""
    def size(weights):
        return int(sum(np.prod(w.shape) for w in weights))
    return size(model.weights), size(model.trainable_weights)
