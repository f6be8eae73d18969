"""The equivalence check: does every column of a row compute the same function? Parameter counts cannot say (GELU
exact or tanh, a norm's epsilon, an input normalisation, a scheduler's first timestep: all keep the counts).

One job per model and column, in the column's own environment (`python -m kbench.equivalence.check --out R < payload`,
started by kbench.run.launch like a cell), for every task and precision of the model in the suite, on the device its
spec claims (a GPU job whose framework runs on the CPU fails before it compares, as a cell does:
kbench.run.runner.check_device's NoAccelerator):
- the reference column (config equivalence.reference, Keras 3 on JAX) makes the reference: unit-scale weights from
  the cell's seed (kbench.models.weights.unit_scale), its outputs on the cell's inputs in inference mode, and for a fit
  the losses of `fit_steps` optimizer steps from them, all in float32, into <reference>.npz;
- every column loads those weights (the same Keras weights on the other Keras 3 backends and Keras 2; the native
  column through kbench.models.weights' mapping), runs the same forward and steps, and compares: per output the largest
  absolute difference and the relative (Frobenius) error against the reference, for generate the first greedy
  token that differs; its other precisions are compared with its own float32 (their accuracy cost);
- where two libraries differ by design (config equivalence.differences), the native column also runs an aligned
  variant that removes the difference, so the table tells a wrong mapping from a named difference.

Tolerance (float32): a product of contraction length K rounds with a relative error of about u * sqrt(K) (u =
2^-24, errors of random sign), and D products in sequence add in quadrature: 2 * u * sqrt(K * D), from the model's
widths (contraction_and_depth). At the tiny sizes that is 5e-6 to 6e-5; matched pairs measure 1e-7 to 4e-6, the
smallest known difference (a group norm's epsilon, 1e-6 against 1e-5) 2.8e-5.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback

import numpy as np

from kbench.contract.spec import CellSpec
from kbench.contract import cell
from kbench.models import family, weights
from kbench.stacks import lockcheck

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
FILES_ENV = "KBENCH_FILES"


# ---------------------------------------------------------------- tolerance

def contraction_and_depth(spec) -> tuple[int, int]:
    """(K, D): the longest contraction of the products of the model the task runs and how many run in sequence,
    from the model's family (its `contraction_and_depth` fact)."""
    return family.of(spec.model).contraction_and_depth(spec)


def tolerance(spec: CellSpec, dtype: str = "float32") -> float:
    k, d = contraction_and_depth(spec)
    return 2 * UNIT_ROUNDOFF[dtype] * math.sqrt(k * d)


# ---------------------------------------------------------------- comparing

def compare(outputs: dict, reference: dict) -> dict:
    """Per output: the largest absolute difference, the relative Frobenius error and the reference's scale;
    tokens: the first position where any sequence differs (None: none)."""
    found = {}
    for name, ref in reference.items():
        value = np.asarray(outputs[name], np.float64)
        ref = np.asarray(ref, np.float64)
        if value.shape != ref.shape:
            found[name] = {"error": f"shape {value.shape}, the reference's {ref.shape}"}
            continue
        if name == "tokens":
            differs = np.nonzero((value != ref).any(axis=0))[0]
            found[name] = {"first_divergence": None if differs.size == 0 else int(differs[0]),
                           "length": int(ref.shape[1])}
            continue
        norm = float(np.linalg.norm(ref))
        found[name] = {"max_abs": float(np.abs(value - ref).max()), "scale": float(np.abs(ref).max()),
                       "rel": float(np.linalg.norm(value - ref) / norm) if norm else float(np.abs(value).max())}
    return found


def worst(found: dict) -> float | None:
    rel = [v["rel"] for v in found.values() if "rel" in v]
    return max(rel) if rel else None


# ---------------------------------------------------------------- the job process

def _key(*parts) -> str:
    return "|".join(str(p) for p in parts)


def _files() -> dict:
    return json.loads(os.environ.get(FILES_ENV, "{}"))


def run(job: dict, context: dict) -> tuple[cell.CellResult, dict[str, np.ndarray]]:
    """The job: every cell spec of the model in this column; returns its record and, for the reference column,
    the arrays of the reference (weights, outputs, losses)."""
    from kbench import adapters
    from kbench.run import runner
    arrays, own, report = {}, {}, {"reference": job["reference"] is None, "results": []}

    def check(provenance):
        adapter = adapters.load(job["framework_def"]["adapter"])
        backend = adapter.backend()
        provenance.update(backend=backend.name, device=backend.device()["name"], device_facts=backend.device(),
                          packages=backend.package_versions())
        runner.check_device(job, backend)     # a GPU job whose framework runs on the CPU compares nothing: failed
        reference = None if job["reference"] is None else dict(np.load(_files()["reference"]))
        for spec in map(CellSpec.of, job["cells"]):   # float32 first: every other precision is compared with it
            try:
                report["results"].append(_one(adapters, adapter, backend, job, spec, reference, arrays, own))
            except Exception as exc:    # one task or precision the column cannot check: said, the others go on
                kind = "unsupported" if isinstance(exc, adapters.NotSupported) else "failed"
                report["results"].append({"task": spec.task, "precision": spec.precision,
                                          "error": f"{kind}: {type(exc).__name__}: {str(exc)[:500]}",
                                          "detail": traceback.format_exc()[-3000:]})
    result = runner.job_run(job, context, check)
    result.equivalence = report
    return result, arrays


