"""PaddlePaddle adapter: paddlenlp (BERT), ppdiffusers (StableDiffusion v1.4's UNet, VAE encoder and DDIM scheduler),
paddle.vision (ResNet-50, v1.5 as torchvision's). Random weights from configs (kbench.models.<family>), never downloads.

Two columns share this module: paddle-dygraph (the dynamic graph, Paddle's eager mode) and paddle-static
(paddle.jit.to_static(full_graph=False): SOT, which translates Python bytecode into static graphs and falls back to
the dynamic graph at each graph break). What to_static wraps is the forward pass (a fit's forward and loss as one
layer); backward, the optimizer step and clear_grad stay dynamic, as Paddle's own to_static training recipe does
(full_graph=True, the AST transcriber, fails on such a step: `pir.Value has no attribute 'backward'`). Its
translation happens in the warm-up steps. Each workload's evidence says what ran: the to_static mode, the backend
Paddle chose (CINN needs a CINN build, CUDA and PIR; else PHI kernels), and the graph breaks by reason.
Fit: forward, loss, backward, optimizer step, clear_grad, and the loss read back to the host (as train_on_batch).
Precision (spec.dtypes): the weights stay float32 (no Paddle row runs pure bfloat16); a compute dtype other than
the weights' runs forward and loss under paddle.amp.auto_cast(level="O1"), loss scaling is paddle.amp.GradScaler.
On a CPU auto_cast only warns and computes float32: the dtype the adapter observes is that of a product computed
inside the context, so such a cell is failed (kbench.run.runner.PrecisionMismatch), never timed under the half label.
"""
from __future__ import annotations

import contextlib
import os
import zlib  # noqa: F401  before paddle: paddle 2.6's libpaddle.so exports an old zlib that the system's would call

# Paddle sets OMP_NUM_THREADS=1 at import unless it is set (paddle/base/__init__.py __bootstrap__): every core this
# process may use, as torch, TensorFlow and XLA take by default; an explicit setting wins and is recorded.
os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

from kbench.contract.spec import CellSpec
from kbench.models import bert, resnet50, stable_diffusion  # noqa: E402
from kbench.adapters import (Backend, NotSupported, Workload, _hooks, backward_and_step, channels_first,  # noqa: E402
                             for_tasks)

from kbench.adapters._packages import PADDLE as _PACKAGES  # noqa: E402


def backend() -> Backend:
    return Backend(name="paddle", package_versions=lambda: _hooks.package_versions(_PACKAGES),
                   **_hooks.paddle_hooks())


def prepare(spec: CellSpec) -> dict:
    paddle.seed(spec.seed)            # weight init
    return {}


def refuse(spec: CellSpec) -> None:
    """A GPU the installed wheel has no kernels for (paddlepaddle-gpu 2.6.2 on Hopper, kbench.gpu.cuda.KERNEL_ARCHS)
    runs none of them: the cell is unsupported there, with the reason, before any kernel fails."""
    if not (paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0):
        return
    from importlib import metadata
    from kbench.gpu import cuda
    reason = cuda.kernel_refusal(f"paddlepaddle-gpu=={metadata.version('paddlepaddle-gpu')}",
                                 tuple(paddle.device.cuda.get_device_capability(0)))
    if reason:
        raise NotSupported(reason)


# ---------------------------------------------------------------- models

def _bert(spec, inputs):
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification
    config = BertConfig(**bert.paddlenlp_config(spec.arch, _check_dropout(spec)))
    model = BertForSequenceClassification(config)
    gelu = _set_gelu(model, spec.settings["gelu"])
    labels = inputs["labels"]
    # An explicit mask: without one paddlenlp masks every token equal to pad_token_id (0), HF and keras-hub none.
    inputs = _tensors(bert.torch_inputs(inputs["x"]))
    forward = lambda m, **kw: _first(m(**kw, return_dict=False))       # noqa: E731
    logits = lambda out: {"logits": out}                                 # noqa: E731
    if spec.task == "predict":
        return _predict(model, _Call(model, forward), inputs, spec, outputs=logits, evidence=gelu)
    target = _tensors(labels.astype("int64"))
    return _fit(model, _loss_layer(model, lambda out: F.cross_entropy(out, target), forward), inputs, spec,
                "adamw", outputs=logits, evidence=gelu)


def _gelu_tanh(x):
    return F.gelu(x, approximate=True)


