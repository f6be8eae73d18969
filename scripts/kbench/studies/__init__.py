"""studies: questions beside the benchmark's matrix, each with its own job and tables: JAX against NumPy (jax_numpy,
jax_numpy_tables), the ten-minute GPU check (gpucheck), parameter counts at sizes a CPU cannot run (census), the GPU
locks built and exercised on a CPU (gpu_stacks).

May import: every wing below it (ground up to lifecycle)."""
