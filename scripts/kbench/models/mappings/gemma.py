"""Gemma: keras-hub GemmaCausalLM (the reference) <-> HF GemmaForCausalLM, plain (generate) or wrapped by peft
(fit: keras-hub enable_lora(rank) against peft's LoRA on models.PEFT_LORA_TARGETS). The layout of keras-hub 0.32's
HF converter, utils/transformers/convert_gemma.py convert_weights; HF ties lm_head to the embedding
(modeling_gemma.py _tied_weights_keys), so no reference array maps to it."""
import numpy as np

from kbench.models.decoder import PEFT_LORA_TARGETS
from kbench.models.weights import EINSUM_OUT, T, Layout, Mapping, Rule

# q/k/v kernels (heads, hidden, head_dim) -> Linear (heads*head_dim, hidden); convert_gemma.py's hook inverted
EINSUM_HEADS_IN = Layout("einsum-heads-in", lambda k: k.transpose(0, 2, 1).reshape(-1, k.shape[1]),
                         lambda t, shape: np.transpose(t.reshape(shape[0], shape[2], shape[1]), (0, 2, 1)))
LORA = (r".*/lora_kernel_[ab]",)       # keras-hub's per-head factors: peft's flat ones cannot hold them (DERIVED)


def gemma(prefix: str = "", adapted=()) -> Mapping:
    """prefix: "base_model.model." under peft, whose adapted projections keep their weight in .base_layer."""
    layer = rf"decoder_block_(?P<i>\d+)"
    model = f"{prefix}model.layers.{{i}}"

    def proj(name):
        return f"{model}.self_attn.{name}{'.base_layer' if name in adapted else ''}.weight"
    return Mapping(tuple([
        Rule("token_embedding/embeddings", f"{prefix}model.embed_tokens.weight"),
        Rule(f"{layer}/pre_attention_norm/scale", f"{model}.input_layernorm.weight"),
        Rule(f"{layer}/pre_ffw_norm/scale", f"{model}.post_attention_layernorm.weight"),   # Gemma v1's naming
        Rule(f"{layer}/attention/query/kernel", proj("q_proj"), EINSUM_HEADS_IN),
        Rule(f"{layer}/attention/key/kernel", proj("k_proj"), EINSUM_HEADS_IN),
        Rule(f"{layer}/attention/value/kernel", proj("v_proj"), EINSUM_HEADS_IN),
        Rule(f"{layer}/attention/attention_output/kernel", proj("o_proj"), EINSUM_OUT),
        Rule(f"{layer}/ffw_gating/kernel", f"{model}.mlp.gate_proj.weight", T),
        Rule(f"{layer}/ffw_gating_2/kernel", f"{model}.mlp.up_proj.weight", T),
        Rule(f"{layer}/ffw_linear/kernel", f"{model}.mlp.down_proj.weight", T),
        Rule("final_normalization/scale", f"{prefix}model.norm.weight"),
    ]), skip=LORA if adapted else ())


MAPPINGS = {("gemma", "fit"): gemma("base_model.model.", PEFT_LORA_TARGETS), ("gemma", "generate"): gemma()}
# lm_head: the embedding itself (tied); peft's LoRA factors: from its own init, B at zero like the reference's
DERIVED = (r"(base_model\.model\.)?lm_head\.weight", r".*\.lora_[AB]\.default\.weight")
