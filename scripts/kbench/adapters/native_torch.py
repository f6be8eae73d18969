"""Native PyTorch adapter: HF transformers (BERT, Gemma, Mistral) with peft LoRA, diffusers (StableDiffusion v1.4),
Meta segment-anything (SAM), torchvision (ResNet-50). Random weights from configs (kbench.models.<family>), never downloads.

Two columns share this module: eager, and compiled with torch.compile(mode="reduce-overhead") as the anchor; where
torch.compile goes is the cell's settings.compile_site: module (the model), train-step (the whole fit step, the anchor's
SAM/SD fit), step (the whole predict step, the anchor's pipeline-level SD compile), decoding (transformers' compiled
decoding) or model (torch.compile(model), then generate: the anchor's, whose decode loop stays eager). Compilation
happens in the warm-up steps, so its cost is the first-step time and never part of ms/step. Each workload's evidence
says what was compiled, read from the objects built.
Fit is a standard PyTorch loop, the work of one HF Trainer.training_step plus its optimizer step: forward, loss,
backward, optimizer.step, zero_grad, and the loss read back to the host (as train_on_batch does). Left out against
Trainer: gradient clipping and the LR schedule (the Keras cells have neither), and Trainer's per-step bookkeeping,
which would be harness overhead. Models are built where they run: parameters created on the cell's device in its
weights dtype (kbench.adapters.native_torch._built), never in float32 on the host first.
Precision (spec.dtypes, kbench.contract.precision): the module is cast to the weights dtype (pure bfloat16, as the Keras
cells' dtype policy; LoRA factors as settings.lora_dtype says); a compute dtype other than the weights' runs
forward and loss under torch.autocast; loss scaling is torch.amp.GradScaler, as PyTorch's AMP recipe.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch

from kbench.contract.spec import CellSpec
from kbench.models import bert, decoder, gemma, llama, mistral, resnet50, sam, stable_diffusion
from kbench.adapters import (Backend, NotSupported, Workload, _hooks, backward_and_step, channels_first, dtype_name,
                             for_tasks)

from kbench.adapters._packages import NATIVE_TORCH as _PACKAGES
COMPILE_MODE = "reduce-overhead"     # the anchor's mode: CUDA graphs on a GPU, plain inductor on a CPU


def _mode(spec) -> str:
    """torch.compile's mode: the anchor's, or the tuned profile's (settings.compile_mode)."""
    return spec.settings.get("compile_mode", COMPILE_MODE)


def backend() -> Backend:
    return Backend(name="torch", package_versions=lambda: _hooks.package_versions(_PACKAGES), **_hooks.torch_hooks())


def load_reference(workload: Workload, arrays, spec: CellSpec) -> dict:
    """The equivalence check's reference (Keras 3 weights) into the native module, through kbench.models.weights' mapping
    of the model and task. What the module has that the reference did not give it, and what the reference has that
    the module lacks, are returned (the check reports them: a module with missing weights never passes), with the
    reference arrays the mapping leaves out on purpose (kbench.models.weights.Mapping.skip)."""
    from kbench.models import mappings
    mapping = mappings.mapping(spec.model, spec.task)
    if mapping is None:
        raise NotSupported(f"no weight mapping from the Keras reference to native {spec.model} {spec.task} yet")
    module = workload.model
    state = {name: torch.as_tensor(value) for name, value in mapping.to_torch(arrays).items()}
    missing, unexpected = module.load_state_dict(state, strict=False)
    return mappings.load_report(spec.model, mapping, arrays, missing, unexpected)


def prepare(spec: CellSpec) -> dict:
    torch.manual_seed(spec.seed)               # weight init
    # The GPU where there is one, else the default device: the CPU, or the meta device for kbench.studies.census.
    return {"device": torch.device("cuda") if torch.cuda.is_available() else _default_device()}


# ---------------------------------------------------------------- torch versions (2.2 .. current)
# The adapter runs on today's stack and on the anchor era's (torch 2.2, transformers 4.38, peft 0.9): each helper
# takes the current API where it exists, else its older spelling.

