"""The one place that maps a library-neutral architecture (config.yaml model_defs.<model>.sizes.<size>.arch) to each
library's constructor arguments.

Libraries: keras-hub (Keras 3), keras-nlp 0.12.1 and keras-cv 0.9.0 (Keras 2; keras-cv also for SD on Keras 3),
HF transformers, peft, Meta segment-anything and diffusers (native PyTorch).
Pure functions of `arch`, pure python: no framework is imported here, so every adapter (and the config checks) can
use this module whatever is installed. Keys of `arch` follow config.yaml; conventions that differ between libraries
are converted here and only here (e.g. keras-hub Gemma's intermediate_dim counts both gate branches).
"""
from __future__ import annotations


# ---------------------------------------------------------------- keras-hub (text)

def keras_hub_bert_kwargs(arch: dict) -> dict:
    """keras_hub.models.BertBackbone(**kwargs), and keras_nlp 0.12.1's BertBackbone (same signature). The classifier
    head takes arch["num_classes"] separately."""
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
    """keras_hub.models.MistralBackbone(**kwargs), and keras_nlp 0.12.1's (same signature); intermediate_dim is per
    branch as in HF, so it maps 1:1."""
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
    """Kwargs of kbench.adapters._keras_sd.unet / .vae_encoder, the width-parametrised versions of keras-cv 0.9.0's
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


def keras_cv_sam_kwargs(arch: dict) -> dict:
    """Kwargs of keras-cv 0.9.0's SAM parts (the Keras 2 path): ViTDetBackbone, SAMPromptEncoder, SAMMaskDecoder and
    its TwoWayTransformer. Same model as keras-hub's, older argument names."""
    hub = keras_hub_sam_kwargs(arch)
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


# ---------------------------------------------------------------- HF transformers + peft (native PyTorch)

# LoRA targets the attention query and value projections in every library (keras-hub's Backbone.enable_lora and
# peft's default for Gemma/Mistral); the factorisation differs: keras-hub adapts EinsumDense kernels per head.
PEFT_LORA_TARGETS = ["q_proj", "v_proj"]


# BERT's feed-forward GELU: keras-hub and keras-nlp always use the tanh approximation (keras_hub bert_backbone.py:131,
# keras_nlp 0.12.1 bert_backbone.py:146: gelu_approximate); HF's BertConfig defaults to the exact one ("gelu").
HF_GELU = {"tanh": "gelu_pytorch_tanh", "exact": "gelu"}


def hf_bert_config(arch: dict, gelu: str = "tanh", dropout: float | None = None) -> dict:
    """transformers.BertConfig(**kwargs) for BertForSequenceClassification; gelu: tanh (as the Keras columns) or
    exact (HF's default); dropout: all three of HF's dropouts (None: HF's default 0.1, as keras-hub's)."""
    config = {"vocab_size": arch["vocabulary_size"], "num_hidden_layers": arch["num_layers"],
              "num_attention_heads": arch["num_heads"], "hidden_size": arch["hidden_dim"],
              "intermediate_size": arch["intermediate_dim"], "max_position_embeddings": arch["max_sequence_length"],
              "type_vocab_size": arch["num_segments"], "num_labels": arch["num_classes"], "hidden_act": HF_GELU[gelu]}
    if dropout is not None:
        config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)
    return config


def paddlenlp_bert_config(arch: dict, dropout: float | None = None) -> dict:
    """paddlenlp.transformers.BertConfig(**kwargs) for its BertForSequenceClassification: HF's names and defaults
    (layer-norm epsilon 1e-12, dropout 0.1). hidden_act is a paddle.nn.functional name, exact GELU: paddlenlp's
    encoder layers take getattr(F, hidden_act), which has no tanh form (the adapter sets that on the layers)."""
    return hf_bert_config(arch, "exact", dropout)


def _hf_decoder_config(arch: dict) -> dict:
    return {"vocab_size": arch["vocabulary_size"], "num_hidden_layers": arch["num_layers"],
            "num_attention_heads": arch["num_query_heads"], "num_key_value_heads": arch["num_key_value_heads"],
            "hidden_size": arch["hidden_dim"], "intermediate_size": arch["intermediate_dim"],
            "rms_norm_eps": arch["layer_norm_epsilon"]}


