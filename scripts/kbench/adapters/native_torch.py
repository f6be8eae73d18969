"""Native PyTorch adapter: HF transformers (BERT, Gemma, Mistral) with peft LoRA, diffusers (StableDiffusion v1.4),
Meta segment-anything (SAM), torchvision (ResNet-50). Random weights from configs (kbench.models), never downloads.

Two columns share this module: eager, and compiled (framework_defs.<fw>.jit_compile) with
torch.compile(mode="reduce-overhead") as the anchor. Compilation happens in the first (warm-up) step, so its cost is the
first-step time and never part of ms/step.
Fit is a standard PyTorch loop, the work of one HF Trainer.training_step plus its optimizer step: forward with labels,
backward, optimizer.step, zero_grad. Left out against Trainer: gradient clipping and the LR schedule (the Keras cells
have neither), and Trainer's per-step bookkeeping, which would be harness overhead.
Precision (the Keras dtype-policy names): bfloat16 casts the model (pure, as the anchor's LLMs); mixed_float16 and
mixed_bfloat16 run forward and loss under torch.autocast with float32 weights, and mixed_float16 trains with a
GradScaler, as PyTorch's AMP recipe.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch

from kbench import models
from kbench.adapters import Backend, NotSupported, Workload, _hooks, dtype_name

_PACKAGES = ("torch", "torchvision", "transformers", "peft", "accelerate", "diffusers", "segment-anything")
COMPILE_MODE = "reduce-overhead"     # the anchor's mode: CUDA graphs on a GPU, plain inductor on a CPU


def backend() -> Backend:
    return Backend(name="torch", package_versions=lambda: _hooks.package_versions(_PACKAGES), **_hooks.torch_hooks())


def build(spec: dict) -> Workload:
    builder = _BUILDERS.get(spec["model"])
    if builder is None or spec["task"] not in _TASKS[spec["model"]]:
        raise NotSupported(f"native_torch adapter has no {spec['model']} {spec['task']}")
    torch.manual_seed(spec["seed"])               # weight init
    rng = np.random.default_rng(spec["seed"])     # data: the same numbers as the Keras cells
    # The GPU where there is one, else the default device: the CPU, or the meta device for kbench.census.
    device = torch.device("cuda") if torch.cuda.is_available() else torch.get_default_device()
    return builder(spec, rng, device)


# ---------------------------------------------------------------- models

def _bert(spec, rng, device):
    import transformers
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**models.hf_bert_config(arch)))
    batch = {"input_ids": rng.integers(0, arch["vocabulary_size"], (n, seq)),
             "token_type_ids": np.zeros((n, seq), "int64"), "attention_mask": np.ones((n, seq), "int64")}
    if spec["task"] == "predict":
        return _predict(model, _tensors(batch, device), spec)
    batch["labels"] = rng.integers(0, arch["num_classes"], (n,))
    return _fit(model, _tensors(batch, device), spec, "adamw", loss=lambda out: out.loss)


def _resnet50(spec, rng, device):
    import torchvision
    from kbench.adapters import _keras_data
    model = torchvision.models.resnet50(weights=None, num_classes=spec["arch"]["num_classes"])
    images, labels = _keras_data.images_and_labels(spec, rng)        # the Keras cells' numbers, made NCHW
    target = _tensors(labels.astype("int64"), device)                # cross_entropy takes int64 class indices
    return _fit(model, _tensors((np.ascontiguousarray(images.transpose(0, 3, 1, 2)),), device), spec, "sgd",
                loss=lambda logits: torch.nn.functional.cross_entropy(logits, target))


def _causal_lm(spec, rng, device):
    import transformers
    config_cls, model_cls, kwargs = {
        "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM, models.hf_gemma_config),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, models.hf_mistral_config),
    }[spec["model"]]
    arch, opts, n = spec["arch"], spec["task_options"], spec["batch_size"]
    # Pure bf16 weights and compute for the LLMs (precision bfloat16), as the Keras cells' dtype policy.
    model = model_cls(config_cls(**kwargs(arch)))
    if spec["precision"] == "bfloat16":
        model = model.to(torch.bfloat16)
    if spec["task"] == "generate":
        return _generate(model, rng, spec, device)
    import peft
    model = peft.get_peft_model(model, peft.LoraConfig(r=opts["lora_rank"], target_modules=models.PEFT_LORA_TARGETS,
                                                       lora_dropout=0.0))
    ids = rng.integers(0, arch["vocabulary_size"], (n, spec["inputs"]["sequence_length"]))
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": ids}   # the model shifts labels
    return _fit(model, _tensors(batch, device), spec, "adamw", loss=lambda out: out.loss)


def _generate(model, rng, spec, device):
    """One greedy generate() call: prompt_length prompt tokens, exactly new_tokens new ones (no EOS stop).
    Compiled column: transformers' own compiled decoding (static KV cache + CompileConfig), the way its docs give."""
    import transformers
    arch, opts, n = spec["arch"], spec["task_options"], spec["batch_size"]
    compiled = spec["framework_def"]["jit_compile"]
    config = transformers.GenerationConfig(
        max_new_tokens=opts["new_tokens"], min_new_tokens=opts["new_tokens"], do_sample=False,
        eos_token_id=None, pad_token_id=0, disable_compile=not compiled,
        cache_implementation="static" if compiled else None,
        compile_config=transformers.CompileConfig(mode=COMPILE_MODE) if compiled else None)
    if compiled and device.type == "cpu":
        config.compile_config._compile_all_devices = True   # transformers compiles on accelerators only by default
    prompt = torch.as_tensor(rng.integers(1, arch["vocabulary_size"], (n, opts["prompt_length"])), device=device)
    mask = torch.ones_like(prompt)
    model.to(device).eval()
    seen = {}

    def step():
        with torch.no_grad():
            _note_compute_dtype(seen, device, model)
            return model.generate(input_ids=prompt, attention_mask=mask, generation_config=config)
    total, trainable = _count(model)
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=n,
                    dtypes=_dtypes(model, seen),
                    generated_tokens=lambda out: out.shape[0] * (out.shape[1] - prompt.shape[1]))


