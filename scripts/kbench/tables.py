"""Cell JSONs -> the final tables (CSV and Markdown) of one suite.

ms_per_step : rows model/task/batch, one column per framework, mean ms/step (the anchor's statistic), or
              "failed: <error type>" / "n/a: <reason>"
speedup     : how much faster the best Keras 3 backend is than each column, in %, as the anchor: other/best - 1
cells_long  : every statistic and provenance field of every cell, one row per cell
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from kbench import cell

ROW_KEYS = ["model", "task", "batch_size"]


def long_table(results: list[dict]) -> pd.DataFrame:
    rows = []
    for result in results:
        spec, timing, prov = result["spec"], result["timing"] or {}, result["provenance"]
        error, params, memory = result["error"] or {}, result["params"] or {}, result["memory"] or {}
        rows.append({
            "cell_id": result["cell_id"], "suite": spec["suite"], "model": spec["model"], "task": spec["task"],
            "batch_size": spec["batch_size"], "framework": spec["framework"], "dtype": spec["dtype"],
            "status": result["status"], "error_type": error.get("type"), "error_message": error.get("message"),
            **{k: timing.get(k) for k in ("n", "mean_ms", "median_ms", "p90_ms", "stdev_ms", "min_ms", "max_ms",
                                          "first_step_ms", "window_ms", "examples_per_s", "tokens_per_s")},
            "params_total": params.get("total"), "params_trainable": params.get("trainable"),
            "peak_host_rss_mib": mib(memory.get("peak_host_rss_bytes")),
            "peak_device_mib": mib(memory.get("peak_device_bytes")),
            "device": prov.get("device"), "runtime": prov.get("runtime"), "git_commit": prov.get("git_commit"),
            "environment_lock_sha256": (prov.get("environment") or {}).get("lock_sha256"),
            "packages": ", ".join(f"{k}=={v}" for k, v in sorted((prov.get("packages") or {}).items())),
            "spec_digest": result["spec_digest"],
        })
    return pd.DataFrame(rows)     # in the order given: the config's order of models, tasks and batches


def mib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)


def cell_text(row: pd.Series) -> str:
    if row.status == "ok":
        return f"{row.mean_ms:.2f}"
    if row.status == "unsupported":
        return f"n/a: {row.error_message}"
    return f"failed: {row.error_type}"


def ms_per_step_table(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    wide = long.assign(value=long.apply(cell_text, axis=1)).pivot(index=ROW_KEYS, columns="framework", values="value")
    rows = pd.MultiIndex.from_frame(long[ROW_KEYS].drop_duplicates())
    return wide.reindex(index=rows, columns=[f for f in frameworks if f in wide.columns]).fillna("")


def speedup_table(long: pd.DataFrame, frameworks: list[str], keras3: list[str]) -> pd.DataFrame:
    ok = long[long.status == "ok"].pivot(index=ROW_KEYS, columns="framework", values="mean_ms")
    rows = ok.reindex(index=ms_per_step_table(long, frameworks).index)
    candidates = rows.reindex(columns=[f for f in keras3 if f in rows.columns])
    table = pd.DataFrame(index=rows.index)
    table["keras3_best"] = candidates.idxmin(axis=1, skipna=True) if not candidates.empty else None
    best_ms = candidates.min(axis=1, skipna=True)
    table["keras3_best_ms"] = best_ms.round(2)
    for framework in frameworks:
        if framework in rows.columns:
            table[f"vs {framework} %"] = ((rows[framework] / best_ms - 1) * 100).round(0)
    return table


def write(table: pd.DataFrame, out_dir: Path, name: str) -> None:
    table.to_csv(out_dir / f"{name}.csv")
    (out_dir / f"{name}.md").write_text(table.reset_index().to_markdown(index=False) + "\n")


def build(result_paths: list[str], frameworks: list[str], keras3: list[str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    long = long_table([cell.read(p) for p in result_paths])
    long.to_csv(out_dir / "cells_long.csv", index=False)
    write(ms_per_step_table(long, frameworks), out_dir, "ms_per_step")
    write(speedup_table(long, frameworks, keras3), out_dir, "speedup")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", required=True, help="column order, comma-separated")
    parser.add_argument("--keras3", required=True, help="the Keras 3 columns, comma-separated")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    build(args.results, args.frameworks.split(","), args.keras3.split(","), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
