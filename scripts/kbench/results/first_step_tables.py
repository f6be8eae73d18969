"""Time to the first useful step, side by side: per row and column, the cold run (its first repeat, an empty compile
cache) and its warm twin (a fresh process whose framework's persistent cache the cold run filled,
kbench.instruments.compile_cache), each in its parts (the framework's import, its libraries' start-up in the numerics
probe, the model's build, the first step with what the framework reports of it), the programs it compiled, graph
breaks, recompiles, cache hits, the step at which ms/step enters its steady band
(kbench.instruments.timing.steady_step), and the steps a compiled column takes to pay its compile back against the
eager column of its framework. A warm twin whose timed window differs from its cold run's beyond both intervals is
flagged: the cache changed the program (an autotuner's other choice), not only its start.
"""
from __future__ import annotations

import math

import pandas as pd

from kbench.contract import cell
from kbench.instruments import compile_cache, timing
from kbench.plan import matrix
from kbench.results import flat, plots, stats
from kbench.results.context import Records, RunContext, Table

NAME = "first_step"
LONG = "first_step_long.csv"
OUTPUTS = [f"{NAME}.{fmt}" for fmt in flat.FORMATS] + [LONG]
PLOTS = [f"{NAME}.{fmt}" for fmt in plots.FORMATS]
WARM_DIFFERS = "warm window differs"
# XLA compiled the run's kernels one at a time: the driver's CUDA older than its ptxas's (kbench.gpu.cuda)
XLA_SERIAL = "xla serial compile"
PART_NAMES = {"trace_s": "trace", "lower_s": "lower", "compile_s": "compile", "backend_s": "backend"}
# the parts before the first step, in order, and as the wide table names them (kbench.run.runner.FirstStep): the
# framework's import, its libraries' start-up (the numerics probe's float32 matmul and convolution: cuBLAS's and
# cuDNN's handles, JAX's first XLA compile), the model's build
BEFORE_FIRST_STEP = {"import_s": "import", "probe_s": "libraries", "build_s": "build"}


def window_estimate(result: cell.CellResult) -> stats.Estimate:
    row = flat.row(result)
    return stats.estimate([row["mean_ms"]], [row["block_means"]])


def warm_differs(cold: cell.CellResult, warm: cell.CellResult, by: float) -> bool:
    """A warm twin's timed window apart from its cold run's: both intervals apart (within-run intervals of the
    blocks) and the means by more than `by` of the cold one's (two processes of one cell differ by a few percent
    however they start: within-run intervals do not hold that spread)."""
    a, b = window_estimate(cold), window_estimate(warm)
    return stats.separate(a, b) and abs(b.ms - a.ms) > by * a.ms


def line(result: cell.CellResult, state: str, band: float, warm_cells: list[dict] = ()) -> dict:
    """One run's time to its first step, in its parts, and where it became steady."""
    row, found, timing_ = flat.row(result), result.first_step or {}, result.timing or {}
    parts = found.get("parts") or {}
    cache = found.get("cache") or {}
    first_s = (row["first_step_ms"] or 0) / 1e3
    # a record without probe_s (made before its libraries' start-up was a part) has no time to its first step:
    # the sum would leave out the start-up its successors count
    before = [found.get(part) for part in BEFORE_FIRST_STEP]
    steady = timing.steady_step(timing_.get("warmup_ms") or [], timing_.get("block_ms") or [],
                                timing_.get("block_steps") or [], band)
    return {**{k: row[k] for k in flat.ROW_KEYS}, "framework": row["framework"], "state": state,
            "status": result.status,
            "to_first_step_s": first_s + sum(before) if None not in before and result.status == "ok" else None,
            **{part: found.get(part) for part in BEFORE_FIRST_STEP},
            "first_step_s": first_s if result.status == "ok" else None,
            **{name: parts.get(name) for name in PART_NAMES}, "reported_by": parts.get("reported_by"),
            "programs": found.get("programs"), "graph_breaks": found.get("graph_breaks"),
            "recompiles": found.get("recompiles"), "cache_hits": cache.get("cache_hits"),
            "cache_misses": cache.get("cache_misses"), "cache_entries": cache.get("entries_after"),
            # what the run added to its cache (a framework that counts no hits, TensorFlow: 0 added is all hits)
            "cache_added": (cache["entries_after"] - cache["entries_before"]
                            if cache.get("entries_after") is not None and cache.get("entries_before") is not None
                            else None),
            "cache_refused": "; ".join(cache.get("refused") or []) or None,
            "steady_at_step": steady["steady_at_step"], "ms_per_step": row["mean_ms"],
            "no_warm_because": no_warm_because(result, warm_cells), **xla_compile(found)}


