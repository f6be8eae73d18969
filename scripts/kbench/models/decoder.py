"""What the causal language models (Gemma, Mistral, Llama) share: their inputs, the FLOPs of a LoRA fit and of a
greedy generate call, the facts of their float32 tolerance, and HF's common config keys. Each family module
(gemma.py, mistral.py, llama.py) registers itself with `family(...)`, giving what differs: its libraries'
constructor arguments and its weight layouts."""
from __future__ import annotations

import numpy as np

from kbench.models import family as families
from kbench.models.tally import Tally, attention, linear

# LoRA targets the attention query and value projections in every library (keras-hub's Backbone.enable_lora and
# peft's default for Gemma/Mistral/Llama); the factorisation differs: keras-hub adapts EinsumDense kernels per head.
PEFT_LORA_TARGETS = ["q_proj", "v_proj"]


def hf_config(arch: dict) -> dict:
    """The keys every transformers *Config of a decoder takes alike."""
    return {"vocab_size": arch["vocabulary_size"], "num_hidden_layers": arch["num_layers"],
            "num_attention_heads": arch["num_query_heads"], "num_key_value_heads": arch["num_key_value_heads"],
            "hidden_size": arch["hidden_dim"], "intermediate_size": arch["intermediate_dim"],
            "rms_norm_eps": arch["layer_norm_epsilon"]}


# ---------------------------------------------------------------- inputs

def fit_inputs(spec, rng) -> dict:
    """x, next-token targets and sample weights, as CausalLMPreprocessor makes them: sequence_length + 1 tokens
    drawn, the first sequence_length in, the last sequence_length as targets."""
    arch, n, seq = spec.arch, spec.batch_size, spec.inputs["sequence_length"]
    ids = rng.integers(0, arch["vocabulary_size"], (n, seq + 1), dtype="int32")
    return {"x": {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, seq), bool)}, "targets": ids[:, 1:],
            "sample_weight": np.ones((n, seq), "float32")}


def generate_inputs(spec, rng) -> dict:
    """The prompt: (batch, prompt_length) token ids, never 0 (the padding id)."""
    arch, opts, n = spec.arch, spec.task_options, spec.batch_size
    return {"prompt": rng.integers(1, arch["vocabulary_size"], (n, opts["prompt_length"]))}


def keras_prompt(spec, prompt) -> dict:
    """The prompt, then new_tokens masked-off slots that greedy decoding fills; with stop_token_ids=None every
    keras-hub generate call produces exactly new_tokens tokens."""
    opts, n = spec.task_options, spec.batch_size
    p, total = opts["prompt_length"], opts["prompt_length"] + opts["new_tokens"]
    ids = np.zeros((n, total), "int32")
    ids[:, :p] = prompt
    return {"token_ids": ids, "padding_mask": np.arange(total)[None, :].repeat(n, 0) < p}


# ---------------------------------------------------------------- FLOPs (HF *ForCausalLM + peft LoRA)

def _dims(spec) -> dict:
    """Widths of transformers' *ForCausalLM: q_proj Linear(d, Hq*hd), k_proj and v_proj Linear(d, Hkv*hd), o_proj
    Linear(Hq*hd, d); the gated MLP's gate_proj and up_proj Linear(d, I), down_proj Linear(I, d); lm_head
    Linear(d, V) (tied to the embedding in Gemma: still a product). head_dim is d // Hq unless the arch gives it."""
    a = spec.arch
    head_dim = a.get("head_dim") or a["hidden_dim"] // a["num_query_heads"]
    return {"d": a["hidden_dim"], "inter": a["intermediate_dim"], "vocab": a["vocabulary_size"],
            "layers": a["num_layers"], "hq": a["num_query_heads"], "hkv": a["num_key_value_heads"], "hd": head_dim,
            "window": a.get("sliding_window")}


