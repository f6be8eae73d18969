"""The equivalence check's mappings of the reference (Keras 3 weights, kbench.models.weights) onto every other column's
models, one module per model, named by its family's `layouts` fact (kbench.models.family): bert, gemma, mistral,
llama, sam, stable_diffusion, resnet50, and paddle (Paddle's names on top of the torch ones); _numbered (what the
numbered-layer models share). The functions here are the one place the adapters ask.

A model module provides MAPPINGS {(model, task): kbench.models.weights.Mapping} onto the native PyTorch modules, DERIVED
(regexes of native names no reference array is mapped to: buffers, tied weights, factors the column initialises
itself), and where Keras 2 orders its weights otherwise than Keras 3, KERAS2_ORDER {(model, task): function(reference
arrays, Keras 2 model) -> arrays in the Keras 2 model's order}.
"""
from __future__ import annotations

import re



def _layouts(model: str):
    from kbench.models import family       # here: the family modules import their layouts from this package
    return family.of(model).layouts if model in family.families() else None


def mapping(model: str, task: str):
    """The Mapping of a model's task onto its native module, or None (no mapping yet: the check says so)."""
    module = _layouts(model)
    return getattr(module, "MAPPINGS", {}).get((model, task)) if module else None


def derived(model: str, name: str) -> bool:
    module = _layouts(model)
    return any(re.fullmatch(pattern, name) for pattern in getattr(module, "DERIVED", ()))


def load_report(model: str, mapping, arrays, missing, unexpected) -> dict:
    """What loading the reference into a native module left out, from the names its load_state_dict(strict=False)
    returned: the module's weights the reference did not give it (derived ones aside: a module with missing weights
    never passes, it reads "mapping incomplete"), what the reference gave that the module lacks, and the reference
    arrays the mapping leaves out on purpose. Pure Python, so it is tested without torch."""
    missing = [name for name in missing if not derived(model, name)]
    return {k: v for k, v in (("missing", missing), ("unexpected", list(unexpected)),
                              ("skipped", mapping.skipped(arrays))) if v}


def keras2_order(model: str, task: str):
    module = _layouts(model)
    return getattr(module, "KERAS2_ORDER", {}).get((model, task)) if module else None
