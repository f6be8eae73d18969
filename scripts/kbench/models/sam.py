"""Segment Anything (Kirillov et al. 2023; the anchor's sam_huge_sa1b at paper size): keras-hub's ViTDet image encoder,
prompt encoder and mask decoder (Keras 3), keras-cv 0.9.0's (Keras 2), Meta's segment-anything (native PyTorch)."""
from __future__ import annotations

import math

import numpy as np

from kbench.models import family
from kbench.models.mappings import sam as layouts
from kbench.models.tally import CONV, Tally, attention, conv2d, conv_transpose2d, linear


def embedding_size(arch: dict) -> int:
    """Side of the image-embedding grid (64 for SAM at 1024 px with 16 px patches)."""
    return arch["image_size"] // arch["patch_size"]


def keras_hub_kwargs(arch: dict) -> dict:
    """Kwargs of the three keras-hub SAM parts, keyed by constructor:
    ViTDetBackbone (image encoder), SAMPromptEncoder, SAMMaskDecoder; SAMBackbone takes the three built parts."""
    size, grid = arch["image_size"], embedding_size(arch)
    return {
        "image_encoder": {
            "hidden_size": arch["encoder_hidden_dim"],
            "num_layers": arch["encoder_num_layers"],
            "intermediate_dim": arch["encoder_intermediate_dim"],
            "num_heads": arch["encoder_num_heads"],
            "global_attention_layer_indices": list(arch["global_attention_layer_indices"]),
            "image_shape": (size, size, 3),
            "patch_size": arch["patch_size"],
            "num_output_channels": arch["embedding_dim"],
            "window_size": arch["window_size"],
        },
        "prompt_encoder": {
            "hidden_size": arch["embedding_dim"],
            "image_embedding_size": (grid, grid),
            "input_image_size": (size, size),
            "mask_in_channels": arch["mask_in_channels"],
        },
        "mask_decoder": {
            "hidden_size": arch["embedding_dim"],
            "num_layers": arch["decoder_num_layers"],
            "intermediate_dim": arch["decoder_intermediate_dim"],
            "num_heads": arch["decoder_num_heads"],
            "embedding_dim": arch["embedding_dim"],
            "num_multimask_outputs": arch["num_multimask_outputs"],
            "iou_head_depth": arch["iou_head_depth"],
            "iou_head_hidden_dim": arch["iou_head_hidden_dim"],
        },
    }


def keras_cv_kwargs(arch: dict) -> dict:
    """Kwargs of keras-cv 0.9.0's SAM parts (the Keras 2 path): ViTDetBackbone, SAMPromptEncoder, SAMMaskDecoder and
    its TwoWayTransformer. Same model as keras-hub's, older argument names."""
    hub = keras_hub_kwargs(arch)
    enc, prompt, dec = hub["image_encoder"], hub["prompt_encoder"], hub["mask_decoder"]
    return {
        "image_encoder": {
            "include_rescaling": False, "input_shape": enc["image_shape"], "patch_size": enc["patch_size"],
            "embed_dim": enc["hidden_size"], "depth": enc["num_layers"], "mlp_dim": enc["intermediate_dim"],
            "num_heads": enc["num_heads"], "out_chans": enc["num_output_channels"], "use_bias": True,
            "use_abs_pos": True, "use_rel_pos": True, "window_size": enc["window_size"],
            "global_attention_indices": enc["global_attention_layer_indices"], "layer_norm_epsilon": 1e-6,
        },
        "prompt_encoder": {
            "embed_dim": prompt["hidden_size"], "image_embedding_size": prompt["image_embedding_size"],
            "input_image_size": prompt["input_image_size"], "mask_in_chans": prompt["mask_in_channels"],
        },
        "transformer": {"depth": dec["num_layers"], "embed_dim": dec["embedding_dim"], "num_heads": dec["num_heads"],
                        "mlp_dim": dec["intermediate_dim"]},
        "mask_decoder": {"transformer_dim": dec["hidden_size"], "num_multimask_outputs": dec["num_multimask_outputs"],
                         "iou_head_depth": dec["iou_head_depth"], "iou_head_hidden_dim": dec["iou_head_hidden_dim"]},
    }


def segment_anything_kwargs(arch: dict) -> dict:
    """Kwargs of segment_anything.modeling's ImageEncoderViT, PromptEncoder, MaskDecoder and TwoWayTransformer, as
    segment_anything.build_sam._build_sam wires them (layer-norm eps 1e-6 is set by the adapter: it is a class)."""
    size, grid, dim = arch["image_size"], embedding_size(arch), arch["embedding_dim"]
    return {
        "image_encoder": {
            "img_size": size, "patch_size": arch["patch_size"], "embed_dim": arch["encoder_hidden_dim"],
            "depth": arch["encoder_num_layers"], "num_heads": arch["encoder_num_heads"],
            "mlp_ratio": arch["encoder_intermediate_dim"] / arch["encoder_hidden_dim"], "out_chans": dim,
            "qkv_bias": True, "use_rel_pos": True, "window_size": arch["window_size"],
            "global_attn_indexes": tuple(arch["global_attention_layer_indices"]),
        },
        "prompt_encoder": {"embed_dim": dim, "image_embedding_size": (grid, grid), "input_image_size": (size, size),
                           "mask_in_chans": arch["mask_in_channels"]},
        "transformer": {"depth": arch["decoder_num_layers"], "embedding_dim": dim,
                        "num_heads": arch["decoder_num_heads"], "mlp_dim": arch["decoder_intermediate_dim"]},
        "mask_decoder": {"transformer_dim": dim, "num_multimask_outputs": arch["num_multimask_outputs"],
                         "iou_head_depth": arch["iou_head_depth"], "iou_head_hidden_dim": arch["iou_head_hidden_dim"]},
    }


