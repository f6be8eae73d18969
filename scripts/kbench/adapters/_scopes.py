"""The attention core's name scope, put around it in the one place every column's model passes (kbench.adapters.build),
so that the breakdown reads the same work as attention in every column (docs/breakdown.md#the-kinds).

An attention core is what one scaled-dot-product-attention call computes (Q.K^T, scale and mask, softmax, dropout of
the probabilities, P.V). Where a framework runs it as one op (torch's SDPA, a flash kernel) the op is the core; where
a model computes it in several ops, the core is scoped by its name (kbench.breakdown.kinds.ATTENTION_SCOPE):
- a Keras layer with Keras's attention-core method (`_compute_attention`: keras.layers.MultiHeadAttention and
  keras-hub's subclasses, tf.keras's): that method;
- any other innermost attention layer (a Keras layer or torch module whose class is named *Attention* and that holds
  no other: keras-hub's and Meta's Segment Anything attention, HF's self-attention modules): its call, with its
  Dense/Linear children (its Q/K/V/output projections) in the projection scope, read for themselves.

The scope costs nothing where it is a name: under JAX (jax.named_scope: an XLA instruction's metadata) and TensorFlow
(tf.name_scope: an op's name), set before the first trace. On torch it is an event (record_function), recorded only
while the breakdown's profiler runs (PROFILING, set by kbench.adapters._hooks' torch trace), so the timed window runs
no record_function; there a projection inside a core closes the core's event and opens another after it, so the
projection's own Python is outside every scope (waiting, as a projection's is in every other column). Paddle's profiler ties no backward op to its forward, so no scope would hold attention's backward
pass: its attention is not separated (its products read as matrix products, the table says so).
"""
from __future__ import annotations

import contextlib
import functools

from kbench.breakdown.kinds import ATTENTION_SCOPE, PROJECTION_SCOPE

# True while the breakdown's torch profiler runs (kbench.adapters._hooks): the only time a torch scope is recorded
PROFILING = False
CORE_METHOD = "_compute_attention"
PROJECTIONS = ("Dense", "EinsumDense", "Linear")


def mark(model, framework: str) -> int:
    """Put the attention scopes into a built model (a Keras model or a torch module; framework: "jax",
    "tensorflow", "torch", anything else marks nothing). The number of attention cores scoped."""
    if model is None or framework not in ("jax", "tensorflow", "torch"):
        return 0
    scope = _scope_maker(framework)
    if hasattr(model, "_flatten_layers"):
        return _mark_keras(model, scope)
    if hasattr(model, "modules") and hasattr(model, "register_forward_pre_hook"):
        return _mark_torch_modules(model, scope)
    return 0


def _scope_maker(framework: str):
    """name -> a context manager that scopes what runs inside it, the framework's own way."""
    if framework == "jax":
        import jax
        return jax.named_scope
    if framework == "tensorflow":
        import tensorflow as tf
        return tf.name_scope
    from torch.autograd.profiler import record_function
    return lambda name: _torch_scope(record_function, name) if PROFILING else contextlib.nullcontext()


_OPEN: list = []        # the torch attention events open now, innermost last (a forward pass runs on one thread)


@contextlib.contextmanager
def _torch_scope(record_function, name: str):
    """An attention core as a record_function event; a projection inside one as a gap in it: the core's event is
    closed before the projection and a new one opened after (events, unlike name scopes, cannot be undone inside)."""
    if name == PROJECTION_SCOPE:
        suspended = _OPEN.pop() if _OPEN else None
        if suspended is not None:
            suspended.__exit__(None, None, None)
        try:
            yield
        finally:
            if suspended is not None:
                _OPEN.append(record_function(ATTENTION_SCOPE).__enter__())
        return
    _OPEN.append(record_function(name).__enter__())
    try:
        yield
    finally:
        _OPEN.pop().__exit__(None, None, None)


def _is_attention(obj) -> bool:
    return "attention" in type(obj).__name__.lower()


def _mark_keras(model, scope) -> int:
    layers = [layer for layer in model._flatten_layers(include_self=False, recursive=True)]
    marked = 0
    for layer in layers:
        if callable(getattr(layer, CORE_METHOD, None)):
            _wrap(layer, CORE_METHOD, scope, ATTENTION_SCOPE)
            marked += 1
        elif _is_attention(layer) and _innermost(list(layer._flatten_layers(include_self=False, recursive=True))):
            _wrap(layer, "call", scope, ATTENTION_SCOPE)
            for child in layer._flatten_layers(include_self=False, recursive=False):
                if type(child).__name__ in PROJECTIONS:
                    _wrap(child, "call", scope, PROJECTION_SCOPE)
            marked += 1
    return marked


def _mark_torch_modules(model, scope) -> int:
    marked = 0
    for module in model.modules():
        if module is model or not _is_attention(module) or not _innermost(list(module.modules())[1:]):
            continue
        _hook(module, scope, ATTENTION_SCOPE)
        for child in module.children():
            if type(child).__name__ in PROJECTIONS:
                _hook(child, scope, PROJECTION_SCOPE)
        marked += 1
    return marked


def _innermost(inside: list) -> bool:
    """An attention layer that holds no other (a transformer block holding attention layers is no core)."""
    return not any(_is_attention(child) or callable(getattr(child, CORE_METHOD, None)) for child in inside)


def _wrap(obj, method: str, scope, name: str) -> None:
    """obj.method run inside scope(name), on this object alone (set past Keras's attribute tracking)."""
    original = getattr(obj, method)

    @functools.wraps(original)
    def scoped(*args, **kwargs):
        with scope(name):
            return original(*args, **kwargs)
    object.__setattr__(obj, method, scoped)


def _hook(module, scope, name: str) -> None:
    """A torch module's forward inside scope(name), by its forward hooks (torch's own API for it)."""
    open_scopes = []

    def enter(_module, _args):
        context = scope(name)
        context.__enter__()
        open_scopes.append(context)

    def leave(_module, _args, _output):
        if open_scopes:
            open_scopes.pop().__exit__(None, None, None)
    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave)
