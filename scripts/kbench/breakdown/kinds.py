"""What kind of work an op is, rules as data (docs/breakdown.md#the-kinds says what each kind holds, and how each
profiler shows it).

A kind names the work, never the packaging, the same in every column: a compiler's fusion is of the kind of what it
holds, a library's fused kernel of the kind of the work it does. Read, in this order:
- the attention core: what one scaled-dot-product-attention call computes (Q.K^T, its scale and mask, the softmax,
  dropout of the probabilities, P.V; forward and backward), wherever it runs: an attention op or kernel (SDPA,
  flash, fmha), every op inside its scope, and every op inside the ATTENTION_SCOPE name scope the adapters put
  around an attention core that is no single op (Keras's MultiHeadAttention._compute_attention; an XLA
  instruction's metadata carries it, as a TensorFlow op's name and a torch record_function event do). A
  projection called inside such a core (PROJECTION_SCOPE) is read for itself: Q/K/V/output projections are matrix
  products in every column. A softmax outside an attention core is a reduction (the loss's, a classifier's);
- an XLA op (JAX, Keras 3 on TensorFlow, Keras 2 under XLA): the opcodes of its HLO instruction and of every
  computation it calls, from the compiled program's optimized HLO (kbench.breakdown.compiled): HLO_RULES;
- an Inductor kernel (cpp_fused_*, triton_{poi,red,per,tem}_fused_*): the ATen ops its name lists (its source nodes),
  INDUCTOR; a template kernel (tem) is a matrix product, a pointwise or reduction kernel never is (Inductor calls
  the matrix product apart: "addmm" in such a kernel's name is the epilogue's bias add);
- any other name (torch's and TensorFlow's ops, Paddle's operators, CUDA library kernels): NAME_RULES, first match.
An XLA fusion whose program's HLO is not in the trace is read by its name's stems (XLA names a fusion after what it
holds: multiply_add_fusion); one whose name says nothing (ynn_fusion.3, fusion.12) is "fusion, content not read".
Random numbers outside an attention core are their own kind wherever they run (a hidden layer's dropout mask).

"fused" is no kind: a breakdown's fused share says how much of the step ran in compiler fusions, whatever they hold.
"""
from __future__ import annotations

import re

KIND_NAMES = {"matmul_conv": "matmul and conv", "attention": "attention", "normalization": "normalization",
              "random": "random numbers", "elementwise": "elementwise and reductions",
              "data_movement": "data movement", "optimizer": "optimizer update",
              "fusion_unread": "fusion, content not read", "other": "other", "waiting": "waiting"}
UNREAD_WHY = {"xla": "an XLA fusion whose program's optimized HLO the trace does not carry, named without its content",
              "inductor": "a torch.compile graph call: Inductor's C++ kernels run inside it without events of their "
                          "own (torch._inductor.config.cpp.enable_kernel_profile is off)"}

# (kind, pattern) on the lower-cased name, first match wins. The patterns name real ops of every column's trace and
# the CUDA libraries' kernels (tests/test_breakdown.py).
NAME_RULES = (
    # control flow and calls hold other ops (their own time is the runtime's)
    ("other", r"^(while|call|conditional|tuple|get-tuple-element|parameter)([._]|$)"),
    ("random", r"bernoulli|(^|[^a-z])rand(n|int|perm|om|_like|n_like)?([^a-z]|$)|random|rng|philox|threefry"
               r"|(^|[^a-z])uniform|normal_kernel|distribution_|fused_dropout"),
    ("optimizer", r"optimizer|adamw?([^a-z]|$)|applyadam|fused_adam|_foreach_|optimization step|momentum"),
    ("normalization", r"norm|moments|(^|[^a-z])bn_(fw|bw)|batchnorm"),
    # the loss's log-softmax and cross-entropy are reductions
    ("elementwise", r"log_?softmax|cross_?entropy|nll_?loss"),
    # an attention op or kernel (a softmax alone is no attention core: it is a reduction)
    ("attention", r"attention|sdpa|flash|fmha"),
    ("matmul_conv", r"(^|[^a-z])(mm|bmm|addmm|baddbmm|addbmm|matmul|linear|einsum|dot|gemm|gemv)([^a-z]|$)"
                    r"|matmul|cublas|cutlass|gemm|xmma|conv(?!ert)|winograd|implicit_convolve"),
    ("data_movement", r"copy|transpose|permute|reshape|view|contiguous|concat|(^|::)cat$|slice|gather|scatter"
                      r"|index|pad|memcpy|memset|clone|expand|broadcast|stack|split|bitcast|tile|embedding|flip"
                      r"|unfold|as_strided|squeeze|(^|[^a-z])roll([^a-z]|$)|identity|readvariableop"
                      r"|assignvariableop|dynamic-update|nchwtonhwc|nhwctonchw|(^|::)t$|item|local_scalar_dense"
                      r"|(^|[^a-z])(un)?pack"),
    ("elementwise", r"add|sub|mul|div|relu|gelu|tanh|sigmoid|silu|swish|exp|log|sqrt|pow|neg|where|select|maximum"
                    r"|minimum|erf|dropout|bias|clamp|clip|fill|full|zero|ones|cast|convert|compare"
                    r"|equal|less|greater|logical|bitwise|isnan|isinf|isfinite|sum|mean|reduce|max|min|cumsum|argmax"
                    r"|sort|topk|sign|square|reciprocal|round|floor|ceil|iota|arange|constant|lerp|loss|nll|entropy"
                    r"|scale|(^|[^a-z])(abs|all|any|sin|cos|sine|cosine)([^a-z]|$)|elementwise|vectorized"),
)
_NAME_RES = tuple((kind, re.compile(pattern)) for kind, pattern in NAME_RULES)