def _default_device() -> torch.device:
    """torch.get_default_device where torch has it (2.2 has not); else where a factory function puts a new tensor,
    which honours torch.set_default_device and a `with torch.device(...)` context alike."""
    if hasattr(torch, "get_default_device"):
        return torch.get_default_device()
    return torch.empty(()).device


def _autocast_enabled(device_type: str) -> bool:
    """torch.is_autocast_enabled(device_type); torch 2.2's takes no argument (CUDA) and has one per device."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _autocast_dtype(device_type: str) -> torch.dtype:
    """torch.get_autocast_dtype(device_type); torch 2.2 has one function per device instead."""
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device_type)
    return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()


def _grad_scaler(device_type: str):
    """torch.amp.GradScaler(device); torch 2.2 has CUDA's only (torch.cuda.amp.GradScaler), no CPU loss scaling:
    its CUDA scaler on a CPU disables itself with a warning, which would run a loss-scaled cell unscaled."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type)
    if device_type != "cuda":
        raise NotSupported(f"loss scaling on {device_type} needs torch >= 2.3 (torch {torch.__version__} has "
                           "torch.cuda.amp.GradScaler only)")
    return torch.cuda.amp.GradScaler()


# ---------------------------------------------------------------- models

def _built(spec, device, make):
    """make() run where its parameters are created as the cell runs them: on the cell's device, in its weights
    dtype (a 7B model built in float32 on the host, then cast and moved, takes about 34 GB of host memory and
    minutes of CPU before a step runs)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(_torch_dtype(spec.dtypes.weights))
    try:
        with torch.device(device):
            return make()
    finally:
        torch.set_default_dtype(previous)


def _bert(spec, inputs, device):
    import transformers
    config = transformers.BertConfig(**bert.hf_config(spec.arch, spec.settings["gelu"],
                                                             _check_dropout(spec)))
    model = _built(spec, device, lambda: transformers.BertForSequenceClassification(config))
    labels = inputs["labels"]
    inputs = _tensors(bert.torch_inputs(inputs["x"]), device)
    gelu = {"gelu": {v: k for k, v in bert.HF_GELU.items()}[config.hidden_act]}
    logits = lambda out: {"logits": out.logits}         # noqa: E731
    if spec.task == "predict":
        return _predict(model, inputs, spec, outputs=logits, evidence=gelu)
    inputs["labels"] = _tensors(labels.astype("int64"), device)
    return _fit(model, inputs, spec, "adamw", loss=lambda out: out.loss, outputs=logits, evidence=gelu)


def _check_dropout(spec):
    """The equivalence check runs without dropout (each framework draws its own masks); the cells with the
    libraries' defaults."""
    return 0.0 if spec.equivalence else None


def _resnet50(spec, inputs, device):
    import torchvision
    model = _built(spec, device, lambda: torchvision.models.resnet50(**resnet50.torchvision_kwargs(spec.arch)))
    if spec.aligned:
        _as_keras_resnet50(model)
    target = _tensors(inputs["labels"].astype("int64"), device)      # cross_entropy takes int64 class indices
    return _fit(model, _tensors((channels_first(inputs["images"]),), device), spec, "sgd",
                loss=lambda logits: torch.nn.functional.cross_entropy(logits, target),
                outputs=lambda logits: {"logits": logits})


def _as_keras_resnet50(model):
    """torchvision's v1.5 made keras.applications' v1, for the equivalence check only: the stride of each stage's
    first block on conv1 (1x1) instead of conv2 (3x3), a bias on every convolution, batch-norm epsilon 1.001e-5
    (keras/src/applications/resnet.py block1: Conv2D(filters, 1, strides=stride), use_bias, epsilon=1.001e-5)."""
    for layer in (model.layer2, model.layer3, model.layer4):
        layer[0].conv1.stride, layer[0].conv2.stride = (2, 2), (1, 1)
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.bias is None:
            module.bias = torch.nn.Parameter(torch.zeros(module.out_channels, device=module.weight.device,
                                                         dtype=module.weight.dtype))
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eps = 1.001e-5


