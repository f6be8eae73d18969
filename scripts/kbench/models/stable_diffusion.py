"""Stable Diffusion v1.4 (Rombach et al. 2022; the anchor's keras-cv StableDiffusion at paper size): the UNet's
guided denoising step (predict) and the VAE image encoder's fit: keras-cv 0.9.0's networks, width-parametrised
(kbench.adapters._keras_sd), diffusers' UNet2DConditionModel and VAE Encoder, ppdiffusers' (the same constructors)."""
from __future__ import annotations

from kbench.models import family
from kbench.models.mappings import stable_diffusion as layouts
from kbench.models.tally import CONV, Tally, attention, conv2d, conv_size, linear


def keras_cv_kwargs(arch: dict) -> dict:
    """Kwargs of kbench.adapters._keras_sd.unet / .vae_encoder, the width-parametrised versions of keras-cv 0.9.0's
    DiffusionModel and ImageEncoder (which hard-code the v1.4 widths)."""
    return {
        "unet": {
            "latent_size": latent_size(arch),
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


def latent_size(arch: dict) -> int:
    """The VAE halves the image once per block transition (512 px -> 64 latent for 4 blocks)."""
    return arch["image_size"] // 2 ** (len(arch["vae_block_channels"]) - 1)


def diffusers_kwargs(arch: dict) -> dict:
    """Kwargs of diffusers' UNet2DConditionModel and the VAE's Encoder (diffusers.models.autoencoders.vae.Encoder,
    what AutoencoderKL.encoder is), as in the SD v1.4 configs."""
    unet_ch, vae_ch = list(arch["unet_block_channels"]), list(arch["vae_block_channels"])
    if arch["timestep_embedding_dim"] != unet_ch[0]:
        raise ValueError("diffusers ties the timestep embedding width to unet_block_channels[0]: "
                         f"timestep_embedding_dim={arch['timestep_embedding_dim']} != {unet_ch[0]}")
    n = len(unet_ch)
    return {
        "unet": {
            "sample_size": latent_size(arch), "in_channels": arch["latent_channels"],
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


def _resnet_block(t: Tally, part: str, n: int, c_in: int, c_out: int, size: int, temb: int = 0, grads: int = 0):
    """diffusers ResnetBlock2D: conv1 Conv2d(c_in, c_out, 3), time_emb_proj Linear(temb, c_out) on the n timestep
    embeddings (UNet only), conv2 Conv2d(c_out, c_out, 3), conv_shortcut Conv2d(c_in, c_out, 1) when c_in != c_out."""
    t.add(part, conv2d(n, c_in, c_out, 3, size, size) + conv2d(n, c_out, c_out, 3, size, size), grads, CONV)
    if c_in != c_out:
        t.add(part, conv2d(n, c_in, c_out, 1, size, size), grads, CONV)
    if temb:
        t.add("time embedding", linear(n, temb, c_out), grads)


def _unet(spec, t: Tally, n: int) -> None:
    """diffusers UNet2DConditionModel as diffusers_kwargs configures it (SD v1.4), on n latents (the 2 x
    batch guidance batch): time_embedding TimestepEmbedding Linear(c0, 4 c0), Linear(4 c0, 4 c0); conv_in; down
    blocks (CrossAttnDownBlock2D, last DownBlock2D): layers_per_block x (ResnetBlock2D [+ Transformer2DModel]) and a
    Downsample2D 3x3 stride-2 conv except the last; mid UNetMidBlock2DCrossAttn: resnet, transformer, resnet; up
    blocks (UpBlock2D, then CrossAttnUpBlock2D): layers_per_block + 1 resnets on [x, skip] concatenations (popped
    from the down path's outputs), an Upsample2D 3x3 conv after nearest x2 except the last; conv_out.
    Transformer2DModel (use_linear_projection False): proj_in Conv2d 1x1, one BasicTransformerBlock [attn1
    self-attention to_q/k/v/out Linear(C, C); attn2 cross-attention to_q, to_out Linear(C, C), to_k/to_v
    Linear(context_dim, C) on the text_length context tokens; FeedForward GEGLU proj Linear(C, 8C), Linear(4C, C)],
    proj_out Conv2d 1x1; unet_attention_heads heads of C / heads (diffusers' "attention_head_dim" quirk)."""
    a = spec.arch
    kw = diffusers_kwargs(a)["unet"]
    ch, layers, heads = kw["block_out_channels"], kw["layers_per_block"], kw["attention_head_dim"]
    ctx, text, size = kw["cross_attention_dim"], a["text_length"], kw["sample_size"]
    temb = 4 * ch[0]

    def transformer(c, size):
        tok = n * size * size
        t.add("transformer proj_in/proj_out", 2 * conv2d(n, c, c, 1, size, size), kind=CONV)
        t.add("self-attention projections", 4 * linear(tok, c, c))
        t.attention("self-attention", attention(n * heads, size * size, size * size, c // heads))
        t.add("cross-attention projections", 2 * linear(tok, c, c) + 2 * linear(n * text, ctx, c))
        t.attention("cross-attention", attention(n * heads, size * size, text, c // heads))
        t.add("GEGLU feed-forward", linear(tok, c, 8 * c) + linear(tok, 4 * c, c))

    t.add("time embedding", linear(n, ch[0], temb) + linear(n, temb, temb))
    t.add("conv_in/conv_out", conv2d(n, kw["in_channels"], ch[0], 3, size, size), kind=CONV)
    skips, c_prev = [ch[0]], ch[0]
    for i, (c, kind) in enumerate(zip(ch, kw["down_block_types"])):
        for j in range(layers):
            _resnet_block(t, "resnet convs", n, c_prev if j == 0 else c, c, size, temb)
            if kind.startswith("CrossAttn"):
                transformer(c, size)
            skips.append(c)
        c_prev = c
        if i < len(ch) - 1:
            size = conv_size(size, 3, 2, 1)
            t.add("down/upsample convs", conv2d(n, c, c, 3, size, size), kind=CONV)
            skips.append(c)
    _resnet_block(t, "resnet convs", n, c_prev, c_prev, size, temb)
    transformer(c_prev, size)
    _resnet_block(t, "resnet convs", n, c_prev, c_prev, size, temb)
    for i, (c, kind) in enumerate(zip(reversed(ch), kw["up_block_types"])):
        for j in range(layers + 1):
            _resnet_block(t, "resnet convs", n, c_prev + skips.pop(), c, size, temb)
            c_prev = c
            if kind.startswith("CrossAttn"):
                transformer(c, size)
        if i < len(ch) - 1:
            size *= 2
            t.add("down/upsample convs", conv2d(n, c, c, 3, size, size), kind=CONV)
    t.add("conv_in/conv_out", conv2d(n, ch[0], kw["out_channels"], 3, size, size), kind=CONV)


def predict_flops(spec, t: Tally) -> None:
    """One classifier-free-guided denoising step: the UNet once on the 2 x batch guidance batch (diffusers'
    pipeline; keras-cv calls it twice on the batch: the same FLOPs). Guidance and the DDIM step are elementwise."""
    _unet(spec, t, 2 * spec.batch_size)


def fit_flops(spec, t: Tally) -> None:
    """diffusers.models.autoencoders.vae.Encoder (AutoencoderKL.encoder, double_z) as diffusers_kwargs
    configures it, trained against random moments: conv_in Conv2d(3, c0, 3) (weight gradient only: the image needs
    none); DownEncoderBlock2D x len(vae_block_channels): vae_layers_per_block ResnetBlock2D (no time embedding) and,
    except the last, a Downsample2D (F.pad (0, 1, 0, 1), then a 3x3 stride-2 conv, padding 0); UNetMidBlock2D:
    resnet, Attention (one head of C: to_q/k/v/out Linear(C, C) over the latent grid's tokens), resnet; conv_out
    Conv2d(C, 2 * latent_channels, 3) (the moments; keras-cv's layers[-3])."""
    a, b = spec.arch, spec.batch_size
    kw = diffusers_kwargs(a)["vae_encoder"]
    ch, size = kw["block_out_channels"], a["image_size"]
    t.add("conv_in/conv_out", conv2d(b, kw["in_channels"], ch[0], 3, size, size), grads=1, kind=CONV)
    c_prev = ch[0]
    for i, c in enumerate(ch):
        for j in range(kw["layers_per_block"]):
            _resnet_block(t, "resnet convs", b, c_prev if j == 0 else c, c, size, grads=2)
        c_prev = c
        if i < len(ch) - 1:
            size = conv_size(size + 1, 3, 2, 0)
            t.add("downsample convs", conv2d(b, c, c, 3, size, size), grads=2, kind=CONV)
    _resnet_block(t, "resnet convs", b, c_prev, c_prev, size, grads=2)
    t.add("mid-block attention projections", 4 * linear(b * size * size, c_prev, c_prev), grads=2)
    t.attention("mid-block attention", attention(b, size * size, size * size, c_prev), grads=2)
    _resnet_block(t, "resnet convs", b, c_prev, c_prev, size, grads=2)
    out = 2 * kw["out_channels"] if kw["double_z"] else kw["out_channels"]
    t.add("conv_in/conv_out", conv2d(b, c_prev, out, 3, size, size), grads=2, kind=CONV)


# ---------------------------------------------------------------- inputs

def fit_inputs(spec, rng) -> dict:
    """Images and the random 2*latent_channels moments the anchor's VAE-encoder fit regresses onto."""
    arch, n = spec.arch, spec.batch_size
    size, lat = arch["image_size"], latent_size(arch)
    images = rng.random((n, size, size, 3), dtype="float32")
    return {"images": images, "target": rng.random((n, lat, lat, 2 * arch["latent_channels"]), dtype="float32")}


def predict_inputs(spec, rng) -> dict:
    """A guided denoising step's latent (channels-last), text context and unconditional context; random contexts
    stand in for the text encoder, which is not part of a denoising step."""
    arch, n = spec.arch, spec.batch_size
    lat = latent_size(arch)
    context_shape = (n, arch["text_length"], arch["context_dim"])
    latent = rng.standard_normal((n, lat, lat, arch["latent_channels"]), dtype="float32")
    context = rng.standard_normal(context_shape, dtype="float32")
    return {"latent": latent, "context": context,
            "unconditional": rng.standard_normal(context_shape, dtype="float32")}


def contraction_and_depth(spec) -> tuple[int, int]:
    a = spec.arch
    if spec.task == "fit":
        # the VAE encoder (not the UNet): 3x3 convs up to its widest level, the middle's attention over the last
        # level's pixels; in sequence conv_in, 2 convs per ResnetBlock and a downsampling conv per level, the
        # middle's 2 blocks (4) and attention (q/k/v, scores, values, output: 4), conv_out
        channels, levels = a["vae_block_channels"], len(a["vae_block_channels"])
        pixels = (a["image_size"] // 2 ** (levels - 1)) ** 2
        return max(9 * max(channels), pixels), levels * (2 * a["vae_layers_per_block"] + 1) + 9
    channels = a["unet_block_channels"]
    return 9 * 2 * max(channels), 6 * len(channels) * a["unet_layers_per_block"] + 12


FAMILY = family.register(
    name="stable_diffusion", about="Stable Diffusion v1.4: UNet denoising step (predict), VAE image encoder (fit)",
    tasks=("fit", "predict"),
    libraries={"keras-cv": keras_cv_kwargs, "diffusers": diffusers_kwargs, "ppdiffusers": diffusers_kwargs},
    inputs={"fit": fit_inputs, "predict": predict_inputs}, flops={"fit": fit_flops, "predict": predict_flops},
    contraction_and_depth=contraction_and_depth,
    example={"fit": "image", "predict": "latent through one guided denoising step (not a finished image)"},
    layouts=layouts)
