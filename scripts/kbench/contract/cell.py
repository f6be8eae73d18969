"""The cell contract: one typed record per cell result, the only code that reads or writes a cell JSON.

A result always has status ok | failed | unsupported | oom (the batch did not fit in the device's memory: the
framework's own error, or the batch study's rung below already did not). All but ok carry an error (type, message) and no
timing, so the tables can show "failed: <type>" or "n/a: <reason>" without stopping the other cells. A fit cell records
its loss at the first and last timed step ("loss"), a cell that built its model its parameter counts ("params") and
the dtypes its steps ran in ("numerics").
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kbench.contract.spec import CellSpec, JobSpec, spec_of
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
    spec: CellSpec | JobSpec     # typed at the JSON edge (spec_of): a cell's, or a job's
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
        self.spec = spec_of(self.spec)
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
        if not isinstance(data.get("spec"), dict):
            raise SchemaError(source, "no spec", "a cell record holds the spec it ran")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except (ValueError, TypeError) as error:      # its spec read strictly (spec_of), or a bad status
            raise SchemaError(source, str(error), "a record as kbench.contract.cell writes it: rerun the cell") from None

    @classmethod
    def read(cls, path: str | os.PathLike) -> CellResult:
        return cls.from_json(files.read_json(path), str(path))

    def to_json(self) -> dict:
        data = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "spec"}
        return {**data, "spec": self.spec.to_dict()}

    def write(self, path: str | os.PathLike) -> None:
        files.write_json(path, self.to_json())

    # ------------------------------------------------------------ views

    @property
    def cell_spec(self) -> CellSpec:
        """The record's spec as a cell's (a job's is not: ValueError naming the job)."""
        if not isinstance(self.spec, CellSpec):
            raise ValueError(f"{self.cell_id}: the record of a {self.spec.job} job, not of a cell")
        return self.spec

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


def new_result(spec: CellSpec | JobSpec | dict, context: dict, status: str, error: dict | None = None,
               repeat: int = 1) -> CellResult:
    """spec: a CellSpec, or a job's (the equivalence check's, JAX against NumPy's), typed or as its JSON."""
    spec = spec_of(spec)
    return CellResult(cell_id=spec.cell_id, status=status, spec=spec, provenance=dict(context), error=error,
                      repeat=repeat)


def read(path: str | os.PathLike) -> CellResult:
    return CellResult.read(path)
