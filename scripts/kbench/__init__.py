"""kbench: the code behind the Keras 3 multi-backend benchmark pipeline, in wings by the stage each serves. Data flows
one way, and a wing imports only the wings below it (kbench.layout checks it: `python -m kbench.layout`):

    ground       files, the reader of kbench's imports, the layout check and a long job's heartbeat (these modules),
                 and three shelves:
      contract/    the cell's contract: its spec, its record (the cell JSON), the precisions
      instruments/ what a cell measures with: the step timer, the float32 probe, the compile cache
      machine/     the host, the runtimes, lock paths, the environment records of images and venvs
    breakdown/   a step's time by kind of work, from the framework's own profiler's trace and its compiler's programs
    models/      each model in every library: constructor arguments, reference weights, weight layouts
    gpu/         NVML facts, CUDA requirements, peak FLOP/s, the host's GPU preflight
    stacks/      locks, venvs and images
    plan/        config -> cells, n/a and why; config checks; departures; the sources a cell runs
    adapters/    one framework family each: build a model, run one step
    run/         the launcher, the cell process, recovery
    equivalence/ same weights, same function
    results/     statistics, FLOPs, tables, plots; the words every verdict takes
    claims/      the published claims: one registry of their kinds, each decided on the run's tables
    lifecycle/   archive, compare, history, bisect
    studies/     beside the matrix: JAX against NumPy, the parameter census
    harness/     the harness's own checks: its overhead, image builds, the breakdown's and a warm cache's effect
    gpucheck/    the GPU check: its cells and acceptance steps, the GPU stacks checked on a CPU
    report/      the report's first page: the run, then its claims
    frontdoor/   the `kbench` command beside Snakemake: its subcommands, and the venv's launcher

A cell process imports ground, models, adapters and run only, and no framework until its adapter builds the model.
"""
