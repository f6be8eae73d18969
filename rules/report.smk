rule plots:
    """A profile's charts (ms/step per model/task, speedup, first-step time), PNG shown in the report, SVG beside."""
    input:
        results("tables/{suite}/{profile}/cells_summary.csv"),
    output:
        [in_report(results("plots/{suite}/{profile}", name), "Plots", "{profile}") if name.endswith(".png")
         else results("plots/{suite}/{profile}", name) for name in PLOTS],
    log:
        results("logs/plots/{suite}/{profile}.log"),
    params:
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        out_dir=lambda wildcards: results("plots", wildcards.suite, wildcards.profile),
    localrule: True
    shell:
        "python -m kbench.results.plots --frameworks={params.frameworks} --keras3={params.keras3} "
        "--out {params.out_dir} {input} > {log} 2>&1"


rule run_facts:
    """What the report must name: the suite, the images (or venvs) the cells ran in, and the host."""
    input:
        cells=lambda wildcards: cell_jsons(every_cell(wildcards.suite), wildcards.suite),
        environments=lambda wildcards: stack_records(wildcards.suite),
    output:
        in_report(results("tables/{suite}/run_facts.html"), "Run"),
    log:
        results("logs/run_facts/{suite}.log"),
    localrule: True
    shell:
        "python -m kbench.results.facts --suite {wildcards.suite} --out {output} "
        "--environments {input.environments} --cells {input.cells} > {log} 2>&1"


rule archive:
    """One finished run -> results/archive/<run_id>.tar.gz with a SHA-256 manifest (see kbench.lifecycle.archive).
    The report is an input: make it first with `snakemake --report results/report/<suite>.html`."""
    input:
        cells=cell_jsons(every_cell(config["suite"]), config["suite"])
        + [path for profile in config["profiles"] for path in warm_jsons(config["suite"], profile)]
        + [path for profile in config["profiles"] for path in equivalence_jsons(config["suite"], profile)],
        tables=table_files(config["suite"]) + batch_study_files(config["suite"]) + tuning_files(config["suite"]),
        plots=plot_files(config["suite"]),
        report=results("report", f"{config['suite']}.html"),
        environments=stack_records(config["suite"]),
        images=image_archives(config["suite"]) if config["archive_images"] else [],
    output:
        results("archive/{run_id}.tar.gz"),
    log:
        results("logs/archive/{run_id}.log"),
    params:
        suite=config["suite"],
        results_dir=lambda wildcards: RESULTS,      # the root that names files inside the archive
        config_json=json.dumps(config),
    localrule: True
    shell:
        "python -m kbench.lifecycle.archive pack --run-id {wildcards.run_id} --suite {params.suite} "
        "--results {params.results_dir} --config-json {params.config_json:q} --report {input.report} --out {output} "
        "--cells {input.cells} --environments {input.environments} --images {input.images} > {log} 2>&1"
