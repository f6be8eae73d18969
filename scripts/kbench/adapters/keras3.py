"""Keras 3 adapter (keras + keras-hub + keras-cv), one module for the jax, tensorflow and torch backends.

The backend is chosen by KERAS_BACKEND before keras is imported (framework_defs.<fw>.env). Models follow the anchor
(keras-benchmarks v0.0.5), built from config with random weights; kbench.models gives the constructor kwargs.
A step is exactly one Keras call: train_on_batch, one compiled forward call, or one generate call.
"""
from __future__ import annotations

import importlib.metadata

import numpy as np

from kbench import models
from kbench.adapters import Backend, NotSupported, Workload

_PACKAGES = ("keras", "keras-hub", "keras-cv", "jax", "jaxlib", "tensorflow", "tensorflow-cpu", "torch")


# ---------------------------------------------------------------- backend hooks

def backend() -> Backend:
    import keras
    name = keras.backend.backend()
    hooks = {"jax": _jax_hooks, "tensorflow": _tf_hooks, "torch": _torch_hooks}[name]()
    return Backend(name=name, package_versions=_package_versions, **hooks)


def _package_versions() -> dict[str, str]:
    versions = {}
    for pkg in _PACKAGES:   # tensorflow shows up on every backend: keras-hub imports it (tensorflow-text)
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _jax_hooks():
    import jax
    dev = jax.devices()[0]

    def peak():
        stats = dev.memory_stats() if dev.platform != "cpu" else None
        return stats.get("peak_bytes_in_use") if stats else None
    return {"sync": jax.block_until_ready,   # non-array leaves (python floats from train_on_batch) pass through
            "device_name": lambda: dev.device_kind if dev.platform != "cpu" else "cpu",
            "peak_device_memory_bytes": peak}


def _tf_hooks():
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")

    def sync(_):
        # GPU kernels run asynchronously; on CPU eager execution is synchronous unless switched off.
        if gpus or not tf.config.experimental.get_synchronous_execution():
            tf.test.experimental.sync_devices()
    return {"sync": sync,
            "device_name": lambda: tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
            if gpus else "cpu",
            "peak_device_memory_bytes": lambda: tf.config.experimental.get_memory_info("GPU:0")["peak"]
            if gpus else None}


def _torch_hooks():
    import torch
    cuda = torch.cuda.is_available()
    return {"sync": lambda _: torch.cuda.synchronize() if cuda else None,
            "device_name": lambda: torch.cuda.get_device_name(0) if cuda else "cpu",
            "peak_device_memory_bytes": lambda: torch.cuda.max_memory_allocated() if cuda else None}


# ---------------------------------------------------------------- build

def build(spec: dict) -> Workload:
    import keras
    builder = _BUILDERS.get(spec["model"])
    if builder is None:
        raise NotSupported(f"keras3 adapter has no model {spec['model']!r}")
    if spec["task"] not in _TASKS[spec["model"]]:
        raise NotSupported(f"keras3 adapter runs {spec['model']} for {sorted(_TASKS[spec['model']])}, "
                           f"not {spec['task']!r}")
    # Pure dtype policy as the anchor (set_dtype_policy): bfloat16 weights and compute for the LLMs. Set it on every
    # build, since it is process-global.
    keras.config.set_dtype_policy(spec["dtype"])
    keras.utils.set_random_seed(spec["seed"])   # weight init
    rng = np.random.default_rng(spec["seed"])   # data: the same numbers on every backend
    return builder(spec, rng)


def _bert(spec, rng):
    import keras_hub
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    backbone = keras_hub.models.BertBackbone(**models.keras_hub_bert_kwargs(arch))
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=arch["num_classes"], preprocessor=None)
    x = {"token_ids": rng.integers(0, arch["vocabulary_size"], (n, seq), dtype="int32"),
         "segment_ids": np.zeros((n, seq), "int32"),
         "padding_mask": np.ones((n, seq), "int32")}
    if spec["task"] == "predict":
        return _predict(model, x, spec)
    y = rng.integers(0, arch["num_classes"], (n,), dtype="int32")
    return _fit(model, x, y, spec, *_adamw_logits_ce())


def _causal_lm(spec, rng):
    import keras_hub
    cls, kwargs = {"gemma": (keras_hub.models.GemmaCausalLM, models.keras_hub_gemma_kwargs),
                   "mistral": (keras_hub.models.MistralCausalLM, models.keras_hub_mistral_kwargs)}[spec["model"]]
    arch, opts, n = spec["arch"], spec["task_options"], spec["batch_size"]
    backbone = cls.backbone_cls(**kwargs(arch))
    model = cls(backbone, preprocessor=None)
    if spec["task"] == "generate":
        # Prompt of prompt_length tokens, then new_tokens masked-off slots that greedy decoding fills; with
        # stop_token_ids=None every call generates exactly new_tokens tokens.
        p, total = opts["prompt_length"], opts["prompt_length"] + opts["new_tokens"]
        ids = np.zeros((n, total), "int32")
        ids[:, :p] = rng.integers(1, arch["vocabulary_size"], (n, p))
        x = _to_device({"token_ids": ids, "padding_mask": np.arange(total)[None, :].repeat(n, 0) < p})
        model.compile(sampler="greedy", jit_compile=spec["framework_def"]["jit_compile"])
        total_params, trainable = _count(model)
        return Workload(step=lambda: model.generate(x, stop_token_ids=None), params_total=total_params,
                        params_trainable=trainable, examples_per_step=n, tokens_per_step=n * opts["new_tokens"])
    # fit: LoRA on the backbone (freezes everything else), next-token targets as CausalLMPreprocessor makes them.
    backbone.enable_lora(rank=opts["lora_rank"])
    seq = spec["inputs"]["sequence_length"]
    ids = rng.integers(0, arch["vocabulary_size"], (n, seq + 1), dtype="int32")
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, seq), bool)}
    return _fit(model, x, ids[:, 1:], spec, *_adamw_logits_ce(), sample_weight=np.ones((n, seq), "float32"))


