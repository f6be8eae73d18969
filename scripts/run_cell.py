"""Snakemake script of rule `cell`: run one repeat of one cell through the launcher, or record why it is not
applicable."""
from kbench import cell, launch

params = snakemake.params  # noqa: F821 (injected by Snakemake)
config_limits = snakemake.config["containers"].get("limits") or {}  # noqa: F821
repeat = int(snakemake.wildcards.repeat)  # noqa: F821
if params.not_applicable:
    cell.new_result(params.spec, {"runtime": None}, "unsupported",
                    cell.error_info("NotApplicable", params.not_applicable), repeat).write(snakemake.output[0])  # noqa: F821
    open(snakemake.log[0], "w").write(f"n/a: {params.not_applicable}\n")  # noqa: F821
else:
    launch.run_cell(params.spec, params.runtime, snakemake.input.environment, snakemake.output[0],  # noqa: F821
                    snakemake.log[0], timeout_s=snakemake.resources.cell_timeout_s, repeat=repeat,  # noqa: F821
                    memory_mb=config_limits.get("memory_mb"), cpus=config_limits.get("cpus"))
