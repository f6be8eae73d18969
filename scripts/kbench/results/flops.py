"""FLOPs of one benchmark step of a cell, from its architecture (config.yaml model_defs) alone: the one place that
knows them. Pure Python like kbench.models.constructors (no framework import), so any adapter, table or test can use it.

    per_step(spec) -> int              FLOPs of one step of the cell (its batch, its task)
    breakdown(spec) -> {part: FLOPs}   named parts that add up to per_step(spec)

`spec` is kbench.plan.matrix.spec()'s resolved cell dict (model, task, batch_size, arch, inputs, task_options).

Convention: FLOPs = 2 x multiply-accumulates (MACs) of matrix products, einsums, convolutions (transposed ones too)
and attention, whose two products QK^T (scores) and AV (values) are counted explicitly over every (query, key) pair
the kernel computes: a causal or sliding-window mask does not halve them, as torch's scaled_dot_product_attention
computes the masked scores too. This is the convention of torch.utils.flop_counter.FlopCounterMode and of MFU
papers (model FLOPs: Kaplan et al. 2020 section 2.1, PaLM, Chowdhery et al. 2022 appendix B). Not counted:
elementwise ops, embedding lookups, norms, softmax, activations, pooling, losses, optimizer updates, the DDIM
scheduler step, and bias additions.

What a step is: the native-torch adapter's (scripts/kbench/adapters/native_torch.py), checked against
FlopCounterMode on every tiny model/task (tests/test_flops.py, exact). The Keras columns run the same architectures
and mostly the same products (keras-cv's SD predict calls the UNet twice on the batch: the same FLOPs), with two
known differences a FLOP rate for them must allow for: keras-hub's LoRA factors are per head (docs/choices.md, "Choices and
limits"), and keras-hub's generate prefills the whole prompt_length + new_tokens buffer and decodes against that
fixed-length cache.

- predict: one forward pass of what the step runs.
- fit: forward + backward as autograd runs it. The backward of a matrix product costs one product of the same size
  per operand that needs a gradient: 2x its forward for a trained linear/conv whose input needs a gradient (grad
  wrt input and wrt weight), 1x for a frozen layer above the lowest trained one (input gradient only) and for the
  lowest trained layer itself (weight gradient only: the data needs none), 0 below it. Attention backward: 2x its
  forward (dQ, dK from dScores; dV, dScores from dOut). Fused attention kernels (flash / memory-efficient SDPA)
  recompute QK^T in their backward (+0.5x the attention forward): that is rematerialisation, which model FLOPs
  leave out (PaLM appendix B), so it is not counted (torch's FlopCounterMode counts it for the GPU kernels).
- LoRA fit (peft on q_proj, v_proj, everything else frozen): the frozen model's input gradients from the LM head
  down to the first layer's LoRA factors, plus the LoRA factors' own products (forward, input and weight grads).
- generate: one greedy HF generate() call with P = prompt_length prompt tokens and exactly N = new_tokens new
  ones, with a KV cache (DynamicCache). Counted: a prefill forward over the P prompt tokens (attention P x P),
  whose LM head runs on the last position only (generate passes logits_to_keep=1) and yields the first new token;
  then N - 1 decode forwards of one token each, the j-th (j = 1 .. N-1) attending over the P + j tokens so far
  (Mistral's sliding-window cache: at most sliding_window of them), LM head on that one token. The N-th token is
  not fed back, so the last decode forward is the (N-1)-th. Prompt and new tokens are counted per sequence in the
  batch (no padding: every prompt has P tokens).
"""
from __future__ import annotations

import math

from kbench.models import constructors

# ---------------------------------------------------------------- primitives (2 x MACs)


def linear(tokens: int, d_in: int, d_out: int) -> int:
    """y = x W over `tokens` rows (torch.nn.Linear / keras Dense): tokens x d_in x d_out MACs."""
    return 2 * tokens * d_in * d_out


def conv2d(batch: int, c_in: int, c_out: int, kernel: int, h_out: int, w_out: int) -> int:
    """A dense (groups=1) k x k convolution: every output pixel of every output channel takes c_in*k*k MACs."""
    return 2 * batch * c_out * h_out * w_out * c_in * kernel * kernel


def conv_transpose2d(batch: int, c_in: int, c_out: int, kernel: int, h_in: int, w_in: int) -> int:
    """A transposed convolution: every input pixel scatters into c_out*k*k outputs (what FlopCounterMode counts)."""
    return 2 * batch * c_in * h_in * w_in * c_out * kernel * kernel


