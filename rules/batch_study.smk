# The batch study (kbench.results.batch): each rung of a suite's ladder is an ordinary cell (rule cell; the row's own
# batch is the benchmark's own cell), and one job per profile fits and tabulates them. Above a row's own batch each
# rung waits for the one below it (matrix.previous_rung), so a column's ladder stops at its first oom.


rule batch_study:
    """One profile's ladder cells -> batch_study (ms/step and examples/s per rung), batch_fit (a and c per column
    with intervals, the knee), batch_verdicts (the claim per row) and the ms/step-against-batch plot."""
    input:
        profile_batch_cells,
    output:
        [in_report(results("tables/{suite}/{profile}", name), "Batch study", "{profile}") if name.endswith(".html")
         else results("tables/{suite}/{profile}", name) for name in batch.OUTPUTS]
        + [in_report(results("plots/{suite}/{profile}", name), "Batch study", "{profile}") if name.endswith(".png")
           else results("plots/{suite}/{profile}", name) for name in batch.PLOTS],
    log:
        results("logs/batch_study/{suite}/{profile}.log"),
    params:
        frameworks=lambda wildcards: ",".join(matrix.ladder_frameworks(config, wildcards.suite)),
        keras3=",".join(matrix.keras3_frameworks(config)),
        native=",".join(matrix.native_torch_frameworks(config)),
        own=lambda wildcards: own_batches_json(wildcards.suite),
        tolerance=config.get("batch_study", {}).get("tolerance", 0.1),
        tables=lambda wildcards: results("tables", wildcards.suite, wildcards.profile),
        plots=lambda wildcards: results("plots", wildcards.suite, wildcards.profile),
        accelerator=config["accelerator"],
    localrule: True
    shell:
        "python -m kbench.results.batch --profile {wildcards.profile} --frameworks={params.frameworks} "
        "--keras3={params.keras3} --native={params.native} --own-batch={params.own:q} "
        "--tolerance {params.tolerance} --accelerator {params.accelerator} --out {params.tables} "
        "--plots {params.plots} {input} > {log} 2>&1"
