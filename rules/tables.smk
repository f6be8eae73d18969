rule tables:
    """One profile's cells of a suite -> the anchor-shaped ms/step and speedup tables, parameter counts, the precision
    study's tables and the long table."""
    input:
        cells=profile_cells,
        equivalence=profile_equivalence,
    output:
        [in_report(results("tables/{suite}/{profile}", name), "Tables", "{profile}") if name.endswith(".html")
         else results("tables/{suite}/{profile}", name) for name in tables.OUTPUTS],
    log:
        results("logs/tables/{suite}/{profile}.log"),
    params:
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        baseline=config["precision_study"]["baseline"],
        claims=json.dumps(config["precision_study"]["claims"]),
        unreproduced=lambda wildcards: json.dumps(departures.unreproduced(config, wildcards.profile)),
        differences=json.dumps(config["equivalence"]["differences"]),
        departures=json.dumps(config["departures"]),
        out_dir=lambda wildcards: results("tables", wildcards.suite, wildcards.profile),
    localrule: True
    shell:
        "python -m kbench.results.tables --profile {wildcards.profile} --frameworks={params.frameworks} "
        "--keras3={params.keras3} --baseline={params.baseline} --claims={params.claims:q} "
        "--unreproduced={params.unreproduced:q} --differences={params.differences:q} "
        "--departures={params.departures:q} "
        "--equivalence {input.equivalence} --out {params.out_dir} {input.cells} > {log} 2>&1"


rule departures:
    """Every way this project's cells differ from the published benchmark's code, as the config lists them, for the
    report (and which profile keeps the anchor's behaviour)."""
    output:
        [in_report(results("tables/{suite}", name), "Departures") if name.endswith(".html")
         else results("tables/{suite}", name) for name in departures.OUTPUTS],
    log:
        results("logs/departures/{suite}.log"),
    params:
        departures=json.dumps(config["departures"]),
        tuning=json.dumps(config.get("tuning") or []),
        profiles=json.dumps(config["profile_defs"]),
        out_dir=lambda wildcards: results("tables", wildcards.suite),
    localrule: True
    shell:
        "python -m kbench.plan.departures --departures={params.departures:q} --tuning={params.tuning:q} "
        "--profiles={params.profiles:q} "
        "--out {params.out_dir} > {log} 2>&1"


rule tuning_gain:
    """strict and tuned side by side -> tuning_gain (per cell), tuning_columns (per column), tuning_verdicts (the
    out-of-the-box finding per row) and the gain plot."""
    input:
        lambda wildcards: [results("tables", wildcards.suite, p, name) for p in ("strict", tuned_profile())
                           for name in ("cells_summary.csv", "ms_per_step.csv")],
    output:
        [in_report(results("tables/{suite}", name), "Tuning") if name.endswith(".html")
         else results("tables/{suite}", name) for name in tuning.OUTPUTS]
        + [in_report(results("plots/{suite}", name), "Tuning") if name.endswith(".png")
           else results("plots/{suite}", name) for name in tuning.PLOTS],
    log:
        results("logs/tuning_gain/{suite}.log"),
    params:
        strict=lambda wildcards: results("tables", wildcards.suite, "strict"),
        tuned=lambda wildcards: results("tables", wildcards.suite, tuned_profile()),
        frameworks=",".join(config["frameworks"]),
        keras3=",".join(matrix.keras3_frameworks(config)),
        native=",".join(matrix.native_torch_frameworks(config)),
        out=lambda wildcards: results("tables", wildcards.suite),
        plots=lambda wildcards: results("plots", wildcards.suite),
        accelerator=config["accelerator"],
        applied=shlex.quote(json.dumps(matrix.tuning_ids(config))),
    localrule: True
    shell:
        "python -m kbench.results.tuning --strict {params.strict} --tuned {params.tuned} "
        "--frameworks={params.frameworks} --keras3={params.keras3} --native={params.native} "
        "--accelerator {params.accelerator} --out {params.out} --plots {params.plots} "
        "--applied {params.applied} > {log} 2>&1"


rule time_by_kind:
    """One profile's cells' breakdowns by kind of work (kbench.breakdown, recorded after each timed window) side by
    side, the batch study's ladder included (the Python-overhead verdict reads it): time_by_kind (row x column x
    kind), its long form, each cell's top ops, the stacked bars per row."""
    input:
        profile_cells,
        profile_batch_cells,
    output:
        [in_report(results("tables/{suite}/{profile}", name), "Time by kind", "{profile}") if name.endswith(".html")
         else results("tables/{suite}/{profile}", name) for name in breakdown_tables.OUTPUTS]
        + [in_report(results("plots/{suite}/{profile}", name), "Time by kind", "{profile}") if name.endswith(".png")
           else results("plots/{suite}/{profile}", name) for name in breakdown_tables.PLOTS],
    log:
        results("logs/time_by_kind/{suite}/{profile}.log"),
    params:
        frameworks=",".join(config["frameworks"]),
        out_dir=lambda wildcards: results("tables", wildcards.suite, wildcards.profile),
        plots=lambda wildcards: results("plots", wildcards.suite, wildcards.profile),
    localrule: True
    shell:
        "python -m kbench.results.breakdown_tables --profile {wildcards.profile} --frameworks={params.frameworks} "
        "--out {params.out_dir} --plots {params.plots} {input} > {log} 2>&1"


rule first_step:
    """One profile's time to the first step (kbench.results.first_step_tables): each cell's first repeat (cold) and
    its warm twin side by side, in their parts, with the steady step and the compile's payback; the dots per row."""
    input:
        cells=profile_cells,
        warm=lambda wildcards: warm_jsons(wildcards.suite, wildcards.profile),
    output:
        [in_report(results("tables/{suite}/{profile}", name), "First step", "{profile}") if name.endswith(".html")
         else results("tables/{suite}/{profile}", name) for name in first_step_tables.OUTPUTS]
        + [in_report(results("plots/{suite}/{profile}", name), "First step", "{profile}") if name.endswith(".png")
           else results("plots/{suite}/{profile}", name) for name in first_step_tables.PLOTS],
    log:
        results("logs/first_step/{suite}/{profile}.log"),
    params:
        frameworks=",".join(config["frameworks"]),
        out_dir=lambda wildcards: results("tables", wildcards.suite, wildcards.profile),
        plots=lambda wildcards: results("plots", wildcards.suite, wildcards.profile),
        band=config["first_step"]["steady_band"],
        differs_by=config["first_step"]["warm_differs_by"],
        eager_twin=shlex.quote(json.dumps(config["first_step"]["eager_twin"])),
        warm=lambda wildcards, input: " ".join(f"--warm {shlex.quote(path)}" for path in input.warm),
    localrule: True
    shell:
        "python -m kbench.results.first_step_tables --profile {wildcards.profile} --frameworks={params.frameworks} "
        "--out {params.out_dir} --plots {params.plots} --steady-band {params.band} --eager-twin {params.eager_twin} "
        "--warm-differs-by {params.differs_by} "
        "{params.warm} {input.cells} > {log} 2>&1"