def _causal_lm(name: str, kwargs):
    """The builder of a transformers causal LM: its classes' stem (transformers.<name>Config,
    <name>ForCausalLM), the family's config kwargs."""
    return for_tasks(lambda spec, inputs, device: _causal_lm_cell(spec, inputs, device, name, kwargs), "fit", "generate")


def _causal_lm_cell(spec, inputs, device, name, kwargs):
    import transformers
    config_cls, model_cls = getattr(transformers, f"{name}Config"), getattr(transformers, f"{name}ForCausalLM")
    config = config_cls(**kwargs(spec.arch))
    model = _built(spec, device, lambda: model_cls(config))
    if spec.task == "generate":
        return _generate(model, inputs["prompt"], spec, device)
    import peft
    model = peft.get_peft_model(model, peft.LoraConfig(r=spec.task_options["lora_rank"], lora_dropout=0.0,
                                                       target_modules=decoder.PEFT_LORA_TARGETS))
    x, targets = inputs["x"], inputs["targets"]        # the Keras cells' tokens and next-token targets
    inputs = _tensors({"input_ids": x["token_ids"].astype("int64"),
                       "attention_mask": x["padding_mask"].astype("int64")}, device)
    target = _tensors(targets.astype("int64"), device).flatten()
    # Cross-entropy over every position against its next token, as the Keras cells (HF's own shifted loss would
    # drop the last position); in float32 as HF computes its loss.
    return _fit(model, inputs, spec, "adamw",
                loss=lambda out: torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), target),
                outputs=lambda out: {"logits": out.logits})


def _generate(model, prompt, spec, device):
    """One greedy generate() call: prompt_length prompt tokens, exactly new_tokens new ones (no EOS stop).
    Compiled column: transformers' own compiled decoding (static KV cache + CompileConfig), the way its docs give."""
    import transformers
    new_tokens = spec.task_options["new_tokens"]
    site = spec.settings["compile_site"]
    compiled = site == "decoding"
    # A transformers with CompileConfig compiles its static-cache decoding itself; older ones (4.38) leave it to the
    # caller: the static cache, then torch.compile of the model's forward, as their docs give.
    own_compile = hasattr(transformers, "CompileConfig")
    extra = {"disable_compile": not compiled,
             "compile_config": transformers.CompileConfig(mode=_mode(spec)) if compiled else None} if own_compile else {}
    config = transformers.GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
        eos_token_id=None, pad_token_id=0, cache_implementation="static" if compiled else None, **extra)
    if compiled and own_compile and device.type == "cpu":
        config.compile_config._compile_all_devices = True   # transformers compiles on accelerators only by default
    prompt = _tensors(prompt, device)
    mask = torch.ones_like(prompt)
    model = _place(model, spec, device).eval()
    # generate() fills a None eos_token_id from the model's own generation_config (Llama's and Mistral's 2, Gemma's
    # 1), and min_new_tokens then masks that token out of the greedy choice: the Keras columns (stop_token_ids=None)
    # would pick it, so the tokens would part where it is the argmax.
    model.generation_config.eos_token_id = None
    if compiled and not own_compile:
        if not callable(getattr(model, "_setup_cache", None)):      # 4.38: Llama and Gemma only
            raise NotSupported(f"transformers {transformers.__version__} has no static KV cache for "
                               f"{type(model).__name__} (compiled decoding needs one)")
        # not fullgraph=True (the 4.38 docs'): 4.38.1's Gemma mask has a data-dependent branch dynamo cannot trace
        model.forward = torch.compile(model.forward, mode=_mode(spec))
    # "model": the anchor's torch.compile(model) then generate, which reaches the uncompiled forward
    generating = torch.compile(model, mode=_mode(spec)) if site == "model" else model
    seen = {}

    def step():
        with torch.no_grad():
            _note_compute_dtype(seen, device, model)
            return generating.generate(input_ids=prompt, attention_mask=mask, generation_config=config)

    def evidence():
        decoding = config.cache_implementation == "static" and (
            bool(config.compile_config) if own_compile else _is_compiled(model.forward))
        return {"jit_compile": decoding or _is_compiled(generating),
                "compile_site": "decoding" if decoding else "model" if _is_compiled(generating) else "none"}

    def outputs():      # the prompt's logits (a prefill) and the greedy tokens of one whole call
        return {"prefill_logits": model(input_ids=prompt, attention_mask=mask).logits,
                "tokens": generating.generate(input_ids=prompt, attention_mask=mask,
                                              generation_config=config)[:, prompt.shape[1]:]}
    return _workload(model, step, spec, seen, evidence=evidence, outputs=_inference_outputs(model, outputs),
                     generated_tokens=lambda out: out.shape[0] * (out.shape[1] - prompt.shape[1]))


