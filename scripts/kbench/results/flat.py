"""The one place a cell's record becomes a table's row, and how every table is written: row (a record, flat),
long_table and write_long (one row per repeat), write (CSV for programs, Markdown for reading, HTML for the report),
markdown and sections_markdown; ROW_KEYS, the keys of a table's row. pandas is imported where a table is made: the GPU
check reads its cells' rows (row) on a host with NumPy and PyYAML only."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kbench.contract import cell

if TYPE_CHECKING:
    import pandas as pd

ROW_KEYS = ["model", "task", "batch_size", "precision"]
STUDY_KEYS = ["model", "task", "batch_size"]
FORMATS = ("csv", "md", "html")


def row(result: cell.CellResult) -> dict:
    """A cell's record, flat: every statistic and provenance field a table or a comparison reads, one level deep."""
    spec, timing, prov = result.cell_spec, result.timing or {}, result.provenance
    error, params, memory = result.error or {}, result.params or {}, result.memory or {}
    loss, numerics, energy, evidence = result.loss or {}, result.numerics or {}, result.energy or {}, result.evidence or {}
    compiles = evidence.get("compiles") or {}
    before, in_window = compiles.get("before_window") or {}, compiles.get("in_window") or {}
    mig = bool((prov.get("device_identity") or {}).get("mig"))
    return {
        "cell_id": result.cell_id, "repeat": result.repeat, "suite": spec.suite, "profile": spec.profile,
        "model": spec.model, "task": spec.task,
        "batch_size": spec.batch_size, "precision": spec.precision, "framework": spec.framework,
        "status": result.status, "error_type": error.get("type"), "error_message": error.get("message"),
        "text": result.text(),
        **{k: timing.get(k) for k in ("n", "mean_ms", "median_ms", "p90_ms", "stdev_ms", "min_ms", "max_ms",
                                      "first_step_ms", "window_ms", "examples_per_s", "tokens_per_s")},
        "step_ms": timing.get("step_ms"),
        "block_means": _block_means(timing),
        "generated_tokens_per_step": timing.get("generated_tokens_per_step"),
        "device_busy_share": (timing.get("device_busy") or {}).get("share"),
        "loss_first": loss.get("first_timed_step"), "loss_last": loss.get("last_timed_step"),
        "weights_dtype": numerics.get("weights_dtype"), "compute_dtype": numerics.get("compute_dtype"),
        "probe_class": (numerics.get("probe") or {}).get("observed_class"),
        "precision_switches": numerics.get("precision_switches"),
        "tf32_override": (prov.get("environment_variables") or {}).get("NVIDIA_TF32_OVERRIDE"),
        "params_total": params.get("total"), "params_trainable": params.get("trainable"),
        "peak_host_rss_mib": _mib(memory.get("peak_host_rss_bytes")),
        "peak_device_mib": _mib(memory.get("peak_device_bytes")),
        "nvml_used_mib": _mib(memory.get("nvml_used_bytes_after_steps")),
        "nvml_process_mib": _only_process_mib(memory.get("nvml_processes_after_steps")),
        "memory_view": prov.get("memory_view"),
        # the GPU during the timed window (kbench.gpu.nvml.WindowMonitor)
        "energy_j_per_step": (energy["energy_j"] / timing["n"] if energy.get("energy_j") is not None
                              and timing.get("n") else None),
        "mean_power_w": energy.get("mean_power_w"), "sm_clock_mhz_mean": energy.get("sm_clock_mhz_mean"),
        "sm_clock_mhz_min": energy.get("sm_clock_mhz_min"),
        "memory_clock_mhz_mean": energy.get("memory_clock_mhz_mean"),
        "temperature_c_max": energy.get("temperature_c_max"),
        "slowdowns": ", ".join(energy.get("slowdowns") or []), "power_capped": energy.get("power_capped"),
        # the framework's compile counters (runner.Window): what compiled inside the window, graph breaks
        "jit_compiled": evidence.get("jit_compile"),
        "compiles_in_window": sum(in_window.get(k, 0) for k in cell.PROGRAMS) if in_window else None,
        "graph_breaks": (before.get("graph_breaks", 0) + before.get("unsupported", 0)) if before else None,
        "cudagraph_skips": before.get("cudagraph_skips", 0) + in_window.get("cudagraph_skips", 0)
        if before else None,
        # a MIG instance is named as one (kbench.run.runner.check_device_identity): it has a part of the chip
        "device": _mig_named(prov.get("device"), mig), "mig": mig,
        "gpu_name": _mig_named(((prov.get("device_facts") or {}).get("nvml") or {}).get("name"), mig),
        "runtime": prov.get("runtime"), "git_commit": prov.get("git_commit"),
        "environment_lock_sha256": (prov.get("environment") or {}).get("lock_sha256"),
        "packages": ", ".join(f"{k}=={v}" for k, v in sorted((prov.get("packages") or {}).items())),
        "spec_digest": result.spec_digest,
        # what derived figures (FLOPs) are computed from; not written to the CSVs
        "arch": spec.arch, "inputs": spec.inputs, "task_options": spec.task_options,
        "adapter": spec.adapter,
    }


