"""The Paddle columns' weights: the native PyTorch state dict a model's Mapping makes from the reference
(kbench.models.mappings.<model>) -> the Paddle model's state dict, by name rules. Pure NumPy.

Paddle's Linear stores its weight (in, out), torch's (out, in): every Linear weight is transposed; convolutions share
torch's (out, in, kh, kw) layout; embeddings and norms are copied. Batch norm's running statistics are _mean and
_variance in Paddle. paddlenlp's BERT is built on paddle.nn.TransformerEncoderLayer (paddlenlp ships the same table
as BertPretrainedModel._get_name_mappings); paddle.vision's ResNet-50 has torchvision's module names.
A model without rules here has no Paddle mapping yet (the check reports it: mapping incomplete).
"""
from __future__ import annotations

import re

import numpy as np

_BERT_LAYER = r"bert\.encoder\.layer\.(?P<i>\d+)\."
# (torch name, Paddle name, Linear weight: transposed)
RULES = {
    "bert": (
        (r"bert\.embeddings\.(?P<e>word|position|token_type)_embeddings\.weight",
         "bert.embeddings.{e}_embeddings.weight", False),
        (r"bert\.embeddings\.LayerNorm\.(?P<p>weight|bias)", "bert.embeddings.layer_norm.{p}", False),
        (_BERT_LAYER + r"attention\.self\.query\.weight", "bert.encoder.layers.{i}.self_attn.q_proj.weight", True),
        (_BERT_LAYER + r"attention\.self\.key\.weight", "bert.encoder.layers.{i}.self_attn.k_proj.weight", True),
        (_BERT_LAYER + r"attention\.self\.value\.weight", "bert.encoder.layers.{i}.self_attn.v_proj.weight", True),
        (_BERT_LAYER + r"attention\.self\.query\.bias", "bert.encoder.layers.{i}.self_attn.q_proj.bias", False),
        (_BERT_LAYER + r"attention\.self\.key\.bias", "bert.encoder.layers.{i}.self_attn.k_proj.bias", False),
        (_BERT_LAYER + r"attention\.self\.value\.bias", "bert.encoder.layers.{i}.self_attn.v_proj.bias", False),
        (_BERT_LAYER + r"attention\.output\.dense\.weight", "bert.encoder.layers.{i}.self_attn.out_proj.weight", True),
        (_BERT_LAYER + r"attention\.output\.dense\.bias", "bert.encoder.layers.{i}.self_attn.out_proj.bias", False),
        (_BERT_LAYER + r"attention\.output\.LayerNorm\.(?P<p>weight|bias)", "bert.encoder.layers.{i}.norm1.{p}",
         False),
        (_BERT_LAYER + r"intermediate\.dense\.weight", "bert.encoder.layers.{i}.linear1.weight", True),
        (_BERT_LAYER + r"intermediate\.dense\.bias", "bert.encoder.layers.{i}.linear1.bias", False),
        (_BERT_LAYER + r"output\.dense\.weight", "bert.encoder.layers.{i}.linear2.weight", True),
        (_BERT_LAYER + r"output\.dense\.bias", "bert.encoder.layers.{i}.linear2.bias", False),
        (_BERT_LAYER + r"output\.LayerNorm\.(?P<p>weight|bias)", "bert.encoder.layers.{i}.norm2.{p}", False),
        (r"(?P<m>bert\.pooler\.dense|classifier)\.weight", "{m}.weight", True),
        (r"(?P<m>bert\.pooler\.dense|classifier)\.bias", "{m}.bias", False),
    ),
    "resnet50": (
        (r"(?P<m>.+)\.running_mean", "{m}._mean", False),
        (r"(?P<m>.+)\.running_var", "{m}._variance", False),
        (r"fc\.weight", "fc.weight", True),
        (r"(?P<m>.+)\.(?P<p>weight|bias)", "{m}.{p}", False),
    ),
}


def has_rules(model: str) -> bool:
    return model in RULES


def to_paddle(model: str, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """torch name -> array into Paddle name -> array; a torch name no rule matches is an error (nothing is left out
    unsaid)."""
    if model not in RULES:
        raise KeyError(f"no Paddle weight rules for {model}")
    out = {}
    for name, value in state.items():
        for pattern, target, transposed in RULES[model]:
            found = re.fullmatch(pattern, name)
            if found:
                paddle_name = target.format(**found.groupdict())
                if paddle_name in out:
                    raise ValueError(f"two torch weights map to the Paddle weight {paddle_name}")
                out[paddle_name] = np.ascontiguousarray(value.T if transposed else value)
                break
        else:
            raise ValueError(f"no Paddle rule for the torch weight {name} ({model})")
    return out