def xla_compile(found: dict) -> dict:
    """Where the column compiled with XLA on a GPU (kbench.run.runner.xla_compile): the driver's CUDA and its
    ptxas's, and the flag where the driver is older (XLA then compiles serially: a cold first step slower by the
    host's driver alone); None and False elsewhere."""
    xla = found.get("xla_compile") or {}
    return {"driver_cuda": xla.get("driver_cuda"), "ptxas_cuda": xla.get("ptxas_cuda"),
            XLA_SERIAL: xla.get("serial_compile") is True}


def no_warm_because(result: cell.CellResult, warm_cells: list[dict] = ()) -> str | None:
    """Why a compiled cell has no warm twin: its framework keeps no persistent compile cache, or no pattern of
    first_step.warm_cells chose it (None: it has one, or the cell does not compile)."""
    spec = result.cell_spec
    if not spec.settings.get("jit_compile"):
        return None
    if not compile_cache.has_cache(spec):
        return compile_cache.why_none(spec)
    return matrix.not_warm_because(list(warm_cells), spec.framework, spec.model, spec.task, spec.precision)


def first_step_long(cold: list[cell.CellResult], warm: list[cell.CellResult], band: float,
                    eager_twin: dict[str, str], differs_by: float = 0.1, warm_cells: list[dict] = ()) -> pd.DataFrame:
    """One line per cell and state (cold: each cell's first repeat; warm: its warm twin), with the warm-differs flag
    and the payback against the eager twin; a cell that first_step.warm_cells gives no twin says why."""
    firsts = {r.cell_id: r for r in cold if r.repeat == 1}
    lines = [line(r, "cold", band, warm_cells) for r in firsts.values()]
    for result in warm:
        entry = line(result, "warm", band)
        twin = firsts.get(result.cell_id)
        entry[WARM_DIFFERS] = bool(twin and twin.status == result.status == "ok" and warm_differs(twin, result, differs_by))
        lines.append(entry)
    long = pd.DataFrame(lines)
    if long.empty:                  # the columns still, so a reader of an empty table finds them
        return pd.DataFrame(columns=[*flat.ROW_KEYS, "framework", "state", "status", "to_first_step_s",
                                     WARM_DIFFERS, XLA_SERIAL, "pays_back_after_steps"])
    long[WARM_DIFFERS] = long.get(WARM_DIFFERS, pd.Series(False, index=long.index)).fillna(False).astype(bool)
    long["pays_back_after_steps"] = [payback(long, entry, eager_twin) for _, entry in long.iterrows()]
    return long


def payback(long: pd.DataFrame, entry, eager_twin: dict[str, str]) -> str | None:
    """The steps after which a compiled column's faster step has paid for its longer wait to the first step, against
    its framework's eager column in the same row and state: ceil(extra wait / time saved per step); "never" where it
    is not faster; None where it has no eager twin or either did not run."""
    eager = eager_twin.get(entry["framework"])
    if not eager or entry["status"] != "ok":
        return None
    same = long[(long.framework == eager) & (long.status == "ok")
                & (long[flat.ROW_KEYS] == entry[flat.ROW_KEYS]).all(axis=1)]
    other = same[same.state == "cold"]           # the eager column never compiles: its cold run is its only run
    if other.empty or pd.isna(entry["to_first_step_s"]) or pd.isna(other.iloc[0]["to_first_step_s"]):
        return None
    other = other.iloc[0]
    saved_ms = other["ms_per_step"] - entry["ms_per_step"]
    extra_ms = (entry["to_first_step_s"] - other["to_first_step_s"]) * 1e3
    if extra_ms <= 0:
        return "at once"
    if saved_ms <= 0:
        return "never (not faster)"
    return f"{math.ceil(extra_ms / saved_ms)}"