def _sam(spec, inputs, device):
    model = _built(spec, device, lambda: _segment_anything(spec.arch))
    images = _tensors(channels_first(inputs["images"]), device)
    if spec.task == "fit":   # the image encoder alone against a random embedding, as the anchor
        target = _tensors(channels_first(inputs["target"]), device)
        return _fit(SamImageEncoder(model.image_encoder), (images,), spec, "adam", loss=_mse(target),
                    outputs=lambda embedding: {"image_embedding": _channels_last(embedding)})
    points = inputs["points"]                           # one prompt of num_points points per image
    n, k = points.shape[:2]
    prompts = _tensors((points.reshape(n, 1, k, 2), np.ones((n, 1, k), "int64")), device)
    return _predict(SamPredict(model), (images, *prompts), spec,
                    outputs=lambda found: {"masks": torch.cat([masks for masks, _ in found]),
                                           "iou": torch.cat([iou for _, iou in found])})


def _channels_last(x):
    return x.permute(0, 2, 3, 1)


def _segment_anything(arch):
    """segment_anything.modeling's parts wired as segment_anything.build_sam does, at any size."""
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer
    kw = sam.segment_anything_kwargs(arch)
    return Sam(image_encoder=ImageEncoderViT(**kw["image_encoder"],
                                             norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-6)),
               prompt_encoder=PromptEncoder(**kw["prompt_encoder"]),
               mask_decoder=MaskDecoder(**kw["mask_decoder"], transformer=TwoWayTransformer(**kw["transformer"])))


# The normalisation the Keras SAM image encoders apply in their graph (keras-hub vit_det_backbone.py:108-111, keras-cv
# vit_det_backbone.py:127-130) and segment-anything's Sam.preprocess outside it (sam.py:27-28; its 0-255 units):
# the same per-channel ImageNet mean and std, here on [0, 1) images.
SAM_PIXEL_MEAN, SAM_PIXEL_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class _Normalizing(torch.nn.Module):
    """Normalises [0, 1) images as the Keras SAM encoders do in their graph (without it the native column encodes
    other inputs than the Keras ones: 81% apart on the same weights)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor(SAM_PIXEL_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(SAM_PIXEL_STD).view(1, 3, 1, 1), persistent=False)

    def normalized(self, images):
        return (images - self.mean) / self.std


class SamImageEncoder(_Normalizing):
    """segment-anything's image encoder on [0, 1) images, normalised first."""

    def __init__(self, image_encoder):
        super().__init__()
        self.image_encoder = image_encoder

    def forward(self, images):
        return self.image_encoder(self.normalized(images))


class SamPredict(_Normalizing):
    """Sam.forward without its padding and mask post-processing (the Keras cells have neither): the normalised image
    encoder on the batch, then prompt encoder and mask decoder per image (segment-anything's decoder takes one
    image), multimask output."""

    def __init__(self, sam):
        super().__init__()
        self.sam = sam

    def forward(self, images, points, labels):
        embeddings = self.sam.image_encoder(self.normalized(images))
        dense_pe = self.sam.prompt_encoder.get_dense_pe()
        outputs = []
        for i in range(images.shape[0]):
            sparse, dense = self.sam.prompt_encoder(points=(points[i], labels[i]), boxes=None, masks=None)
            outputs.append(self.sam.mask_decoder(image_embeddings=embeddings[i:i + 1], image_pe=dense_pe,
                                                 sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                                 multimask_output=True))
        return outputs


