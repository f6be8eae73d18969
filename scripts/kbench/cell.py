"""The cell contract: one typed record per cell result, the only code that reads or writes a cell JSON.

A result always has status ok | failed | unsupported | oom (the batch did not fit in the device's memory: the
framework's own error, or the batch study's rung below already did not). All but ok carry an error (type, message) and no
timing, so the tables can show "failed: <type>" or "n/a: <reason>" without stopping the other cells. A fit cell records
its loss at the first and last timed step ("loss"), a cell that built its model its parameter counts ("params") and
the dtypes its steps ran in ("numerics").
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kbench.spec import CellSpec
from kbench import files

SCHEMA_VERSION = 6
STATUSES = ("ok", "failed", "unsupported", "oom")
STAGED = "result"        # a cell process writes result.json in its staging folder, and beside it result.<x>


def beside(record: str | os.PathLike, staged: str) -> Path:
    """Where a file the cell process wrote beside its result (staged: result.<x>) is kept beside its record, as the
    launcher moves it out of the staging folder: x.r1.json -> x.r1.<x> (a trace, a compile cache)."""
    record = Path(record)
    return record.with_name(record.stem + staged.removeprefix(STAGED))


# what a framework's compile counters call a compiled program (torch and Paddle: graphs; JAX: XLA compiles)
PROGRAMS = ("graphs", "xla_compiles")
# a compiled cell's warm twin (rule warm_cell) beside its record: <cell>.r<repeat>.warm.json
WARM_SUFFIX = ".warm.json"
# Older records a reader still accepts, and what each lacks: an archive made before a field existed stays readable.
# (5: timing had no synced blocks, block_ms; such a record of one repeat gets no within-run interval.)
_ADDED_SINCE = {2: {"numerics": None, "evidence": None, "repeat": 1, "energy": None, "equivalence": None},
                3: {"evidence": None, "repeat": 1, "energy": None, "equivalence": None},
                4: {"repeat": 1, "energy": None, "equivalence": None}, 5: {"energy": None, "equivalence": None}}


class SchemaError(files.BadFile):
    """A cell JSON this code cannot read (a newer schema, or not a cell record)."""


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def spec_digest(spec) -> str:
    """Digest of the resolved cell config: two cells with the same digest ran the same workload definition."""
    spec = spec.to_dict() if hasattr(spec, "to_dict") else spec        # a CellSpec, or a job's dict
    return "sha256:" + hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def error_info(error_type: str, message: str, detail: str = "") -> dict:
    return {"type": error_type, "message": message, "detail": detail}


@dataclass
class CellResult:
    cell_id: str
    status: str
    spec: dict
    provenance: dict
    error: dict | None = None
    timing: dict | None = None
    params: dict | None = None
    loss: dict | None = None
    numerics: dict | None = None
    evidence: dict | None = None
    memory: dict | None = None
    energy: dict | None = None      # the GPU during the timed window (kbench.gpu.nvml.WindowMonitor): energy, clocks, slowdowns
    equivalence: dict | None = None     # an equivalence job's findings (kbench.equivalence.check), not a cell's
    jax_numpy: dict | None = None       # the JAX-against-NumPy job's findings (kbench.studies.jax_numpy), not a cell's
    breakdown: dict | None = None       # the steps profiled after the window, by kind of work (kbench.breakdown)
    first_step: dict | None = None      # time to the first step in its parts, the compile cache (kbench.run.runner)
    repeat: int = 1                 # which fresh process of the cell this is (1 .. config repeats)
    spec_digest: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")
        self.spec_digest = self.spec_digest or spec_digest(self.spec)

    # ------------------------------------------------------------ JSON

    @classmethod
    def from_json(cls, data: dict, source: str = "cell JSON") -> CellResult:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION and version not in _ADDED_SINCE:
            raise SchemaError(source, "not a cell record" if version is None else f"schema version {version!r}",
                              f"this code reads schema {SCHEMA_VERSION} and {', '.join(map(str, sorted(_ADDED_SINCE)))}"
                              ": rerun the cell")
        data = {**_ADDED_SINCE.get(version, {}), **data, "schema_version": SCHEMA_VERSION}
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def read(cls, path: str | os.PathLike) -> CellResult:
        return cls.from_json(files.read_json(path), str(path))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def write(self, path: str | os.PathLike) -> None:
        files.write_json(path, self.to_json())

    # ------------------------------------------------------------ views

    @property
    def cell_spec(self) -> CellSpec:
        """The record's spec, typed (a cell's; a job's dict is not a cell spec: ValueError naming its keys)."""
        return CellSpec.from_dict(self.spec)

    @property
    def mean_ms(self) -> float | None:
        return self.timing["mean_ms"] if self.status == "ok" and self.timing else None

    def text(self) -> str:
        """How a table cell shows this result: the mean ms/step, or why there is none."""
        if self.status == "ok":
            return f"{self.mean_ms:.2f}"
        error = self.error or {}
        if self.status == "unsupported":    # configured n/a (NotApplicable) or the adapter's own (NotSupported)
            return f"{'n/a' if error.get('type') == 'NotApplicable' else 'unsupported'}: {error.get('message')}"
        return f"{self.status}: {error.get('type')}"

    def row(self) -> dict:
        """The flat view: every statistic and provenance field a table or a comparison reads, one level deep."""
        spec, timing, prov = self.spec, self.timing or {}, self.provenance
        error, params, memory = self.error or {}, self.params or {}, self.memory or {}
        loss, numerics, energy, evidence = self.loss or {}, self.numerics or {}, self.energy or {}, self.evidence or {}
        compiles = evidence.get("compiles") or {}
        before, in_window = compiles.get("before_window") or {}, compiles.get("in_window") or {}
        mig = bool((prov.get("device_identity") or {}).get("mig"))
        return {
            "cell_id": self.cell_id, "repeat": self.repeat, "suite": spec["suite"], "profile": spec.get("profile"),
            "model": spec["model"], "task": spec["task"],
            "batch_size": spec["batch_size"], "precision": spec["precision"], "framework": spec["framework"],
            "status": self.status, "error_type": error.get("type"), "error_message": error.get("message"),
            "text": self.text(),
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
            "compiles_in_window": sum(in_window.get(k, 0) for k in PROGRAMS) if in_window else None,
            "graph_breaks": (before.get("graph_breaks", 0) + before.get("unsupported", 0)) if before else None,
            "cudagraph_skips": before.get("cudagraph_skips", 0) + in_window.get("cudagraph_skips", 0)
            if before else None,
            # a MIG instance is named as one (kbench.run.runner.check_device_identity): it has a part of the chip
            "device": _mig_named(prov.get("device"), mig), "mig": mig,
            "gpu_name": _mig_named(((prov.get("device_facts") or {}).get("nvml") or {}).get("name"), mig),
            "runtime": prov.get("runtime"), "git_commit": prov.get("git_commit"),
            "environment_lock_sha256": (prov.get("environment") or {}).get("lock_sha256"),
            "packages": ", ".join(f"{k}=={v}" for k, v in sorted((prov.get("packages") or {}).items())),
            "spec_digest": self.spec_digest,
            # what derived figures (FLOPs) are computed from; not written to the CSVs
            "arch": spec["arch"], "inputs": spec["inputs"], "task_options": spec["task_options"],
            "adapter": spec.get("framework_def", {}).get("adapter"),
        }


def _mig_named(name: str | None, mig: bool) -> str | None:
    return f"{name} (MIG)" if mig and isinstance(name, str) and "MIG" not in name.split() else name


def _block_means(timing: dict) -> list[float] | None:
    """Mean ms/step of each synced block of the window (kbench.timing), or None for a record without them."""
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


def new_result(spec, context: dict, status: str, error: dict | None = None, repeat: int = 1) -> CellResult:
    """spec: a CellSpec, or a job's dict (the equivalence check's, JAX against NumPy's); the record keeps its JSON."""
    spec = spec.to_dict() if hasattr(spec, "to_dict") else spec
    return CellResult(cell_id=spec["cell_id"], status=status, spec=spec, provenance=dict(context), error=error,
                      repeat=repeat)


def read(path: str | os.PathLike) -> CellResult:
    return CellResult.read(path)