def seconds(value) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.1f}" if value >= 0.1 else f"{value:.2f}"


def cell_text(entry) -> str:
    """A run as the wide table shows it: time to the first step, then its parts."""
    if entry["status"] != "ok":
        return entry["status"]
    parts = [f"{name} {seconds(entry[key])}" for key, name in BEFORE_FIRST_STEP.items() if pd.notna(entry.get(key))]
    parts.append(f"first step {seconds(entry['first_step_s'])}")
    inner = [f"{name} {seconds(entry[key])}" for key, name in PART_NAMES.items() if pd.notna(entry.get(key))]
    total = (f"{seconds(entry['to_first_step_s'])} s" if pd.notna(entry.get("to_first_step_s"))
             else "n/a (a part not recorded)")
    text = f"{total} ({', '.join(parts)}" + (f": {', '.join(inner)}" if inner else "")
    text += ")"
    counts = [f"{int(entry[k])} {name}" for k, name in (("programs", "programs"), ("graph_breaks", "breaks"),
                                                         ("recompiles", "recompiles"), ("cache_hits", "cache hits"))
              if pd.notna(entry.get(k))]
    if pd.isna(entry.get("cache_hits")) and pd.notna(entry.get("cache_added")):
        counts.append(f"{int(entry['cache_added'])} cache entries added")
    if counts:
        text += "; " + ", ".join(counts)
    missed = cache_missed(entry)
    if missed:
        text += f"; {missed} ‡"
    if pd.notna(entry.get("steady_at_step")):
        text += f"; steady at step {int(entry['steady_at_step'])}"
    paid = entry.get("pays_back_after_steps")
    if isinstance(paid, str):
        text += f"; pays back after {paid} steps" if paid.isdigit() else f"; pays back: {paid}"
    if entry.get(WARM_DIFFERS):
        text += f"; {WARM_DIFFERS} †"
    if entry.get(XLA_SERIAL):
        text += f"; XLA compiled serially: driver CUDA {entry['driver_cuda']} older than ptxas {entry['ptxas_cuda']} §"
    return text


def cache_missed(entry) -> str | None:
    """What a run's cache counters say against its state: a warm run that compiled anew (JAX's or Inductor's misses;
    TensorFlow, which counts no hits: entries it added), so its "warm" figures are a cold start's; a cold run that
    persisted nothing, so its warm twin can only start cold."""
    misses, added = entry.get("cache_misses"), entry.get("cache_added")
    if entry.get("state") == "warm":
        if pd.notna(misses) and misses > 0:
            return f"warm, yet {int(misses)} cache misses: it compiled anew"
        if pd.isna(entry.get("cache_hits")) and pd.notna(added) and added > 0:
            return f"warm, yet it added {int(added)} cache entries: it compiled anew"
    elif entry.get("state") == "cold" and pd.isna(entry.get("cache_hits")) and pd.notna(added) and added == 0:
        return "cold, and it persisted nothing"
    return None


