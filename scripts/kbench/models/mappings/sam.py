"""SAM: keras-hub's ViTDetBackbone (fit) and SAMImageSegmenter (predict), the reference, <-> segment-anything's
ImageEncoderViT, PromptEncoder and MaskDecoder as kbench.adapters.native_torch wires them (SamImageEncoder: names
"image_encoder.*"; SamPredict: "sam.image_encoder.*", "sam.prompt_encoder.*", "sam.mask_decoder.*").

The correspondence is keras-hub's own converter's (tools/checkpoint_conversion/convert_sam_checkpoints.py in the
keras-hub repository, torch -> Keras), inverted. keras-hub leaves the layers inside unnamed, so the rules match ordinal
paths (kbench.models.mappings._numbered): "dense#1" is the second Dense its parent's __init__ creates (keras-hub
vit_det/vit_layers.py, sam/sam_layers.py, sam_transformer.py, sam_mask_decoder.py, sam_prompt_encoder.py).
segment-anything's other buffers (Sam.pixel_mean/std) are not persistent: no DERIVED.
"""
from kbench.models import weights
from kbench.models.mappings._numbered import Numbered
from kbench.models.weights import CONV, Rule, dense_rules, norm_rules


def _conv(keras: str, torch: str) -> list[Rule]:
    """Conv2D / Conv2DTranspose with a bias (one layout for both: HWIO and (h, w, out, in) -> OIHW and (in, out, h,
    w))."""
    return [Rule(f"{keras}/kernel", f"{torch}.weight", CONV), Rule(f"{keras}/bias", f"{torch}.bias")]


def _image_encoder(p: str) -> list[Rule]:
    b, block = r"windowed_transformer_encoder#(?P<i>\d+)", f"{p}.blocks.{{i}}"
    return [
        *_conv("vi_t_det_patching_and_embedding#0/conv2d#0", f"{p}.patch_embed.proj"),
        Rule("add_positional_embedding#0/pos_embed", f"{p}.pos_embed"),      # (1, grid, grid, C) on both sides
        *norm_rules(f"{b}/layer_normalization#0", f"{block}.norm1"),
        *norm_rules(f"{b}/layer_normalization#1", f"{block}.norm2"),
        *dense_rules(f"{b}/multi_head_attention_with_relative_pe#0/dense#0", f"{block}.attn.qkv"),
        *dense_rules(f"{b}/multi_head_attention_with_relative_pe#0/dense#1", f"{block}.attn.proj"),
        # made in the attention's build(), outside the block's name scope: top-level layers, one per block
        Rule(r"add_relative_positional_embedding#(?P<i>\d+)/(?P<w>rel_pos_[hw])", f"{block}.attn.{{w}}"),
        *dense_rules(f"{b}/mlp#0/sequential#0/dense#0", f"{block}.mlp.lin1"),
        *dense_rules(f"{b}/mlp#0/sequential#0/dense#1", f"{block}.mlp.lin2"),
        # the neck: 1x1 conv, layer norm, 3x3 conv, layer norm, both convs without bias (vit_det_backbone.py)
        Rule("sequential#0/conv2d#0/kernel", f"{p}.neck.0.weight", CONV),
        *norm_rules("sequential#0/layer_normalization#0", f"{p}.neck.1"),
        Rule("sequential#0/conv2d#1/kernel", f"{p}.neck.2.weight", CONV),
        *norm_rules("sequential#0/layer_normalization#1", f"{p}.neck.3"),
    ]


# segment-anything's point_embeddings: 0 background (label 0), 1 foreground (label 1), 2 and 3 the box corners
# (prompt_encoder.py _embed_points, _embed_boxes); keras-hub has one named Embedding each
_POINTS = ("background_point_embed", "foreground_point_embed", "top_left_corner_embed", "bottom_right_corner_embed")


def _prompt_encoder(p: str) -> list[Rule]:
    k, down = "sam_prompt_encoder#0", "sam_prompt_encoder#0/mask_downscaler#0"
    return [
        Rule("random_frequency_positional_embeddings#0/positional_encoding_gaussian_matrix",
             f"{p}.pe_layer.positional_encoding_gaussian_matrix"),            # a weight in Keras, a buffer in torch
        *[Rule(f"{k}/{name}#0/embeddings", f"{p}.point_embeddings.{i}.weight") for i, name in enumerate(_POINTS)],
        Rule(f"{k}/not_a_point_embed#0/embeddings", f"{p}.not_a_point_embed.weight"),
        Rule(f"{k}/no_mask_embed#0/embeddings", f"{p}.no_mask_embed.weight"),
        # mask_downscaling: conv, norm, GELU, conv, norm, GELU, conv (torch indices count the activations)
        *_conv(f"{down}/conv2d#0", f"{p}.mask_downscaling.0"),
        *norm_rules(f"{down}/layer_normalization#0", f"{p}.mask_downscaling.1"),
        *_conv(f"{down}/conv2d#1", f"{p}.mask_downscaling.3"),
        *norm_rules(f"{down}/layer_normalization#1", f"{p}.mask_downscaling.4"),
        *_conv(f"{down}/conv2d#2", f"{p}.mask_downscaling.6"),
    ]


