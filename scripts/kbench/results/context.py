"""What a table reads of its run, typed and built once: RunContext (the suite, the profile, where tables and plots go,
the config's slices the tables read), Records (the records a table is built from), and Table (what a table module
declares: its outputs, plots, the records it reads and its build(records, run)). kbench.results.registry lists the
table modules; the Snakemake rules, the file lists, the archive's check and the first page all loop over it.

The Snakemake rule builds the context from the config (RunContext.of) and hands it to the table's process as JSON
(a rule param: a change in the context reruns the tables that read it).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kbench.contract import cell, spec
from kbench.plan import claims, departures, matrix
from kbench.results import flops

# The records a table may read, by kind: the suite's or profile's cells (every repeat, in the config's order), the
# batch study's rungs, the warm twins, the equivalence jobs, the stacks' environment records, the JAX-against-NumPy job.
RECORD_KINDS = ("cells", "ladder", "warm", "equivalence", "environments", "jax_numpy")
# What a run reads of config published: the published table (its claims are kbench.plan.claims')
PUBLISHED = ("source", "device", "rows")


def folder(root: str | Path, profile: str | None) -> Path:
    """Where a table's files go under the suite's tables (or plots) folder: its profile's folder, or the suite's."""
    return Path(root) / profile if profile else Path(root)


@dataclass(frozen=True)
class RunContext:
    suite: str
    profile: str | None                 # None: a table of the whole suite
    tables_root: Path                   # the suite's tables folder (results/tables/<suite>)
    plots_root: Path | None             # the suite's plots folder; None: no plots (the archive's check)
    accelerator: str
    frameworks: tuple[str, ...]         # the column order
    keras3: tuple[str, ...]
    native: tuple[str, ...]
    precision_baseline: str = "float32"
    precision_claims: tuple[dict, ...] = ()
    unreproduced: tuple[dict, ...] = ()     # the departures no profile keeps, of this profile
    differences: tuple[dict, ...] = ()      # config equivalence.differences
    departures: tuple[dict, ...] = ()
    profile_defs: dict = field(default_factory=dict)
    tuning: tuple[dict, ...] = ()
    first_step: dict | None = None          # config first_step (absent from a run that predates it)
    ladder_frameworks: tuple[str, ...] = ()
    own_batch: tuple[tuple, ...] = ()       # (model, task, precision, batch): each ladder row's own batch
    batch_tolerance: float = 0.10
    tuned_profile: str | None = None
    tuning_applied: dict = field(default_factory=dict)
    jax_numpy: dict | None = None           # {claim, workloads} where the study runs for the suite
    published: dict = field(default_factory=dict)   # config published: source, device, rows (the published table)

    @property
    def on_gpu(self) -> bool:
        """The run is on a GPU (gpu and gpu-cuda12 alike: kbench.contract.spec.on_gpu, the one meaning)."""
        return spec.on_gpu(self.accelerator)

    @property
    def tables_dir(self) -> Path:
        return folder(self.tables_root, self.profile)

    @property
    def plots_dir(self) -> Path | None:
        return None if self.plots_root is None else folder(self.plots_root, self.profile)

    def tables_of(self, profile: str) -> Path:
        return self.tables_root / profile

    @classmethod
    def of(cls, config: dict, suite: str, profile: str | None, tables_root, plots_root=None) -> RunContext:
        """From a run's config (an archived one too: a key a run predates reads as its absence)."""
        study, batch_study = config.get("precision_study") or {}, config.get("batch_study") or {}
        jax_numpy = None
        if matrix.jax_numpy_planned(config, suite):
            settings = config["jax_numpy"]
            jax_numpy = {"claim": claims.at(config, "jax_numpy.claim"),
                         "workloads": {w: settings["workloads"][w] for w in settings["suites"][suite]["sizes"]}}
        return cls(
            suite=suite, profile=profile, tables_root=Path(tables_root),
            plots_root=None if plots_root is None else Path(plots_root), accelerator=config["accelerator"],
            frameworks=tuple(config["frameworks"]), keras3=tuple(matrix.keras3_frameworks(config)),
            native=tuple(matrix.native_torch_frameworks(config)),
            precision_baseline=study.get("baseline", "float32"), precision_claims=claims.speedups(config),
            unreproduced=tuple(departures.unreproduced(config, profile)) if profile else (),
            differences=tuple((config.get("equivalence") or {}).get("differences", ())),
            departures=tuple(config.get("departures", ())), profile_defs=dict(config.get("profile_defs", {})),
            tuning=tuple(config.get("tuning") or ()), first_step=config.get("first_step"),
            ladder_frameworks=tuple(matrix.ladder_frameworks(config, suite)) if batch_study else (),
            own_batch=tuple((*row, b) for row, b in matrix.ladder_rows(config, suite).items()) if batch_study else (),
            batch_tolerance=batch_study.get("tolerance", 0.10), tuned_profile=matrix.tuned_profile(config),
            tuning_applied=matrix.tuning_ids(config) if matrix.tuned_profile(config) else {}, jax_numpy=jax_numpy,
            published={k: v for k, v in (config.get("published") or {}).items() if k in PUBLISHED})

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in data.items()})   # the config's order

    @classmethod
    def from_json(cls, text: str) -> RunContext:
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"a run context with unknown keys {', '.join(unknown)}; it has: {', '.join(sorted(names))}")
        for name in ("tables_root", "plots_root"):
            data[name] = None if data.get(name) is None else Path(data[name])
        for name, value in data.items():
            if isinstance(value, list):
                data[name] = tuple(tuple(v) if name == "own_batch" else v for v in value)
        return cls(**data)