def hf_gemma_config(arch: dict) -> dict:
    """transformers.GemmaConfig(**kwargs); embeddings tied as in keras-hub and gemma-7b."""
    return {**_hf_decoder_config(arch), "head_dim": arch["head_dim"]}


def hf_mistral_config(arch: dict) -> dict:
    """transformers.MistralConfig(**kwargs); untied embeddings as in keras-hub and Mistral-7B-v0.1."""
    return {**_hf_decoder_config(arch), "rope_theta": float(arch["rope_max_wavelength"]),
            "sliding_window": arch["sliding_window"]}


# ---------------------------------------------------------------- Meta segment-anything (native PyTorch)

def segment_anything_kwargs(arch: dict) -> dict:
    """Kwargs of segment_anything.modeling's ImageEncoderViT, PromptEncoder, MaskDecoder and TwoWayTransformer, as
    segment_anything.build_sam._build_sam wires them (layer-norm eps 1e-6 is set by the adapter: it is a class)."""
    size, grid, dim = arch["image_size"], sam_embedding_size(arch), arch["embedding_dim"]
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


# ---------------------------------------------------------------- diffusers (native PyTorch)

def diffusers_sd_kwargs(arch: dict) -> dict:
    """Kwargs of diffusers' UNet2DConditionModel and the VAE's Encoder (diffusers.models.autoencoders.vae.Encoder,
    what AutoencoderKL.encoder is), as in the SD v1.4 configs."""
    unet_ch, vae_ch = list(arch["unet_block_channels"]), list(arch["vae_block_channels"])
    if arch["timestep_embedding_dim"] != unet_ch[0]:
        raise ValueError("diffusers ties the timestep embedding width to unet_block_channels[0]: "
                         f"timestep_embedding_dim={arch['timestep_embedding_dim']} != {unet_ch[0]}")
    n = len(unet_ch)
    return {
        "unet": {
            "sample_size": sd_latent_size(arch), "in_channels": arch["latent_channels"],
            "out_channels": arch["latent_channels"], "block_out_channels": unet_ch,
            "down_block_types": ["CrossAttnDownBlock2D"] * (n - 1) + ["DownBlock2D"],
            "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * (n - 1),
            "layers_per_block": arch["unet_layers_per_block"], "cross_attention_dim": arch["context_dim"],
            # SD 1.x configs name the number of heads "attention_head_dim" (a diffusers naming quirk it keeps).
            "attention_head_dim": arch["unet_attention_heads"],
        },
        "vae_encoder": {
            "in_channels": 3, "out_channels": arch["latent_channels"], "block_out_channels": vae_ch,
            "down_block_types": ["DownEncoderBlock2D"] * len(vae_ch), "layers_per_block": arch["vae_layers_per_block"],
            "double_z": True,   # 2 * latent_channels moments: the anchor's fit target
        },
    }


# ---------------------------------------------------------------- ResNet-50: two networks under one name

# Where each library's ResNet-50 puts the stride of a downsampling bottleneck block. keras.applications (Keras 3 and
# tf.keras: keras/src/applications/resnet.py block1, `Conv2D(filters, 1, strides=stride)` first) builds the
# original ResNet (v1): the stride on the first 1x1 convolution. torchvision (models/resnet.py Bottleneck:
# `self.conv2 = conv3x3(width, width, stride)`) builds v1.5: the stride on the 3x3 one, about 6% more FLOPs at 224 px.
# paddle.vision's resnet50 (BottleneckBlock: the stride on conv2, the 3x3) is torchvision's v1.5, name for name.
RESNET50_STRIDE_ON = {"keras3": "1x1", "keras2": "1x1", "native_torch": "3x3", "paddle": "3x3"}
RESNET50_VARIANT = {"1x1": "ResNet v1 (stride on the first 1x1 conv; keras.applications)",
                    "3x3": "ResNet v1.5 (stride on the 3x3 conv; torchvision)"}


def resnet50_stride_on(adapter: str | None) -> str:
    """"1x1" (v1) or "3x3" (v1.5) for the column's adapter; torchvision's where the adapter is not a column's."""
    return RESNET50_STRIDE_ON.get(adapter, "3x3")


def network_name(model: str, adapter: str | None) -> str:
    """The network a column builds under the model's name, where libraries differ (ResNet-50), else the model."""
    if model == "resnet50":
        return RESNET50_VARIANT[resnet50_stride_on(adapter)]
    return model
