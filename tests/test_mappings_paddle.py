"""The Paddle columns' weight rules (kbench.models.mappings.paddle): torch's state dict, as the native column's mapping makes
it from the reference, onto paddlenlp's BERT and paddle.vision's ResNet-50 (NumPy only)."""
import numpy as np
import pytest

from kbench.models.mappings import paddle as to_paddle

HIDDEN, FF = 4, 8


def hf_bert_layer(i: int, rng) -> dict:
    p = f"bert.encoder.layer.{i}."
    linear = {"attention.self.query": (HIDDEN, HIDDEN), "attention.self.key": (HIDDEN, HIDDEN),
              "attention.self.value": (HIDDEN, HIDDEN), "attention.output.dense": (HIDDEN, HIDDEN),
              "intermediate.dense": (FF, HIDDEN), "output.dense": (HIDDEN, FF)}
    state = {}
    for name, shape in linear.items():
        state[f"{p}{name}.weight"] = rng.random(shape)
        state[f"{p}{name}.bias"] = rng.random(shape[0])
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
        state[f"{p}{norm}.weight"], state[f"{p}{norm}.bias"] = rng.random(HIDDEN), rng.random(HIDDEN)
    return state


def test_bert_every_linear_weight_is_transposed_and_renamed_onto_paddlenlp():
    rng = np.random.default_rng(0)
    state = {"bert.embeddings.word_embeddings.weight": rng.random((16, HIDDEN)),
             "bert.embeddings.position_embeddings.weight": rng.random((8, HIDDEN)),
             "bert.embeddings.token_type_embeddings.weight": rng.random((2, HIDDEN)),
             "bert.embeddings.LayerNorm.weight": rng.random(HIDDEN), "bert.embeddings.LayerNorm.bias": rng.random(HIDDEN),
             **hf_bert_layer(0, rng), **hf_bert_layer(1, rng),
             "bert.pooler.dense.weight": rng.random((HIDDEN, HIDDEN)), "bert.pooler.dense.bias": rng.random(HIDDEN),
             "classifier.weight": rng.random((2, HIDDEN)), "classifier.bias": rng.random(2)}
    out = to_paddle.to_paddle("bert", state)
    assert len(out) == len(state) == 41        # the tiny BERT: 5 embedding tensors, 2 layers of 16, pooler and head
    np.testing.assert_array_equal(out["bert.encoder.layers.1.linear1.weight"],
                                  state["bert.encoder.layer.1.intermediate.dense.weight"].T)
    assert out["bert.encoder.layers.1.linear1.weight"].shape == (HIDDEN, FF)      # Paddle's Linear: (in, out)
    np.testing.assert_array_equal(out["bert.encoder.layers.0.self_attn.out_proj.weight"],
                                  state["bert.encoder.layer.0.attention.output.dense.weight"].T)
    np.testing.assert_array_equal(out["bert.encoder.layers.0.norm1.weight"],
                                  state["bert.encoder.layer.0.attention.output.LayerNorm.weight"])
    np.testing.assert_array_equal(out["bert.encoder.layers.0.linear2.bias"],
                                  state["bert.encoder.layer.0.output.dense.bias"])
    np.testing.assert_array_equal(out["bert.embeddings.word_embeddings.weight"],       # embeddings as they are
                                  state["bert.embeddings.word_embeddings.weight"])
    assert out["classifier.weight"].shape == (HIDDEN, 2) and "bert.embeddings.layer_norm.bias" in out


def test_resnet50_renames_batch_norm_statistics_and_transposes_the_head_only():
    rng = np.random.default_rng(0)
    state = {"conv1.weight": rng.random((8, 3, 7, 7)), "bn1.weight": rng.random(8), "bn1.bias": rng.random(8),
             "bn1.running_mean": rng.random(8), "bn1.running_var": rng.random(8),
             "layer2.0.downsample.0.weight": rng.random((8, 8, 1, 1)), "layer2.0.conv1.bias": rng.random(8),
             "fc.weight": rng.random((10, 8)), "fc.bias": rng.random(10)}
    out = to_paddle.to_paddle("resnet50", state)
    assert set(out) == {"conv1.weight", "bn1.weight", "bn1.bias", "bn1._mean", "bn1._variance",
                        "layer2.0.downsample.0.weight", "layer2.0.conv1.bias", "fc.weight", "fc.bias"}
    np.testing.assert_array_equal(out["conv1.weight"], state["conv1.weight"])          # same conv layout
    np.testing.assert_array_equal(out["fc.weight"], state["fc.weight"].T)
    np.testing.assert_array_equal(out["bn1._variance"], state["bn1.running_var"])


def test_an_unmapped_name_or_model_is_an_error_not_a_silent_gap():
    with pytest.raises(ValueError, match="no Paddle rule for the torch weight bert.encoder.layer.0.extra.weight"):
        to_paddle.to_paddle("bert", {"bert.encoder.layer.0.extra.weight": np.zeros(1)})
    assert not to_paddle.has_rules("stable_diffusion")
    with pytest.raises(KeyError):
        to_paddle.to_paddle("stable_diffusion", {})
