"""The words a verdict on a published claim takes, wherever it is decided: a study's table per row (batch, tuning,
jax_numpy_tables) and the claims on the first page (kbench.claims). Defined once, here, low enough for both.

- holds / does not hold: the figures decide it, intervals apart; not shown: their intervals overlap; not measured:
  this run has nothing to decide it with (a row's: "not measured"; a claim's on the first page: "not measured here",
  the run named); cannot be observed here: the claim's mechanism cannot show on this run (Keras 2 under XLA).
- A verdict is its word and what it rests on (Verdict: the rows or figures that decided, as a reader checks them).
- The CPU rule (on_this_run): the published claims are about GPUs, so a verdict reached on a run without one checks
  the pipeline, not the frameworks, and says so; "not measured" needs no such word. A claim names what its CPU
  figures read (rows, breakdowns); a study's row marks itself.
"""
from __future__ import annotations

from typing import NamedTuple

HOLDS, FAILS, NOT_SHOWN, NOT_MEASURED = "holds", "does not hold", "not shown", "not measured"
NOT_MEASURED_HERE = f"{NOT_MEASURED} here"
CANNOT_OBSERVE = "cannot be observed here"


# What a page says of a run without a GPU, beside its timings and verdicts.
CPU_NOTE = ("This run is on a CPU: its timings check the pipeline, not the frameworks, and say nothing about GPU "
            "throughput.")


class Verdict(NamedTuple):
    said: str           # one of the words above
    rests_on: str       # the rows or figures that decided it


def on_this_run(said: str, on_gpu: bool, reading: str | None = None) -> str:
    """A verdict as this run may state it: on a GPU as decided; on a CPU, a claim's verdict reads "not measured here"
    with what its CPU figures (reading: "rows", "breakdowns") read, a study row's is marked the pipeline's check."""
    if on_gpu or said in (NOT_MEASURED, NOT_MEASURED_HERE):
        return said
    if reading is None:
        return f"{said} (CPU: the pipeline's check)"
    return f"{NOT_MEASURED_HERE} (no GPU in this run; its CPU {reading} read: {said})"


def device_note(on_gpu: bool) -> str:
    return "" if on_gpu else CPU_NOTE


def left_out(row: dict, without: list[dict]) -> bool:
    """Whether a row is one a claim leaves out (its config `without`: e.g. {task: generate, batch_size: 1}, the
    rows the published page's text predates)."""
    return any(all(row.get(k) == v for k, v in rule.items()) for rule in without)