# The name scopes the adapters put around an attention core that is no single op (kbench.adapters._scopes), and
# around a projection called inside one: found as a host event's name (torch's record_function, which leaves a gap
# around a projection instead), a segment of an XLA instruction's op_name or of a TensorFlow op's name
ATTENTION_SCOPE = "kbench_attention"
PROJECTION_SCOPE = "kbench_projection"
# Scopes: a host event whose name says what every op inside it does, and whose own time between its ops is that
# work too (the optimizer's Python between its kernels)
SCOPES = (("optimizer", re.compile(r"^optimizer\.step|optimization step|optimizer\.zero_grad")),
          ("attention", re.compile(r"scaled_dot_product_attention|_scaled_dot_product|^" + ATTENTION_SCOPE + "$")))

# HLO: (kind, opcodes, custom-call targets (substrings)) of which one must be there, first match wins; past them
# JAX's threefry; a fusion whose opcodes are all MOVEMENT is data movement, else elementwise and reductions (a
# softmax too: outside an attention core's scope it is a reduction).
HLO_RULES = (
    ("random", {"rng", "rng-bit-generator", "rng-get-and-update-state"}, ()),
    ("attention", set(), ("fmha", "flash")),
    ("matmul_conv", {"dot", "convolution", "ragged-dot", "scaled-dot"}, ("gemm", "conv", "matmul", "cublas")),
    ("normalization", {"batch-norm-training", "batch-norm-inference", "batch-norm-grad", "rsqrt"}, ("norm",)),
)
# JAX's threefry: bit mixing by xor and shifts, both
THREEFRY = {"xor", "shift-right-logical"}
MOVEMENT = {"copy", "transpose", "bitcast", "broadcast", "reshape", "slice", "dynamic-slice", "dynamic-update-slice",
            "concatenate", "pad", "gather", "scatter", "reverse", "iota", "constant", "parameter", "tuple",
            "get-tuple-element", "bitcast-convert", "copy-start", "copy-done", "all-gather"}
# An HLO instruction's metadata names the framework's scope it came from (jax.named_scope, Keras's name_scope, JAX's
# own jit(_bernoulli)): an instruction all of whose named parts lie in one of these scopes is that scope's work (a
# matrix product stays one; the optimizer's update is the optimizer's whatever it holds)
HLO_SCOPES = (("optimizer", re.compile(r"(^|/)(adam_?w?|sgd|rmsprop|adafactor|lion|lamb|optimizer)[^/]*/", re.I)),
              ("random", re.compile(r"jit\(_(bernoulli|uniform|normal|random_bits|gamma)\)|threefry|rng", re.I)),
              ("normalization", re.compile(r"(layer|batch|group|rms|instance)_?norm", re.I)))

# XLA names a fusion after the instructions it holds: the stems before "fusion" (multiply_add_fusion.3); one with
# no stem says nothing of its content
XLA_FUSION = re.compile(r"^(?P<stems>[a-z0-9_-]*?)_?fusion(\.\d+)?$")
MOVEMENT_STEMS = {"copy", "transpose", "bitcast", "broadcast", "reshape", "slice", "dynamic", "update", "concatenate",
                  "pad", "gather", "scatter", "reverse", "iota", "constant", "tuple", "get", "element"}
SILENT_STEMS = {"", "ynn", "loop", "input", "output", "kloop", "kinput", "koutput", "custom", "wrapped"}
INDUCTOR = re.compile(r"^(cpp|triton)_(?:(?P<kind>poi|red|per|tem)_)?fused_(?P<ops>.*?)(_\d+)?$")
INDUCTOR_GRAPH = re.compile(r"compiledfxgraph")

