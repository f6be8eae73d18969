# The equivalence check (kbench.equivalence.check): the reference column makes the reference (unit-scale weights, its
# outputs and losses), then every column of the model loads it and compares. One job per model and column, each
# its own process in its column's environment, rerun when the model's code (its adapter and what it imports), the
# weight mappings or the column's lock change.
REFERENCE = config["equivalence"]["reference"]


rule equivalence_reference:
    """The reference column's job: unit-scale weights from the cell's seed, its outputs and losses (the .npz)."""
    input:
        environment=lambda wildcards: equivalence_environment(REFERENCE),
        harness=lambda wildcards: equivalence_sources(REFERENCE),
        caches=lambda wildcards: equivalence_cache_jsons(wildcards, REFERENCE),
    output:
        json=results("equivalence/{suite}/{profile}/{model}/reference.json"),
        npz=results("equivalence/{suite}/{profile}/{model}/reference.npz"),
    log:
        results("logs/equivalence/{suite}/{profile}/{model}/reference.log"),
    params:
        job=lambda wildcards: matrix.equivalence_job(config, wildcards.suite, wildcards.profile, wildcards.model,
                                                     REFERENCE, reference=True),
        runtime=RUNTIME,
        lock_sha256=lambda wildcards: envs.sha256_file(lock_path(matrix.stack_of(config, REFERENCE),
                                                                 config["accelerator"])),
    resources:
        cell_timeout_s=round(config["cell_timeout_minutes"] * 60),
        runtime=math.ceil(config["cell_timeout_minutes"]) + 10,
    threads: untimed_threads
    script:
        "../scripts/run_equivalence.py"


rule equivalence:
    """One column's job: the reference's weights loaded, the same outputs and steps, compared."""
    input:
        reference=results("equivalence/{suite}/{profile}/{model}/reference.npz"),
        environment=lambda wildcards: equivalence_environment(wildcards.framework),
        harness=lambda wildcards: equivalence_sources(wildcards.framework),
        caches=equivalence_cache_jsons,
    output:
        json=results("equivalence/{suite}/{profile}/{model}/{framework}.json"),
    log:
        results("logs/equivalence/{suite}/{profile}/{model}/{framework}.log"),
    params:
        job=lambda wildcards: matrix.equivalence_job(config, wildcards.suite, wildcards.profile, wildcards.model,
                                                     wildcards.framework),
        runtime=RUNTIME,
        lock_sha256=lambda wildcards: envs.sha256_file(lock_path(matrix.stack_of(config, wildcards.framework),
                                                                 config["accelerator"])),
    resources:
        cell_timeout_s=round(config["cell_timeout_minutes"] * 60),
        runtime=math.ceil(config["cell_timeout_minutes"]) + 10,
    threads: untimed_threads
    script:
        "../scripts/run_equivalence.py"
