"""FLOP arithmetic the family modules count a step with: the primitives (2 x multiply-accumulates of one matrix
product, convolution or attention) and the Tally of a step's named parts. The convention is kbench.results.flops's
(its module docstring). Pure Python."""
from __future__ import annotations

# ---------------------------------------------------------------- primitives (2 x MACs)


def linear(tokens: int, d_in: int, d_out: int) -> int:
    """y = x W over `tokens` rows (torch.nn.Linear / keras Dense): tokens x d_in x d_out MACs."""
    return 2 * tokens * d_in * d_out


def conv2d(batch: int, c_in: int, c_out: int, kernel: int, h_out: int, w_out: int) -> int:
    """A dense (groups=1) k x k convolution: every output pixel of every output channel takes c_in*k*k MACs."""
    return 2 * batch * c_out * h_out * w_out * c_in * kernel * kernel


def conv_transpose2d(batch: int, c_in: int, c_out: int, kernel: int, h_in: int, w_in: int) -> int:
    """A transposed convolution: every input pixel scatters into c_out*k*k outputs (what FlopCounterMode counts)."""
    return 2 * batch * c_in * h_in * w_in * c_out * kernel * kernel


def conv_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output side of a convolution or pooling window (torch.nn.Conv2d's formula, dilation 1)."""
    return (size + 2 * padding - kernel) // stride + 1


def attention(batch_heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int | None = None) -> tuple[int, int]:
    """(scores, values) FLOPs of softmax(Q K^T) V for batch_heads independent heads: QK^T is q_len x qk_dim x kv_len
    MACs per head, AV q_len x kv_len x v_dim. Grouped-query attention is counted per query head (the kernel
    broadcasts the shared K/V heads)."""
    v_dim = qk_dim if v_dim is None else v_dim
    return 2 * batch_heads * q_len * kv_len * qk_dim, 2 * batch_heads * q_len * kv_len * v_dim


# ---------------------------------------------------------------- tally


MATMUL, CONV = "matmul", "convolution"


class Tally:
    """Named FLOP parts of one step. add(part, flops, grads): the forward FLOPs of one product, and, in a fit step,
    `grads` products of the same size in its backward (2: weight and input gradient, or both attention operands;
    1: one of them; 0: none), tallied under "backward: <part>". prefixed(p) is a view whose parts are named p + part
    (the prefill and decode parts of a generate call), sharing the same parts."""

    def __init__(self, training: bool, prefix: str = "", parts: dict | None = None, kinds: dict | None = None):
        self.training, self.prefix = training, prefix
        self.parts = {} if parts is None else parts
        self.kinds = {} if kinds is None else kinds         # part -> "matmul" | "convolution"

    def prefixed(self, prefix: str) -> "Tally":
        return Tally(self.training, self.prefix + prefix, self.parts, self.kinds)

    def add(self, part: str, flops: int, grads: int = 0, kind: str = MATMUL) -> None:
        """kind: what runs the product on a GPU, which decides its arithmetic (cuBLAS matmul or cuDNN
        convolution: torch switches TF32 apart for the two)."""
        part = self.prefix + part
        if self.kinds.setdefault(part, kind) != kind:
            raise ValueError(f"FLOP part {part!r} mixes {self.kinds[part]} and {kind}")
        self.parts[part] = self.parts.get(part, 0) + flops
        if self.training and grads:
            self.kinds["backward: " + part] = kind
            self.parts["backward: " + part] = self.parts.get("backward: " + part, 0) + grads * flops

    def attention(self, part: str, scores_values: tuple[int, int], grads: int = 0) -> None:
        scores, values = scores_values
        self.add(f"{part} scores QK^T", scores, grads)
        self.add(f"{part} values AV", values, grads)

    def result(self) -> dict[str, int]:
        """Forward parts first, then the backward parts."""
        forward = {k: v for k, v in self.parts.items() if not k.startswith("backward: ")}
        return {**forward, **{k: v for k, v in self.parts.items() if k not in forward}}
