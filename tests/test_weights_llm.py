"""The Gemma and Mistral weight mappings (kbench.models.mappings.gemma / .mistral) on fake arrays, no framework: the
paths and shapes are the real ones of the tiny archs (dumped once in the keras3-jax and native-torch images: keras-hub
0.32 with enable_lora(4), transformers 5 under peft), layer 0 and the model-level weights."""
import numpy as np
import pytest

from kbench.models import mappings
from kbench.models.weights import Mapping, Rule

# keras-hub paths and shapes (fit: enable_lora(rank=4) adds lora_kernel_a/b on query and value)
GEMMA_KERAS = [
    ("token_embedding/embeddings", (1024, 64)),
    ("decoder_block_0/pre_attention_norm/scale", (64,)),
    ("decoder_block_0/attention/query/kernel", (4, 64, 16)),
    ("decoder_block_0/attention/query/lora_kernel_a", (4, 64, 4)),
    ("decoder_block_0/attention/query/lora_kernel_b", (4, 16)),
    ("decoder_block_0/attention/key/kernel", (4, 64, 16)),
    ("decoder_block_0/attention/value/kernel", (4, 64, 16)),
    ("decoder_block_0/attention/value/lora_kernel_a", (4, 64, 4)),
    ("decoder_block_0/attention/value/lora_kernel_b", (4, 16)),
    ("decoder_block_0/attention/attention_output/kernel", (4, 16, 64)),
    ("decoder_block_0/pre_ffw_norm/scale", (64,)),
    ("decoder_block_0/ffw_gating/kernel", (64, 128)),
    ("decoder_block_0/ffw_gating_2/kernel", (64, 128)),
    ("decoder_block_0/ffw_linear/kernel", (128, 64)),
    ("final_normalization/scale", (64,)),
]
MISTRAL_KERAS = [
    ("token_embedding/embeddings", (1024, 64)),
    ("token_embedding/reverse_embeddings", (64, 1024)),
    ("transformer_layer_0/self_attention/query/kernel", (64, 4, 16)),
    ("transformer_layer_0/self_attention/query/lora_kernel_a", (64, 4, 4)),
    ("transformer_layer_0/self_attention/query/lora_kernel_b", (4, 16)),
    ("transformer_layer_0/self_attention/key/kernel", (64, 2, 16)),
    ("transformer_layer_0/self_attention/value/kernel", (64, 2, 16)),
    ("transformer_layer_0/self_attention/value/lora_kernel_a", (64, 2, 4)),
    ("transformer_layer_0/self_attention/value/lora_kernel_b", (4, 16)),
    ("transformer_layer_0/self_attention/attention_output/kernel", (4, 16, 64)),
    ("transformer_layer_0/self_attention_layernorm/scale", (64,)),
    ("transformer_layer_0/feedforward_intermediate_dense/kernel", (64, 128)),
    ("transformer_layer_0/feedforward_gate_dense/kernel", (64, 128)),
    ("transformer_layer_0/feedforward_output_dense/kernel", (128, 64)),
    ("transformer_layer_0/feedforward_layernorm/scale", (64,)),
    ("sequence_output_layernorm/scale", (64,)),
]


def _hf(kv: int, adapted: bool) -> dict:
    """HF *ForCausalLM state names and shapes (generate), or under peft with LoRA on q_proj/v_proj (fit)."""
    p, base = ("base_model.model.", ".base_layer") if adapted else ("", "")
    names = {f"{p}model.embed_tokens.weight": (1024, 64), f"{p}lm_head.weight": (1024, 64),
             f"{p}model.norm.weight": (64,)}
    layer = f"{p}model.layers.0"
    names.update({f"{layer}.self_attn.q_proj{base}.weight": (64, 64), f"{layer}.self_attn.k_proj.weight": (kv, 64),
                  f"{layer}.self_attn.v_proj{base}.weight": (kv, 64), f"{layer}.self_attn.o_proj.weight": (64, 64),
                  f"{layer}.mlp.gate_proj.weight": (128, 64), f"{layer}.mlp.up_proj.weight": (128, 64),
                  f"{layer}.mlp.down_proj.weight": (64, 128), f"{layer}.input_layernorm.weight": (64,),
                  f"{layer}.post_attention_layernorm.weight": (64,)})
    if adapted:
        for proj, out in (("q_proj", 64), ("v_proj", kv)):
            names.update({f"{layer}.self_attn.{proj}.lora_A.default.weight": (4, 64),
                          f"{layer}.self_attn.{proj}.lora_B.default.weight": (out, 4)})
    return names