def _stable_diffusion(spec, inputs, device):
    kw = stable_diffusion.diffusers_kwargs(spec.arch)
    if spec.task == "fit":   # the VAE image encoder (AutoencoderKL.encoder) against random moments, as the anchor
        from diffusers.models.autoencoders.vae import Encoder
        images, target = (_tensors(channels_first(inputs[k]), device) for k in ("images", "target"))
        encoder = _built(spec, device, lambda: Encoder(**kw["vae_encoder"]))
        if spec.aligned:
            _as_keras_cv_sd(encoder)
        return _fit(encoder, (images,), spec, "adam", loss=_mse(target),
                    outputs=lambda moments: {"moments": _channels_last(moments)})
    # predict: one classifier-free-guided denoising step of the diffusers pipeline: the UNet on the 2n batch
    # (unconditional + conditional), guidance, one DDIM scheduler step. Prompt embeddings stand in for the text encoder.
    from diffusers import DDIMScheduler, UNet2DConditionModel
    unet = _place(_built(spec, device, lambda: UNet2DConditionModel(**kw["unet"])), spec, device).eval()
    if spec.aligned:
        _as_keras_cv_sd(unet)
    # SD v1.4's schedule; "trailing" spacing starts at t = 999 (and steps to 979), as keras-cv's sampler and the
    # Keras cells' step (kbench.adapters._keras_sd) do; diffusers' default "leading" starts at 980. No clipping of the
    # predicted x0, as SD v1.4's scheduler config and keras-cv (stable_diffusion.py: pred_x0 as computed): DDIMScheduler
    # defaults to clip_sample=True (scheduling_ddim.py), at t = 999 a clamp to [-1, 1] of an x0 of scale ~15
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              timestep_spacing="trailing", clip_sample=False, set_alpha_to_one=False)
    scheduler.set_timesteps(50)
    # The scheduler gets the timestep as a Python int (its arithmetic on a tensor timestep is a data-dependent
    # branch: a graph break under torch.compile), the UNet a device tensor made once (a CPU tensor is copied to the
    # device, with a stream sync, on every call: diffusers unet_2d_condition.py, `timesteps[None].to(device)`).
    t = int(scheduler.timesteps[0])
    timestep = torch.tensor([t], device=device)
    latent, context, unconditional = inputs["latent"], inputs["context"], inputs["unconditional"]
    latents, contexts = _tensors((channels_first(latent), np.concatenate([unconditional, context])), device)
    forward, autocast = _maybe_compile(unet, spec), _autocast(spec, device)

    def denoise():
        eps_uncond, eps_text = forward(torch.cat([latents] * 2), timestep,
                                       encoder_hidden_states=contexts).sample.chunk(2)
        eps = eps_uncond + 7.5 * (eps_text - eps_uncond)
        return scheduler.step(eps, t, latents).prev_sample
    # "step": the whole denoising step compiled, as the anchor's torch.compile(pipeline) reached it
    return _inference(unet, forward, denoise, spec, device, autocast,
                      outputs=lambda latent: {"latent": _channels_last(latent)})


def _as_keras_cv_sd(module):
    """diffusers' SD v1.4 blocks made keras-cv's, for the equivalence check only, so the check can tell the mapping
    right from the two libraries' own differences: keras-cv's GEGLU gates with the tanh GELU (diffusion_model.py
    GEGLU) where diffusers' is exact (activations.py GEGLU.gelu), and keras-cv's group norms use epsilon 1e-5
    everywhere where diffusers' Transformer2DModel norm (transformer_2d.py) and VAE Encoder use 1e-6."""
    from diffusers.models.activations import GEGLU
    for layer in module.modules():
        if isinstance(layer, GEGLU):
            layer.gelu = lambda gate: torch.nn.functional.gelu(gate, approximate="tanh")
        if isinstance(layer, torch.nn.GroupNorm):
            layer.eps = 1e-5


MODELS = {"bert": for_tasks(_bert, "fit", "predict"), "gemma": _causal_lm("Gemma", gemma.hf_config),
          "mistral": _causal_lm("Mistral", mistral.hf_config), "llama": _causal_lm("Llama", llama.hf_config), "sam": for_tasks(_sam, "fit", "predict"),
          "stable_diffusion": for_tasks(_stable_diffusion, "fit", "predict"), "resnet50": {"fit": _resnet50}}


