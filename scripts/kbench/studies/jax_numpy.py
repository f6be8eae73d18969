"""JAX against NumPy: the same NumPy-API workloads run as NumPy and as jax.numpy under jax.jit, timed alike and their
results compared, to test the claim that JAX speeds NumPy-style code up "by tens of times".

One job per suite (`python -m kbench.studies.jax_numpy --out R < payload`, started by kbench.run.launch like a cell, in the
keras3-jax column's environment: NumPy and JAX from its lock). Each workload is one NumPy-API program written once
against a module `xp` and run twice: with xp = numpy, and with xp = jax.numpy under jax.jit. Per size (config
jax_numpy.suites.<suite>):
- matmul n: an n x n by n x n product;
- elementwise n: a chain of ufuncs over an array of n elements (XLA can fuse it into one loop);
- reduction n: sum, mean and std over the axes of an n x n array;
- mlp n: a forward pass of a batch of n through dense layers with tanh between them (jax_numpy.mlp_widths).

Timing is kbench.instruments.timing's, for both sides: warm-up steps excluded (jit compilation is the first of them), the window
bracketed by syncs (jax.block_until_ready; NumPy returns when it is done), split into synced blocks that give one
process's within-run interval (kbench.results.stats). The inputs are float32 arrays from the job's seed, placed on JAX's
device before timing: host-device transfers are not timed. float32 means float32: JAX's default matmul precision is
set to "highest" (on an NVIDIA GPU its default would use TF32).

Agreement: the relative (Frobenius) error of JAX's outputs against NumPy's, in float64, worst over the outputs,
against a float32 tolerance ULPS x 2^-24 x sqrt(K x D) (K: the longest sum of products or terms, D: the operations in
sequence); beyond it the size is marked a mismatch, and a time that computes something else is no speedup.
"""
from __future__ import annotations

import math
import os
import sys
import types

import numpy as np

from kbench.contract import cell
from kbench.instruments import timing
from kbench.results import stats

WORKLOADS = ("matmul", "elementwise", "reduction", "mlp")
UNIT_ROUNDOFF = 2.0 ** -24
ULPS = 4          # per operation: either library's transcendental functions are accurate to a few units of roundoff


# ---------------------------------------------------------------- the workloads, written once against xp

def program(workload: str, xp):
    """The workload as a function of its input arrays, in the NumPy API of `xp` (numpy or jax.numpy)."""
    if workload == "matmul":
        return lambda a, b: a @ b
    if workload == "elementwise":
        return lambda x: x * 2 + xp.sin(x) * xp.exp(-x) - xp.tanh(x) ** 2 + xp.sqrt(x)
    if workload == "reduction":
        return lambda x: (x.sum(axis=1), x.mean(axis=0), x.std(axis=1))
    if workload == "mlp":
        def mlp(x, *layers):
            for i in range(0, len(layers), 2):
                x = x @ layers[i] + layers[i + 1]
                if i + 2 < len(layers):
                    x = xp.tanh(x)
            return x
        return mlp
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")


def inputs(workload: str, size: int, rng: np.random.Generator, widths: list[int]) -> list[np.ndarray]:
    """float32 inputs of one size, scaled so every output is of order one (no cancellation to blur agreement)."""
    f32 = np.float32
    if workload == "matmul":
        return [rng.standard_normal((size, size), f32) / f32(math.sqrt(size)), rng.standard_normal((size, size), f32)]
    if workload == "elementwise":
        return [rng.uniform(0, 4, size).astype(f32)]
    if workload == "reduction":
        return [rng.uniform(0, 1, (size, size)).astype(f32)]
    if workload == "mlp":
        found = [rng.standard_normal((size, widths[0]), f32)]
        for fan_in, fan_out in zip(widths, widths[1:]):
            found += [rng.standard_normal((fan_in, fan_out), f32) / f32(math.sqrt(fan_in)),
                      rng.uniform(-0.1, 0.1, fan_out).astype(f32)]
        return found
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")


def contraction_and_depth(workload: str, size: int, widths: list[int]) -> tuple[int, int]:
    """(K, D) of the tolerance: the longest sum and the operations in sequence."""
    if workload == "matmul":
        return size, 1
    if workload == "elementwise":
        return 1, 7
    if workload == "reduction":
        return size, 3
    if workload == "mlp":
        return max(widths), 3 * (len(widths) - 1)
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")


def tolerance(workload: str, size: int, widths: list[int]) -> float:
    k, d = contraction_and_depth(workload, size, widths)
    return ULPS * UNIT_ROUNDOFF * math.sqrt(k * d)