CASES = {("gemma", "fit"): (GEMMA_KERAS, _hf(64, True)),
         ("gemma", "generate"): ([a for a in GEMMA_KERAS if "lora" not in a[0]], _hf(64, False)),
         ("mistral", "fit"): (MISTRAL_KERAS, _hf(32, True)),
         ("mistral", "generate"): ([a for a in MISTRAL_KERAS if "lora" not in a[0]], _hf(32, False))}


def _fake(paths):
    rng = np.random.default_rng(0)
    return [(path, rng.standard_normal(shape).astype(np.float32)) for path, shape in paths]


@pytest.mark.parametrize("model, task", CASES)
def test_every_reference_array_lands_on_a_torch_name_and_comes_back(model, task):
    paths, hf = CASES[model, task]
    arrays, mapping = _fake(paths), mappings.mapping(model, task)
    state = mapping.to_torch(arrays)
    assert {k: v.shape for k, v in state.items()} == {k: s for k, s in hf.items() if not mappings.derived(model, k)}
    # what stays unloaded is derived: Gemma's tied lm_head, peft's own LoRA factors; nothing else
    assert {k for k in hf if mappings.derived(model, k)} == (
        {k for k in hf if "lora_" in k} | ({next(k for k in hf if k.endswith("lm_head.weight"))}
                                           if model == "gemma" else set()))
    # the keras-hub LoRA factors map to nothing, on purpose, and are named
    assert mapping.skipped(arrays) == [p for p, _ in paths if "lora_kernel" in p]
    back = dict(mapping.to_keras(state, arrays))
    assert set(back) == {p for p, _ in paths if "lora_kernel" not in p}
    for path, value in arrays:
        if path in back:
            np.testing.assert_array_equal(back[path], value, err_msg=path)


def _linear(x, state, name):
    return x @ state[name].T


@pytest.mark.parametrize("model, prefix", [("gemma", "decoder_block_0/attention"),
                                           ("mistral", "transformer_layer_0/self_attention")])
def test_attention_kernels_compute_what_keras_hubs_einsums_compute(model, prefix):
    """An invertible layout can still be the wrong one: each projection against the EinsumDense equations keras-hub
    builds them with (gemma_attention.py: btd,ndh->btnh and btnh,nhd->btd; mistral_attention.py: bqm,muh->bquh,
    bquh,uhm->bqm), heads in HF's order (heads * head_dim flattened head-major)."""
    paths, _ = CASES[model, "generate"]
    arrays = dict(_fake(paths))
    state = mappings.mapping(model, "generate").to_torch(list(arrays.items()))
    x = np.random.default_rng(1).standard_normal((2, 3, 64)).astype(np.float32)
    heads_in = "btd,ndh->btnh" if model == "gemma" else "btd,dnh->btnh"
    for keras, hf in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        expected = np.einsum(heads_in, x, arrays[f"{prefix}/{keras}/kernel"])
        got = _linear(x, state, f"model.layers.0.self_attn.{hf}.weight").reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=hf)
    heads = np.random.default_rng(2).standard_normal((2, 3, 4, 16)).astype(np.float32)
    expected = np.einsum("btnh,nhd->btd", heads, arrays[f"{prefix}/attention_output/kernel"])
    got = _linear(heads.reshape(2, 3, 64), state, "model.layers.0.self_attn.o_proj.weight")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_mistral_head_is_the_reverse_embedding_transposed():
    arrays = dict(_fake(CASES["mistral", "generate"][0]))
    state = mappings.mapping("mistral", "generate").to_torch(list(arrays.items()))
    np.testing.assert_array_equal(state["lm_head.weight"], arrays["token_embedding/reverse_embeddings"].T)


def test_a_skip_never_hides_an_unmapped_weight_nor_a_mapped_one():
    arrays = [("a/kernel", np.zeros((2, 2))), ("a/lora_kernel_a", np.zeros((2, 1)))]
    with pytest.raises(ValueError, match="no mapping rule for the reference weight a/lora_kernel_a"):
        Mapping((Rule("a/kernel", "a.weight"),)).to_torch(arrays)
    with pytest.raises(ValueError, match="both skipped and mapped"):
        Mapping((Rule("a/(?P<x>.*)", "a.{x}"),), skip=(r".*/lora_kernel_a",)).to_torch(arrays)
    assert list(Mapping((Rule("a/kernel", "a.weight"),), skip=(r".*/lora_kernel_a",)).to_torch(arrays)) == ["a.weight"]
