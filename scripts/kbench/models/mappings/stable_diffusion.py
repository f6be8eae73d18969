"""Stable Diffusion v1.4: keras-cv 0.9's blocks as kbench.adapters._keras_sd wires them (the reference; Keras 2's are
the same weights in the same order) <-> diffusers. Fit: the VAE image encoder up to its moments conv (vae_encoder's
layers[-3]) <-> diffusers.models.autoencoders.vae.Encoder ("conv_in.*", "down_blocks.*", "mid_block.*",
"conv_norm_out.*", "conv_out.*"); predict: the UNet inside guided_denoising_step <-> UNet2DConditionModel.

No public keras-cv <-> diffusers map exists; the correspondence is the one both take from the CompVis checkpoint
(keras-cv's weights came from it; diffusers' loaders/single_file_utils.py convert_ldm_unet_checkpoint and
convert_ldm_vae_checkpoint map it to diffusers). keras-cv leaves its layers unnamed, so the rules match ordinal paths
(kbench.models.mappings._numbered), and each top-level block (the n-th ResBlock, SpatialTransformer, ...) is first renamed to
the diffusers module it is: the blocks are created in diffusers' module order, per kind (_keras_sd.unet, vae_encoder).
"""
from collections import Counter

from kbench.models.mappings._numbered import Numbered
from kbench.models.weights import CONV, CONV1X1_AS_LINEAR, Layout, Rule, dense_rules, norm_rules


def _blocks(paths: list[str], modules, root: str = "") -> list[str]:
    """Each path's top-level component below `root` (kind#k) renamed to the k-th module of its kind; modules(counts of
    each kind) -> {kind: diffusers module names in creation order}."""
    tops = [path.removeprefix(root).split("/", 1) for path in paths]
    names = modules(Counter(kind for kind, _ in {tuple(top[0].split("#")) for top in tops}))
    renamed = []
    for path, (top, rest) in zip(paths, tops):
        kind, k = top.split("#")
        if kind not in names or int(k) >= len(names[kind]):
            raise ValueError(f"no diffusers module for the reference's layer {top} ({path})")
        renamed.append(f"{names[kind][int(k)]}/{rest}")
    return renamed


def _unet_modules(count: Counter) -> dict[str, list[str]]:
    """UNet2DConditionModel's modules in the order _keras_sd.unet creates keras-cv's layers: n levels (one Upsample
    between two), per level L ResBlocks down (each with a SpatialTransformer but on the last level) and L + 1 up
    (diffusers' up_blocks from the lowest resolution, as keras-cv's loop; no attention on the first), 2 in the middle
    around one attention, so count(ResBlock) = n (2L + 1) + 2."""
    n = count["upsample"] + 1
    per = (count["res_block"] - 2 - n) // (2 * n)
    resnets, attentions = [], []
    for b in range(n):
        resnets += [f"down_blocks.{b}.resnets.{j}" for j in range(per)]
        attentions += [f"down_blocks.{b}.attentions.{j}" for j in range(per) if b < n - 1]
    resnets += ["mid_block.resnets.0", "mid_block.resnets.1"]
    attentions += ["mid_block.attentions.0"]
    for b in range(n):
        resnets += [f"up_blocks.{b}.resnets.{j}" for j in range(per + 1)]
        attentions += [f"up_blocks.{b}.attentions.{j}" for j in range(per + 1) if b > 0]
    return {"dense": ["time_embedding.linear_1", "time_embedding.linear_2"], "res_block": resnets,
            "spatial_transformer": attentions, "upsample": [f"up_blocks.{b}.upsamplers.0" for b in range(n - 1)],
            "padded_conv2d": ["conv_in", *[f"down_blocks.{b}.downsamplers.0.conv" for b in range(n - 1)], "conv_out"],
            "group_normalization": ["conv_norm_out"]}


def _vae_modules(count: Counter) -> dict[str, list[str]]:
    """Encoder's modules in the order _keras_sd.vae_encoder lists keras-cv's: conv_in, per level L ResnetBlocks and a
    downsampling conv but on the last, the middle's ResnetBlock, attention, ResnetBlock, the norm and conv_out (the
    fit model ends there: count(PaddedConv2D) = n + 1)."""
    n = count["padded_conv2d"] - 1
    per = (count["resnet_block"] - 2) // n
    return {"padded_conv2d": ["conv_in", *[f"down_blocks.{b}.downsamplers.0.conv" for b in range(n - 1)], "conv_out"],
            "resnet_block": [f"down_blocks.{b}.resnets.{j}" for b in range(n) for j in range(per)]
            + ["mid_block.resnets.0", "mid_block.resnets.1"],
            "attention_block": ["mid_block.attentions.0"], "group_normalization": ["conv_norm_out"]}


