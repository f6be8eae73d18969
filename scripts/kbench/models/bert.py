"""BERT (Devlin et al. 2019; the anchor's bert_base_en) as a sequence classifier: keras-hub BertTextClassifier,
keras-nlp 0.12.1 BertClassifier, HF BertForSequenceClassification, paddlenlp's."""
from __future__ import annotations

import numpy as np

from kbench.models import family
from kbench.models.mappings import bert as layouts
from kbench.models.tally import Tally, attention, linear


def keras_hub_kwargs(arch: dict) -> dict:
    """keras_hub.models.BertBackbone(**kwargs), and keras_nlp 0.12.1's BertBackbone (same signature). The classifier
    head takes arch["num_classes"] separately."""
    keys = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "max_sequence_length", "num_segments")
    return {k: arch[k] for k in keys}


# BERT's feed-forward GELU: keras-hub and keras-nlp always use the tanh approximation (keras_hub bert_backbone.py:131,
# keras_nlp 0.12.1 bert_backbone.py:146: gelu_approximate); HF's BertConfig defaults to the exact one ("gelu").
HF_GELU = {"tanh": "gelu_pytorch_tanh", "exact": "gelu"}


def hf_config(arch: dict, gelu: str = "tanh", dropout: float | None = None) -> dict:
    """transformers.BertConfig(**kwargs) for BertForSequenceClassification; gelu: tanh (as the Keras columns) or
    exact (HF's default); dropout: all three of HF's dropouts (None: HF's default 0.1, as keras-hub's)."""
    config = {"vocab_size": arch["vocabulary_size"], "num_hidden_layers": arch["num_layers"],
              "num_attention_heads": arch["num_heads"], "hidden_size": arch["hidden_dim"],
              "intermediate_size": arch["intermediate_dim"], "max_position_embeddings": arch["max_sequence_length"],
              "type_vocab_size": arch["num_segments"], "num_labels": arch["num_classes"], "hidden_act": HF_GELU[gelu]}
    if dropout is not None:
        config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)
    return config


def paddlenlp_config(arch: dict, dropout: float | None = None) -> dict:
    """paddlenlp.transformers.BertConfig(**kwargs) for its BertForSequenceClassification: HF's names and defaults
    (layer-norm epsilon 1e-12, dropout 0.1). hidden_act is a paddle.nn.functional name, exact GELU: paddlenlp's
    encoder layers take getattr(F, hidden_act), which has no tanh form (the adapter sets that on the layers)."""
    return hf_config(arch, "exact", dropout)


def inputs(spec, rng) -> dict:
    """x for BertTextClassifier / BertClassifier (preprocessor=None) and, for fit, class labels."""
    arch, n, seq = spec.arch, spec.batch_size, spec.inputs["sequence_length"]
    x = {"token_ids": rng.integers(0, arch["vocabulary_size"], (n, seq), dtype="int32"),
         "segment_ids": np.zeros((n, seq), "int32"),
         "padding_mask": np.ones((n, seq), "int32")}
    return {"x": x, "labels": rng.integers(0, arch["num_classes"], (n,), dtype="int32")}


def torch_inputs(x: dict) -> dict:
    """inputs()'s x as BertForSequenceClassification's keyword arguments (int64 ids)."""
    return {"input_ids": x["token_ids"].astype("int64"), "token_type_ids": x["segment_ids"].astype("int64"),
            "attention_mask": x["padding_mask"].astype("int64")}


def flops(spec, t: Tally) -> None:
    """transformers BertForSequenceClassification (= keras-hub BertTextClassifier): BertEmbeddings (lookups only),
    num_layers x BertLayer [BertSelfAttention query/key/value Linear(d, d), SDPA, BertSelfOutput.dense Linear(d, d),
    BertIntermediate.dense Linear(d, I), BertOutput.dense Linear(I, d)], BertPooler.dense Linear(d, d) on the first
    token, classifier Linear(d, num_classes). Fit trains everything (the embeddings too, so every layer's input
    needs a gradient): grads=2 everywhere."""
    a, b, s = spec.arch, spec.batch_size, spec.inputs["sequence_length"]
    d, inter, heads = a["hidden_dim"], a["intermediate_dim"], a["num_heads"]
    tokens = b * s
    for _ in range(a["num_layers"]):
        t.add("encoder q/k/v/o projections", 4 * linear(tokens, d, d), grads=2)
        t.attention("encoder self-attention", attention(b * heads, s, s, d // heads), grads=2)
        t.add("encoder feed-forward", linear(tokens, d, inter) + linear(tokens, inter, d), grads=2)
    t.add("pooler + classifier", linear(b, d, d) + linear(b, d, a["num_classes"]), grads=2)


def contraction_and_depth(spec) -> tuple[int, int]:
    a = spec.arch
    return max(a["hidden_dim"], a["intermediate_dim"], spec.inputs["sequence_length"]), 6 * a["num_layers"] + 3


FAMILY = family.register(
    name="bert", about="BERT encoder with a classification head (bert_base_en at paper size)",
    tasks=("fit", "predict"),
    libraries={"keras-hub": keras_hub_kwargs, "keras-nlp": keras_hub_kwargs, "transformers": hf_config,
               "paddlenlp": paddlenlp_config},
    inputs={"fit": inputs, "predict": inputs}, flops={"fit": flops, "predict": flops},
    contraction_and_depth=contraction_and_depth,
    example={"fit": "sequence", "predict": "sequence"},
    layouts=layouts)
