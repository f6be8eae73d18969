"""The numpy inputs of the Keras cells, shared by the Keras 3 and Keras 2 adapters (and native ResNet-50) (keras-hub, keras-nlp and keras-cv
take the same input dicts), so both columns run on the same numbers. Channels-last images; rng is the cell's
numpy Generator, drawn in a fixed order."""
from __future__ import annotations

import numpy as np

from kbench import models


def bert(spec, rng):
    """x for BertTextClassifier / BertClassifier (preprocessor=None) and, for fit, class labels."""
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    x = {"token_ids": rng.integers(0, arch["vocabulary_size"], (n, seq), dtype="int32"),
         "segment_ids": np.zeros((n, seq), "int32"),
         "padding_mask": np.ones((n, seq), "int32")}
    return x, rng.integers(0, arch["num_classes"], (n,), dtype="int32")


def causal_lm_fit(spec, rng):
    """x, next-token targets and sample weights, as CausalLMPreprocessor makes them."""
    arch, n, seq = spec["arch"], spec["batch_size"], spec["inputs"]["sequence_length"]
    ids = rng.integers(0, arch["vocabulary_size"], (n, seq + 1), dtype="int32")
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((n, seq), bool)}
    return x, ids[:, 1:], np.ones((n, seq), "float32")


def causal_lm_prompt(spec, rng):
    """Prompt of prompt_length tokens, then new_tokens masked-off slots that greedy decoding fills; with
    stop_token_ids=None every generate call produces exactly new_tokens tokens."""
    arch, opts, n = spec["arch"], spec["task_options"], spec["batch_size"]
    p, total = opts["prompt_length"], opts["prompt_length"] + opts["new_tokens"]
    ids = np.zeros((n, total), "int32")
    ids[:, :p] = rng.integers(1, arch["vocabulary_size"], (n, p))
    return {"token_ids": ids, "padding_mask": np.arange(total)[None, :].repeat(n, 0) < p}


def sam_images(spec, rng):
    size = spec["arch"]["image_size"]
    return rng.random((spec["batch_size"], size, size, 3), dtype="float32")


def sam_embedding_target(spec, rng):
    """The random image embedding the anchor's SAM fit regresses the image encoder onto."""
    arch, grid = spec["arch"], models.sam_embedding_size(spec["arch"])
    return rng.random((spec["batch_size"], grid, grid, arch["embedding_dim"]), dtype="float32")


def sam_prompts(spec, rng, images):
    """num_points foreground points plus the (0, 0) / label -1 padding point keras SAM wants when no box is given;
    empty box and mask prompts passed explicitly (the models' predict_step would add them, but the compiled forward
    call bypasses it)."""
    arch, n, size = spec["arch"], spec["batch_size"], spec["arch"]["image_size"]
    k, mask_side = spec["task_options"]["num_points"], 4 * models.sam_embedding_size(arch)
    points = np.concatenate([rng.uniform(0, size, (n, k, 2)), np.zeros((n, 1, 2))], axis=1).astype("float32")
    labels = np.concatenate([np.ones((n, k)), -np.ones((n, 1))], axis=1).astype("float32")
    return {"images": images, "points": points, "labels": labels,
            "boxes": np.zeros((n, 0, 2, 2), "float32"), "masks": np.zeros((n, 0, mask_side, mask_side, 1), "float32")}


def sd_fit(spec, rng):
    """Images and the random 2*latent_channels moments the anchor's VAE-encoder fit regresses onto."""
    arch, n = spec["arch"], spec["batch_size"]
    size, lat = arch["image_size"], models.sd_latent_size(arch)
    images = rng.random((n, size, size, 3), dtype="float32")
    return images, rng.random((n, lat, lat, 2 * arch["latent_channels"]), dtype="float32")


def sd_predict(spec, rng, timestep_embedding):
    """[latent, timestep embedding, context, unconditional context] for _keras_sd.guided_denoising_step; random
    contexts stand in for the text encoder, which is not part of a denoising step."""
    n, u = spec["batch_size"], models.keras_cv_sd_kwargs(spec["arch"])["unet"]
    ctx_shape = (n, u["text_length"], u["context_dim"])
    return [rng.standard_normal((n, u["latent_size"], u["latent_size"], u["latent_channels"]), dtype="float32"),
            timestep_embedding, rng.standard_normal(ctx_shape, dtype="float32"),
            rng.standard_normal(ctx_shape, dtype="float32")]


def images_and_labels(spec, rng):
    """Image classification (ResNet-50): uniform [0, 1) images and class labels."""
    arch, n = spec["arch"], spec["batch_size"]
    size = arch["image_size"]
    images = rng.random((n, size, size, 3), dtype="float32")
    return images, rng.integers(0, arch["num_classes"], (n,), dtype="int32")
