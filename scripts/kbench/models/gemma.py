"""Gemma (Gemma Team 2024; the anchor's gemma_7b_en at paper size): keras-hub GemmaCausalLM, HF GemmaForCausalLM."""
from __future__ import annotations

from kbench.models import decoder
from kbench.models.mappings import gemma as layouts


def keras_hub_kwargs(arch: dict) -> dict:
    """keras_hub.models.GemmaBackbone(**kwargs).

    Our intermediate_dim is the width of one gate branch (HF intermediate_size); keras-hub's GemmaDecoderBlock splits
    its intermediate_dim into two branches of intermediate_dim // 2 (its HF converter passes intermediate_size * 2).
    """
    kwargs = {k: arch[k] for k in ("vocabulary_size", "num_layers", "num_query_heads", "num_key_value_heads",
                                   "hidden_dim", "head_dim", "layer_norm_epsilon")}
    kwargs["intermediate_dim"] = 2 * arch["intermediate_dim"]
    return kwargs


def hf_config(arch: dict) -> dict:
    """transformers.GemmaConfig(**kwargs); embeddings tied as in keras-hub and gemma-7b."""
    return {**decoder.hf_config(arch), "head_dim": arch["head_dim"]}


FAMILY = decoder.family("gemma", "Gemma decoder (gemma_7b_en at paper size), LoRA fit and greedy generate",
                        {"keras-hub": keras_hub_kwargs, "transformers": hf_config}, layouts)