def _sam(spec, rng):
    import keras
    import keras_hub
    arch, n, size = spec["arch"], spec["batch_size"], spec["arch"]["image_size"]
    kw = models.keras_hub_sam_kwargs(arch)
    image_encoder = keras_hub.models.ViTDetBackbone(**kw["image_encoder"])
    images = rng.random((n, size, size, 3), dtype="float32")
    if spec["task"] == "fit":   # the anchor trains the image encoder alone against a random embedding
        grid = models.sam_embedding_size(arch)
        y = rng.random((n, grid, grid, arch["embedding_dim"]), dtype="float32")
        return _fit(image_encoder, images, y, spec, keras.optimizers.Adam(), keras.losses.MeanSquaredError())
    backbone = keras_hub.models.SAMBackbone(
        image_encoder=image_encoder,
        prompt_encoder=keras_hub.layers.SAMPromptEncoder(**kw["prompt_encoder"]),
        mask_decoder=keras_hub.layers.SAMMaskDecoder(**kw["mask_decoder"]))
    model = keras_hub.models.SAMImageSegmenter(backbone, preprocessor=None)
    # num_points foreground points plus the (0, 0) / label -1 padding point keras-hub wants when no box is given;
    # empty box and mask prompts are passed explicitly (SAMImageSegmenter.predict_step would add them, but it is
    # bypassed by the compiled forward call).
    k, mask_side = spec["task_options"]["num_points"], 4 * models.sam_embedding_size(arch)
    points = np.concatenate([rng.uniform(0, size, (n, k, 2)), np.zeros((n, 1, 2))], axis=1).astype("float32")
    labels = np.concatenate([np.ones((n, k)), -np.ones((n, 1))], axis=1).astype("float32")
    x = {"images": images, "points": points, "labels": labels,
         "boxes": np.zeros((n, 0, 2, 2), "float32"), "masks": np.zeros((n, 0, mask_side, mask_side, 1), "float32")}
    return _predict(model, x, spec)


def _stable_diffusion(spec, rng):
    import keras
    from kbench.adapters import keras3_sd
    arch, n = spec["arch"], spec["batch_size"]
    kw = models.keras_cv_sd_kwargs(arch)
    if spec["task"] == "fit":
        # As the anchor: the VAE image encoder up to layers[-3], the 3x3 conv giving 2*latent_channels moments.
        encoder = keras3_sd.vae_encoder(**kw["vae_encoder"])
        model = keras.Model(encoder.inputs, encoder.layers[-3].output)
        size, lat = arch["image_size"], models.sd_latent_size(arch)
        images = rng.random((n, size, size, 3), dtype="float32")
        y = rng.random((n, lat, lat, 2 * arch["latent_channels"]), dtype="float32")
        return _fit(model, images, y, spec, keras.optimizers.Adam(), keras.losses.MeanSquaredError())
    # predict: one guided denoising step; the text encoder is not part of the step (random contexts, made once).
    u = kw["unet"]
    model = keras3_sd.guided_denoising_step(keras3_sd.unet(**u))
    ctx_shape = (n, u["text_length"], u["context_dim"])
    x = [rng.standard_normal((n, u["latent_size"], u["latent_size"], u["latent_channels"]), dtype="float32"),
         keras.ops.convert_to_numpy(keras3_sd.timestep_embedding(999, u["timestep_embedding_dim"], n)),
         rng.standard_normal(ctx_shape, dtype="float32"), rng.standard_normal(ctx_shape, dtype="float32")]
    return _predict(model, x, spec)


_BUILDERS = {"bert": _bert, "gemma": _causal_lm, "mistral": _causal_lm, "sam": _sam,
             "stable_diffusion": _stable_diffusion}
_TASKS = {"bert": {"fit", "predict"}, "gemma": {"fit", "generate"}, "mistral": {"fit", "generate"},
          "sam": {"fit", "predict"}, "stable_diffusion": {"fit", "predict"}}


# ---------------------------------------------------------------- shared step paths

def _fit(model, x, y, spec, optimizer, loss, sample_weight=None) -> Workload:
    """One optimizer step per call: train_on_batch, not fit() (whose per-call setup costs ~0.7 s on torch)."""
    model.compile(optimizer=optimizer, loss=loss, jit_compile=spec["framework_def"]["jit_compile"])
    x, y, sample_weight = _to_device((x, y, sample_weight))
    total, trainable = _count(model)
    return Workload(step=lambda: model.train_on_batch(x, y, sample_weight=sample_weight), params_total=total,
                    params_trainable=trainable, examples_per_step=spec["batch_size"])


def _adamw_logits_ce():
    """The anchor's optimizer and loss for the token/sequence classifiers (BERT, Gemma, Mistral)."""
    import keras
    return keras.optimizers.AdamW(), keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _predict(model, x, spec) -> Workload:
    total, trainable = _count(model)
    return Workload(step=_compiled_forward(model, _to_device(x), spec["framework_def"]["jit_compile"]),
                    params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"])


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