def conv_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output side of a convolution or pooling window (torch.nn.Conv2d's formula, dilation 1)."""
    return (size + 2 * padding - kernel) // stride + 1


def attention(batch_heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int | None = None) -> tuple[int, int]:
    """(scores, values) FLOPs of softmax(Q K^T) V for batch_heads independent heads: QK^T is q_len x qk_dim x kv_len
    MACs per head, AV q_len x kv_len x v_dim. Grouped-query attention is counted per query head (the kernel
    broadcasts the shared K/V heads)."""
    v_dim = qk_dim if v_dim is None else v_dim
    return 2 * batch_heads * q_len * kv_len * qk_dim, 2 * batch_heads * q_len * kv_len * v_dim


# ---------------------------------------------------------------- tally


MATMUL, CONV = "matmul", "convolution"


class _Tally:
    """Named FLOP parts of one step. add(part, flops, grads): the forward FLOPs of one product, and, in a fit step,
    `grads` products of the same size in its backward (2: weight and input gradient, or both attention operands;
    1: one of them; 0: none), tallied under "backward: <part>". prefixed(p) is a view whose parts are named p + part
    (the prefill and decode parts of a generate call), sharing the same parts."""

    def __init__(self, training: bool, prefix: str = "", parts: dict | None = None, kinds: dict | None = None):
        self.training, self.prefix = training, prefix
        self.parts = {} if parts is None else parts
        self.kinds = {} if kinds is None else kinds         # part -> "matmul" | "convolution"

    def prefixed(self, prefix: str) -> "_Tally":
        return _Tally(self.training, self.prefix + prefix, self.parts, self.kinds)

    def add(self, part: str, flops: int, grads: int = 0, kind: str = MATMUL) -> None:
        """kind: what runs the product on a GPU, which decides its arithmetic (cuBLAS matmul or cuDNN
        convolution: torch switches TF32 apart for the two)."""
        part = self.prefix + part
        if self.kinds.setdefault(part, kind) != kind:
            raise ValueError(f"FLOP part {part!r} mixes {self.kinds[part]} and {kind}")
        self.parts[part] = self.parts.get(part, 0) + flops
        if self.training and grads:
            self.kinds["backward: " + part] = kind
            self.parts["backward: " + part] = self.parts.get("backward: " + part, 0) + grads * flops

    def attention(self, part: str, scores_values: tuple[int, int], grads: int = 0) -> None:
        scores, values = scores_values
        self.add(f"{part} scores QK^T", scores, grads)
        self.add(f"{part} values AV", values, grads)

    def result(self) -> dict[str, int]:
        """Forward parts first, then the backward parts."""
        forward = {k: v for k, v in self.parts.items() if not k.startswith("backward: ")}
        return {**forward, **{k: v for k, v in self.parts.items() if k not in forward}}


# ---------------------------------------------------------------- BERT

def _bert(spec: dict, t: _Tally) -> None:
    """transformers BertForSequenceClassification (= keras-hub BertTextClassifier): BertEmbeddings (lookups only),
    num_layers x BertLayer [BertSelfAttention query/key/value Linear(d, d), SDPA, BertSelfOutput.dense Linear(d, d),
    BertIntermediate.dense Linear(d, I), BertOutput.dense Linear(I, d)], BertPooler.dense Linear(d, d) on the first
    token, classifier Linear(d, num_classes). Fit trains everything (the embeddings too, so every layer's input
    needs a gradient): grads=2 everywhere."""
    a, b, s = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    d, inter, heads = a["hidden_dim"], a["intermediate_dim"], a["num_heads"]
    tokens = b * s
    for _ in range(a["num_layers"]):
        t.add("encoder q/k/v/o projections", 4 * linear(tokens, d, d), grads=2)
        t.attention("encoder self-attention", attention(b * heads, s, s, d // heads), grads=2)
        t.add("encoder feed-forward", linear(tokens, d, inter) + linear(tokens, inter, d), grads=2)
    t.add("pooler + classifier", linear(b, d, d) + linear(b, d, a["num_classes"]), grads=2)


# ---------------------------------------------------------------- Gemma, Mistral (HF *ForCausalLM + peft LoRA)

def _decoder_dims(spec: dict) -> dict:
    """Widths of transformers' GemmaForCausalLM / MistralForCausalLM (constructors.hf_gemma_config / hf_mistral_config):
    GemmaAttention / MistralAttention q_proj Linear(d, Hq*hd), k_proj and v_proj Linear(d, Hkv*hd), o_proj
    Linear(Hq*hd, d); GemmaMLP / MistralMLP gate_proj and up_proj Linear(d, I), down_proj Linear(I, d); lm_head
    Linear(d, V) (tied to the embedding in Gemma: still a product). Mistral's head_dim is d // Hq (MistralConfig)."""
    a = spec["arch"]
    head_dim = a.get("head_dim") or a["hidden_dim"] // a["num_query_heads"]
    return {"d": a["hidden_dim"], "inter": a["intermediate_dim"], "vocab": a["vocabulary_size"],
            "layers": a["num_layers"], "hq": a["num_query_heads"], "hkv": a["num_key_value_heads"], "hd": head_dim,
            "window": a.get("sliding_window")}


def _decoder_forward(spec: dict, t: _Tally, b: int, q_len: int, kv_len: int, logits_tokens: int,
                     lora_rank: int = 0) -> None:
    """One forward of the decoder stack: b sequences of q_len new positions attending over kv_len keys (cache
    included); the LM head on logits_tokens positions. lora_rank > 0: the LoRA fit (peft LoraLayer on
    constructors.PEFT_LORA_TARGETS: lora_A Linear(in, r), lora_B Linear(r, out), base frozen) with its backward grads:
    nothing needs a gradient below layer 0's LoRA factors (embeddings frozen), so layer 0's frozen q/k/v take no
    input gradient and its lora_A only a weight gradient; every frozen product above takes its input gradient."""
    m = _decoder_dims(spec)
    d, hq, hkv, hd = m["d"], m["hq"], m["hkv"], m["hd"]
    tokens = b * q_len
    out_dims = {"q_proj": hq * hd, "k_proj": hkv * hd, "v_proj": hkv * hd}
    for layer in range(m["layers"]):
        above = 1 if layer > 0 else 0           # does this layer's input need a gradient (LoRA fit)?
        for name, out in out_dims.items():
            t.add("q/k/v projections", linear(tokens, d, out), grads=above)
            if lora_rank and name in constructors.PEFT_LORA_TARGETS:
                t.add("LoRA factors", linear(tokens, d, lora_rank), grads=1 + above)   # lora_A: weight (+ input)
                t.add("LoRA factors", linear(tokens, lora_rank, out), grads=2)         # lora_B: weight + input
        t.attention("self-attention", attention(b * hq, q_len, kv_len, hd), grads=2)
        t.add("o projection", linear(tokens, hq * hd, d), grads=1)
        t.add("gated MLP", 2 * linear(tokens, d, m["inter"]) + linear(tokens, m["inter"], d), grads=1)
    t.add("LM head", linear(b * logits_tokens, d, m["vocab"]), grads=1)


def _causal_lm_fit(spec: dict, t: _Tally) -> None:
    """LoRA fit at sequence_length, the LM head over every position (HF computes all logits, then shifts labels)."""
    s = spec["inputs"]["sequence_length"]
    _decoder_forward(spec, t, spec["batch_size"], s, s, s, lora_rank=spec["task_options"]["lora_rank"])


def _causal_lm_generate(spec: dict, t: _Tally) -> None:
    """Greedy generate with a KV cache (see the module docstring, "generate"): the prefill over the prompt, LM head
    on its last position only (GenerationMixin sets logits_to_keep=1), then new_tokens - 1 one-token decode
    forwards, the j-th attending over the prompt_length + j tokens so far."""
    b, opts = spec["batch_size"], spec["task_options"]
    prompt, new = opts["prompt_length"], opts["new_tokens"]
    window = _decoder_dims(spec)["window"]
    _decoder_forward(spec, t.prefixed("prefill: "), b, prompt, prompt, 1)
    decode = t.prefixed("decode: ")
    for j in range(1, new):
        kv = prompt + j                        # the tokens so far, the one being fed included
        if window:                             # Mistral: DynamicSlidingWindowLayer keeps the last window - 1 tokens
            kv = min(kv, window)
        _decoder_forward(spec, decode, b, 1, kv, 1)


# ---------------------------------------------------------------- SAM (Meta segment-anything)

def _sam_image_encoder(spec: dict, t: _Tally, b: int) -> None:
    """segment_anything ImageEncoderViT (= keras-hub ViTDetBackbone) on b images, as constructors.segment_anything_kwargs
    builds it: PatchEmbed Conv2d(3, D, p, stride p) on a g x g grid (g = image_size // patch_size); then
    encoder_num_layers x Block: windowed blocks pad the grid to a multiple of window_size (window_partition; the
    padded tokens are computed too) and run Attention on each w x w window, the blocks in
    global_attention_layer_indices on the whole grid; Attention = qkv Linear(D, 3D), (q*scale) @ k^T, the decomposed
    relative-position terms (add_decomposed_rel_pos: two einsums "bhwc,hkc->bhwk" and "bhwc,wkc->bhwk", q against the
    per-axis tables, side x side x side x head_dim MACs each), attn @ v, proj Linear(D, D); MLPBlock lin1
    Linear(D, I), lin2 Linear(I, D) on the unpadded grid; neck Conv2d(D, C, 1) and Conv2d(C, C, 3), no bias.
    Fit trains all of it against the image: the patch embedding takes a weight gradient only (the image needs
    none), everything above both gradients; attention and the einsums are plain matmuls here (no fused kernel)."""
    a = spec["arch"]
    dim, heads, inter = a["encoder_hidden_dim"], a["encoder_num_heads"], a["encoder_intermediate_dim"]
    head_dim, grid, window, out = dim // heads, constructors.sam_embedding_size(a), a["window_size"], a["embedding_dim"]
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


def _sam_prompt_and_mask_decoder(spec: dict, t: _Tally, b: int) -> None:
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
    a, opts = spec["arch"], spec["task_options"]
    c, heads, mlp, grid = a["embedding_dim"], a["decoder_num_heads"], a["decoder_intermediate_dim"], \
        constructors.sam_embedding_size(a)
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


def _sam_fit(spec: dict, t: _Tally) -> None:
    _sam_image_encoder(spec, t, spec["batch_size"])


def _sam_predict(spec: dict, t: _Tally) -> None:
    _sam_image_encoder(spec, t, spec["batch_size"])
    _sam_prompt_and_mask_decoder(spec, t, spec["batch_size"])


# ---------------------------------------------------------------- StableDiffusion v1.4 (diffusers)

def _resnet_block(t: _Tally, part: str, n: int, c_in: int, c_out: int, size: int, temb: int = 0, grads: int = 0):
    """diffusers ResnetBlock2D: conv1 Conv2d(c_in, c_out, 3), time_emb_proj Linear(temb, c_out) on the n timestep
    embeddings (UNet only), conv2 Conv2d(c_out, c_out, 3), conv_shortcut Conv2d(c_in, c_out, 1) when c_in != c_out."""
    t.add(part, conv2d(n, c_in, c_out, 3, size, size) + conv2d(n, c_out, c_out, 3, size, size), grads, CONV)
    if c_in != c_out:
        t.add(part, conv2d(n, c_in, c_out, 1, size, size), grads, CONV)
    if temb:
        t.add("time embedding", linear(n, temb, c_out), grads)


def _unet(spec: dict, t: _Tally, n: int) -> None:
    """diffusers UNet2DConditionModel as constructors.diffusers_sd_kwargs configures it (SD v1.4), on n latents (the 2 x
    batch guidance batch): time_embedding TimestepEmbedding Linear(c0, 4 c0), Linear(4 c0, 4 c0); conv_in; down
    blocks (CrossAttnDownBlock2D, last DownBlock2D): layers_per_block x (ResnetBlock2D [+ Transformer2DModel]) and a
    Downsample2D 3x3 stride-2 conv except the last; mid UNetMidBlock2DCrossAttn: resnet, transformer, resnet; up
    blocks (UpBlock2D, then CrossAttnUpBlock2D): layers_per_block + 1 resnets on [x, skip] concatenations (popped
    from the down path's outputs), an Upsample2D 3x3 conv after nearest x2 except the last; conv_out.
    Transformer2DModel (use_linear_projection False): proj_in Conv2d 1x1, one BasicTransformerBlock [attn1
    self-attention to_q/k/v/out Linear(C, C); attn2 cross-attention to_q, to_out Linear(C, C), to_k/to_v
    Linear(context_dim, C) on the text_length context tokens; FeedForward GEGLU proj Linear(C, 8C), Linear(4C, C)],
    proj_out Conv2d 1x1; unet_attention_heads heads of C / heads (diffusers' "attention_head_dim" quirk)."""
    a = spec["arch"]
    kw = constructors.diffusers_sd_kwargs(a)["unet"]
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


def _sd_predict(spec: dict, t: _Tally) -> None:
    """One classifier-free-guided denoising step: the UNet once on the 2 x batch guidance batch (diffusers'
    pipeline; keras-cv calls it twice on the batch: the same FLOPs). Guidance and the DDIM step are elementwise."""
    _unet(spec, t, 2 * spec["batch_size"])


def _sd_fit(spec: dict, t: _Tally) -> None:
    """diffusers.models.autoencoders.vae.Encoder (AutoencoderKL.encoder, double_z) as constructors.diffusers_sd_kwargs
    configures it, trained against random moments: conv_in Conv2d(3, c0, 3) (weight gradient only: the image needs
    none); DownEncoderBlock2D x len(vae_block_channels): vae_layers_per_block ResnetBlock2D (no time embedding) and,
    except the last, a Downsample2D (F.pad (0, 1, 0, 1), then a 3x3 stride-2 conv, padding 0); UNetMidBlock2D:
    resnet, Attention (one head of C: to_q/k/v/out Linear(C, C) over the latent grid's tokens), resnet; conv_out
    Conv2d(C, 2 * latent_channels, 3) (the moments; keras-cv's layers[-3])."""
    a, b = spec["arch"], spec["batch_size"]
    kw = constructors.diffusers_sd_kwargs(a)["vae_encoder"]
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


# ---------------------------------------------------------------- ResNet-50 (torchvision v1.5, keras.applications v1)

RESNET50_LAYERS = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # (planes, Bottleneck blocks, stride)


def _resnet50_fit(spec: dict, t: _Tally) -> None:
    """The column's ResNet-50 at image_size (kbench.models.constructors.resnet50_stride_on: torchvision's v1.5 or
    keras.applications' v1): conv1 Conv2d(3, 64, 7, stride 2, padding 3) (weight gradient only: the images need
    none), maxpool 3x3 stride 2; layer1-4 of Bottleneck: conv1 1x1 (in, planes), conv2 3x3 (planes, planes), conv3
    1x1 (planes, 4 planes), the block's stride on conv2 (v1.5) or on conv1 (v1, which so runs conv1 and conv2 on the
    smaller grid), and on each layer's first block the downsample Conv2d(in, 4 planes, 1, stride); avgpool; fc
    Linear(2048, num_classes). Fit trains everything. keras' convolution biases are additions, not counted."""
    a, b = spec["arch"], spec["batch_size"]
    v1 = constructors.resnet50_stride_on(spec.get("framework_def", {}).get("adapter")) == "1x1"
    size = conv_size(a["image_size"], 7, 2, 3)
    t.add("stem conv", conv2d(b, 3, 64, 7, size, size), grads=1, kind=CONV)
    size, inplanes = conv_size(size, 3, 2, 1), 64
    for planes, blocks, stride in RESNET50_LAYERS:
        for k in range(blocks):
            step = stride if k == 0 else 1
            out = conv_size(size, 3, step, 1)
            first = out if v1 else size         # the grid conv1 runs on
            t.add("bottleneck convs", conv2d(b, inplanes, planes, 1, first, first)
                  + conv2d(b, planes, planes, 3, out, out) + conv2d(b, planes, 4 * planes, 1, out, out), grads=2,
                  kind=CONV)
            if k == 0:
                t.add("downsample convs", conv2d(b, inplanes, 4 * planes, 1, out, out), grads=2, kind=CONV)
            size, inplanes = out, 4 * planes
    t.add("fc", linear(b, inplanes, a["num_classes"]), grads=2)


# ---------------------------------------------------------------- API

_STEPS = {("bert", "fit"): _bert, ("bert", "predict"): _bert,
          ("gemma", "fit"): _causal_lm_fit, ("gemma", "generate"): _causal_lm_generate,
          ("mistral", "fit"): _causal_lm_fit, ("mistral", "generate"): _causal_lm_generate,
          ("sam", "fit"): _sam_fit, ("sam", "predict"): _sam_predict,
          ("stable_diffusion", "fit"): _sd_fit, ("stable_diffusion", "predict"): _sd_predict,
          ("resnet50", "fit"): _resnet50_fit}


def _tally(spec: dict) -> _Tally:
    step = _STEPS.get((spec["model"], spec["task"]))
    if step is None:
        raise ValueError(f"no FLOP formula for {spec['model']} {spec['task']}; known: {sorted(_STEPS)}")
    tally = _Tally(training=spec["task"] == "fit")
    step(spec, tally)
    return tally


def breakdown(spec: dict) -> dict[str, int]:
    """FLOPs of one step of the cell by named part (forward parts, then "backward: <part>" in a fit); the values add
    up to per_step(spec)."""
    return _tally(spec).result()


def known(model: str, task: str) -> bool:
    return (model, task) in _STEPS


def by_kind(spec: dict) -> dict[str, int]:
    """FLOPs of one step split by what runs them on a GPU: {"matmul": ..., "convolution": ...} (kbench.gpu.peaks takes
    each at the peak of its own arithmetic)."""
    tally = _tally(spec)
    totals = dict.fromkeys((MATMUL, CONV), 0)
    for part, count in tally.parts.items():
        totals[tally.kinds[part]] += count
    return totals


def per_step(spec: dict) -> int:
    """FLOPs of one benchmark step of the cell: its batch, its task (see the module docstring for the convention)."""
    return sum(breakdown(spec).values())