def _check_ran_in(workload, spec: CellSpec) -> None:
    """A precision's cost is only its cost where the steps ran in it: a column whose autocast does nothing (Paddle's
    on a CPU) would show an error of zero. The cell's own guard (kbench.run.runner.check_dtypes), on what the workload
    observed in its steps (a predict task runs one step to observe them)."""
    from kbench.run import runner
    if spec.task != "fit":
        workload.step()
    observed = {kind: name for kind, name in workload.dtypes().items() if name is not None}
    expected = {kind: getattr(spec.dtypes, kind) for kind in observed if kind in ("weights", "compute")}
    if {k: observed[k] for k in expected} != expected:
        runner.check_dtypes(spec, workload.dtypes())


def _one(adapters, adapter, backend, job: dict, spec: CellSpec, reference: dict | None, arrays: dict,
         own: dict) -> dict:
    """One task and precision in this column: as built, and aligned where the column differs by design."""
    task, precision, model = spec.task, spec.precision, spec.model
    backend.set_tf32(spec.settings["tf32"], spec.dtypes.compute, spec.task)
    entry = {"task": task, "precision": precision, "tolerance": tolerance(spec), "variants": {}}
    aligned = _aligned(job, spec) and precision == "float32"     # the mapping's proof: float32 only
    for variant in ["as built"] + (["aligned"] if aligned else []):
        spec_v = spec.replace(equivalence={"aligned": variant == "aligned"})
        workload = adapters.build(adapter, spec_v)
        if workload.outputs is None:
            raise adapters.NotSupported(f"{job['framework']} has no outputs for {model} {task}")
        found = {}
        if reference is None and precision == "float32":    # the reference column makes the weights
            weights.unit_scale(workload.model, np.random.default_rng([spec.seed, _crc(model, task)]))
            for i, (path, value) in enumerate(weights.keras_arrays(workload.model)):
                arrays[_key("w", task, f"{i:05d}", path)] = value
        elif reference is None:
            weights.assign_in_order(workload.model, _task_weights(arrays, task))
        else:
            found["loaded"] = adapter.load_reference(workload, _task_weights(reference, task), spec_v) or {}
        outputs = workload.outputs()
        losses = [float(workload.step()) for _ in range(job["fit_steps"])] if task == "fit" else []
        if precision != "float32":
            _check_ran_in(workload, spec)
        found.update(outputs=_summary(outputs), losses=losses)
        if precision == "float32" and variant == "as built":    # what this column's other precisions cost
            own[task] = (outputs, np.asarray(losses))
            if reference is None:
                arrays.update({_key("o", task, name): value for name, value in outputs.items()})
                arrays[_key("l", task)] = np.asarray(losses, np.float64)
        against = (("reference float32", _reference_outputs(reference, task)) if precision == "float32"
                   else ("own float32", own.get(task)))
        if against[1] is not None and not (reference is None and precision == "float32"):
            found["against"] = against[0]
            found["compared"] = compare(outputs, against[1][0])
            found["rel"] = worst(found["compared"])
            if losses and against[1][1].size:
                found["loss_rel"] = [abs(a - b) / abs(b) if b else abs(a) for a, b in zip(losses, against[1][1])]
        entry["variants"][variant] = found
    return entry


def _reference_outputs(reference: dict | None, task: str):
    if reference is None:
        return None
    prefix = _key("o", task) + "|"
    return ({k.removeprefix(prefix): v for k, v in reference.items() if k.startswith(prefix)},
            np.asarray(reference.get(_key("l", task), np.zeros(0))))


def _aligned(job: dict, spec: CellSpec) -> bool:
    """Whether this column runs the aligned variant of a difference by design (config equivalence.differences)."""
    from kbench.plan.matrix import matches
    return any(d.get("aligned") and matches(d.get("model"), spec.model) and matches(d.get("task"), spec.task)
               and matches(d.get("framework"), job["framework"]) for d in job["differences"])


def _task_weights(source: dict, task: str) -> list[tuple[str, np.ndarray]]:
    prefix = _key("w", task) + "|"
    return [(k.split("|", 3)[3], source[k]) for k in sorted(k for k in source if k.startswith(prefix))]


def _summary(outputs: dict) -> dict:
    return {name: {"shape": list(np.shape(v)), "scale": float(np.abs(v).max()) if np.size(v) else 0.0}
            for name, v in outputs.items()}


def _crc(*parts) -> int:
    import zlib
    return zlib.crc32("/".join(parts).encode())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="result JSON path (the reference's arrays: beside it, .npz)")
    args = parser.parse_args(argv)
    payload = json.load(sys.stdin)
    os.environ[FILES_ENV] = json.dumps(payload.get("files", {}))
    result, arrays = run(payload["spec"], payload["context"])
    if payload["spec"]["reference"] is None and result.status == "ok":
        np.savez(os.path.splitext(args.out)[0] + ".npz", **arrays)
    result.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
