"""studies: questions beside the benchmark's matrix, each with its own job and tables: JAX against NumPy (jax_numpy,
jax_numpy_tables), the ten-minute GPU check (gpucheck), parameter counts at sizes a CPU cannot run (census: the count
in a stack's environment; census_tables: every framework's, as a table), the GPU locks built and exercised on a CPU
(gpu_stacks), and the harness's own costs (bench_overhead: the runner against a bare loop; bench_images: image builds
and container start-up).

May import: every wing below it (ground up to lifecycle)."""
