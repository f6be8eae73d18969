"""Every cell's inputs, drawn from the cell's seed in one fixed order, so every column runs on the same numbers.

Arrays are NumPy in the Keras layout (channels-last images, dicts keyed as keras-hub, keras-nlp and keras-cv take
them); the native PyTorch adapter converts layouts and key names (channels_first, torch_*), never draws its own.
rng is the cell's numpy Generator (kbench.adapters.build makes it).
"""
from __future__ import annotations

import numpy as np

from kbench.models import constructors


def channels_first(images: np.ndarray) -> np.ndarray:
    """NHWC -> NCHW (torch's convolution layout), contiguous."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2))


# ---------------------------------------------------------------- text

def bert(spec, rng):
    """x for BertTextClassifier / BertClassifier (preprocessor=None) and, for fit, class labels."""
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    x = {"token_ids": rng.integers(0, arch["vocabulary_size"], (n, seq), dtype="int32"),
         "segment_ids": np.zeros((n, seq), "int32"),
         "padding_mask": np.ones((n, seq), "int32")}
    return x, rng.integers(0, arch["num_classes"], (n,), dtype="int32")


def torch_bert(x: dict) -> dict:
    """bert()'s x as BertForSequenceClassification's keyword arguments (int64 ids)."""
    return {"input_ids": x["token_ids"].astype("int64"), "token_type_ids": x["segment_ids"].astype("int64"),
            "attention_mask": x["padding_mask"].astype("int64")}


def causal_lm_fit(spec, rng):
    """x, next-token targets and sample weights, as CausalLMPreprocessor makes them: sequence_length + 1 tokens
    drawn, the first sequence_length in, the last sequence_length as targets."""
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    ids = rng.integers(0, arch["vocabulary_size"], (n, seq + 1), dtype="int32")
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, seq), bool)}
    return x, ids[:, 1:], np.ones((n, seq), "float32")


def prompt_tokens(spec, rng):
    """(batch, prompt_length) token ids, never 0 (the padding id)."""
    arch, opts, n = spec["arch"], spec["task_options"], spec["batch_size"]
    return rng.integers(1, arch["vocabulary_size"], (n, opts["prompt_length"]))


def causal_lm_prompt(spec, rng):
    """The prompt, then new_tokens masked-off slots that greedy decoding fills; with stop_token_ids=None every
    keras-hub generate call produces exactly new_tokens tokens."""
    opts, n = spec["task_options"], spec["batch_size"]
    p, total = opts["prompt_length"], opts["prompt_length"] + opts["new_tokens"]
    ids = np.zeros((n, total), "int32")
    ids[:, :p] = prompt_tokens(spec, rng)
    return {"token_ids": ids, "padding_mask": np.arange(total)[None, :].repeat(n, 0) < p}


# ---------------------------------------------------------------- images

def sam_images(spec, rng):
    size = spec["arch"]["image_size"]
    return rng.random((spec["batch_size"], size, size, 3), dtype="float32")


def sam_embedding_target(spec, rng):
    """The random image embedding the anchor's SAM fit regresses the image encoder onto (channels-last)."""
    arch, grid = spec["arch"], constructors.sam_embedding_size(spec["arch"])
    return rng.random((spec["batch_size"], grid, grid, arch["embedding_dim"]), dtype="float32")


def sam_points(spec, rng):
    """num_points foreground points per image, (batch, num_points, 2) pixel coordinates."""
    size, n, k = spec["arch"]["image_size"], spec["batch_size"], spec["task_options"]["num_points"]
    return rng.uniform(0, size, (n, k, 2)).astype("float32")


def sam_prompts(spec, rng, images):
    """The keras SAM prompts: the points plus the (0, 0) / label -1 padding point keras SAM wants when no box is
    given; empty box and mask prompts passed explicitly (the models' predict_step would add them, but the compiled
    forward call bypasses it)."""
    arch, n = spec["arch"], spec["batch_size"]
    k, mask_side = spec["task_options"]["num_points"], 4 * constructors.sam_embedding_size(arch)
    points = np.concatenate([sam_points(spec, rng), np.zeros((n, 1, 2), "float32")], axis=1)
    labels = np.concatenate([np.ones((n, k)), -np.ones((n, 1))], axis=1).astype("float32")
    return {"images": images, "points": points, "labels": labels,
            "boxes": np.zeros((n, 0, 2, 2), "float32"), "masks": np.zeros((n, 0, mask_side, mask_side, 1), "float32")}


def sd_fit(spec, rng):
    """Images and the random 2*latent_channels moments the anchor's VAE-encoder fit regresses onto."""
    arch, n = spec["arch"], spec["batch_size"]
    size, lat = arch["image_size"], constructors.sd_latent_size(arch)
    images = rng.random((n, size, size, 3), dtype="float32")
    return images, rng.random((n, lat, lat, 2 * arch["latent_channels"]), dtype="float32")


def sd_denoising(spec, rng):
    """A guided denoising step's latent (channels-last), text context and unconditional context; random contexts
    stand in for the text encoder, which is not part of a denoising step."""
    arch, n = spec["arch"], spec["batch_size"]
    lat = constructors.sd_latent_size(arch)
    context_shape = (n, arch["text_length"], arch["context_dim"])
    latent = rng.standard_normal((n, lat, lat, arch["latent_channels"]), dtype="float32")
    return latent, rng.standard_normal(context_shape, dtype="float32"), rng.standard_normal(context_shape,
                                                                                             dtype="float32")


def images_and_labels(spec, rng):
    """Image classification (ResNet-50): uniform [0, 1) images and class labels."""
    arch, n = spec["arch"], spec["batch_size"]
    size = arch["image_size"]
    images = rng.random((n, size, size, 3), dtype="float32")
    return images, rng.integers(0, arch["num_classes"], (n,), dtype="int32")
