rule archive:
    """One finished run -> results/archive/<run_id>.tar.gz with a SHA-256 manifest (see kbench.lifecycle.archive).
    The report is an input: make it first with `snakemake --report results/report/<suite>.html`."""
    input:
        cells=cell_jsons(every_cell(config["suite"]), config["suite"])
        + [path for profile in config["profiles"] for path in warm_jsons(config["suite"], profile)]
        + [path for profile in config["profiles"] for path in equivalence_jsons(config["suite"], profile)],
        tables=table_files(config["suite"], archived=True),
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