def wide(long: pd.DataFrame, frameworks: list[str]) -> pd.DataFrame:
    """Row x column: "cold ... | warm ..." per cell."""
    if long.empty:
        return pd.DataFrame(columns=[*flat.ROW_KEYS, *frameworks]).set_index(flat.ROW_KEYS)
    texts = {}
    for keys, group in long.groupby([*flat.ROW_KEYS, "framework"], sort=False):
        key, framework = tuple(keys[:-1]), keys[-1]
        by_state = {entry["state"]: cell_text(entry) for _, entry in group.iterrows()}
        shown = [f"{state} {by_state[state]}" for state in ("cold", "warm") if state in by_state]
        why = group["no_warm_because"].dropna()
        if not why.empty:      # no warm twin: a framework without a persistent cache, or first_step.warm_cells
            shown.append(f"warm n/a: {why.iloc[0]}")
        texts.setdefault(key, {})[framework] = " | ".join(shown)
    index = pd.MultiIndex.from_tuples(list(texts), names=flat.ROW_KEYS)
    present = [f for f in frameworks if any(f in row for row in texts.values())]
    return pd.DataFrame([[texts[k].get(f, "") for f in present] for k in texts], index=index, columns=present)


NOTE = ("\ncold: the cell's first repeat, an empty compile cache; warm: a fresh process whose framework's persistent "
        "compile cache the cold run filled. Seconds to the first step's return: the framework's import (its device "
        "found), its libraries' start-up (the numerics probe's float32 matmul and convolution, the first it runs on "
        "its device: cuBLAS's and cuDNN's handles, JAX's first XLA compile), the model's build, the first step (with "
        "what the framework reports of it: JAX's trace, lower and XLA compile; torch.compile's dynamo compile and its "
        "backend). Programs: graphs or XLA compiles by the first step's end; recompiles: after it. Steady: the step "
        "from which ms/step stays in its band. Pays back: steps until the compiled column's faster step has made up "
        "its longer wait, against its framework's eager column. "
        "† the warm window differs from the cold one beyond both intervals and by more than first_step.warm_differs_by "
        "(the cache changed the program, or the machine was not quiet). ‡ the cache's own counters contradict the "
        "run's state: a warm run that compiled anew (misses, or entries added where the framework counts no hits) "
        "started as a cold one; a cold run that persisted nothing leaves its warm twin nothing to load. § XLA "
        "compiled the run's kernels one at a time: the host's driver supports an older CUDA than XLA's ptxas (XLA's "
        "own condition; first_step_long.csv: driver_cuda, ptxas_cuda), so its compile, and a cold first step, is "
        "slower on this host than on one with a newer driver.\n")


def plot(long: pd.DataFrame, frameworks: list[str]):
    """Cold and warm time to the first step per row: dots on a log axis with their values (plots.dots_per_row)."""
    shown = long.rename(columns={"to_first_step_s": "value"})
    return plots.dots_per_row(shown, frameworks, "value", "to the first step (log axis)",
                              series=("state", {"cold": "o", "warm": "D"}), scale=1e3)


def build(records: Records, run: RunContext) -> pd.DataFrame:
    """The tables, and the plot where the run has a plots folder (an archive's check rebuilds the tables only)."""
    out_dir, plots_dir, frameworks, profile, settings = (run.tables_dir, run.plots_dir, list(run.frameworks),
                                                         run.profile, run.first_step)
    out_dir.mkdir(parents=True, exist_ok=True)
    long = first_step_long(list(records.cells), list(records.warm), settings["steady_band"], settings["eager_twin"],
                           settings["warm_differs_by"], settings["warm_cells"] if settings["warm_runs"] else [])
    long.to_csv(out_dir / LONG, index=False)
    flat.write(wide(long, frameworks), out_dir, NAME, profile, note=NOTE)
    if plots_dir is not None:
        plots_dir.mkdir(parents=True, exist_ok=True)
        figure = plot(long, frameworks)
        for fmt in plots.FORMATS:
            plots.save(figure, plots_dir / f"{NAME}.{fmt}", dpi=110)
    return long


def _planned(config: dict, suite: str) -> list[str | None]:
    return list(config["profiles"]) if "first_step" in config else []    # a run before the first-step study: none


TABLE = Table(rule="first_step", outputs=tuple(OUTPUTS), plots=tuple(PLOTS), build=build, category="First step",
              reads=("cells", "warm"), planned=_planned)
