"""Snakemake script of rule `jax_numpy`: the JAX-against-NumPy job (kbench.studies.jax_numpy) of a suite in its column's
environment, through the launcher like a cell (its own process and image; failures decoded into its record), on every
CPU of the host (its NumPy half is timed on them) and one GPU leased alone."""
from kbench.run import launch

sm = snakemake  # noqa: F821 (injected by Snakemake)
launch.run_cell(sm.params.job, sm.params.runtime, sm.input.environment, sm.output.json, sm.log[0],
                launch.Options(timeout_s=sm.resources.cell_timeout_s, module="kbench.studies.jax_numpy",
                               host_cpus=True))