def _sam(spec, rng, device):
    sam = _segment_anything(spec["arch"])
    arch, n, size = spec["arch"], spec["batch_size"], spec["arch"]["image_size"]
    images = rng.random((n, 3, size, size), dtype="float32")
    if spec["task"] == "fit":   # the image encoder alone against a random embedding, as the anchor
        grid = models.sam_embedding_size(arch)
        target = rng.random((n, arch["embedding_dim"], grid, grid), dtype="float32")
        return _fit(sam.image_encoder, _tensors((images,), device), spec, "adam", loss=_mse(_tensors(target, device)))
    k = spec["task_options"]["num_points"]
    points = rng.uniform(0, size, (n, 1, k, 2)).astype("float32")   # one prompt of k points per image
    labels = np.ones((n, 1, k), "int64")
    return _predict(SamPredict(sam), _tensors((images, points, labels), device), spec)


def _segment_anything(arch):
    """segment_anything.modeling's parts wired as segment_anything.build_sam does, at any size."""
    import functools
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer
    kw = models.segment_anything_kwargs(arch)
    return Sam(image_encoder=ImageEncoderViT(**kw["image_encoder"],
                                             norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-6)),
               prompt_encoder=PromptEncoder(**kw["prompt_encoder"]),
               mask_decoder=MaskDecoder(**kw["mask_decoder"], transformer=TwoWayTransformer(**kw["transformer"])))


class SamPredict(torch.nn.Module):
    """Sam.forward without its pre/post-processing (the Keras cells have neither): the image encoder on the batch,
    then prompt encoder and mask decoder per image (segment-anything's decoder takes one image), multimask output."""

    def __init__(self, sam):
        super().__init__()
        self.sam = sam

    def forward(self, images, points, labels):
        embeddings = self.sam.image_encoder(images)
        dense_pe = self.sam.prompt_encoder.get_dense_pe()
        outputs = []
        for i in range(images.shape[0]):
            sparse, dense = self.sam.prompt_encoder(points=(points[i], labels[i]), boxes=None, masks=None)
            outputs.append(self.sam.mask_decoder(image_embeddings=embeddings[i:i + 1], image_pe=dense_pe,
                                                 sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                                 multimask_output=True))
        return outputs


def _stable_diffusion(spec, rng, device):
    arch, n = spec["arch"], spec["batch_size"]
    kw = models.diffusers_sd_kwargs(arch)
    if spec["task"] == "fit":   # the VAE image encoder (AutoencoderKL.encoder) against random moments, as the anchor
        from diffusers.models.autoencoders.vae import Encoder
        size, lat = arch["image_size"], models.sd_latent_size(arch)
        images = rng.random((n, 3, size, size), dtype="float32")
        target = rng.random((n, 2 * arch["latent_channels"], lat, lat), dtype="float32")
        return _fit(Encoder(**kw["vae_encoder"]), _tensors((images,), device), spec, "adam",
                    loss=_mse(_tensors(target, device)))
    # predict: one classifier-free-guided denoising step of the diffusers pipeline: the UNet on the 2n batch
    # (unconditional + conditional), guidance, one DDIM scheduler step. Prompt embeddings stand in for the text encoder.
    from diffusers import DDIMScheduler, UNet2DConditionModel
    unet = UNet2DConditionModel(**kw["unet"]).to(device).eval()
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")   # SD v1.4
    scheduler.set_timesteps(50)
    t = scheduler.timesteps[0]
    u = kw["unet"]
    latents, context = _tensors((
        rng.standard_normal((n, u["in_channels"], u["sample_size"], u["sample_size"]), dtype="float32"),
        rng.standard_normal((2 * n, arch["text_length"], arch["context_dim"]), dtype="float32")), device)
    forward, autocast = _maybe_compile(unet, spec), _autocast(spec, device)
    seen = {}

    def step():
        with torch.no_grad(), autocast():
            _note_compute_dtype(seen, device, unet)
            eps_uncond, eps_text = forward(torch.cat([latents] * 2), t, encoder_hidden_states=context).sample.chunk(2)
            eps = eps_uncond + 7.5 * (eps_text - eps_uncond)
            return scheduler.step(eps, t, latents).prev_sample
    total, trainable = _count(unet)
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=n,
                    dtypes=_dtypes(unet, seen))