def _set_gelu(model, gelu: str) -> dict:
    """paddlenlp's encoder layers take getattr(paddle.nn.functional, hidden_act), which has no tanh GELU: where
    settings.gelu is tanh (the Keras columns' form) each layer's activation is set to it. Returns what the layers
    use, read from them."""
    layers = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.TransformerEncoderLayer)]
    if gelu == "tanh":
        for layer in layers:
            layer.activation = _gelu_tanh
    found = {"tanh" if layer.activation is _gelu_tanh else "exact" if layer.activation is F.gelu
             else getattr(layer.activation, "__name__", "other") for layer in layers}
    return {"gelu": found.pop() if len(found) == 1 else sorted(found)}


def _check_dropout(spec):
    """The equivalence check runs without dropout (each framework draws its own masks); the cells with the
    libraries' defaults."""
    return 0.0 if spec.equivalence else None


def _resnet50(spec, inputs):
    model = paddle.vision.models.resnet50(**resnet50.paddle_vision_kwargs(spec.arch))
    if spec.aligned:
        _as_keras_resnet50(model)
    images, target = inputs["images"], _tensors(inputs["labels"].astype("int64"))
    return _fit(model, _loss_layer(model, lambda logits: F.cross_entropy(logits, target)),
                {"x": _tensors(channels_first(images))}, spec, "sgd", outputs=lambda logits: {"logits": logits})


def _as_keras_resnet50(model):
    """paddle.vision's v1.5 made keras.applications' v1, for the equivalence check only (as the native column's
    kbench.adapters.native_torch._as_keras_resnet50): each stage's first stride on conv1 (1x1) instead of conv2
    (3x3), a bias on every convolution, batch-norm epsilon 1.001e-5."""
    for layer in (model.layer2, model.layer3, model.layer4):
        layer[0].conv1._stride, layer[0].conv2._stride = [2, 2], [1, 1]
    for module in model.sublayers():
        if isinstance(module, paddle.nn.Conv2D) and module.bias is None:
            module.bias = module.create_parameter([module._out_channels], is_bias=True)
        if isinstance(module, paddle.nn.layer.norm._BatchNormBase):
            module._epsilon = 1.001e-5


def _stable_diffusion(spec, inputs):
    kw = stable_diffusion.diffusers_kwargs(spec.arch)     # ppdiffusers mirrors diffusers' constructors
    if spec.task == "fit":   # the VAE image encoder (AutoencoderKL.encoder) against random moments, as the anchor
        from ppdiffusers.models.vae import Encoder
        images, target = (_tensors(channels_first(inputs[k])) for k in ("images", "target"))
        encoder = Encoder(**kw["vae_encoder"])
        return _fit(encoder, _loss_layer(encoder, lambda moments: F.mse_loss(moments, target)), {"x": images}, spec, "adam",
                    outputs=lambda moments: {"moments": _channels_last(moments)})
    # predict: one classifier-free-guided denoising step, as the native column's: the UNet on the 2n batch
    # (unconditional + conditional), guidance 7.5, one DDIM step; prompt embeddings stand in for the text encoder.
    from ppdiffusers import DDIMScheduler, UNet2DConditionModel
    unet = UNet2DConditionModel(**kw["unet"])
    # SD v1.4's schedule with trailing spacing (t = 999 first, as keras-cv's sampler) and no clipping of the
    # predicted x0 (SD v1.4's scheduler config; DDIMScheduler defaults to clip_sample=True): see native_torch.
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              timestep_spacing="trailing", clip_sample=False, set_alpha_to_one=False)
    scheduler.set_timesteps(50)
    t = int(scheduler.timesteps[0])
    timestep = paddle.to_tensor([t])
    latent, context, unconditional = inputs["latent"], inputs["context"], inputs["unconditional"]
    latents, contexts = _tensors((channels_first(latent), np.concatenate([unconditional, context])))
    forward = _Call(unet, lambda m, x: m(x, timestep, encoder_hidden_states=contexts, return_dict=False)[0])

    def denoise(call):
        eps_uncond, eps_text = call(x=paddle.concat([latents] * 2)).chunk(2)
        eps = eps_uncond + 7.5 * (eps_text - eps_uncond)
        return scheduler.step(eps, t, latents).prev_sample
    return _inference(unet, forward, denoise, spec, outputs=lambda latent: {"latent": _channels_last(latent)})


MODELS = {"bert": for_tasks(_bert, "fit", "predict"), "stable_diffusion": for_tasks(_stable_diffusion, "fit", "predict"),
          "resnet50": {"fit": _resnet50}}


# ---------------------------------------------------------------- what to_static wraps

