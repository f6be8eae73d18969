"""The equivalence check's SAM and Stable Diffusion weight mappings (kbench.models.mappings.sam, .stable_diffusion), without
any framework: tests/data/keras_torch_weights.json holds the real weight paths and shapes, dumped once in the images,
of keras-hub's SAM (tiny arch: the reference's order), keras-cv 0.9's on Keras 2 (its weight and layer names, its
order) and segment-anything's state dict; and of the Stable Diffusion models of kbench.adapters._keras_sd and
diffusers at a smaller arch than tiny (2 levels, 1 layer per block, 32 px) than the check runs (4 levels, 2 layers):
the block counts are read off the reference, so a second arch tests that too."""
import json
from pathlib import Path

import numpy as np
import pytest

from kbench.models import mappings
from kbench.models.mappings._numbered import ordinal_paths

DUMP = json.loads((Path(__file__).parent / "data" / "keras_torch_weights.json").read_text())


def _reference(entries, seed=0):
    rng = np.random.default_rng(seed)
    return [(path, rng.standard_normal(shape).astype("float32")) for path, shape in entries]


@pytest.mark.parametrize("key", sorted(DUMP))
def test_mapping_gives_the_native_state_and_back(key):
    """Every reference weight maps to one native name, the native state dict's names and shapes exactly, and the
    inverse gives back the reference's paths and values."""
    model, task = key.split("/")
    mapping, arrays = mappings.mapping(model, task), _reference(DUMP[key]["keras"])
    state = mapping.to_torch(arrays)
    assert {name: list(value.shape) for name, value in state.items()} == dict(DUMP[key]["torch"])
    back = mapping.to_keras(state, arrays)
    assert [path for path, _ in back] == [path for path, _ in arrays]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(arrays, back))


def test_named_pairs():
    """The pairs the shapes cannot tell apart: which Dense of an attention is the query, which norm comes first,
    which point embedding is the background, which block a numbered layer is in."""
    for key, pairs in {
        "sam/predict": {
            "windowed_transformer_encoder_1/layer_normalization_3/gamma": "sam.image_encoder.blocks.1.norm2.weight",
            "add_relative_positional_embedding_1/rel_pos_h": "sam.image_encoder.blocks.1.attn.rel_pos_h",
            "sam_prompt_encoder/background_point_embed/embeddings": "sam.prompt_encoder.point_embeddings.0.weight",
            "sam_mask_decoder/two_way_transformer/two_way_multi_head_attention_1/multi_head_attention_with_"
            "downsampling_4/dense_27/kernel": "sam.mask_decoder.transformer.layers.1.cross_attn_token_to_image."
                                              "k_proj.weight",
            "sam_mask_decoder/mlp_8/sequential_10/dense_54/bias": "sam.mask_decoder.iou_prediction_head.layers.2.bias",
        },
        "stable_diffusion/predict": {
            "dense_1/kernel": "time_embedding.linear_2.weight",
            "spatial_transformer_1/basic_transformer_block_1/cross_attention_3/dense_20/kernel":
                "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight",
            "res_block_7/group_normalization_18/beta": "up_blocks.1.resnets.1.norm2.bias",
        },
        "stable_diffusion/fit": {
            "vae_encoder/attention_block/padded_conv2d_10/conv2d_10/kernel": "mid_block.attentions.0.to_v.weight",
        },
    }.items():
        model, task = key.split("/")
        arrays = dict(_reference(DUMP[key]["keras"]))
        state = mappings.mapping(model, task).to_torch(list(arrays.items()))
        for path, name in pairs.items():
            value = arrays[path]        # Dense kernels transposed, 1x1 convs as Linear, the rest as they are
            expected = value[0, 0].T if value.ndim == 4 else value.T if path.endswith("kernel") else value
            assert np.array_equal(state[name], expected), (path, name)


def test_ordinal_paths():
    """Auto-numbered names become ranks among their siblings of the same name, in the order Keras numbered them."""
    assert ordinal_paths(["a_3/dense_7/kernel", "a_3/dense/kernel", "a_3/dense_9/bias", "a/dense_2/kernel",
                          "top/w"]) == ["a#1/dense#1/kernel", "a#1/dense#0/kernel", "a#1/dense#2/bias",
                                        "a#0/dense#0/kernel", "top#0/w"]


class _Weight:
    def __init__(self, name, shape):
        self.name, self.shape = f"{name}:0", tuple(shape)


class _Layer:
    def __init__(self, name):
        self.name, self._trainable_weights = name, []


class _Keras2Model:
    """What kbench.models.mappings.sam.by_layer_names reads of a tf.keras model: its weights and its layers' own weights."""

    def __init__(self, entries):
        self.weights, self._layers = [], {}
        for name, layer, shape in entries:
            self.weights.append(_Weight(name, shape))
            self._layers.setdefault(layer, _Layer(layer))._trainable_weights.append(self.weights[-1])

    def _flatten_layers(self, include_self=True, recursive=True):
        return list(self._layers.values())


@pytest.mark.parametrize("task", ["fit", "predict"])
def test_keras2_order(task):
    """keras-cv's Keras 2 SAM lists the same weights in another order (its names are not unique: five
    'sam_prompt_encoder/embeddings'); by layer and weight name each gets the reference weight of its shape, and
    the order really differs."""
    key = f"sam/{task}"
    arrays, model = _reference(DUMP[key]["keras"]), _Keras2Model(DUMP[key]["keras2"])
    ordered = mappings.keras2_order("sam", task)(arrays, model)
    assert sorted(path for path, _ in ordered) == sorted(path for path, _ in arrays)
    assert [tuple(w.shape) for w in model.weights] == [value.shape for _, value in ordered]
    assert [path for path, _ in ordered] != [path for path, _ in arrays]
    found = dict(zip((w.name for w in model.weights), (path for path, _ in ordered)))
    assert found["positional_encoding_gaussian_matrix:0"].endswith("positional_encoding_gaussian_matrix") \
        if task == "predict" else found["pos_embed:0"] == "add_positional_embedding/pos_embed"
    with pytest.raises(ValueError, match="not the reference's"):
        mappings.keras2_order("sam", task)(arrays[1:], model)
