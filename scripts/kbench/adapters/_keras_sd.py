"""StableDiffusion v1.4 parts for the Keras 3 and Keras 2 adapters, built from keras-cv 0.9.0's own blocks with the
widths as arguments. keras-cv's backend shim gives Keras 3, or tf.keras under TF_USE_LEGACY_KERAS=1.

keras-cv's DiffusionModel and ImageEncoder hard-code the v1.4 widths (320/640/1280, 128/256/512); the tiny suite needs
the same topology shrunk, so the two builders below repeat keras-cv's wiring with the widths from
kbench.models.stable_diffusion.keras_cv_kwargs. At the paper arch they give exactly keras-cv's parameter counts.
"""
from __future__ import annotations

import math

import numpy as np
from keras_cv.src.backend import keras
from keras_cv.src.models.stable_diffusion.attention_block import AttentionBlock
from keras_cv.src.models.stable_diffusion.constants import _ALPHAS_CUMPROD
from keras_cv.src.models.stable_diffusion.diffusion_model import ResBlock, SpatialTransformer, Upsample
from keras_cv.src.models.stable_diffusion.padded_conv2d import PaddedConv2D
from keras_cv.src.models.stable_diffusion.resnet_block import ResnetBlock

from kbench.models import stable_diffusion
from kbench.adapters import _keras


def build(spec, inputs, predict, to_device):
    """The Stable Diffusion cell of either Keras (keras-cv's `keras` is the Keras the adapter runs): fit, as the
    anchor, the VAE image encoder up to layers[-3] (the 3x3 conv giving 2*latent_channels moments) against random
    moments; predict, one guided denoising step (the text encoder is not part of the step: random contexts).
    predict(model, inputs, spec) and to_device(tree) are the adapter's own."""
    kw = stable_diffusion.keras_cv_kwargs(spec.arch)
    if spec.task == "fit":
        encoder = vae_encoder(**kw["vae_encoder"])
        model = keras.Model(encoder.inputs, encoder.layers[-3].output)
        images, y = inputs["images"], inputs["target"]
        return _keras.fit(keras, model, images, y, spec, _keras.optimizer(keras, spec, "adam"),
                          keras.losses.MeanSquaredError(), to_device, output="moments")
    u = kw["unet"]
    model = guided_denoising_step(unet(**u))
    latent, context, unconditional = inputs["latent"], inputs["context"], inputs["unconditional"]
    t_emb = timestep_embedding(999, u["timestep_embedding_dim"], spec.batch_size)
    return predict(model, [latent, t_emb, context, unconditional], spec, output="latent")