class _Call(paddle.nn.Layer):
    """call(model, *args, **kwargs) as a layer that holds the model (what paddle-static's to_static wraps: a layer,
    not a closure; to_static of a closure fails in paddle 2.6, `NameError: name 'm' is not defined`)."""

    def __init__(self, model, call=None):
        super().__init__()
        self.model, self.call = model, call or _one_input

    def forward(self, **inputs):        # keywords only: to_static's signature check refuses *args here
        return self.call(self.model, **inputs)


def _one_input(model, x):
    return model(x)


def _loss_layer(model, loss, call=None) -> _Call:
    """A fit's forward pass and loss as one layer: (loss, output)."""
    forward = call or _one_input

    def with_loss(m, **inputs):
        output = forward(m, **inputs)
        return loss(output), output
    return _Call(model, with_loss)


def _static(layer, spec):
    """paddle-static: the layer through paddle.jit.to_static(full_graph=False) (SOT); paddle-dygraph: as it is."""
    return paddle.jit.to_static(layer, full_graph=False) if spec.settings["jit_compile"] else layer


def _evidence(layer) -> dict:
    """What ran, read from the layer built: to_static's function class (SymbolicStaticFunction: SOT,
    ASTStaticFunction: the AST transcriber), the backend it chose (its _kwargs['backend']: CINN or PHI), whether
    this Paddle has CINN at all, and SOT's graph breaks by reason (kbench.adapters._hooks.paddle_graph_breaks)."""
    forward = layer.forward
    kwargs = getattr(forward, "_kwargs", None)
    if kwargs is None:
        return {"jit_compile": False, "to_static": "none", "omp_num_threads": os.environ["OMP_NUM_THREADS"]}
    kind = type(forward).__name__
    static_backend = kwargs.get("backend")
    return {"jit_compile": True,
            "to_static": {"SymbolicStaticFunction": "sot", "ASTStaticFunction": "ast"}.get(kind, kind),
            "static_backend": getattr(static_backend, "name", str(static_backend)),
            "cinn_compiled": paddle.is_compiled_with_cinn(),
            "sot_graph_breaks": dict(_hooks.paddle_graph_breaks()),
            "omp_num_threads": os.environ["OMP_NUM_THREADS"]}


# ---------------------------------------------------------------- shared step paths

def _autocast(spec):
    """The forward pass's precision context: paddle.amp.auto_cast O1 where compute and weights dtypes differ."""
    dtypes = spec.dtypes
    if dtypes.compute == dtypes.weights:
        return contextlib.nullcontext
    return lambda: paddle.amp.auto_cast(enable=True, dtype=dtypes.compute, level="O1")


def observed_compute_dtype(autocast) -> str:
    """The dtype a matrix product really runs in inside the step's precision context: one computed there, read from
    its result (auto_cast on a CPU only warns and leaves float32; what was asked for is no evidence)."""
    a = paddle.ones([8, 8], dtype="float32")
    with autocast():
        return _dtype_name(paddle.matmul(a, a).dtype)


def _note_compute_dtype(seen: dict, autocast) -> None:
    """Once per cell, in the step's precision context (kbench.adapters.paddle.observed_compute_dtype)."""
    if "compute" not in seen:
        seen["compute"] = observed_compute_dtype(autocast)


def _optimizer(kind: str, spec: CellSpec, parameters):
    """The Keras cells' optimizers with config `optimizers`' hyperparameters and the task's learning rate; Paddle's
    Momentum is torch's SGD with momentum (v = m v + g, p -= lr v)."""
    o, lr = spec.task_options["optimizers"][kind], spec.task_options["learning_rate"]
    if kind == "sgd":
        return paddle.optimizer.Momentum(learning_rate=lr, momentum=o["momentum"], parameters=parameters)
    cls = {"adamw": paddle.optimizer.AdamW, "adam": paddle.optimizer.Adam}[kind]
    extra = {"weight_decay": o["weight_decay"]} if kind == "adamw" else {}
    return cls(learning_rate=lr, beta1=o["beta_1"], beta2=o["beta_2"], epsilon=o["epsilon"], parameters=parameters,
               **extra)


