"""studies: questions beside the benchmark's matrix, each with its own job: JAX against NumPy (jax_numpy, the job
process; its table is kbench.results.jax_numpy_tables), parameter counts at sizes a CPU cannot run (census: the count
in a stack's environment; census_tables: every framework's, as a table: `kbench census`). The GPU check is
kbench.gpucheck; the harness's own checks are kbench.harness.

May import: every wing below it (ground up to lifecycle)."""
