# JAX against NumPy (kbench.studies.jax_numpy): one job per suite in the environment of config jax_numpy.framework (the
# keras3-jax column's: its lock's NumPy and JAX), run by the launcher like a cell; rerun when its code or that lock
# changes. Its table and the claim's verdict per workload go under tables/<suite>/.


rule jax_numpy:
    """The job: every workload and size of the suite, as NumPy and as jax.numpy under jax.jit."""
    input:
        environment=stack_record(matrix.stack_of(config, config["jax_numpy"]["framework"])),
        harness=sources.entry_sources("kbench.studies.jax_numpy"),
    output:
        json=results("jax_numpy/{suite}/result.json"),
    log:
        results("logs/jax_numpy/{suite}.log"),
    params:
        job=lambda wildcards: jax_numpy.job(config, wildcards.suite),
        runtime=RUNTIME,
        lock_sha256=envs.sha256_file(lock_path(matrix.stack_of(config, config["jax_numpy"]["framework"]),
                                               config["accelerator"])),
    resources:
        cell_timeout_s=round(config["cell_timeout_minutes"] * 60),
        runtime=math.ceil(config["cell_timeout_minutes"]) + 10,
    # The host's cores, not a GPU's share (rule cell's cell_threads): the NumPy half runs on the CPU, and its verdict
    # must not depend on how many GPUs the host has. Snakemake runs nothing beside it; the launcher leases it one GPU
    # alone and every CPU (launch.Options.host_cpus), and its record says which (provenance.launcher.cpus_allocated).
    threads: lambda wildcards: workflow.cores
    script:
        "../scripts/run_jax_numpy.py"