def _forward(spec, t: Tally, b: int, q_len: int, kv_len: int, logits_tokens: int, lora_rank: int = 0) -> None:
    """One forward of the decoder stack: b sequences of q_len new positions attending over kv_len keys (cache
    included); the LM head on logits_tokens positions. lora_rank > 0: the LoRA fit (peft LoraLayer on
    PEFT_LORA_TARGETS: lora_A Linear(in, r), lora_B Linear(r, out), base frozen) with its backward grads: nothing
    needs a gradient below layer 0's LoRA factors (embeddings frozen), so layer 0's frozen q/k/v take no input
    gradient and its lora_A only a weight gradient; every frozen product above takes its input gradient."""
    m = _dims(spec)
    d, hq, hkv, hd = m["d"], m["hq"], m["hkv"], m["hd"]
    tokens = b * q_len
    out_dims = {"q_proj": hq * hd, "k_proj": hkv * hd, "v_proj": hkv * hd}
    for layer in range(m["layers"]):
        above = 1 if layer > 0 else 0           # does this layer's input need a gradient (LoRA fit)?
        for name, out in out_dims.items():
            t.add("q/k/v projections", linear(tokens, d, out), grads=above)
            if lora_rank and name in PEFT_LORA_TARGETS:
                t.add("LoRA factors", linear(tokens, d, lora_rank), grads=1 + above)   # lora_A: weight (+ input)
                t.add("LoRA factors", linear(tokens, lora_rank, out), grads=2)         # lora_B: weight + input
        t.attention("self-attention", attention(b * hq, q_len, kv_len, hd), grads=2)
        t.add("o projection", linear(tokens, hq * hd, d), grads=1)
        t.add("gated MLP", 2 * linear(tokens, d, m["inter"]) + linear(tokens, m["inter"], d), grads=1)
    t.add("LM head", linear(b * logits_tokens, d, m["vocab"]), grads=1)


def fit_flops(spec, t: Tally) -> None:
    """LoRA fit at sequence_length, the LM head over every position (HF computes all logits, then shifts labels)."""
    s = spec.inputs["sequence_length"]
    _forward(spec, t, spec.batch_size, s, s, s, lora_rank=spec.task_options["lora_rank"])


def generate_flops(spec, t: Tally) -> None:
    """Greedy generate with a KV cache (kbench.results.flops's docstring, "generate"): the prefill over the prompt,
    LM head on its last position only (GenerationMixin sets logits_to_keep=1), then new_tokens - 1 one-token decode
    forwards, the j-th attending over the prompt_length + j tokens so far."""
    b, opts = spec.batch_size, spec.task_options
    prompt, new = opts["prompt_length"], opts["new_tokens"]
    window = _dims(spec)["window"]
    _forward(spec, t.prefixed("prefill: "), b, prompt, prompt, 1)
    decode = t.prefixed("decode: ")
    for j in range(1, new):
        kv = prompt + j                        # the tokens so far, the one being fed included
        if window:                             # Mistral: DynamicSlidingWindowLayer keeps the last window - 1 tokens
            kv = min(kv, window)
        _forward(spec, decode, b, 1, kv, 1)


def contraction_and_depth(spec) -> tuple[int, int]:
    a = spec.arch
    head = a.get("head_dim") or a["hidden_dim"] // a["num_query_heads"]
    return (max(a["hidden_dim"], a["intermediate_dim"], spec.inputs["sequence_length"],
                head * a["num_query_heads"]), 7 * a["num_layers"] + 1)


def family(name: str, about: str, libraries: dict, layouts=None) -> families.Family:
    """A causal LM's family: fit (LoRA) and generate, with the facts above."""
    return families.register(
        name=name, about=about, tasks=("fit", "generate"), libraries=libraries,
        inputs={"fit": fit_inputs, "generate": generate_inputs}, flops={"fit": fit_flops, "generate": generate_flops},
        contraction_and_depth=contraction_and_depth,
        example={"fit": "sequence", "generate": "sequence (one whole generate call)"}, layouts=layouts)
