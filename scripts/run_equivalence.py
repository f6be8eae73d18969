"""Snakemake script of rules `equivalence_reference` and `equivalence`: one equivalence job (kbench.equivalence.check) of a
model in a column, through the launcher like a cell (its own process and image; failures decoded into its record)."""
from kbench.run import launch

sm = snakemake  # noqa: F821 (injected by Snakemake)
job = launch.with_share_of_cores(sm.params.job, sm.threads)     # beside another one on a CPU host (its rule's threads)
files = {"reference": sm.input.reference} if "reference" in sm.input.keys() else {}
# the cells' compile caches it starts from (config first_step.reuse_caches), where there are any
caches = tuple(sm.input.get("caches") or ()) or None
options = launch.Options(timeout_s=sm.resources.cell_timeout_s, module="kbench.equivalence.check", files=files,
                         cache_from=caches)
launch.run_cell(job, sm.params.runtime, sm.input.environment, sm.output.json, sm.log[0], options)