_BUILDERS = {"bert": _bert, "gemma": _causal_lm, "mistral": _causal_lm, "sam": _sam,
             "stable_diffusion": _stable_diffusion, "resnet50": _resnet50}
_TASKS = {"bert": {"fit", "predict"}, "gemma": {"fit", "generate"}, "mistral": {"fit", "generate"},
          "sam": {"fit", "predict"}, "stable_diffusion": {"fit", "predict"}, "resnet50": {"fit"}}


# ---------------------------------------------------------------- shared step paths

def _maybe_compile(module, spec):
    return torch.compile(module, mode=COMPILE_MODE) if spec["framework_def"]["jit_compile"] else module


def _autocast(spec, device):
    """The forward pass's precision context: torch.autocast for the mixed precisions, else nothing."""
    half = {"mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}.get(spec["precision"])
    return functools.partial(torch.autocast, device.type, half) if half else contextlib.nullcontext


# The Keras cells' optimizers, with their defaults but the configured learning rate.
_OPTIMIZERS = {"adamw": torch.optim.AdamW,      # also HF Trainer's default ("adamw_torch")
               "adam": torch.optim.Adam,
               "sgd": functools.partial(torch.optim.SGD, momentum=0.9)}


def _fit(module, inputs, spec, optimizer, loss) -> Workload:
    """inputs: a dict of keyword tensors or a tuple of positional ones; loss(output) -> scalar tensor.
    The step returns the (unscaled) loss."""
    device = _device_of(inputs)
    module.to(device).train()
    forward, autocast = _maybe_compile(module, spec), _autocast(spec, device)
    optimizer = _OPTIMIZERS[optimizer]([p for p in module.parameters() if p.requires_grad],
                                       lr=spec["task_options"]["learning_rate"])
    # Dynamic loss scaling for float16 gradients (bfloat16 has float32's range and needs none).
    scaler = torch.amp.GradScaler(device.type) if spec["precision"] == "mixed_float16" else None
    seen = {}

    def step():
        with autocast():
            _note_compute_dtype(seen, device, module)
            value = loss(_call(forward, inputs))
        if scaler:
            scaler.scale(value).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            value.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.detach()
    total, trainable = _count(module)
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"],
                    dtypes=_dtypes(module, seen))


def _predict(module, inputs, spec) -> Workload:
    device = _device_of(inputs)
    module.to(device).eval()
    forward, autocast = _maybe_compile(module, spec), _autocast(spec, device)
    seen = {}

    def step():
        with torch.no_grad(), autocast():
            _note_compute_dtype(seen, device, module)
            return _call(forward, inputs)
    total, trainable = _count(module)
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=spec["batch_size"],
                    dtypes=_dtypes(module, seen))


def _note_compute_dtype(seen: dict, device, module) -> None:
    """Inside a step, once: the dtype its matrix products run in, autocast's where autocast is on, else the weights'."""
    if "compute" not in seen:
        on = torch.is_autocast_enabled(device.type)
        seen["compute"] = dtype_name(torch.get_autocast_dtype(device.type) if on else next(module.parameters()).dtype)


def _dtypes(module, seen: dict):
    return lambda: {"weights": dtype_name(next(module.parameters()).dtype), "compute": seen.get("compute")}


def _call(forward, inputs):
    """inputs: a dict of keyword tensors or a tuple of positional ones."""
    return forward(**inputs) if isinstance(inputs, dict) else forward(*inputs)


def _mse(target):
    return lambda out: torch.nn.functional.mse_loss(out, target)


def _tensors(tree, device):
    """numpy -> tensors on the device, made once in build(), so no step pays a host-to-device copy."""
    if isinstance(tree, dict):
        return {k: _tensors(v, device) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_tensors(v, device) for v in tree)
    return torch.as_tensor(tree, device=device)


def _device_of(inputs):
    first = next(iter(inputs.values())) if isinstance(inputs, dict) else inputs[0]
    return first.device


def _count(module) -> tuple[int, int]:
    """Parameters of the module the step trains or runs (LoRA fit: trainable counts the LoRA factors only)."""
    params = list(module.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)