def _padded(keras: str, torch: str, layout: Layout = CONV) -> list[Rule]:
    """keras-cv's PaddedConv2D: a ZeroPadding2D and the Conv2D that holds the weights (padded_conv2d.py)."""
    return [Rule(f"{keras}/conv2d#0/kernel", f"{torch}.weight", layout),
            Rule(f"{keras}/conv2d#0/bias", f"{torch}.bias")]


_CONV = r"(?P<m>conv_in|conv_out|[\w.]+\.downsamplers\.0\.conv)"
_RES = r"(?P<m>[\w.]+\.resnets\.\d+)"
_ATTENTION = r"(?P<m>[\w.]+\.attentions\.\d+)"


def _resnet(time: bool) -> list[Rule]:
    """keras-cv's ResBlock (diffusion_model.py; time: its embedding Dense) and ResnetBlock (resnet_block.py) ->
    ResnetBlock2D; the 1x1 residual projection exists where the widths differ, made in build(): the last conv."""
    return [*norm_rules(f"{_RES}/group_normalization#0", "{m}.norm1"), *_padded(f"{_RES}/padded_conv2d#0", "{m}.conv1"),
            *(dense_rules(f"{_RES}/dense#0", "{m}.time_emb_proj") if time else []),
            *norm_rules(f"{_RES}/group_normalization#1", "{m}.norm2"), *_padded(f"{_RES}/padded_conv2d#1", "{m}.conv2"),
            *_padded(f"{_RES}/padded_conv2d#2", "{m}.conv_shortcut")]


def _spatial_transformer() -> list[Rule]:
    """keras-cv's SpatialTransformer (1x1 conv projections) and BasicTransformerBlock -> Transformer2DModel and
    BasicTransformerBlock: CrossAttention's to_q/k/v (no bias) and out_proj -> to_q/k/v and to_out.0, GEGLU's Dense
    -> ff.net.0.proj (the same value/gate halves), the last Dense -> ff.net.2."""
    a, block = f"{_ATTENTION}/basic_transformer_block#0", "{m}.transformer_blocks.0"
    return [*norm_rules(f"{_ATTENTION}/group_normalization#0", "{m}.norm"),
            *_padded(f"{_ATTENTION}/padded_conv2d#0", "{m}.proj_in"),
            *_padded(f"{_ATTENTION}/padded_conv2d#1", "{m}.proj_out"),
            *[r for i in range(3) for r in norm_rules(f"{a}/layer_normalization#{i}", f"{block}.norm{i + 1}")],
            *[r for i in range(2) for j, name in enumerate(("to_q", "to_k", "to_v"))
              for r in dense_rules(f"{a}/cross_attention#{i}/dense#{j}", f"{block}.attn{i + 1}.{name}", bias=False)],
            *[r for i in range(2) for r in dense_rules(f"{a}/cross_attention#{i}/dense#3", f"{block}.attn{i + 1}.to_out.0")],
            *dense_rules(f"{a}/geglu#0/dense#0", f"{block}.ff.net.0.proj"),
            *dense_rules(f"{a}/dense#0", f"{block}.ff.net.2")]


# top level (renamed by _blocks): conv_in, the downsampling convs and conv_out are PaddedConv2Ds themselves
_TOP = [*_padded(_CONV, "{m}"), *norm_rules("conv_norm_out", "conv_norm_out")]

UNET = Numbered(tuple([
    *_TOP, *dense_rules(r"(?P<m>time_embedding\.linear_[12])", "{m}"),
    *_padded(r"(?P<m>[\w.]+\.upsamplers\.0)/padded_conv2d#0", "{m}.conv"),       # Upsample: nearest x2, conv
    *_resnet(time=True), *_spatial_transformer(),
]), rename=lambda paths: _blocks(paths, _unet_modules))

# keras-cv's AttentionBlock (attention_block.py): one head over 1x1 convs q, k, v, proj_out where diffusers'
# Attention has Linear layers to_q, to_k, to_v, to_out.0
_VAE_ATTENTION = [*norm_rules(f"{_ATTENTION}/group_normalization#0", "{m}.group_norm"),
                  *[r for i, name in enumerate(("to_q", "to_k", "to_v", "to_out.0"))
                    for r in _padded(f"{_ATTENTION}/padded_conv2d#{i}", f"{{m}}.{name}", CONV1X1_AS_LINEAR)]]
VAE_ENCODER = Numbered(tuple([*_TOP, *_resnet(time=False), *_VAE_ATTENTION]),
                       rename=lambda paths: _blocks(paths, _vae_modules, root="vae_encoder#0/"))

MAPPINGS = {("stable_diffusion", "fit"): VAE_ENCODER, ("stable_diffusion", "predict"): UNET}