def _fit(model, loss_layer, inputs, spec, optimizer, outputs, evidence=None) -> Workload:
    """inputs: keyword tensors; loss_layer(**inputs) -> (loss, output); outputs(output) -> {name: tensor} (the equivalence check's view). The
    step returns the (unscaled) loss, read back to the host."""
    model.train()
    forward, autocast = _static(loss_layer, spec), _autocast(spec)
    optimizer = _optimizer(optimizer, spec, [p for p in model.parameters() if not p.stop_gradient])
    scaler = paddle.amp.GradScaler() if spec.dtypes.loss_scaling else None
    seen = {}

    def step():
        _note_compute_dtype(seen, autocast)
        with autocast():
            value, _ = forward(**inputs)
        backward_and_step(value, optimizer, scaler)
        optimizer.clear_grad()
        return float(value)
    return _workload(model, step, spec, seen, evidence=lambda: {**_evidence(forward), "metrics": [],
                                                                 **(evidence or {})},
                     outputs=_inference_outputs(model, lambda: outputs(forward(**inputs)[1]), autocast))


def _predict(model, call, inputs, spec, outputs, evidence=None) -> Workload:
    return _inference(model, call, lambda forward: forward(**inputs), spec, outputs, evidence)


def _inference(model, call, run, spec, outputs, evidence=None) -> Workload:
    """A no-grad step: run(forward), forward being `call` (a layer) through to_static where the column compiles."""
    model.eval()
    forward, autocast = _static(call, spec), _autocast(spec)
    seen = {}

    def step():
        _note_compute_dtype(seen, autocast)
        with paddle.no_grad(), autocast():
            return run(forward)
    return _workload(model, step, spec, seen, evidence=lambda: {**_evidence(forward), **(evidence or {})},
                     outputs=_inference_outputs(model, lambda: outputs(run(forward)), autocast))


def _inference_outputs(model, compute, autocast=contextlib.nullcontext):
    """The model's outputs on the cell's inputs in inference mode, as float32 NumPy; its mode restored after."""
    def found() -> dict:
        training = model.training
        model.eval()
        try:
            with paddle.no_grad(), autocast():
                values = compute()
        finally:
            model.train() if training else model.eval()
        return {name: value.astype("float32").numpy() for name, value in values.items()}
    return found


def _workload(model, step, spec, seen: dict, evidence, **extra) -> Workload:
    total, trainable = count(model)
    return Workload(step=step, params_total=total, params_trainable=trainable, examples_per_step=spec.batch_size,
                    dtypes=lambda: {"weights": _dtype_name(model.parameters()[0].dtype), "compute": seen.get("compute")},
                    evidence=evidence, model=model, **extra)


def count(model) -> tuple[int, int]:
    """(total, trainable) parameters, as torch and Keras count weights: Paddle's batch-norm running mean and
    variance are Parameters (stop_gradient=True), torch's are buffers; they are left out of both counts."""
    statistics = {id(p) for layer in model.sublayers(include_self=True)
                  if isinstance(layer, paddle.nn.layer.norm._BatchNormBase) for p in (layer._mean, layer._variance)}
    params = [p for p in model.parameters() if id(p) not in statistics]
    size = lambda p: int(p.size)        # noqa: E731
    return sum(map(size, params)), sum(size(p) for p in params if not p.stop_gradient)


def _dtype_name(dtype) -> str:
    """paddle.float32 (str form "paddle.float32") -> "float32"."""
    return str(dtype).removeprefix("paddle.")


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def _channels_last(x):
    return x.transpose([0, 2, 3, 1])


def _tensors(tree):
    """numpy -> tensors on Paddle's current device (the GPU where the hooks set one), made once in build()."""
    if isinstance(tree, dict):
        return {k: _tensors(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_tensors(v) for v in tree)
    return paddle.to_tensor(tree)


def load_reference(workload: Workload, arrays, spec: CellSpec) -> dict:
    """The equivalence check's reference (Keras 3 weights) into the Paddle model: the native column's mapping of the
    model and task (kbench.models.mappings) onto torch's names and layouts, then torch's onto Paddle's
    (kbench.models.mappings.paddle). What the model has that the reference did not give it, and the reverse, are returned
    (a model with missing weights never passes)."""
    from kbench.models import mappings
    from kbench.models.mappings import paddle as to_paddle
    mapping = mappings.mapping(spec.model, spec.task)
    if mapping is None or not to_paddle.has_rules(spec.model):
        raise NotSupported(f"mapping incomplete: no weight mapping from the Keras reference to Paddle "
                           f"{spec.model} {spec.task} yet")
    state = to_paddle.to_paddle(spec.model, mapping.to_torch(arrays))
    own = workload.model.state_dict()
    unexpected = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state))
    workload.model.set_state_dict({name: value.astype(_dtype_name(own[name].dtype)) for name, value in state.items()
                                   if name in own})
    return {k: v for k, v in (("missing", missing), ("unexpected", unexpected),
                              ("skipped", mapping.skipped(arrays))) if v}