def long_table(results: list[cell.CellResult]) -> pd.DataFrame:
    """One row per repeat of each cell (row), in the order given: the config's order of cells."""
    import pandas as pd
    return pd.DataFrame([row(result) for result in results])


def write_long(long: pd.DataFrame, path: Path) -> None:
    """The long table as CSV: every repeat's flat fields, without the lists and specs a CSV cannot hold."""
    long.drop(columns=["step_ms", "block_means", "arch", "inputs", "task_options", "precision_switches"]).to_csv(
        path, index=False)


def write(table: pd.DataFrame, out_dir: Path, name: str, profile: str, by_section: bool = False,
          readable: pd.DataFrame | None = None, note: str = "") -> None:
    """CSV for programs, Markdown for reading, HTML for the Snakemake report (from `readable` where given); the
    profile heads the readable ones."""
    table.to_csv(out_dir / f"{name}.csv")
    shown = table if readable is None else readable
    text = sections_markdown(shown) if by_section else markdown(shown)
    (out_dir / f"{name}.md").write_text(f"## {name}, profile {profile}\n\n{text}{note}")
    (out_dir / f"{name}.html").write_text(f"<html><body><h2>{name}, profile {profile}</h2>\n"
                                          + shown.to_html(na_rep="", border=0) + f"\n<p>{note}</p>\n</body></html>\n")


def sections_markdown(table: pd.DataFrame) -> str:
    """One Markdown table per model/task/batch, frameworks as rows (the study's reading order)."""
    parts = []
    for (model, task, batch), section in table.groupby(level=STUDY_KEYS, sort=False):
        parts.append(f"### {model} {task}, batch {batch}\n\n"
                     + markdown(section.droplevel(STUDY_KEYS)))
    return "\n".join(parts) or "(no model/task ran the baseline and another precision)\n"


def markdown(table: pd.DataFrame) -> str:
    """A Markdown table with empty cells where a value is missing (no ratio, no claim), not "nan"."""
    flat = table.reset_index()
    return flat.astype(object).where(flat.notna(), "").to_markdown(index=False) + "\n"


def _mig_named(name: str | None, mig: bool) -> str | None:
    return f"{name} (MIG)" if mig and isinstance(name, str) and "MIG" not in name.split() else name


def _block_means(timing: dict) -> list[float] | None:
    """Mean ms/step of each synced block of the window (kbench.instruments.timing), or None for a record without them."""
    if not timing.get("block_ms"):
        return None
    return [ms / steps for ms, steps in zip(timing["block_ms"], timing["block_steps"])]


def _only_process_mib(processes: list[dict] | None) -> float | None:
    """NVML's per-process device memory where exactly one process was on the GPU (one cell per GPU: that process is
    the cell; NVML names host PIDs, which a container cannot match against its own)."""
    if not processes or len(processes) != 1:
        return None
    return _mib(processes[0].get("used_bytes"))


def _mib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 1)
