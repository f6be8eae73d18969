"""The JAX-against-NumPy job's record (kbench.studies.jax_numpy) -> jax_numpy.{csv,md,html}: per workload and size NumPy's
and JAX's ms per call with their intervals, the ratio numpy/jax and the agreement; and jax_numpy_claim.csv: the
claim's verdict per workload, with the reason.

Verdict of a workload on the claim's speedup (config jax_numpy.claim.speedup, 10: "tens of times"), over its sizes
whose results agree (a mismatch or a failed size counts for nothing):
- holds: at some size the ratio clears the claim beyond both intervals (NumPy's low end / JAX's high end >= claim);
- does not hold: at every size even the ratio's high end (NumPy's high end / JAX's low end) stays below it;
- not shown: at some size the ratio's interval straddles the claim (the reason names the size whose high end
  reaches furthest);
- not measured: no size ran and agreed (the job failed, or every size failed or mismatched).
"""
from __future__ import annotations

import pandas as pd

from kbench.contract import cell
from kbench.plan import matrix
from kbench.results.context import Records, RunContext, Table
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED, NOT_SHOWN

CLAIM = "jax_numpy_claim.csv"           # the claim's verdict per workload (kbench.claims reads it)
OUTPUTS = [f"jax_numpy.{ext}" for ext in ("csv", "md", "html")] + [CLAIM]


def ratio_range(row: dict) -> tuple[float, float | None, float | None]:
    """numpy/jax: the point, and its low and high ends from the two intervals (None where either has none)."""
    n, j = row["numpy"], row["jax"]
    point = n["ms"] / j["ms"]
    if n.get("low") is None or j.get("low") is None or j["low"] <= 0:
        return point, None, None
    return point, max(n["low"], 0.0) / j["high"], n["high"] / j["low"]


def device_text(findings: dict) -> str:
    device = findings.get("device") or {}
    if not device:
        return ""
    cpus = findings.get("host_cpus")
    return f"jax: {device['platform']} ({device['kind']}); numpy: host CPU ({cpus} cores)"


def rows(result: cell.CellResult) -> list[dict]:
    """One flat row per workload and size."""
    findings = result.jax_numpy or {}
    device = device_text(findings)
    flat = []
    for row in findings.get("rows", []):
        base = {"workload": row["workload"], "size": row["size"], "device": device}
        if row["status"] == "failed":
            flat.append({**base, "agreement": f"failed: {row['error']}"})
            continue
        point, low, high = ratio_range(row)
        mark = "✓" if row["status"] == "ok" else "✗ mismatch"
        flat.append({**base,
                     "numpy ms": row["numpy"]["ms"], "numpy low": row["numpy"]["low"],
                     "numpy high": row["numpy"]["high"],
                     "jax ms": row["jax"]["ms"], "jax low": row["jax"]["low"], "jax high": row["jax"]["high"],
                     "jax first call ms": row["jax"]["first_ms"],
                     "numpy/jax x": point, "x low": low, "x high": high,
                     "rel error": row["rel"], "tolerance": row["tolerance"],
                     "agreement": f"{mark} rel {row['rel']:.1e} (tolerance {row['tolerance']:.1e})"})
    return flat


def verdict(workload_rows: list[dict], speedup: float) -> tuple[str, str]:
    """(verdict, the measured part of its reason) of one workload's rows (kbench.studies.jax_numpy records' rows)."""
    usable = [r for r in workload_rows if r["status"] == "ok"]
    if not usable:
        states = ", ".join(f"{r['size']}: {r['status']}" for r in workload_rows) or "no size ran"
        return NOT_MEASURED, f"no size ran with agreeing results ({states})"
    found = [(r, *ratio_range(r)) for r in usable]
    best = max(found, key=lambda f: f[1])
    summary = "numpy/jax " + ", ".join(f"{f[1]:.2g}x at {f[0]['size']}" for f in found)
    skipped = [r for r in workload_rows if r["status"] != "ok"]
    if skipped:
        summary += "; not counted: " + ", ".join(f"{r['size']} ({r['status']})" for r in skipped)
    clears = [f for f in found if (f[2] if f[2] is not None else f[1]) >= speedup]
    if clears:
        top = max(clears, key=lambda f: f[1])
        return HOLDS, f"{summary}: {top[1]:.3g}x at {top[0]['size']} clears {speedup:g}x beyond both intervals"
    if all((f[3] if f[3] is not None else f[1]) < speedup for f in found):
        return FAILS, f"{summary}: at most {best[1]:.3g}x (at {best[0]['size']}), below {speedup:g}x beyond the intervals"
    # the size whose interval reaches the claim (its high end at or above it), not the best point: a small size's
    # wide interval can straddle the claim while the best point's interval lies below it
    straddling = max((f for f in found if f[3] is not None and f[3] >= speedup), key=lambda f: f[3])
    return NOT_SHOWN, (f"{summary}: at {straddling[0]['size']} the ratio's interval ({straddling[2]:.3g}x to "
                       f"{straddling[3]:.3g}x) straddles {speedup:g}x")


