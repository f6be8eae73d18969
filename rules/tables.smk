rule tables:
    """Every cell of a suite -> the anchor-shaped ms/step and speedup tables, parameter counts, the precision study's
    tables and the long table."""
    input:
        cells=lambda wildcards: [cell_json(c) for c in matrix.cells(config, wildcards.suite)],
    output:
        [in_report(f"{RESULTS}/tables/{{suite}}/{name}", "Tables") if name.endswith(".html")
         else f"{RESULTS}/tables/{{suite}}/{name}" for name in TABLES],
    log:
        RESULTS + "/logs/tables/{suite}.log",
    params:
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        baseline=config["precision_study"]["baseline"],
        claims=json.dumps(config["precision_study"]["claims"]),
        out_dir=lambda wildcards: f"{RESULTS}/tables/{wildcards.suite}",
    localrule: True
    shell:
        "{PYTHON} -m kbench.tables --frameworks={params.frameworks} --keras3={params.keras3} "
        "--baseline={params.baseline} --claims={params.claims:q} --out {params.out_dir} {input.cells} > {log} 2>&1"
