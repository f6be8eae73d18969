"""The published claims the config quotes, read in one place. Each is a mapping with its `kind` (the rule that decides
it: kbench.claims.registry), its `quote` (the claim's words, as its source states them) and its rule's parameters;
the loader adds `place`, where the config holds it. The places:

    published.findings[i]        the published page's findings
    published.explanations[i]    its explanations of them
    first_step.claim             the compile's cost side of "out of the box"
    batch_study.claim            a small batch makes PyTorch look slower
    jax_numpy.claim              JAX speeds up NumPy-style code
    profile_defs.<name>.claim    the claim a profile tests (tuned: Keras 3 best out of the box, native PyTorch tuned)

precision_study.claims are not claims of their own kind: they are the speedups one finding (precision_claims) reads
and the precision_speedup table quotes beside its ratios (speedups). A key a run predates reads as its absence (an
archived config): the loader reads what is there.
"""
from __future__ import annotations

LISTS = ("published.findings", "published.explanations")
ONES = ("first_step.claim", "batch_study.claim", "jax_numpy.claim")


def _at(config: dict, place: str):
    found = config
    for key in place.split("."):
        found = (found or {}).get(key)
    return found


def load(config: dict) -> tuple[dict, ...]:
    """Every claim the config quotes, in the order above (a list's in its order), each with its place."""
    found = [{**entry, "place": f"{place}[{i}]"} for place in LISTS for i, entry in enumerate(_at(config, place) or ())]
    found += [{**entry, "place": place} for place in ONES if (entry := _at(config, place))]
    found += [{**definition["claim"], "place": f"profile_defs.{name}.claim"}
              for name, definition in (config.get("profile_defs") or {}).items() if definition.get("claim")]
    return tuple(found)


def at(config: dict, place: str) -> dict | None:
    """The claim the config holds at one place (first_step.claim, jax_numpy.claim), or None."""
    return next((claim for claim in load(config) if claim["place"] == place), None)


def speedups(config: dict) -> tuple[dict, ...]:
    """precision_study.claims: each {model, task, speedup, baseline, quote}, the speedups the mixed-precision guides
    quote."""
    return tuple((config.get("precision_study") or {}).get("claims", ()))