def published_flops(config: dict) -> tuple[dict[str, int | None], ...]:
    """Each published row's model FLOPs per step at the paper size, per column the row has a number for (the anchor
    profile's cell: kbench.results.flops; None where no count is known): what its numbers imply (the first page)."""
    found = []
    for entry in (config.get("published") or {}).get("rows", ()):
        shape = (entry["model"], entry["task"], entry["batch_size"], entry["precision"])
        found.append({framework: flops.per_step(matrix.spec(config, "paper", *shape, framework, "anchor"))
                      if flops.known(entry["model"], entry["task"]) else None
                      for framework, ms in entry["ms"].items() if ms})
    return tuple(found)


@dataclass(frozen=True)
class Records:
    """The records a table is built from (kinds: RECORD_KINDS), each list in the order the plan gives."""
    cells: tuple[cell.CellResult, ...] = ()
    ladder: tuple[cell.CellResult, ...] = ()
    warm: tuple[cell.CellResult, ...] = ()
    equivalence: tuple[cell.CellResult, ...] = ()
    environments: tuple[dict, ...] = ()
    jax_numpy: tuple[cell.CellResult, ...] = ()


@dataclass(frozen=True)
class Table:
    """What a table module declares (its TABLE): kbench.results.registry lists them."""
    rule: str                               # its Snakemake rule (and its log's folder)
    outputs: tuple[str, ...]                # files under the tables folder (the profile's, or the suite's)
    build: Callable[[Records, RunContext], Any]
    category: str                           # the Snakemake report's category of its HTML tables and PNG plots
    plots: tuple[str, ...] = ()             # files under the plots folder
    reads: tuple[str, ...] = ()             # the record kinds it is built from (RECORD_KINDS)
    # tables it reads of other tables, (profile, file name); a profile of None: its own
    reads_tables: Callable[[RunContext], list[tuple[str | None, str]]] = lambda run: []
    per_profile: bool = True                # one per profile (tables/<suite>/<profile>/), else the suite's one
    # where the run makes it: the profiles (None: the suite) it is made for; absent: every profile, or the suite
    planned: Callable[[dict, str], list[str | None]] | None = None
    archived: bool = True                   # packed into a run's archive
    rebuilt: bool = True                    # the archive's check rebuilds it from the archived records

    def profiles(self, config: dict, suite: str) -> list[str | None]:
        if self.planned is not None:
            return self.planned(config, suite)
        return list(config["profiles"]) if self.per_profile else [None]

    def __post_init__(self):
        unknown = sorted(set(self.reads) - set(RECORD_KINDS))
        if unknown:
            raise ValueError(f"table {self.rule}: unknown record kinds {', '.join(unknown)}; "
                             f"kinds: {', '.join(RECORD_KINDS)}")
