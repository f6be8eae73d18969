"""The equivalence check's weights: one reference set per model and task, made in the reference column (Keras 3 on
JAX) from the cell's seed, and the mappings that load it into every other column.

Reference weights are "unit scale" (unit_scale): at the 0.02-std initialisation the cells time with, activations
stay so small that two different elementwise functions (exact and tanh GELU, say) agree to ~1e-6 relative, inside
any float32 tolerance; at weights whose activations reach unit scale (kernels of std 1/sqrt(fan in), embeddings of
std 1, every norm scale and bias moved off its trivial init) the same pair differs by ~3e-4.

The reference is stored in the Keras layout, in the order of the reference model's weights (Keras 3 on TensorFlow
and torch read it by path, the same models' weights, not always in the same order; Keras 2's BERT, ResNet-50 and
Stable Diffusion by order, whose weights have the same order and shapes); a mapping per model (kbench.models.mappings.<model>) turns it into the native
PyTorch layout (and, for SAM, Keras 2's order). A mapping is a list of (keras path pattern, torch name template,
layout) rules: kbench.models.weights.Mapping checks that every reference array is matched exactly once, and its inverse
gives the round trip (reference -> column -> reference) the tests check. Pure NumPy: no framework import.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

# ---------------------------------------------------------------- unit-scale weights (Keras side)


def _fan_in(layer, weight_name: str, shape: tuple) -> int:
    """The contraction length of a kernel: Dense (in, out) and Conv (h, w, in, out) contract all but the last axis;
    EinsumDense contracts the kernel axes its equation shares with its input (query (hidden, heads, head_dim):
    hidden; output (heads, head_dim, hidden): heads x head_dim)."""
    equation = getattr(layer, "equation", None)
    if equation and weight_name == "kernel":
        inputs, output = equation.split("->")
        x, kernel = inputs.split(",")
        return int(np.prod([n for axis, n in zip(kernel, shape) if axis in x and axis not in output]) or 1)
    return int(np.prod(shape[:-1])) if len(shape) > 1 else int(shape[0])


def unit_value(layer, name: str, shape: tuple, rng) -> np.ndarray:
    """The unit-scale value of one weight, from what it is: norm scales 1 + N(0, 0.2) (RMS norms that apply 1 + w:
    N(0, 0.2)), shifts and biases N(0, 0.1), batch-norm statistics N(0, 0.1) and U(0.5, 1.5), embeddings and other
    tables N(0, 1) (position tables N(0, 0.25)), kernels N(0, 1/fan in)."""
    kind = type(layer).__name__
    if name in ("gamma", "scale"):
        centred = kind in ("RMSNormalization",) and "gemma" in type(layer).__module__
        return (0.0 if centred else 1.0) + 0.2 * rng.standard_normal(shape)
    if name == "lora_kernel_b":     # LoRA factors start as the libraries start them, B at zero: the adapted model is
        return np.zeros(shape)      # the base model (keras-hub's per-head factors and peft's flat ones agree there)
    if name in ("beta", "bias"):
        return 0.1 * rng.standard_normal(shape)
    if name == "moving_mean":
        return 0.1 * rng.standard_normal(shape)
    if name == "moving_variance":
        return rng.uniform(0.5, 1.5, shape)
    if name in ("kernel", "depthwise_kernel") and len(shape) > 1:
        return rng.standard_normal(shape) / np.sqrt(_fan_in(layer, name, shape))
    if name in ("embeddings",):
        return rng.standard_normal(shape)
    return 0.25 * rng.standard_normal(shape)      # positional tables, tokens, LoRA factors, other tables


def unit_scale(model, rng, values=unit_value) -> None:
    """Every weight of a Keras model (Keras 3 or tf.keras) set to its unit-scale value, layer by layer, in the
    model's weight order (so the draw is the same in every process); every weight must be a layer's own."""
    owner = {}
    for layer in model._flatten_layers(include_self=True, recursive=True):
        for weight in _own_weights(layer):
            owner.setdefault(id(weight), layer)
    for weight in model.weights:
        if id(weight) not in owner:
            raise ValueError(f"{weight_path(weight)}: no layer of the model owns it")
        value = values(owner[id(weight)], weight_name(weight), tuple(weight.shape), rng)
        weight.assign(np.asarray(value).astype(_np_dtype(weight)))


def _own_weights(layer) -> list:
    """The weights a layer creates itself, not its sublayers' (Keras 3: _trainable_variables; tf.keras:
    _trainable_weights)."""
    for trainable, frozen in (("_trainable_variables", "_non_trainable_variables"),
                              ("_trainable_weights", "_non_trainable_weights")):
        own = list(getattr(layer, trainable, None) or []) + list(getattr(layer, frozen, None) or [])
        if own:
            return own
    return []


def weight_name(weight) -> str:
    """The last component of a weight's name without tf's ":0" ("kernel", "gamma", ...)."""
    return getattr(weight, "path", weight.name).split("/")[-1].split(":")[0]


def weight_path(weight) -> str:
    return getattr(weight, "path", weight.name).split(":")[0]


def _np_dtype(weight) -> str:
    return str(getattr(weight.dtype, "name", weight.dtype)).removeprefix("torch.")


def keras_arrays(model) -> list[tuple[str, np.ndarray]]:
    """(path, float32 array) of every weight, in the model's order."""
    return [(weight_path(w), np.asarray(w.numpy() if hasattr(w, "numpy") else w, np.float32)) for w in model.weights]


