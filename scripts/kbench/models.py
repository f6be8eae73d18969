"""The one place that maps a library-neutral architecture (config.yaml model_defs.<model>.sizes.<size>.arch) to each
library's constructor arguments.

Pure functions of `arch`, pure python: no framework is imported here, so every adapter (and the config checks) can
use this module whatever is installed. Keys of `arch` follow config.yaml; conventions that differ between libraries
are converted here and only here (e.g. keras-hub Gemma's intermediate_dim counts both gate branches).
"""
from __future__ import annotations


# ---------------------------------------------------------------- keras-hub (text)

def keras_hub_bert_kwargs(arch: dict) -> dict:
    """keras_hub.models.BertBackbone(**kwargs). The classifier head takes arch["num_classes"] separately."""
    keys = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "max_sequence_length", "num_segments")
    return {k: arch[k] for k in keys}


def keras_hub_gemma_kwargs(arch: dict) -> dict:
    """keras_hub.models.GemmaBackbone(**kwargs).

    Our intermediate_dim is the width of one gate branch (HF intermediate_size); keras-hub's GemmaDecoderBlock splits
    its intermediate_dim into two branches of intermediate_dim // 2 (its HF converter passes intermediate_size * 2).
    """
    kwargs = {k: arch[k] for k in ("vocabulary_size", "num_layers", "num_query_heads", "num_key_value_heads",
                                   "hidden_dim", "head_dim", "layer_norm_epsilon")}
    kwargs["intermediate_dim"] = 2 * arch["intermediate_dim"]
    return kwargs


def keras_hub_mistral_kwargs(arch: dict) -> dict:
    """keras_hub.models.MistralBackbone(**kwargs); intermediate_dim is per branch as in HF, so it maps 1:1."""
    keys = ("vocabulary_size", "num_layers", "num_query_heads", "num_key_value_heads", "hidden_dim",
            "intermediate_dim", "rope_max_wavelength", "layer_norm_epsilon", "sliding_window")
    return {k: arch[k] for k in keys}


# ---------------------------------------------------------------- keras-hub (SAM)

def sam_embedding_size(arch: dict) -> int:
    """Side of the image-embedding grid (64 for SAM at 1024 px with 16 px patches)."""
    return arch["image_size"] // arch["patch_size"]


def keras_hub_sam_kwargs(arch: dict) -> dict:
    """Kwargs of the three keras-hub SAM parts, keyed by constructor:
    ViTDetBackbone (image encoder), SAMPromptEncoder, SAMMaskDecoder; SAMBackbone takes the three built parts."""
    size, grid = arch["image_size"], sam_embedding_size(arch)
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


# ---------------------------------------------------------------- keras-cv (StableDiffusion v1.4)

def sd_latent_size(arch: dict) -> int:
    """The VAE halves the image once per block transition (512 px -> 64 latent for 4 blocks)."""
    return arch["image_size"] // 2 ** (len(arch["vae_block_channels"]) - 1)


def keras_cv_sd_kwargs(arch: dict) -> dict:
    """Kwargs of kbench.adapters.keras3_sd.unet / .vae_encoder, the width-parametrised versions of keras-cv 0.9.0's
    DiffusionModel and ImageEncoder (which hard-code the v1.4 widths)."""
    return {
        "unet": {
            "latent_size": sd_latent_size(arch),
            "latent_channels": arch["latent_channels"],
            "block_channels": list(arch["unet_block_channels"]),
            "layers_per_block": arch["unet_layers_per_block"],
            "num_heads": arch["unet_attention_heads"],
            "context_dim": arch["context_dim"],
            "text_length": arch["text_length"],
            "timestep_embedding_dim": arch["timestep_embedding_dim"],
        },
        "vae_encoder": {
            "image_size": arch["image_size"],
            "block_channels": list(arch["vae_block_channels"]),
            "layers_per_block": arch["vae_layers_per_block"],
            "latent_channels": arch["latent_channels"],
        },
    }
