rule plots:
    """The suite's charts (ms/step per model/task, speedup, first-step time), PNG shown in the report, SVG beside."""
    input:
        RESULTS + "/tables/{suite}/cells_long.csv",
    output:
        [in_report(f"{RESULTS}/plots/{{suite}}/{name}", "Plots") if name.endswith(".png")
         else f"{RESULTS}/plots/{{suite}}/{name}" for name in PLOTS],
    log:
        RESULTS + "/logs/plots/{suite}.log",
    params:
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        out_dir=lambda wildcards: f"{RESULTS}/plots/{wildcards.suite}",
    localrule: True
    shell:
        "{PYTHON} -m kbench.plots --frameworks={params.frameworks} --keras3={params.keras3} "
        "--out {params.out_dir} {input} > {log} 2>&1"


rule run_facts:
    """What the report must name: the suite, the images (or venvs) the cells ran in, and the host."""
    input:
        cells=lambda wildcards: [cell_json(c) for c in matrix.cells(config, wildcards.suite)],
        environments=lambda wildcards: stack_records(wildcards.suite),
    output:
        in_report(RESULTS + "/tables/{suite}/run_facts.html", "Run"),
    log:
        RESULTS + "/logs/run_facts/{suite}.log",
    localrule: True
    shell:
        "{PYTHON} -m kbench.archive facts --suite {wildcards.suite} --out {output} "
        "--environments {input.environments} --cells {input.cells} > {log} 2>&1"


rule archive:
    """One finished run -> results/archive/<run_id>.tar.gz with a SHA-256 manifest (see kbench.archive).
    The report is an input: make it first with `snakemake --report results/report/<suite>.html`."""
    input:
        tables=table_files(config["suite"]),
        plots=plot_files(config["suite"]),
        facts=RESULTS + f"/tables/{config['suite']}/run_facts.html",
        report=RESULTS + f"/report/{config['suite']}.html",
        environments=stack_records(config["suite"]),
        images=image_archives(config["suite"]) if config["archive_images"] else [],
    output:
        RESULTS + "/archive/{run_id}.tar.gz",
    log:
        RESULTS + "/logs/archive/{run_id}.log",
    params:
        suite=config["suite"],
        config_json=json.dumps(config),
    localrule: True
    shell:
        "{PYTHON} -m kbench.archive pack --run-id {wildcards.run_id} --suite {params.suite} --results {RESULTS} "
        "--config-json {params.config_json:q} --report {input.report} --out {output} "
        "--environments {input.environments} --images {input.images} > {log} 2>&1"
