"""Parameter counts of models as the cells build them, without running a step: the parity check at sizes a CPU
cannot run (paper Gemma is 8.5 B parameters).

`python -m kbench.studies.census --out COUNTS.json < specs.json` runs in one stack's environment (started by kbench.run.launch like
a cell; specs as kbench.plan.matrix.spec makes them, all of one framework) and writes {"counts": [{"cell_id", "total",
"trainable"} or {"cell_id", "error"}, ...]}. kbench.studies.census_tables (`kbench census`) drives it for every framework.
Torch-based columns build on PyTorch's meta device (shapes only, no memory); the others build for real.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from kbench.contract.spec import CellSpec
from kbench import files


def shapes_only(adapter_name: str, env: dict):
    """A context in which the adapter allocates no parameter memory, where its framework has one."""
    if adapter_name == "native_torch":
        import torch
        return torch.device("meta")
    if env.get("KERAS_BACKEND") == "torch":
        import keras
        return keras.device("meta")
    return contextlib.nullcontext()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    out = parser.parse_args(argv).out
    specs = [CellSpec.from_dict(s) for s in json.load(sys.stdin)]
    framework_def, env = specs[0].framework_def, specs[0].env
    os.environ.update(env)     # before the framework is imported
    from kbench import adapters
    adapter = adapters.load(framework_def["adapter"])
    counts = []
    for spec in specs:
        try:
            with shapes_only(framework_def["adapter"], env):
                workload = adapters.build(adapter, spec)
            line = {"cell_id": spec.cell_id, "total": workload.params_total, "trainable": workload.params_trainable}
        except Exception as exc:  # one model that does not build must not hide the others' counts
            line = {"cell_id": spec.cell_id, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(line), flush=True)
        counts.append(line)
    files.write_json(out, {"counts": counts})
    return 0


if __name__ == "__main__":
    sys.exit(main())
