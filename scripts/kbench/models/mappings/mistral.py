"""Mistral: keras-hub MistralCausalLM (the reference) <-> HF MistralForCausalLM, plain (generate) or wrapped by peft
(fit). The key list and layouts of keras-hub 0.32's HF converter, utils/transformers/convert_mistral.py
convert_weights, without its astype(np.float16) (it rounds every weight through float16); lm_head is untied on both
sides (mistral_backbone.py: ReversibleEmbedding(tie_weights=False))."""
from kbench.models.decoder import PEFT_LORA_TARGETS
from kbench.models.weights import EINSUM_IN, EINSUM_OUT, T, Mapping, Rule

LORA = (r".*/lora_kernel_[ab]",)       # keras-hub's per-head factors: peft's flat ones cannot hold them (DERIVED)


def mistral(prefix: str = "", adapted=()) -> Mapping:
    """prefix: "base_model.model." under peft, whose adapted projections keep their weight in .base_layer."""
    layer = rf"transformer_layer_(?P<i>\d+)"
    model = f"{prefix}model.layers.{{i}}"

    def proj(name):
        return f"{model}.self_attn.{name}{'.base_layer' if name in adapted else ''}.weight"
    return Mapping(tuple([
        Rule("token_embedding/embeddings", f"{prefix}model.embed_tokens.weight"),
        Rule("token_embedding/reverse_embeddings", f"{prefix}lm_head.weight", T),
        Rule(f"{layer}/self_attention_layernorm/scale", f"{model}.input_layernorm.weight"),
        Rule(f"{layer}/feedforward_layernorm/scale", f"{model}.post_attention_layernorm.weight"),
        # q/k/v (hidden, heads, head_dim), output (heads, head_dim, hidden): BERT's EinsumDense layouts
        Rule(f"{layer}/self_attention/query/kernel", proj("q_proj"), EINSUM_IN),
        Rule(f"{layer}/self_attention/key/kernel", proj("k_proj"), EINSUM_IN),
        Rule(f"{layer}/self_attention/value/kernel", proj("v_proj"), EINSUM_IN),
        Rule(f"{layer}/self_attention/attention_output/kernel", proj("o_proj"), EINSUM_OUT),
        Rule(f"{layer}/feedforward_gate_dense/kernel", f"{model}.mlp.gate_proj.weight", T),
        Rule(f"{layer}/feedforward_intermediate_dense/kernel", f"{model}.mlp.up_proj.weight", T),
        Rule(f"{layer}/feedforward_output_dense/kernel", f"{model}.mlp.down_proj.weight", T),
        Rule("sequence_output_layernorm/scale", f"{prefix}model.norm.weight"),
    ]), skip=LORA if adapted else ())


MAPPINGS = {("mistral", "fit"): mistral("base_model.model.", PEFT_LORA_TARGETS), ("mistral", "generate"): mistral()}
DERIVED = (r".*\.lora_[AB]\.default\.weight",)   # peft's LoRA factors: its own init, B at zero like the reference's
