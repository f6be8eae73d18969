rule cell:
    """One repeat of any cell: one fresh process in its stack's environment, one result JSON (ok, failed or
    unsupported). Repeats share the cell's spec (and so its params): a changed lock reruns all of them."""
    input:
        environment=environment_record,
        image_archive=image_archive,
        harness=harness_sources,
        previous_rung=previous_rung_json,
        cache_sources=cache_source_jsons,
    output:
        results("cells/{suite}/{profile}/{model}/{task}/bs{batch}/{precision}/{framework}.r{repeat}.json"),
    log:
        results("logs/cells/{suite}/{profile}/{model}/{task}/bs{batch}/{precision}/{framework}.r{repeat}.log"),
    params:
        spec=cell_spec,
        not_applicable=lambda wildcards: cell_of(wildcards).not_applicable,
        runtime=RUNTIME,
        lock_sha256=stack_lock_digest,
        # the persistent compile cache (kbench.instruments.compile_cache): None, none; [], an empty one; the cold runs it copies
        cache_from=lambda wildcards, input: None if cache_sources(wildcards) is None else list(input.cache_sources),
    # Operational, not part of what a cell measures: resources, so changing them never reruns a finished cell. The
    # cell is killed after cell_timeout_s; runtime (the job's wall time on a cluster) leaves room to record that.
    resources:
        cell_timeout_s=round(config["cell_timeout_minutes"] * 60),     # resources are integers
        runtime=math.ceil(config["cell_timeout_minutes"]) + 10,
    # CPU cells: all cores to one cell, so cells never share the CPU. GPU cells on a host with N GPUs: the cores in
    # N shares, so N cells run side by side, each on a GPU of its own (kbench.run.launch.gpu_lease). A lambda, since a
    # cluster run has no --cores at parse time: its profile sets the cell job's CPUs (set-threads).
    threads: cell_threads
    script:
        "../scripts/run_cell.py"


rule warm_cell:
    """A compiled cell's warm twin (config first_step.warm_runs): its repeat once more in a fresh process, its
    framework's persistent compile cache a copy of the one that repeat filled (kbench.instruments.compile_cache). Its record says
    warm; the tables show it beside the cold run in first_step, never in ms/step."""
    input:
        environment=environment_record,
        image_archive=image_archive,
        harness=harness_sources,
        cold=results("cells/{suite}/{profile}/{model}/{task}/bs{batch}/{precision}/{framework}.r{repeat}.json"),
    output:
        results("cells/{suite}/{profile}/{model}/{task}/bs{batch}/{precision}/{framework}.r{repeat}.warm.json"),
    log:
        results("logs/cells/{suite}/{profile}/{model}/{task}/bs{batch}/{precision}/{framework}.r{repeat}.warm.log"),
    params:
        # its steps as the cell's, without the breakdown's profiled steps (the cold run has them)
        spec=lambda wildcards: cell_spec(wildcards).replace(steps=dataclasses.replace(cell_spec(wildcards).steps,
                                                                                      breakdown=0)),
        not_applicable=None,
        runtime=RUNTIME,
        lock_sha256=stack_lock_digest,
        cache_from=lambda wildcards, input: [input.cold],
    resources:
        cell_timeout_s=round(config["cell_timeout_minutes"] * 60),
        runtime=math.ceil(config["cell_timeout_minutes"]) + 10,
    threads: cell_threads
    script:
        "../scripts/run_cell.py"
