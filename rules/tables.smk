# Every table and plot of a run: one rule per table module of kbench.results.registry, made by this loop. A table
# declares what it writes, the records it reads and where the report shows it (kbench.results.context.Table); the
# rule hands its process the run's context as JSON and the records in the plan's order.


def table_records(table, wildcards):
    """The table's inputs: its records by kind (the profile's cells, or the suite's for a table of the suite), and
    the other tables' files it reads."""
    suite, profile = wildcards.suite, getattr(wildcards, "profile", None)
    by_kind = {
        "cells": lambda: profile_cells(wildcards) if profile else cell_jsons(every_cell(suite), suite),
        "ladder": lambda: profile_batch_cells(wildcards),
        "warm": lambda: warm_jsons(suite, profile),
        "equivalence": lambda: equivalence_jsons(suite, profile),
        "environments": lambda: stack_records(suite),
        "jax_numpy": lambda: [results("jax_numpy", suite, "result.json")],
    }
    found = {kind: by_kind[kind]() for kind in table.reads}
    run = table_run(wildcards)
    found["tables"] = [str((run.tables_of(p) if p else run.tables_dir) / name) for p, name in table.reads_tables(run)]
    return found


def records_arguments(table, input):
    """--records KIND PATH... for each kind of record the table reads, in the plan's order."""
    return " ".join(f"--records {kind} " + " ".join(map(shlex.quote, input[kind])) for kind in table.reads)


def table_outputs(table):
    folder = "{suite}/{profile}" if table.per_profile else "{suite}"
    sub = "{profile}" if table.per_profile else None
    return ([in_report(results("tables", folder, name), table.category, sub) if name.endswith(".html")
             else results("tables", folder, name) for name in table.outputs]
            + [in_report(results("plots", folder, name), table.category, sub) if name.endswith(".png")
               else results("plots", folder, name) for name in table.plots])


for table in registry.TABLES:

    rule:
        name:
            table.rule
        input:
            unpack(lambda wildcards, table=table: table_records(table, wildcards)),
        output:
            table_outputs(table),
        log:
            results("logs", table.rule, "{suite}/{profile}.log" if table.per_profile else "{suite}.log"),
        params:
            # (the shell command is formatted when the job runs, after the loop: what it needs of the table is here)
            rule=table.rule,
            run=lambda wildcards: table_run(wildcards).to_json(),
            records=lambda wildcards, input, table=table: records_arguments(table, input),
        localrule: True
        shell:
            "python -m kbench.results.registry {params.rule} --run {params.run:q} {params.records} > {log} 2>&1"