# ---------------------------------------------------------------- shared step paths

def _compile(target, spec):
    return torch.compile(target, mode=_mode(spec))


def _maybe_compile(module, spec):
    """The module compiled where the cell's compile site is the module."""
    return _compile(module, spec) if spec.settings["compile_site"] == "module" else module


def _is_compiled(target) -> bool:
    """torch.compile's wrapper, on a module (OptimizedModule) or a function."""
    return isinstance(target, torch._dynamo.eval_frame.OptimizedModule) or hasattr(target,
                                                                                  "_torchdynamo_orig_callable")


def _evidence(forward, whole_step, whole_step_site: str) -> dict:
    """What the cell compiled, read from what it built: the module, the whole step function, or nothing."""
    site = "module" if _is_compiled(forward) else whole_step_site if _is_compiled(whole_step) else "none"
    return {"jit_compile": site != "none", "compile_site": site}


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _place(module, spec, device):
    """The module on the cell's device, its parameters in the precision's weights dtype; LoRA factors in float32
    where the cell's lora_dtype says so (as Keras 3 creates them), else in the model's dtype (the anchor's peft).
    The tuned profile's convolution settings (PyTorch's performance tuning guide): the channels_last memory format,
    and cuDNN's auto-tuner."""
    weights = spec.dtypes.weights
    module = module.to(device) if weights == "float32" else module.to(device=device, dtype=_torch_dtype(weights))
    if spec.settings.get("channels_last"):
        module = module.to(memory_format=torch.channels_last)
    if spec.settings.get("cudnn_benchmark"):
        torch.backends.cudnn.benchmark = True
    if spec.settings.get("lora_dtype") == "float32" and hasattr(module, "peft_config"):
        _lora_to_float32(module)
    return module


def _lora_to_float32(module) -> None:
    """The LoRA factors in float32: peft's cast_adapter_dtype; where peft has none (0.9), what it does by hand:
    every float16/bfloat16 parameter of the lora_ layers cast to float32 in place (peft 0.9's LoRA forward casts
    its input to the factors' dtype and its output back)."""
    try:
        from peft.tuners.tuners_utils import cast_adapter_dtype
    except ImportError:
        for name, p in module.named_parameters():
            if "lora_" in name and p.dtype in (torch.float16, torch.bfloat16):
                p.data = p.data.to(torch.float32)
        return
    cast_adapter_dtype(module, adapter_name="default", autocast_adapter_dtype=True)


def _autocast(spec, device):
    """The forward pass's precision context: torch.autocast where compute and weights dtypes differ, else nothing."""
    dtypes = spec.dtypes
    if dtypes.compute == dtypes.weights:
        return contextlib.nullcontext
    return functools.partial(torch.autocast, device.type, _torch_dtype(dtypes.compute))


# The Keras cells' optimizers, with their defaults but the configured learning rate.
def _optimizer(kind: str, spec: CellSpec, parameters):
    """The Keras cells' optimizers with config `optimizers`' hyperparameters and the task's learning rate (AdamW is
    also HF Trainer's default, "adamw_torch")."""
    o, lr = spec.task_options["optimizers"][kind], spec.task_options["learning_rate"]
    if kind == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=o["momentum"])
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[kind]
    extra = {"weight_decay": o["weight_decay"]} if kind == "adamw" else {}
    if spec.settings.get("fused_optimizer"):     # the tuned profile: one fused kernel for the whole step
        extra["fused"] = True
    return cls(parameters, lr=lr, betas=(o["beta_1"], o["beta_2"]), eps=o["epsilon"], **extra)


