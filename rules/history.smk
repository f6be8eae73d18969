# Every finished run joins the history (kbench.lifecycle.history: results/history/history.duckdb, Parquet beside it); its
# changes against the previous comparable run and the trends of the cells that moved; the report's first page.
HISTORY = results("history")
# Where and how cells run, never what they measured: a change to one rewrites no page (the cells rerun for none)
OPERATIONAL_SETTINGS = ("runtime", "preinstalled_python", "results_dir", "archive_images", "ship_images",
                        "disk_check", "cell_timeout_minutes", "containers")


rule history:
    """This results directory's cells, as one run, into the history (nothing when that run is there already)."""
    input:
        cells=lambda wildcards: cell_jsons(every_cell(wildcards.suite), wildcards.suite),
    output:
        results("history/receipts/{suite}.json"),
    log:
        results("logs/history/{suite}.log"),
    params:
        store=lambda wildcards: HISTORY,        # (lambdas: the store and results folder are prefixes of outputs)
        results_dir=lambda wildcards: RESULTS,
    localrule: True
    shell:
        "python -m kbench.lifecycle.history --store {params.store} ingest {params.results_dir} --suite {wildcards.suite} "
        "--receipt {output} > {log} 2>&1"


rule changes:
    """Between consecutive comparable runs in the history: the cells that moved, with the packages that changed;
    the trends of those cells."""
    input:
        results("history/receipts/{suite}.json"),
    output:
        [in_report(results("history/{suite}/{profile}", name), "History", "{profile}")
         if name.endswith((".html", ".png")) else results("history/{suite}/{profile}", name)
         for name in ("changes.csv", "changes.md", "changes.html", "trends.png")],
    log:
        results("logs/history/{suite}.{profile}.log"),
    params:
        store=lambda wildcards: HISTORY,
        out_dir=lambda wildcards: results("history", wildcards.suite, wildcards.profile),
    localrule: True
    shell:
        "python -m kbench.lifecycle.history --store {params.store} changes --suite {wildcards.suite} "
        "--profile {wildcards.profile} --out {params.out_dir} --plots {params.out_dir} > {log} 2>&1"


rule first_page:
    """The report's first page (report/workflow.rst includes it): each row's fastest column, what changed since the
    previous run, the published findings re-tested, the published A100 table and what it implies."""
    input:
        tables=lambda wildcards: table_files(wildcards.suite),
        changes=lambda wildcards: [results("history", wildcards.suite, profile, "changes.csv")
                                   for profile in config["profiles"]],
    output:
        html=results("report/{suite}/first_page.html"),
        md=results("report/{suite}/first_page.md"),
    log:
        results("logs/first_page/{suite}.log"),
    params:
        store=HISTORY,
        tables=lambda wildcards: results("tables", wildcards.suite),
        config_json=json.dumps({k: v for k, v in config.items() if k not in OPERATIONAL_SETTINGS}),
    localrule: True
    shell:
        "python -m kbench.report.first_page --suite {wildcards.suite} --tables {params.tables} --history {params.store} "
        "--config-json {params.config_json:q} --out {output.html} > {log} 2>&1"