def assign_in_order(model, arrays: list[tuple[str, np.ndarray]]) -> None:
    """The reference's arrays into a Keras model of the same weights in the same order (another Keras 3 backend;
    Keras 2's BERT, ResNet-50, Stable Diffusion), each checked for its shape."""
    weights = model.weights
    if len(weights) != len(arrays):
        raise ValueError(f"the model has {len(weights)} weights, the reference {len(arrays)}")
    for weight, (path, value) in zip(weights, arrays):
        if tuple(weight.shape) != value.shape:
            raise ValueError(f"{weight_path(weight)} has shape {tuple(weight.shape)}, the reference's {path} "
                             f"{value.shape}")
        weight.assign(value.astype(_np_dtype(weight)))


# ---------------------------------------------------------------- layouts and mappings (Keras <-> torch)

@dataclass(frozen=True)
class Layout:
    """How a Keras array becomes a torch parameter, and back (the inverse needs the Keras shape)."""
    name: str
    to_torch: Callable[[np.ndarray], np.ndarray]
    to_keras: Callable[[np.ndarray, tuple], np.ndarray]


SAME = Layout("same", lambda k: k, lambda t, shape: t.reshape(shape))
FLAT = Layout("flat", lambda k: k.reshape(-1), lambda t, shape: t.reshape(shape))          # (heads, hd) bias
T = Layout("transpose", lambda k: k.T, lambda t, shape: t.T)                               # Dense (in, out)
CONV = Layout("conv", lambda k: k.transpose(3, 2, 0, 1), lambda t, shape: t.transpose(2, 3, 1, 0))   # HWIO
CONV1X1_AS_LINEAR = Layout("conv1x1-linear", lambda k: k[0, 0].T, lambda t, shape: t.T.reshape(shape))
# EinsumDense kernels: (in, heads, head_dim) -> Linear (heads*head_dim, in); (heads, head_dim, out) -> (out, h*hd)
EINSUM_IN = Layout("einsum-in", lambda k: k.reshape(k.shape[0], -1).T, lambda t, shape: t.T.reshape(shape))
EINSUM_OUT = Layout("einsum-out", lambda k: k.reshape(-1, k.shape[-1]).T, lambda t, shape: t.T.reshape(shape))


@dataclass(frozen=True)
class Rule:
    keras: str          # a regular expression over Keras weight paths; groups named as in `torch`
    torch: str          # a template of torch state-dict names, e.g. "bert.encoder.layer.{i}.attention.self.{p}.weight"
    layout: Layout = SAME


@dataclass(frozen=True)
class Mapping:
    """Reference (Keras paths) <-> torch state dict, by rules. Strict both ways: every reference array maps to one
    torch name, every torch name it is asked for has one reference array.

    skip: regexes of reference paths the column has no counterpart for, left out on purpose (keras-hub's per-head
    LoRA factors against peft's flat ones: neither can hold the other's). A skipped path matches no rule, to_torch
    and to_keras leave it out, skipped() names it; any other path without a rule is still an error."""
    rules: tuple[Rule, ...]
    skip: tuple[str, ...] = ()

    def skipped(self, arrays: list[tuple[str, np.ndarray]]) -> list[str]:
        return [path for path, _ in arrays if self._skips(path)]

    def _skips(self, path: str) -> bool:
        if not any(re.fullmatch(pattern, path) for pattern in self.skip):
            return False
        if any(re.fullmatch(rule.keras, path) for rule in self.rules):
            raise ValueError(f"the reference weight {path} is both skipped and mapped")
        return True

    def to_torch(self, arrays: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        state = {}
        for path, value in arrays:
            if self._skips(path):
                continue
            name, layout = self._match(path)
            if name in state:
                raise ValueError(f"two reference arrays map to {name}")
            state[name] = np.ascontiguousarray(layout.to_torch(value))
        return state

    def to_keras(self, state: dict[str, np.ndarray], arrays: list[tuple[str, np.ndarray]]
                 ) -> list[tuple[str, np.ndarray]]:
        """The inverse, onto the reference's own paths and shapes."""
        out = []
        for path, value in arrays:
            if self._skips(path):
                continue
            name, layout = self._match(path)
            out.append((path, layout.to_keras(np.asarray(state[name]), value.shape)))
        return out

    def _match(self, path: str) -> tuple[str, Layout]:
        for rule in self.rules:
            found = re.fullmatch(rule.keras, path)
            if found:
                return rule.torch.format(**found.groupdict()), rule.layout
        raise ValueError(f"no mapping rule for the reference weight {path}")


NORM = {"gamma": "weight", "beta": "bias"}


def norm_rules(keras: str, torch: str) -> list[Rule]:
    """A Keras layer norm's gamma/beta -> torch's weight/bias."""
    return [Rule(f"{keras}/{k}", f"{torch}.{t}") for k, t in NORM.items()]


def dense_rules(keras: str, torch: str, bias: bool = True) -> list[Rule]:
    return [Rule(f"{keras}/kernel", f"{torch}.weight", T)] + ([Rule(f"{keras}/bias", f"{torch}.bias")] if bias else [])