# A kernel a compiler made (XLA's fusions, Inductor's), as against one its op library fused
COMPILER_FUSED = re.compile(r"fusion|cpp_fused|triton_", re.I)
# The fused ops TensorFlow's own op library offers, which a layer chooses (tf.keras's BatchNormalization and
# LayerNormalization call FusedBatchNormV3, its LSTM/GRU CudnnRNN), as against the fusions grappler's remapper makes in
# any graph (_FusedMatMul, _FusedConv2D, oneDNN's _MklNativeFused*: a conv or matmul with its bias and activation)
LAYER_FUSED = re.compile(r"^fused(batchnorm|resizeandpadconv2d|padconv2d)|^cudnnrnn|^_?fusedbatchnorm", re.I)
GRAPH_FUSED = re.compile(r"^_(mkl)?(native)?fused", re.I)


def of_name(name: str, allow: tuple[str, ...] | None = None) -> str:
    """The kind a name says (NAME_RULES, first match; allow: the kinds it may take, None: every one)."""
    lowered = re.sub(r"backward\d*", "", name.lower())      # an autograd node is of its forward op's kind
    return next((kind for kind, pattern in _NAME_RES if pattern.search(lowered)
                 and (allow is None or kind in allow)), "other")


def of_scope(name: str) -> str | None:
    lowered = name.lower()
    return next((kind for kind, pattern in SCOPES if pattern.search(lowered)), None)


def in_attention_core(op_name: str) -> bool:
    """Whether a framework op name (an XLA instruction's metadata, a TensorFlow op's name) lies in an attention
    core's scope and not in a projection called inside it."""
    parts = op_name.split("/")
    if ATTENTION_SCOPE not in parts:
        return False
    last = len(parts) - 1 - parts[::-1].index(ATTENTION_SCOPE)
    return PROJECTION_SCOPE not in parts[last:]


def of_hlo(opcodes: set[str], op_names: list[str] = ()) -> str:
    """The kind of an XLA instruction from the opcodes it holds (a fusion: its fused computations' too) and the
    framework scopes its instructions came from (their OpMetadata.op_name): the optimizer's update or an attention
    core where every named part lies in one (the core's products, softmax and dropout mask included), else its
    content, a matrix product first; HLO_SCOPES name a norm or random numbers where the content says no more."""
    named = [n for n in op_names if "/" in n]
    scoped = next((kind for kind, pattern in HLO_SCOPES if named and all(pattern.search(n) for n in named)), None)
    if scoped == "optimizer":
        return scoped
    if named and all(in_attention_core(n) for n in named):
        return "attention"
    targets = [op.split(":", 1)[1] for op in opcodes if op.startswith("custom-call:")]
    by_content = next((kind for kind, wanted, words in HLO_RULES
                       if opcodes & wanted or any(word in target for target in targets for word in words)), None)
    if by_content is None and THREEFRY <= opcodes:
        by_content = "random"
    if by_content in ("matmul_conv", "random", "attention"):
        return by_content
    if scoped:
        return scoped
    if by_content:
        return by_content
    plain = {op for op in opcodes if not op.startswith("custom-call")} - {"fusion"}
    return "data_movement" if plain and plain <= MOVEMENT else "elementwise"


def of_xla_name(name: str) -> tuple[str, bool]:
    """A fusion read by its name's stems: (kind, whether the name said anything). Not a fusion: of_name. XLA's
    emitter prefixes (loop_, input_, ...) say how it runs, not what it holds: dropped before the stems are read."""
    found = XLA_FUSION.match(name.lower())
    if not found:
        return of_name(name), True
    stems = {s for s in re.split(r"[-_.]", found["stems"]) if s and not s.isdigit()} - SILENT_STEMS
    if not stems:
        return "fusion_unread", False
    if {"dot", "convolution", "gemm", "conv"} & stems:
        return "matmul_conv", True
    if {"rsqrt"} & stems:
        return "normalization", True
    if {"rng", "xor"} & stems or {"shift", "logical"} <= stems:     # threefry's rounds, its bits to floats
        return "random", True
    if stems <= MOVEMENT_STEMS:
        return "data_movement", True
    return "elementwise", True


def of_inductor(name: str) -> str | None:
    """An Inductor kernel's kind from its name (None: not one): a template is a matrix product; the rest by the
    ops listed, a matrix product never (Inductor runs those apart)."""
    found = INDUCTOR.match(name.lower())
    if not found:
        return None
    if found["kind"] == "tem":
        return "matmul_conv"
    return of_name(found["ops"].replace("__", "_"), allow=tuple(k for k in KIND_NAMES if k != "matmul_conv"))


def is_compiler_fusion(name: str, opcode: str | None = None) -> bool:
    return opcode == "fusion" or bool(COMPILER_FUSED.search(name))
