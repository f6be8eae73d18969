"""Snakemake script of rules `cell` and `warm_cell`: run one repeat of one cell through the launcher (with the compile
cache its params name: kbench.instruments.compile_cache), or record why it is not applicable (or, in the batch study, why its
rung was not run)."""
import os

from kbench.contract import cell
from kbench.run import launch

sm = snakemake  # noqa: F821 (injected by Snakemake)
params, repeat = sm.params, int(sm.wildcards.repeat)
limits = sm.config["containers"].get("limits") or {}
# In a SLURM job the job's memory (resources mem_mb, sbatch --mem) is the container's limit too: a container's
# processes live outside the job's cgroup, so SLURM alone could not hold them to it.
memory_mb = limits.get("memory_mb") or (sm.resources.get("mem_mb") if os.environ.get("SLURM_JOB_ID") else None)
below = cell.read(sm.input.previous_rung) if sm.input.get("previous_rung") else None
if params.not_applicable:
    cell.new_result(params.spec, {"runtime": None}, "unsupported",
                    cell.error_info("NotApplicable", params.not_applicable), repeat).write(sm.output[0])
    open(sm.log[0], "w").write(f"n/a: {params.not_applicable}\n")
elif launch.ladder_stopped(below):
    stopped = launch.ladder_stopped(below)
    cell.new_result(params.spec, {"runtime": None}, "oom", stopped, repeat).write(sm.output[0])
    open(sm.log[0], "w").write(stopped["message"] + "\n")
else:
    launch.run_cell(params.spec, params.runtime, sm.input.environment, sm.output[0], sm.log[0],
                    launch.Options(timeout_s=sm.resources.cell_timeout_s, repeat=repeat, memory_mb=memory_mb,
                                   cpus=limits.get("cpus"), image_archive=sm.input.get("image_archive") or None,
                                   cache_from=None if params.cache_from is None else tuple(params.cache_from)))