def relative_error(found, expected) -> float:
    """Worst relative Frobenius error over the outputs (a tuple of arrays, or one), in float64."""
    found = found if isinstance(found, (tuple, list)) else (found,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(found) != len(expected):
        return math.inf
    worst = 0.0
    for a, b in zip(found, expected):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or not np.isfinite(a).all():
            return math.inf
        norm = float(np.linalg.norm(b))
        worst = max(worst, float(np.linalg.norm(a - b) / norm) if norm else float(np.abs(a).max(initial=0.0)))
    return worst


# ---------------------------------------------------------------- timing one side, one size

def timed(step, sync, steps: dict) -> dict:
    """kbench.instruments.timing over `step`; the estimate with its interval (kbench.results.stats: one process, its synced blocks)."""
    found = timing.measure(step, sync, steps["warmup"], steps["timed"], blocks=steps["blocks"])
    mean = found.window_ms / steps["timed"]
    blocks = [ms / n for ms, n in zip(found.block_ms, found.block_steps)]
    estimate = stats.estimate([mean], [blocks])
    return {"ms": estimate.ms, "low": estimate.low, "high": estimate.high, "method": estimate.method,
            "first_ms": found.warmup_ms[0] if found.warmup_ms else None, "block_ms": blocks,
            "output": found.last_output}


def compare_pair(workload: str, size: int, numpy_side: dict, jax_side: dict, widths: list[int]) -> dict:
    """One size's row: both sides' times and whether JAX's result agrees with NumPy's (a mismatch fails the size)."""
    rel = relative_error(jax_side.pop("output"), numpy_side.pop("output"))
    tol = tolerance(workload, size, widths)
    return {"workload": workload, "size": size, "numpy": numpy_side, "jax": jax_side, "rel": rel, "tolerance": tol,
            "status": "ok" if rel <= tol else "mismatch"}


def run_size(workload: str, size: int, steps: dict, rng: np.random.Generator, widths: list[int], jax_fn, to_device,
             jax_sync) -> dict:
    """NumPy, then JAX (jax_fn: the jitted program; to_device: places the inputs; jax_sync: blocks until ready)."""
    arrays = inputs(workload, size, rng, widths)
    numpy_fn = program(workload, np)
    numpy_side = timed(lambda: numpy_fn(*arrays), lambda out: None, steps)
    on_device = to_device(arrays)
    jax_side = timed(lambda: jax_fn(*on_device), jax_sync, steps)
    return compare_pair(workload, size, numpy_side, jax_side, widths)


# ---------------------------------------------------------------- the job (driver side)

def job(config: dict, suite: str) -> dict:
    """What the job process gets: the suite's steps and sizes, the column's environment variables, the seed."""
    from kbench.plan import matrix
    study, framework = config["jax_numpy"], config["jax_numpy"]["framework"]
    entry = study["suites"][suite]
    return {"cell_id": f"{suite}/jax_numpy", "job": "jax_numpy", "suite": suite, "accelerator": config["accelerator"],
            "framework": framework, "framework_def": config["framework_defs"][framework],
            "env": matrix.cell_env(config, framework, config["settings"]), "dtype": "float32",
            "steps": entry["steps"], "workloads": entry["sizes"], "mlp_widths": entry["mlp_widths"],
            "seed": config["seed"]}


# ---------------------------------------------------------------- the job process

def jax_device(jax) -> dict:
    device = jax.devices()[0]
    return {"platform": device.platform, "kind": getattr(device, "device_kind", device.platform),
            "count": jax.device_count()}


def numpy_blas() -> str | None:
    """The BLAS library NumPy was built against (its matmul's kernels), as numpy.show_config names it."""
    try:
        found = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{found.get('name')} {found.get('version', '')}".strip()
    except Exception:
        return None


def run(job: dict, context: dict) -> cell.CellResult:
    from kbench.run import runner
    findings = {"rows": [], "host_cpus": len(os.sched_getaffinity(0))}      # the CPUs NumPy may run on

    def study(provenance):
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_default_matmul_precision", "highest")     # float32 products, never TF32
        device = jax_device(jax)
        findings.update(device=device, numpy_version=np.__version__, jax_version=jax.__version__,
                        numpy_blas=numpy_blas(), matmul_precision="highest")
        provenance.update(backend="jax", device=device["kind"],
                          packages={"numpy": np.__version__, "jax": jax.__version__})
        # a GPU job on JAX's CPU would time the CPU against NumPy: the cells' own device check
        runner.check_device(job, types.SimpleNamespace(name="jax", device=lambda: {
            "kind": "cpu" if device["platform"] == "cpu" else "gpu", "name": device["kind"]}))

        def to_device(arrays):
            return jax.block_until_ready([jax.device_put(a) for a in arrays])

        widths = job["mlp_widths"]
        rng = np.random.default_rng(job["seed"])
        for workload, sizes in job["workloads"].items():
            jax_fn = jax.jit(program(workload, jnp))
            for size in sizes:
                try:
                    findings["rows"].append(run_size(workload, size, job["steps"], rng, widths, jax_fn, to_device,
                                                     jax.block_until_ready))
                except Exception as exc:     # one size that cannot run (memory): said, the others go on
                    findings["rows"].append({"workload": workload, "size": size, "status": "failed",
                                             "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
                print(_line(findings["rows"][-1]), flush=True)
    result = runner.job_run(job, context, study)
    result.jax_numpy = findings
    return result


def _line(row: dict) -> str:
    if row["status"] == "failed":
        return f"{row['workload']} {row['size']}: failed: {row['error']}"
    n, j = row["numpy"]["ms"], row["jax"]["ms"]
    return (f"{row['workload']} {row['size']}: numpy {n:.4g} ms, jax {j:.4g} ms (first call {row['jax']['first_ms']:.4g}"
            f" ms), numpy/jax {n / j:.3g}x, rel {row['rel']:.2g} (tolerance {row['tolerance']:.2g}): {row['status']}")


def main(argv=None) -> int:
    from kbench.run import runner
    return runner.job_main(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
