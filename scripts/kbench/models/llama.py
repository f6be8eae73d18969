"""Llama 3 (Grattafiori et al. 2024, Meta-Llama-3-8B at paper size): keras-hub Llama3CausalLM, HF
LlamaForCausalLM. Not in the anchor (keras-benchmarks v0.0.5 has no Llama): its rows have no published number."""
from __future__ import annotations

from kbench.models import decoder
from kbench.models.mappings import llama as layouts


def keras_hub_kwargs(arch: dict) -> dict:
    """keras_hub.models.Llama3Backbone(**kwargs): intermediate_dim is per gate branch as in HF; untied embeddings."""
    keys = ("vocabulary_size", "num_layers", "num_query_heads", "num_key_value_heads", "hidden_dim",
            "intermediate_dim", "rope_max_wavelength", "layer_norm_epsilon")
    return {k: arch[k] for k in keys}


def hf_config(arch: dict) -> dict:
    """transformers.LlamaConfig(**kwargs); untied embeddings as in keras-hub and Meta-Llama-3-8B."""
    return {**decoder.hf_config(arch), "rope_theta": float(arch["rope_max_wavelength"]),
            "tie_word_embeddings": False}


FAMILY = decoder.family("llama", "Llama 3 decoder (Meta-Llama-3-8B at paper size), LoRA fit and greedy generate",
                        {"keras-hub": keras_hub_kwargs, "transformers": hf_config}, layouts)