def _fit(module, inputs, spec, optimizer, loss, outputs, evidence=None) -> Workload:
    """inputs: a dict of keyword tensors or a tuple of positional ones; loss(output) -> scalar tensor; outputs(output)
    -> {name: tensor} (the equivalence check's view of a forward); evidence: more the cell observed of itself.
    The step returns the (unscaled) loss."""
    device = _device_of(inputs)
    module = _place(module, spec, device).train()
    forward, autocast = _maybe_compile(module, spec), _autocast(spec, device)
    optimizer = _optimizer(optimizer, spec, [p for p in module.parameters() if p.requires_grad])
    # Dynamic loss scaling for float16 gradients (bfloat16 has float32's range and needs none).
    scaler = _grad_scaler(device.type) if spec.dtypes.loss_scaling else None

    def train():
        with autocast():
            value = loss(_call(forward, inputs))
        backward_and_step(value, optimizer, scaler)
        optimizer.zero_grad(set_to_none=True)
        return value.detach()
    # "train-step": zero_grad, forward, loss, backward and optimizer step compiled as one function (the anchor's
    # torch.compile(train_fn)); dynamo breaks it into graphs at backward and compiles the optimizer step apart
    train = _compile(train, spec) if spec.settings["compile_site"] == "train-step" else train
    seen = {}

    def step():
        _note_compute_dtype(seen, device, module, autocast)
        # The loss read back to the host every step, as Keras's train_on_batch does with its logs (and as HF
        # Trainer's per-step isnan check did): every column's fit does the same host work, one device sync a step.
        return train().item()
    return _workload(module, step, spec, seen, evidence=lambda: {**_evidence(forward, train, "train-step"),
                                                                  "fused_optimizer": bool(optimizer.defaults.get("fused")),
                                                                  **(evidence or {})},
                     outputs=_inference_outputs(module, lambda: outputs(_call(forward, inputs)), autocast))


def _predict(module, inputs, spec, outputs, evidence=None) -> Workload:
    device = _device_of(inputs)
    module = _place(module, spec, device).eval()
    forward, autocast = _maybe_compile(module, spec), _autocast(spec, device)
    return _inference(module, forward, lambda: _call(forward, inputs), spec, device, autocast, outputs, evidence)


def _inference(module, forward, run, spec, device, autocast, outputs, evidence=None) -> Workload:
    """A no-grad step of `run` (compiled whole where the compile site is "step"), its compute dtype noted;
    outputs(run()) -> {name: tensor}, the equivalence check's view of it."""
    run = _compile(run, spec) if spec.settings["compile_site"] == "step" else run
    seen = {}

    def step():
        with torch.no_grad(), autocast():
            _note_compute_dtype(seen, device, module)
            return run()
    return _workload(module, step, spec, seen, evidence=lambda: {**_evidence(forward, run, "step"),
                                                                  **(evidence or {})},
                     outputs=_inference_outputs(module, lambda: outputs(run()), autocast))


def _inference_outputs(module, compute, autocast=contextlib.nullcontext):
    """The module's outputs on the cell's inputs in inference mode (eval, no grad, the cell's precision context), as
    float32 NumPy; the module is put back in the mode it was in."""
    def outputs() -> dict:
        training = module.training
        module.eval()
        try:
            with torch.no_grad(), autocast():
                found = compute()
        finally:
            module.train(training)
        return {name: value.detach().float().cpu().numpy() for name, value in found.items()}
    return outputs


def _workload(module, step, spec, seen: dict, evidence, **extra) -> Workload:
    total, trainable = _count(module)

    def observed() -> dict:
        found = evidence()
        lora = [p for name, p in module.named_parameters() if "lora_" in name]
        if lora:
            found["lora_dtype"] = dtype_name(lora[0].dtype)
        return found
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=spec.batch_size,
                    dtypes=lambda: {"weights": dtype_name(next(module.parameters()).dtype),
                                    "compute": seen.get("compute")}, evidence=observed, model=module, **extra)


def _note_compute_dtype(seen: dict, device, module, autocast=contextlib.nullcontext) -> None:
    """Once per cell, in the step's precision context: the dtype its matrix products run in, autocast's where
    autocast is on, else the weights'."""
    if "compute" not in seen:
        with autocast():
            on = _autocast_enabled(device.type)
            seen["compute"] = dtype_name(_autocast_dtype(device.type) if on
                                         else next(module.parameters()).dtype)


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