def unet(latent_size, latent_channels, block_channels, layers_per_block, num_heads, context_dim, text_length,
         timestep_embedding_dim):
    """keras-cv DiffusionModel topology: cross-attention in every block but the last, 3 down-samplings, a
    ResBlock/attention/ResBlock middle, layers_per_block + 1 ResBlocks per up block fed by the skips."""
    context = keras.layers.Input((text_length, context_dim), name="context")
    t_embed_input = keras.layers.Input((timestep_embedding_dim,), name="timestep_embedding")
    latent = keras.layers.Input((latent_size, latent_size, latent_channels), name="latent")

    def attention(x, channels):
        return SpatialTransformer(num_heads, channels // num_heads, fully_connected=False)([x, context])

    last = len(block_channels) - 1
    t_emb = keras.layers.Dense(4 * block_channels[0])(t_embed_input)   # 1280 = 4 * 320 in v1.4
    t_emb = keras.layers.Activation("swish")(t_emb)
    t_emb = keras.layers.Dense(4 * block_channels[0])(t_emb)

    x = PaddedConv2D(block_channels[0], kernel_size=3, padding=1)(latent)
    skips = [x]
    for i, ch in enumerate(block_channels):
        for _ in range(layers_per_block):
            x = ResBlock(ch)([x, t_emb])
            if i < last:
                x = attention(x, ch)
            skips.append(x)
        if i < last:
            x = PaddedConv2D(ch, 3, strides=2, padding=1)(x)
            skips.append(x)

    x = ResBlock(block_channels[-1])([x, t_emb])
    x = attention(x, block_channels[-1])
    x = ResBlock(block_channels[-1])([x, t_emb])

    for i in reversed(range(len(block_channels))):
        ch = block_channels[i]
        for _ in range(layers_per_block + 1):
            x = keras.layers.Concatenate()([x, skips.pop()])
            x = ResBlock(ch)([x, t_emb])
            if i < last:
                x = attention(x, ch)
        if i > 0:
            x = Upsample(ch)(x)

    x = keras.layers.GroupNormalization(epsilon=1e-5)(x)
    x = keras.layers.Activation("swish")(x)
    output = PaddedConv2D(latent_channels, kernel_size=3, padding=1)(x)
    return keras.Model([latent, t_embed_input, context], output, name="unet")


def vae_encoder(image_size, block_channels, layers_per_block, latent_channels):
    """keras-cv ImageEncoder topology (a Sequential, so layers[-3] is the 3x3 conv giving the 2*latent_channels
    moments, the anchor's fit target)."""
    layers = [keras.layers.Input((image_size, image_size, 3)), PaddedConv2D(block_channels[0], 3, padding=1)]
    for i, ch in enumerate(block_channels):
        layers += [ResnetBlock(ch) for _ in range(layers_per_block)]
        if i < len(block_channels) - 1:
            layers.append(PaddedConv2D(ch, 3, padding=((0, 1), (0, 1)), strides=2))
    ch = block_channels[-1]
    layers += [
        ResnetBlock(ch), AttentionBlock(ch), ResnetBlock(ch),
        keras.layers.GroupNormalization(epsilon=1e-5),
        keras.layers.Activation("swish"),
        PaddedConv2D(2 * latent_channels, 3, padding=1),
        PaddedConv2D(2 * latent_channels, 1),
        keras.layers.Lambda(lambda x: x[..., :latent_channels] * 0.18215),
    ]
    return keras.Sequential(layers, name="vae_encoder")


def timestep_embedding(timestep, dim, batch_size, max_period=10000):
    """keras-cv StableDiffusionBase._get_timestep_embedding at width `dim`, in NumPy: it is an input, computed once
    (and so it also builds where Keras tensors hold no values, as on kbench.studies.census's meta device)."""
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(0, half, dtype="float32") / half)
    args = np.float32(timestep) * freqs
    embedding = np.concatenate([np.cos(args), np.sin(args)])[None, :]
    return np.repeat(embedding, batch_size, axis=0).astype("float32")


def guided_denoising_step(unet_model, guidance_scale=7.5, num_steps=50):
    """One step of keras-cv text_to_image as one Keras model: two UNet calls (unconditional and conditional context,
    as keras-cv does, not one call on a 2x batch), classifier-free guidance, and the DDIM update of keras-cv's loop
    at its first step (timestep 999 of a num_steps schedule)."""
    latent_in, t_in, context_in = unet_model.inputs
    uncond_in = keras.layers.Input(context_in.shape[1:], name="unconditional_context")
    uncond = unet_model([latent_in, t_in, uncond_in])
    cond = unet_model([latent_in, t_in, context_in])
    eps = uncond + guidance_scale * (cond - uncond)
    timesteps = [round(i * 999 / (num_steps - 1)) for i in range(num_steps)]
    a_t, a_prev = float(_ALPHAS_CUMPROD[timesteps[-1]]), float(_ALPHAS_CUMPROD[timesteps[-2]])
    pred_x0 = (latent_in - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
    latent_out = eps * math.sqrt(1.0 - a_prev) + math.sqrt(a_prev) * pred_x0
    return keras.Model([latent_in, t_in, context_in, uncond_in], latent_out, name="guided_denoising_step")
