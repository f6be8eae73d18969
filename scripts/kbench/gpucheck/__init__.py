"""gpucheck: the GPU check, in one wing: check (the first thing to run on a new GPU host or node: the pipeline's GPU path
in minutes, `kbench gpucheck`), steps (its acceptance steps: the guards a first GPU run must show
failing and passing), stacks (every GPU lock's image built and exercised on a CPU: `kbench gpu-stacks`). The
lease-time host checks it calls are kbench.gpu.preflight.

May import: every wing below it (ground up to harness)."""
