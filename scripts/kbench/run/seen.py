"""What a process the launcher started sees of its host, and nothing else: the CPUs it may run on, the GPU it was
handed (NVML's view of its CUDA_VISIBLE_DEVICES, or of the one device a container got) and, where torch is installed,
the UUID torch's own device properties give. The GPU check (kbench.gpucheck.steps) starts it as a cell is
started (`python -m kbench.run.seen --out R < payload`, kbench.run.launch.run_cell: lease, CPU share, pinning, the
runtime's command line) and compares what it saw with what the launcher recorded it gave."""
from __future__ import annotations

import os
import sys

from kbench.contract import cell
from kbench.gpu import nvml


def torch_uuid() -> str | None:
    """The visible device's UUID as torch's device properties give it (None: no torch, no GPU, or too old a torch)."""
    try:
        import torch
        return str(torch.cuda.get_device_properties(0).uuid) if torch.cuda.is_available() else None
    except Exception:       # no torch, or a torch without .uuid: NVML's view is the record then
        return None


def run(job: dict, context: dict) -> cell.CellResult:
    result = cell.new_result(job, context, "ok")
    result.evidence = {"cpus": sorted(os.sched_getaffinity(0)), "nvml": nvml.facts(), "torch_uuid": torch_uuid(),
                       "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    return result


def main(argv=None) -> int:
    from kbench.run import runner
    return runner.job_main(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
