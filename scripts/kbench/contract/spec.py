"""The one typed record of a cell's resolved config, made once by the plan (kbench.plan.matrix.spec) and read by every
stage after it: the launcher, the runner, the adapters, the FLOP counts, the tables. A dict only at the JSON edge
(to_dict / from_dict: the cell JSON and the runner's argument), read strictly there: an unknown or missing key is an
error naming it, never a silent default."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

# The accelerator a run's cells are on (config accelerator: gpu | gpu-cuda12 | cpu, which lock of each stack): every
# value but cpu is a GPU's, whatever CUDA its locks carry. The one meaning of "on a GPU": the plan, the launcher, the
# runner, the preflight, the disk check, the tables (RunContext.on_gpu) and the first page all ask on_gpu.
CPU = "cpu"


def on_gpu(accelerator: str | None) -> bool:
    """Whether a run on this accelerator is on a GPU (gpu and gpu-cuda12 alike); a record that names none (an
    equivalence job's from before the field) reads as the GPU's only where it names one."""
    return accelerator is not None and accelerator != CPU


@dataclass(frozen=True)
class Dtypes:
    """What the precision resolves to (kbench.contract.precision.dtypes): the adapters read these, never the name."""
    weights: str
    compute: str
    loss_scaling: bool


@dataclass(frozen=True)
class Steps:
    """How many steps the timing runs: warm-up steps (the first excluded), timed steps, synced blocks; and after the
    window, the steps profiled for the breakdown by kind of work (kbench.breakdown; 0: none)."""
    warmup: int
    timed: int
    blocks: int
    breakdown: int = 0


@dataclass(frozen=True)
class StepShape:
    """What one step computes, and no more: what a FLOP count reads (kbench.results.flops), from a CellSpec
    (.shape) or from a table's row of a cell record."""
    model: str
    task: str
    batch_size: int
    arch: Mapping[str, Any]
    inputs: Mapping[str, Any]
    task_options: Mapping[str, Any]
    adapter: str | None = None


@dataclass(frozen=True)
class CellSpec:
    cell_id: str
    suite: str
    profile: str
    size: str
    accelerator: str
    model: str
    task: str
    batch_size: int
    framework: str
    framework_def: Mapping[str, Any]
    settings: Mapping[str, Any]
    env: Mapping[str, str]
    precision: str
    dtypes: Dtypes
    arch: Mapping[str, Any]
    inputs: Mapping[str, Any]
    task_options: Mapping[str, Any]
    steps: Steps
    seed: int
    equivalence: Mapping[str, Any] | None = field(default=None)   # the equivalence check's variant (aligned)

    @property
    def adapter(self) -> str:
        return self.framework_def["adapter"]

    @property
    def on_gpu(self) -> bool:
        return on_gpu(self.accelerator)

    @property
    def shape(self) -> StepShape:
        return StepShape(self.model, self.task, self.batch_size, self.arch, self.inputs, self.task_options,
                         self.adapter)

    @property
    def stack(self) -> str:
        return self.framework_def["stack"]

    @property
    def aligned(self) -> bool:
        """The equivalence check's run with a named design difference removed (kbench.equivalence.check)."""
        return bool((self.equivalence or {}).get("aligned"))

    def replace(self, **changes) -> "CellSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The JSON form (the cell JSON's "spec", the runner's argument)."""
        found = dataclasses.asdict(self)
        if found["equivalence"] is None:
            del found["equivalence"]
        return found

    @classmethod
    def of(cls, value) -> "CellSpec":
        """A CellSpec from either form (a stage that takes a spec from a file or from its caller)."""
        return value if isinstance(value, cls) else cls.from_dict(value)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CellSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in data and f.default is dataclasses.MISSING)
        if unknown or missing:
            raise ValueError(f"a cell spec with {'unknown keys ' + ', '.join(unknown) if unknown else ''}"
                             f"{'; ' if unknown and missing else ''}"
                             f"{'missing keys ' + ', '.join(missing) if missing else ''}; a spec has: "
                             f"{', '.join(sorted(names))}")
        values = dict(data)
        for name, kind in (("dtypes", Dtypes), ("steps", Steps)):
            if not isinstance(values[name], kind):
                values[name] = kind(**values[name])
        return cls(**values)


@dataclass(frozen=True)
class JobSpec:
    """What a job process got (the equivalence check's, JAX against NumPy's: kbench.plan.matrix.equivalence_job,
    kbench.studies.jax_numpy.job): not a cell. Its JSON is kept whole (its digest names it); the fields every reader
    asks of a job are read here, typed."""
    data: Mapping[str, Any]

    def _get(self, key: str):
        return self.data.get(key)

    cell_id = property(lambda self: self.data["cell_id"])
    job = property(lambda self: self.data["job"])
    suite = property(lambda self: self._get("suite"))
    accelerator = property(lambda self: self._get("accelerator"))
    profile = property(lambda self: self._get("profile"))
    model = property(lambda self: self._get("model"))
    framework = property(lambda self: self._get("framework"))
    reference = property(lambda self: self._get("reference"), doc="None: this job makes the reference")
    on_gpu = property(lambda self: on_gpu(self.accelerator))

    @property
    def stack(self) -> str:
        return self.data["framework_def"]["stack"]

    def to_dict(self) -> dict:
        return dict(self.data)


def spec_of(data: Mapping[str, Any] | CellSpec | JobSpec) -> CellSpec | JobSpec:
    """A record's spec, typed at the JSON edge: a job's (it names its job) or a cell's (read strictly)."""
    if isinstance(data, (CellSpec, JobSpec)):
        return data
    return JobSpec(dict(data)) if "job" in data else CellSpec.from_dict(data)
