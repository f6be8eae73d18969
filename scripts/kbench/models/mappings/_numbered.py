"""Mappings over Keras paths of auto-numbered layers, for the models whose libraries leave their inner layers unnamed
(keras-hub's SAM, keras-cv's Stable Diffusion blocks).

Keras names such a layer after its class and a counter over the whole session ("dense_4": the fifth Dense the session
made), so the number in a path depends on everything built before it and a regex cannot tell an attention's query
from its key. Written as ordinals among the siblings of the same name ("dense#1": the second Dense of its parent, in
the order they were created; "dense" itself is number 0), a path says what the weight is, and rules are written over
those paths. The Keras sessions are cleared per build (kbench.adapters._keras.prepare), but ordinals do not even need
that. Pure Python, as kbench.models.weights.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from kbench.models.weights import Mapping

_NUMBERED = re.compile(r"(?P<base>.*?)(?:_(?P<n>\d+))?")


def ordinal_paths(paths: list[str]) -> list[str]:
    """Every layer component of every path (all but the weight's own name) as base#k, k the rank of its number among
    the numbers of its parent's children of that base name; parents first, so siblings share a rewritten parent."""
    parts = [path.split("/") for path in paths]
    written = [[] for _ in paths]
    for depth in range(max(map(len, parts)) - 1):
        numbers, found = defaultdict(set), []
        for components, prefix in zip(parts, written):
            if depth < len(components) - 1:
                m = _NUMBERED.fullmatch(components[depth])
                key, number = (tuple(prefix), m["base"]), int(m["n"] or 0)
                numbers[key].add(number)
                found.append((key, number))
            else:
                found.append(None)
        for entry, prefix in zip(found, written):
            if entry:
                key, number = entry
                prefix.append(f"{key[1]}#{sorted(numbers[key]).index(number)}")
    return ["/".join(prefix + components[-1:]) for components, prefix in zip(parts, written)]


@dataclass(frozen=True)
class Numbered(Mapping):
    """A kbench.models.weights.Mapping whose rules match ordinal paths (ordinal_paths), optionally renamed further by
    `rename` (all paths -> all paths: block ordinals to module names, where that needs the model's block counts).
    Its inverse gives back the reference's own paths."""
    rename: Callable[[list[str]], list[str]] | None = None

    def to_torch(self, arrays):
        return super().to_torch(self._written(arrays))

    def to_keras(self, state, arrays):
        mapped = super().to_keras(state, self._written(arrays))
        return [(path, value) for (path, _), (_, value) in zip(arrays, mapped)]

    def _written(self, arrays):
        paths = ordinal_paths([path for path, _ in arrays])
        paths = self.rename(paths) if self.rename else paths
        return [(path, value) for path, (_, value) in zip(paths, arrays)]