def _image_encoder(spec, t: Tally, b: int) -> None:
    """segment_anything ImageEncoderViT (= keras-hub ViTDetBackbone) on b images, as segment_anything_kwargs
    builds it: PatchEmbed Conv2d(3, D, p, stride p) on a g x g grid (g = image_size // patch_size); then
    encoder_num_layers x Block: windowed blocks pad the grid to a multiple of window_size (window_partition; the
    padded tokens are computed too) and run Attention on each w x w window, the blocks in
    global_attention_layer_indices on the whole grid; Attention = qkv Linear(D, 3D), (q*scale) @ k^T, the decomposed
    relative-position terms (add_decomposed_rel_pos: two einsums "bhwc,hkc->bhwk" and "bhwc,wkc->bhwk", q against the
    per-axis tables, side x side x side x head_dim MACs each), attn @ v, proj Linear(D, D); MLPBlock lin1
    Linear(D, I), lin2 Linear(I, D) on the unpadded grid; neck Conv2d(D, C, 1) and Conv2d(C, C, 3), no bias.
    Fit trains all of it against the image: the patch embedding takes a weight gradient only (the image needs
    none), everything above both gradients; attention and the einsums are plain matmuls here (no fused kernel)."""
    a = spec.arch
    dim, heads, inter = a["encoder_hidden_dim"], a["encoder_num_heads"], a["encoder_intermediate_dim"]
    head_dim, grid, window, out = dim // heads, embedding_size(a), a["window_size"], a["embedding_dim"]
    t.add("patch embedding", conv2d(b, 3, dim, a["patch_size"], grid, grid), grads=1, kind=CONV)
    for i in range(a["encoder_num_layers"]):
        if i in a["global_attention_layer_indices"]:
            kind, windows, side = "global attention", b, grid
        else:
            padded = math.ceil(grid / window) * window
            kind, windows, side = "windowed attention", b * (padded // window) ** 2, window
        tokens = windows * side * side
        t.add(f"{kind} qkv + proj", linear(tokens, dim, 3 * dim) + linear(tokens, dim, dim), grads=2)
        t.attention(kind, attention(windows * heads, side * side, side * side, head_dim), grads=2)
        t.add(f"{kind} relative-position terms", 2 * (2 * windows * heads * side * side * side * head_dim), grads=2)
        t.add("MLP", linear(b * grid * grid, dim, inter) + linear(b * grid * grid, inter, dim), grads=2)
    t.add("neck convs", conv2d(b, dim, out, 1, grid, grid) + conv2d(b, out, out, 3, grid, grid), grads=2,
          kind=CONV)


def _prompt_and_mask_decoder(spec, t: Tally, b: int) -> None:
    """What kbench.adapters.native_torch.SamPredict runs after the encoder: PromptEncoder.get_dense_pe once
    (PositionEmbeddingRandom: the g x g grid's coordinates @ a 2 x C/2 Gaussian matrix), then per image the
    PromptEncoder on its num_points points plus the padding point (boxes=None), and the MaskDecoder with
    multimask output on one prompt. MaskDecoder.predict_masks: T = 1 IoU token + (num_multimask_outputs + 1) mask
    tokens + the point tokens attend with N = g*g image tokens in TwoWayTransformer: decoder_num_layers x
    TwoWayAttentionBlock [self_attn Attention(C) on the tokens; cross_attn_token_to_image and
    cross_attn_image_to_token Attention(C, downsample_rate=2): projections to C/2; MLPBlock(C, mlp) on the tokens],
    then final_attn_token_to_image; output_upscaling ConvTranspose2d(C, C/4, 2, 2) and (C/4, C/8, 2, 2);
    num_mask_tokens hypernetwork MLPs (C, C, C/8; 3 layers) on one token each; masks = hyper_in @ the upscaled
    embedding (C/8 x 4g x 4g); iou_prediction_head MLP(C, iou_head_hidden_dim, num_mask_tokens, iou_head_depth)."""
    a, opts = spec.arch, spec.task_options
    c, heads, mlp, grid = a["embedding_dim"], a["decoder_num_heads"], a["decoder_intermediate_dim"], \
        embedding_size(a)
    n_img, ci, masks = grid * grid, c // 2, a["num_multimask_outputs"] + 1
    n_tok = 1 + masks + opts["num_points"] + 1
    t.add("prompt encoder", linear(n_img, 2, c // 2))                         # get_dense_pe, once per step
    for _ in range(b):
        t.add("prompt encoder", linear(opts["num_points"] + 1, 2, c // 2))   # the points' Fourier features

        def cross(queries, keys):                # Attention(C, heads, downsample_rate=2): q/k/v to C/2, out to C
            t.add("mask decoder projections", linear(queries, c, ci) + 2 * linear(keys, c, ci)
                  + linear(queries, ci, c))
            t.attention("mask decoder attention", attention(heads, queries, keys, ci // heads))
        for _ in range(a["decoder_num_layers"]):
            t.add("mask decoder projections", 4 * linear(n_tok, c, c))       # self_attn, downsample_rate=1
            t.attention("mask decoder attention", attention(heads, n_tok, n_tok, c // heads))
            cross(n_tok, n_img)                                              # token -> image
            t.add("mask decoder MLPs", linear(n_tok, c, mlp) + linear(n_tok, mlp, c))
            cross(n_img, n_tok)                                              # image -> token
        cross(n_tok, n_img)                                                  # final_attn_token_to_image
        t.add("mask decoder upscaling", conv_transpose2d(1, c, c // 4, 2, grid, grid)
              + conv_transpose2d(1, c // 4, c // 8, 2, 2 * grid, 2 * grid), kind=CONV)
        t.add("mask decoder MLPs", masks * (2 * linear(1, c, c) + linear(1, c, c // 8)))     # hypernetworks
        t.add("mask decoder mask products", 2 * masks * (c // 8) * (4 * grid) ** 2)        # hyper_in @ upscaled
        hidden, depth = a["iou_head_hidden_dim"], a["iou_head_depth"]
        t.add("mask decoder MLPs", linear(1, c, hidden) + (depth - 2) * linear(1, hidden, hidden)
              + linear(1, hidden, masks))                                    # iou_prediction_head


def fit_flops(spec, t: Tally) -> None:
    _image_encoder(spec, t, spec.batch_size)


def predict_flops(spec, t: Tally) -> None:
    _image_encoder(spec, t, spec.batch_size)
    _prompt_and_mask_decoder(spec, t, spec.batch_size)


# ---------------------------------------------------------------- inputs

def fit_inputs(spec, rng) -> dict:
    """[0, 1) images and the random image embedding the anchor's SAM fit regresses the image encoder onto
    (channels-last)."""
    arch, n, size = spec.arch, spec.batch_size, spec.arch["image_size"]
    images = rng.random((n, size, size, 3), dtype="float32")
    grid = embedding_size(arch)
    return {"images": images, "target": rng.random((n, grid, grid, arch["embedding_dim"]), dtype="float32")}


def predict_inputs(spec, rng) -> dict:
    """[0, 1) images and num_points foreground points per image, (batch, num_points, 2) pixel coordinates."""
    size, n, k = spec.arch["image_size"], spec.batch_size, spec.task_options["num_points"]
    images = rng.random((n, size, size, 3), dtype="float32")
    return {"images": images, "points": rng.uniform(0, size, (n, k, 2)).astype("float32")}


def keras_prompts(spec, images, points) -> dict:
    """The keras SAM prompts: the points plus the (0, 0) / label -1 padding point keras SAM wants when no box is
    given; empty box and mask prompts passed explicitly (the models' predict_step would add them, but the compiled
    forward call bypasses it)."""
    arch, n = spec.arch, spec.batch_size
    k, mask_side = spec.task_options["num_points"], 4 * embedding_size(arch)
    points = np.concatenate([points, np.zeros((n, 1, 2), "float32")], axis=1)
    labels = np.concatenate([np.ones((n, k)), -np.ones((n, 1))], axis=1).astype("float32")
    return {"images": images, "points": points, "labels": labels,
            "boxes": np.zeros((n, 0, 2, 2), "float32"), "masks": np.zeros((n, 0, mask_side, mask_side, 1), "float32")}


def contraction_and_depth(spec) -> tuple[int, int]:
    a = spec.arch
    return (max(a["encoder_intermediate_dim"], a["decoder_intermediate_dim"], (a["image_size"] // a["patch_size"]) ** 2),
            6 * a["encoder_num_layers"] + 8 * a["decoder_num_layers"] + 12)


FAMILY = family.register(
    name="sam", about="Segment Anything: ViTDet image encoder, prompt encoder, mask decoder (sam_huge_sa1b at paper size)",
    tasks=("fit", "predict"),
    libraries={"keras-hub": keras_hub_kwargs, "keras-cv": keras_cv_kwargs, "segment-anything": segment_anything_kwargs},
    inputs={"fit": fit_inputs, "predict": predict_inputs}, flops={"fit": fit_flops, "predict": predict_flops},
    contraction_and_depth=contraction_and_depth,
    example={"fit": "image", "predict": "image with its point prompt"},
    layouts=layouts)
