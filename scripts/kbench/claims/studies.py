"""The claims a study's table decides: the study's table module (kbench.results) writes a verdict per row with the
vocabulary of kbench.results.verdicts and its CPU rule, and the claim reads it by the name the table declares.

- pays_back_within (config first_step.claim, first_step_long.csv): one verdict over the compiled columns;
- native_fixed_cost (config batch_study.claim, batch_verdicts.csv): the batch study's rows, each row's fit's verdict
  (kbench.results.batch); the claim's one verdict is the explanation host_overhead_at_small_batch;
- keras3_out_of_the_box (config profile_defs.tuned.claim, tuning_verdicts.csv): per row, Keras 3 strict against
  native PyTorch tuned (kbench.results.tuning);
- jax_speeds_numpy (config jax_numpy.claim, jax_numpy_claim.csv): per workload (kbench.results.jax_numpy_tables).
"""
from __future__ import annotations

import pandas as pd

from kbench.claims.evidence import Evidence
from kbench.results import batch, first_step_tables, jax_numpy_tables, tuning
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED_HERE, Verdict


def pays_back_within(claim: dict, evidence: Evidence) -> Verdict:
    """The compile's cost side of "out of the box": each compiled column with an eager twin must pay its longer wait
    to the first step back within claim["steps"] timed steps (the anchor's NUM_STEPS: what its ms/step averages over),
    cold and warm. Holds where every such cell does; not measured where no row has both columns."""
    long = evidence.table(first_step_tables.LONG)
    checked, rests_on = [], []
    for _, entry in long[long.pays_back_after_steps.notna()].iterrows():
        text = entry["pays_back_after_steps"]
        within = text == "at once" or (text.isdigit() and int(text) <= claim["steps"])
        checked.append(within)
        rests_on.append(f"{entry['model']} {entry['task']} bs{entry['batch_size']} {entry['precision']} "
                        f"{entry['framework']} {entry['state']}: {entry['to_first_step_s']:.1f} s to its first step, "
                        f"pays back after {text}" + ("" if text.startswith(("never", "at once")) else " steps"))
    if not checked:
        return Verdict(NOT_MEASURED_HERE, "no row with a compiled column and its eager twin (config "
                                          "first_step.eager_twin)")
    return Verdict(HOLDS if all(checked) else FAILS, "; ".join(rests_on))


def native_fixed_cost(claim: dict, evidence: Evidence) -> pd.DataFrame:
    return evidence.table(batch.VERDICTS)


def keras3_out_of_the_box(claim: dict, evidence: Evidence) -> pd.DataFrame:
    return evidence.table(tuning.VERDICTS)


def jax_speeds_numpy(claim: dict, evidence: Evidence) -> pd.DataFrame:
    return evidence.table(jax_numpy_tables.CLAIM)
