"""Every departure from the published benchmark's code (config.yaml `departures`), as data: which ones a profile that
reproduces the anchor cannot keep, and which apply to a row. The report's page of them is
kbench.results.departures_page."""
from __future__ import annotations

from kbench.plan import matrix

ANCHOR = "keras-benchmarks v0.0.5 (github haifeng-jin/keras-benchmarks, tag v0.0.5, commit 4f1d20e)"


def unreproduced(config: dict, profile: str) -> list[dict]:
    """The departures no profile can keep, for a profile that claims to reproduce the anchor (its tables name them
    per row); none for a profile that does not make that claim."""
    if not config["profile_defs"][profile].get("reproduces_anchor"):
        return []
    return [{"id": d["id"], "applies": d.get("applies", [])} for d in config["departures"] if not d["kept_by"]]


def applying(departures: list[dict], model: str, task: str, frameworks: list[str]) -> list[str]:
    """The ids of the departures that apply to a table row (a model/task and the frameworks of its columns)."""
    def applies(rule) -> bool:
        return (matrix.matches(rule.get("model"), model) and matrix.matches(rule.get("task"), task)
                and any(matrix.matches(rule.get("framework"), f) for f in frameworks))
    return [d["id"] for d in departures if any(applies(rule) for rule in d["applies"])]
