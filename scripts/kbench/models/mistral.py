"""Mistral (Jiang et al. 2023; the anchor's mistral_7b_en at paper size): keras-hub MistralCausalLM, keras-nlp
0.12.1's (Keras 2), HF MistralForCausalLM."""
from __future__ import annotations

from kbench.models import decoder
from kbench.models.mappings import mistral as layouts


def keras_hub_kwargs(arch: dict) -> dict:
    """keras_hub.models.MistralBackbone(**kwargs), and keras_nlp 0.12.1's (same signature); intermediate_dim is per
    branch as in HF, so it maps 1:1."""
    keys = ("vocabulary_size", "num_layers", "num_query_heads", "num_key_value_heads", "hidden_dim",
            "intermediate_dim", "rope_max_wavelength", "layer_norm_epsilon", "sliding_window")
    return {k: arch[k] for k in keys}


def hf_config(arch: dict) -> dict:
    """transformers.MistralConfig(**kwargs); untied embeddings as in keras-hub and Mistral-7B-v0.1."""
    return {**decoder.hf_config(arch), "rope_theta": float(arch["rope_max_wavelength"]),
            "sliding_window": arch["sliding_window"]}


FAMILY = decoder.family("mistral", "Mistral decoder (mistral_7b_en at paper size), LoRA fit and greedy generate",
                        {"keras-hub": keras_hub_kwargs, "keras-nlp": keras_hub_kwargs, "transformers": hf_config},
                        layouts)
