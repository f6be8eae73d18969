rule tables:
    """Every cell of a suite -> the anchor-shaped ms/step and speedup tables, parameter counts, the precision study's
    tables and the long table."""
    input:
        cells=lambda wildcards: [cell_json(c) for c in matrix.cells(config, wildcards.suite)],
    output:
        [in_report(results("tables/{suite}", name), "Tables") if name.endswith(".html")
         else results("tables/{suite}", name) for name in tables.OUTPUTS],
    log:
        results("logs/tables/{suite}.log"),
    params:
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        baseline=config["precision_study"]["baseline"],
        claims=json.dumps(config["precision_study"]["claims"]),
        out_dir=lambda wildcards: results("tables", wildcards.suite),
    localrule: True
    shell:
        "python -m kbench.tables --frameworks={params.frameworks} --keras3={params.keras3} "
        "--baseline={params.baseline} --claims={params.claims:q} --out {params.out_dir} {input.cells} > {log} 2>&1"
