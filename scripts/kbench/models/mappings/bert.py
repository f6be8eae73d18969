"""BERT: keras-hub BertTextClassifier (the reference; keras-nlp's Keras 2 BertClassifier has the same weights in the
same order) <-> HF BertForSequenceClassification. The layout of convert_bert.py in keras-hub 0.32 (its HF converter),
plus the classifier head it does not convert."""
from kbench.models.weights import EINSUM_IN, EINSUM_OUT, FLAT, Mapping, Rule, dense_rules, norm_rules

_L = r"transformer_layer_(?P<i>\d+)"
BERT = Mapping(tuple([
    Rule("token_embedding/embeddings", "bert.embeddings.word_embeddings.weight"),
    Rule("position_embedding/embeddings", "bert.embeddings.position_embeddings.weight"),
    Rule("segment_embedding/embeddings", "bert.embeddings.token_type_embeddings.weight"),
    *norm_rules("embeddings_layer_norm", "bert.embeddings.LayerNorm"),
    Rule(rf"{_L}/self_attention_layer/(?P<p>query|key|value)/kernel",
         "bert.encoder.layer.{i}.attention.self.{p}.weight", EINSUM_IN),
    Rule(rf"{_L}/self_attention_layer/(?P<p>query|key|value)/bias", "bert.encoder.layer.{i}.attention.self.{p}.bias",
         FLAT),
    Rule(rf"{_L}/self_attention_layer/attention_output/kernel", "bert.encoder.layer.{i}.attention.output.dense.weight",
         EINSUM_OUT),
    Rule(rf"{_L}/self_attention_layer/attention_output/bias", "bert.encoder.layer.{i}.attention.output.dense.bias"),
    *norm_rules(rf"{_L}/self_attention_layer_norm", "bert.encoder.layer.{i}.attention.output.LayerNorm"),
    *norm_rules(rf"{_L}/feedforward_layer_norm", "bert.encoder.layer.{i}.output.LayerNorm"),
    *dense_rules(rf"{_L}/feedforward_intermediate_dense", "bert.encoder.layer.{i}.intermediate.dense"),
    *dense_rules(rf"{_L}/feedforward_output_dense", "bert.encoder.layer.{i}.output.dense"),
    *dense_rules("pooled_dense", "bert.pooler.dense"),
    *dense_rules("logits", "classifier"),
]))

MAPPINGS = {("bert", "fit"): BERT, ("bert", "predict"): BERT}
DERIVED = (r".*position_ids$",)         # a buffer HF recomputes: no reference carries it