def claim_table(result: cell.CellResult, claim: dict, workloads: dict) -> pd.DataFrame:
    """Per workload of the job: the claim, the verdict and its reason (measured, then why: config
    jax_numpy.workloads.<workload>.why), and the device."""
    findings = result.jax_numpy or {}
    device = device_text(findings)
    found = []
    for workload, definition in workloads.items():
        if result.status != "ok":
            error = result.error or {}
            state, reason = NOT_MEASURED, f"the job failed: {error.get('type')}: {error.get('message')}"
        else:
            state, reason = verdict([r for r in findings.get("rows", []) if r["workload"] == workload],
                                    claim["speedup"])
        found.append({"workload": workload, "claim": claim["quote"], "claimed x": claim["speedup"],
                      "verdict": state, "reason": f"{reason}. {definition['why']}", "device": device})
    return pd.DataFrame(found)


def note(findings: dict) -> str:
    device = findings.get("device") or {}
    return ("\nms: one call of the workload, the mean over the timed calls ± the half-width of one process's 95% "
            "interval (Student's t over its synced blocks, within-run only), warm-up calls excluded (JAX's first "
            "call, jit compilation included, is in 'jax first call ms'). numpy/jax x: NumPy's ms over JAX's (above 1: "
            "JAX is faster), low and high from the two intervals. Agreement: JAX's outputs against NumPy's, relative "
            "Frobenius error in float64 against a float32 tolerance (kbench.studies.jax_numpy); a mismatch is no speedup. "
            "Inputs are float32 and already on JAX's device: host-device transfers are not timed. "
            f"Here JAX ran on {device.get('platform', '?')} ({device.get('kind', '?')}) and NumPy on the host CPU "
            f"({findings.get('host_cpus')} cores; BLAS: {findings.get('numpy_blas')}), "
            f"numpy {findings.get('numpy_version')}, jax {findings.get('jax_version')}. On a GPU host the same job "
            "runs JAX on the GPU (JAX picks the accelerator) while NumPy stays on the host: the ratio then compares "
            "a GPU with the host's CPU. CPU numbers check the pipeline, not GPUs.\n")


def _markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "(nothing ran)\n"
    return table.astype(object).where(table.notna(), "").to_markdown(index=False) + "\n"


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """The Markdown view: estimate ± half-width, ratio with its range, agreement."""
    if table.empty or "numpy ms" not in table:
        return table
    def pm(ms, low, high):
        if pd.isna(ms):
            return ""
        return f"{ms:.4g}" + ("" if pd.isna(low) else f" ± {(high - low) / 2:.2g}")
    def ratio(x, low, high):
        if pd.isna(x):
            return ""
        return f"{x:.3g}" + ("" if pd.isna(low) else f" ({low:.3g}–{high:.3g})")
    return pd.DataFrame({
        "workload": table.workload, "size": table["size"],
        "numpy ms": [pm(*v) for v in zip(table["numpy ms"], table["numpy low"], table["numpy high"])],
        "jax ms": [pm(*v) for v in zip(table["jax ms"], table["jax low"], table["jax high"])],
        "jax first call ms": table["jax first call ms"].map(lambda v: "" if pd.isna(v) else f"{v:.4g}"),
        "numpy/jax x": [ratio(*v) for v in zip(table["numpy/jax x"], table["x low"], table["x high"])],
        "agreement": table.agreement, "device": table.device})


def build(records: Records, run: RunContext) -> None:
    """The suite's one job record (kbench.studies.jax_numpy), with config jax_numpy's claim and the workloads' whys."""
    (result,), suite, out_dir = records.jax_numpy, run.suite, run.tables_dir
    claim, workloads = run.jax_numpy["claim"], run.jax_numpy["workloads"]
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows(result))
    claims = claim_table(result, claim, workloads)
    table.to_csv(out_dir / "jax_numpy.csv", index=False)
    claims.to_csv(out_dir / CLAIM, index=False)
    shown, text = readable(table), note(result.jax_numpy or {})
    failed = "" if result.status == "ok" else f"\nThe job failed: {(result.error or {}).get('message')}\n"
    (out_dir / "jax_numpy.md").write_text(
        f"## jax_numpy, suite {suite}\n\n{_markdown(shown)}{failed}{text}\n### The claim\n\n{_markdown(claims)}")
    (out_dir / "jax_numpy.html").write_text(
        f"<html><body><h2>jax_numpy, suite {suite}</h2>\n" + shown.to_html(na_rep="", border=0, index=False)
        + f"<p>{failed}{text}</p>\n<h3>The claim</h3>\n" + claims.to_html(na_rep="", border=0, index=False)
        + "\n</body></html>\n")


TABLE = Table(rule="jax_numpy_table", outputs=tuple(OUTPUTS), build=build, category="JAX against NumPy",
              reads=("jax_numpy",), archived=False,
              per_profile=False, planned=lambda config, suite: [None] if matrix.jax_numpy_planned(config, suite) else [])