def _attention(keras: str, torch: str) -> list[Rule]:
    """MultiHeadAttentionWithDownsampling's query, key, value and output Dense -> torch Attention's projections."""
    return [r for i, name in enumerate(("q_proj", "k_proj", "v_proj", "out_proj"))
            for r in dense_rules(f"{keras}/dense#{i}", f"{torch}.{name}")]


def _mask_decoder(p: str) -> list[Rule]:
    k, t = "sam_mask_decoder#0", "sam_mask_decoder#0/two_way_transformer#0"
    layer, to = rf"{t}/two_way_multi_head_attention#(?P<i>\d+)", f"{p}.transformer.layers.{{i}}"
    # TwoWayMultiHeadAttention creates self-attention, token-to-image, MLP, image-to-token with a norm after each
    return [
        *[r for i, name in enumerate(("self_attn", "cross_attn_token_to_image", "cross_attn_image_to_token"))
          for r in _attention(f"{layer}/multi_head_attention_with_downsampling#{i}", f"{to}.{name}")],
        *[r for i in range(4) for r in norm_rules(f"{layer}/layer_normalization#{i}", f"{to}.norm{i + 1}")],
        *dense_rules(f"{layer}/mlp#0/sequential#0/dense#0", f"{to}.mlp.lin1"),
        *dense_rules(f"{layer}/mlp#0/sequential#0/dense#1", f"{to}.mlp.lin2"),
        *_attention(f"{t}/multi_head_attention_with_downsampling#0", f"{p}.transformer.final_attn_token_to_image"),
        *norm_rules(f"{t}/layer_normalization#0", f"{p}.transformer.norm_final_attn"),
        Rule(f"{k}/embedding#0/embeddings", f"{p}.iou_token.weight"),
        Rule(f"{k}/embedding#1/embeddings", f"{p}.mask_tokens.weight"),
        # output_upscaling: transposed conv, norm, GELU, transposed conv, GELU
        *_conv(f"{k}/sequential#0/conv2d_transpose#0", f"{p}.output_upscaling.0"),
        *norm_rules(f"{k}/sequential#0/layer_normalization#0", f"{p}.output_upscaling.1"),
        *_conv(f"{k}/sequential#0/conv2d_transpose#1", f"{p}.output_upscaling.3"),
        # the num_multimask_outputs + 1 = 4 hypernetwork MLPs, then the IoU head (sam_mask_decoder.py __init__)
        *dense_rules(rf"{k}/mlp#(?P<i>[0-3])/sequential#0/dense#(?P<j>\d+)",
                     f"{p}.output_hypernetworks_mlps.{{i}}.layers.{{j}}"),
        *dense_rules(rf"{k}/mlp#4/sequential#0/dense#(?P<j>\d+)", f"{p}.iou_prediction_head.layers.{{j}}"),
    ]


def by_layer_names(arrays: list, model) -> list:
    """The reference in the order of a Keras 2 model of the same weights, each found by its layer's name and its own:
    keras-cv 0.9's SAM (Keras 2) has keras-hub's weights in another order (tf.keras lists a layer's non-trainable
    weights after its trainable ones, so the prompt encoder's Gaussian matrix comes last; the image encoder's neck is
    listed after the prompt encoder), and both sessions name their layers alike (the same classes built in the same
    order, measured: every (layer name, weight name) pair unique and the same on both)."""
    owner = {}
    for layer in model._flatten_layers(include_self=True, recursive=True):
        for weight in weights._own_weights(layer):
            owner.setdefault(id(weight), layer.name)
    reference = {tuple(path.split("/")[-2:]): (path, value) for path, value in arrays}
    keys = [(owner.get(id(w)), weights.weight_name(w)) for w in model.weights]
    if len(reference) != len(arrays) or sorted(keys, key=str) != sorted(reference, key=str):
        missing = sorted(set(keys) ^ set(reference), key=str)[:5]
        raise ValueError(f"the Keras 2 model's weights are not the reference's by layer and weight name: {missing}")
    return [reference[key] for key in keys]


SAM_FIT = Numbered(tuple(_image_encoder("image_encoder")))
SAM_PREDICT = Numbered(tuple(_image_encoder("sam.image_encoder") + _prompt_encoder("sam.prompt_encoder")
                             + _mask_decoder("sam.mask_decoder")))
MAPPINGS = {("sam", "fit"): SAM_FIT, ("sam", "predict"): SAM_PREDICT}
KERAS2_ORDER = {("sam", "fit"): by_layer_names, ("sam", "predict"): by_layer_names}
