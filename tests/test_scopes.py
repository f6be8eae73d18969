"""The attention cores' name scope (kbench.adapters._scopes), on stand-ins shaped as Keras layers and torch modules
(the unit tier has no framework): which calls it scopes, which it leaves, and that a scope runs around exactly them."""
import contextlib

from kbench.adapters import _scopes
from kbench.breakdown import kinds


class Layer:
    """A Keras layer as _scopes sees one: _flatten_layers and call."""

    def __init__(self, *children):
        self.children = list(children)

    def _flatten_layers(self, include_self=True, recursive=True):
        found = [self] if include_self else []
        for child in self.children:
            found += child._flatten_layers(True, recursive) if recursive else [child]
        return found

    def call(self, *args):
        return [child.call() for child in self.children]


class Dense(Layer):
    pass


class Softmax(Layer):
    pass


class MultiHeadAttention(Layer):
    """Keras's: its projections are called outside the core method."""

    def _compute_attention(self):
        return "core"


class MultiHeadAttentionWithRelativePE(Layer):
    """keras-hub's Segment Anything attention: the core computed inline, projections called inside it."""


class TwoWayAttentionBlock(Layer):
    """A block holding attention layers: no core of its own."""


def recording():
    opened = []

    @contextlib.contextmanager
    def scope(name):
        opened.append(("enter", name))
        yield
        opened.append(("exit", name))
    return opened, scope


def test_keras_cores_get_the_attention_scope_and_projections_inside_one_the_projection_scope():
    mha = MultiHeadAttention(Dense(), Dense())
    inline = MultiHeadAttentionWithRelativePE(Dense(), Softmax())
    block = TwoWayAttentionBlock(inline, Dense())
    model = Layer(mha, block, Dense())
    opened, scope = recording()
    assert _scopes._mark_keras(model, scope) == 2
    assert mha._compute_attention() == "core"
    assert opened == [("enter", kinds.ATTENTION_SCOPE), ("exit", kinds.ATTENTION_SCOPE)]
    opened.clear()
    mha.call()                                         # Keras's projections run outside its core: no scope
    assert opened == []
    inline.call()
    assert opened == [("enter", kinds.ATTENTION_SCOPE), ("enter", kinds.PROJECTION_SCOPE),
                      ("exit", kinds.PROJECTION_SCOPE), ("exit", kinds.ATTENTION_SCOPE)]
    opened.clear()
    block.children[1].call()                            # a block's own Dense: no scope
    model.children[2].call()
    assert opened == []
    assert "call" not in vars(block)                     # the block is no core


class Module:
    """A torch module as _scopes sees one: modules(), children() and forward hooks."""

    def __init__(self, *children):
        self._children = list(children)
        self.pre, self.post = [], []

    def modules(self):
        yield self
        for child in self._children:
            yield from child.modules()

    def children(self):
        return iter(self._children)

    def register_forward_pre_hook(self, hook):
        self.pre.append(hook)

    def register_forward_hook(self, hook):
        self.post.append(hook)

    def __call__(self):
        for hook in self.pre:
            hook(self, ())
        for child in self._children:
            child()
        for hook in self.post:
            hook(self, (), None)


class Linear(Module):
    pass


class Attention(Module):
    """Meta's Segment Anything attention: qkv and proj Linear children, the core inline."""


class TwoWayAttentionBlockModule(Module):
    pass


def test_torch_modules_are_scoped_by_their_forward_hooks_innermost_attention_only():
    inner = Attention(Linear(), Linear())
    model = Module(TwoWayAttentionBlockModule(inner, Linear()), Linear())
    opened, scope = recording()
    assert _scopes._mark_torch_modules(model, scope) == 1
    model()
    assert opened == [("enter", kinds.ATTENTION_SCOPE), ("enter", kinds.PROJECTION_SCOPE),
                      ("exit", kinds.PROJECTION_SCOPE), ("enter", kinds.PROJECTION_SCOPE),
                      ("exit", kinds.PROJECTION_SCOPE), ("exit", kinds.ATTENTION_SCOPE)]


def test_a_framework_without_a_scope_marks_nothing():
    """Paddle's profiler ties no backward op to its forward: its attention is not separated, not half-scoped."""
    model = Layer(MultiHeadAttention())
    assert _scopes.mark(model, "paddle") == 0 and _scopes.mark(None, "jax") == 0
    assert "_compute_attention" not in vars(model.children[0])


def test_on_torch_a_projection_inside_a_core_is_a_gap_in_the_cores_event_not_a_scope_inside_it(monkeypatch):
    """record_function events cannot be undone inside: the core's event closes before its projection and a new one
    opens after, so the projection's own Python lies outside every scope (waiting, as in the other columns)."""
    events = []

    class RecordFunction:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            events.append(("open", self.name))
            return self

        def __exit__(self, *exc):
            events.append(("close", self.name))
    monkeypatch.setattr(_scopes, "PROFILING", True)
    scope = lambda name: _scopes._torch_scope(RecordFunction, name)
    with scope(kinds.ATTENTION_SCOPE):
        events.append("scores")
        with scope(kinds.PROJECTION_SCOPE):
            events.append("qkv")
        events.append("softmax")
    assert events == [("open", kinds.ATTENTION_SCOPE), "scores", ("close", kinds.ATTENTION_SCOPE), "qkv",
                      ("open", kinds.ATTENTION_SCOPE), "softmax", ("close", kinds.ATTENTION_SCOPE)]
    assert _scopes._OPEN == []
