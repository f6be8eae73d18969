"""Which cells exist: config -> (profile x model x task x batch x precision x framework) for the chosen suite, each
runnable or n/a, and the resolved spec a cell process gets (its settings: the profile's, after the departures that
profile keeps).

The JSON schema (schemas/config.schema.yaml) checks shapes; this module checks names, in one place: that every name
used in one section is defined in another (or in kbench.contract.precision), and that the files a name stands for exist (each
selected stack's lock, each adapter's module). Every message names the key, the bad value and what is allowed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from kbench.instruments import compile_cache
from kbench.contract import precision
from kbench.machine import runtimes
from kbench.models import family
from kbench.contract.spec import CellSpec, on_gpu
from kbench.machine.host import REPO
from kbench.stacks import lock_path, locks

TASKS = ("fit", "predict", "generate")
GELU_MODELS = ("bert",)     # whose feed-forward GELU is a setting (settings.gelu)


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Cell:
    suite: str
    profile: str                          # a key of profile_defs: whose settings the cell runs with
    model: str
    task: str
    batch_size: int
    precision: str                        # a kbench.contract.precision name: float32, bfloat16, mixed_float16, mixed_bfloat16
    framework: str
    not_applicable: str | None = None     # the reason, when the framework cannot run this model/task

    @property
    def cell_id(self) -> str:
        return (f"{self.suite}/{self.profile}/{self.model}/{self.task}/bs{self.batch_size}/{self.precision}/"
                f"{self.framework}")


def _require(name, known, key: str) -> None:
    if name not in known:
        raise ConfigError(f"config key {key}: {name!r} is not defined; allowed: {', '.join(map(str, sorted(known)))}")


def check_references(config: dict, repo: Path = REPO) -> None:
    if config["runtime"] not in ("auto", *runtimes.RUNTIMES):
        raise ConfigError(f"config key runtime: {config['runtime']!r} is not allowed; allowed: "
                          f"{', '.join(('auto', *runtimes.RUNTIMES))}")
    suites, frameworks, models = config["suites"], config["framework_defs"], config["model_defs"]
    _require(config["suite"], suites, "suite")
    size = suites[config["suite"]]["size"]
    for i, framework in enumerate(config["frameworks"]):
        _require(framework, frameworks, f"frameworks[{i}] (see framework_defs)")
    for i, model in enumerate(config["models"]):
        _require(model, models, f"models[{i}] (see model_defs)")
        _require(size, models[model]["sizes"], f"model_defs.{model}.sizes (suite {config['suite']!r})")
    for i, name in enumerate(config["precisions"]):
        _require(name, precision.PRECISIONS, f"precisions[{i}]")
    for model, model_def in models.items():
        # what the model is (constructors, inputs, FLOPs, tolerance) lives in its family module: none, no cells
        _require(model, family.families(), f"model_defs.{model} (a model's family module, kbench/models/<family>.py)")
        for task in model_def["tasks"]:
            _require(task, family.of(model).tasks, f"model_defs.{model}.tasks (the tasks its family module steps)")
        for i, name in enumerate(model_def["precisions"]):
            _require(name, precision.PRECISIONS, f"model_defs.{model}.precisions[{i}]")
    _require(config["precision_study"]["baseline"], precision.PRECISIONS, "precision_study.baseline")
    adapters = sorted(p.stem for p in (repo / "scripts" / "kbench" / "adapters").glob("[!_]*.py"))
    for framework in config["frameworks"]:
        definition = frameworks[framework]
        _require(definition["adapter"], adapters, f"framework_defs.{framework}.adapter")
        lock = lock_path(definition["stack"], config["accelerator"])
        if not (repo / lock).is_file():
            raise ConfigError(f"config key framework_defs.{framework}.stack: {definition['stack']!r} has no lock "
                              f"{lock} for accelerator {config['accelerator']!r}; stacks with one: "
                              f"{', '.join(stacks_with_lock(config['accelerator'], repo))}")
    for i, rule in enumerate(config["not_applicable"]):
        _check_patterns({"framework": rule["framework"], "model": rule["model"]}, config, f"not_applicable[{i}]")
        matched = [m for m in models if matches(rule["model"], m)]
        tasks = sorted({t for m in matched for t in models[m]["tasks"]})
        if not any(matches(rule["task"], task) for task in tasks):
            raise ConfigError(f"config key not_applicable[{i}].task: {rule['task']!r} matches no task of "
                              f"{rule['model']}; allowed: {', '.join(tasks)} or a pattern such as '*'")
        if "precision" in rule:
            known = sorted({p for m in matched for p in models[m]["precisions"]})
            if not any(matches(rule["precision"], p) for p in known):
                raise ConfigError(f"config key not_applicable[{i}].precision: {rule['precision']!r} matches no "
                                  f"precision of {rule['model']}; allowed: {', '.join(known)} or a pattern")
    for i, claim in enumerate(config["precision_study"]["claims"]):
        _require(claim.get("baseline", config["precision_study"]["baseline"]), precision.PRECISIONS,
                 f"precision_study.claims[{i}].baseline")
        _require(claim["model"], models, f"precision_study.claims[{i}].model")
        _require(claim["task"], models[claim["model"]]["tasks"], f"precision_study.claims[{i}].task")
    for i, profile in enumerate(config["profiles"]):
        _require(profile, config["profile_defs"], f"profiles[{i}] (see profile_defs)")
    _require(config["equivalence"]["reference"], frameworks, "equivalence.reference (see framework_defs)")
    for i, model in enumerate(config["equivalence"].get("models") or []):
        _require(model, models, f"equivalence.models[{i}]")
    for i, rule in enumerate(config["equivalence"]["differences"]):
        _check_patterns(rule, config, f"equivalence.differences[{i}]")
    for i, rule in enumerate(config["not_compilable"]):
        _check_patterns(rule, config, f"not_compilable[{i}]")
    for i, rule in enumerate(config["breakdown"]["cells"]):
        _check_patterns(rule, config, f"breakdown.cells[{i}]")
    for i, rule in enumerate(config["first_step"]["warm_cells"]):
        _check_patterns(rule, config, f"first_step.warm_cells[{i}]", precisions=True)
    check_batch_study(config)
    check_tuning(config)
    for departure in config["departures"]:
        key = f"departures[{departure['id']}]"
        for profile in departure["kept_by"]:
            _require(profile, config["profile_defs"], f"{key}.kept_by")
        for j, rule in enumerate(departure.get("applies", [])):
            _check_patterns(rule, config, f"{key}.applies[{j}]")


# The tuned profile's settings (config `tuning`): each key, the adapters that honour it and the values allowed.
TUNING = {
    "compile_mode": {"adapters": ("native_torch",),
                     "values": ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")},
    "fused_optimizer": {"adapters": ("native_torch",), "values": (True,)},
    "cudnn_benchmark": {"adapters": ("native_torch",), "values": (True,)},
    "channels_last": {"adapters": ("native_torch",), "values": (True,)},
}


def jax_numpy_planned(config: dict, suite: str) -> bool:
    """JAX against NumPy (kbench.studies.jax_numpy) runs for a suite it lists, where it is enabled and its column is
    selected (its environment is built for the column's cells anyway); a run that predates the study has none."""
    study = config.get("jax_numpy")
    return bool(study) and study["enabled"] and suite in study["suites"] and study["framework"] in config["frameworks"]


def tuned_profile(config: dict) -> str | None:
    """The selected profile that tunes (profile_defs.<name>.tunes) where strict is selected beside it: the pair the
    tuning gain compares; else None."""
    tuned = [p for p in config["profiles"] if config["profile_defs"][p].get("tunes")]
    return tuned[0] if tuned and "strict" in config["profiles"] else None


def check_tuning(config: dict) -> None:
    """Every tuning entry cites its source and sets only known settings, each for columns whose adapter has it."""
    for i, entry in enumerate(config.get("tuning") or []):
        key = f"tuning[{entry.get('id', i)}]"
        if not str(entry.get("source") or "").strip():
            raise ConfigError(f"config key {key}.source: missing; allowed: the framework's documentation that "
                              "recommends the setting for performance (a URL or file, with its words)")
        for j, rule in enumerate(entry["applies"]):
            _check_patterns(rule, config, f"{key}.applies[{j}]")
            for name, value in rule["settings"].items():
                where = f"{key}.applies[{j}].settings.{name}"
                if name not in TUNING:
                    raise ConfigError(f"config key {where}: not a tuning setting; allowed: {', '.join(TUNING)}")
                if value not in TUNING[name]["values"]:
                    raise ConfigError(f"config key {where}: {value!r} is not allowed; allowed: "
                                      f"{', '.join(map(str, TUNING[name]['values']))}")
                for framework in config["framework_defs"]:
                    adapter = adapter_of(config, framework)
                    if matches(rule.get("framework"), framework) and adapter not in TUNING[name]["adapters"]:
                        raise ConfigError(f"config key {where}: column {framework} (adapter {adapter}) has no "
                                          f"{name}; allowed for columns of adapter "
                                          f"{', '.join(TUNING[name]['adapters'])}")


def applies(rule: dict, framework: str, model: str, task: str) -> bool:
    """A departure, tuning or not_compilable rule's patterns all match the cell."""
    return all(matches(rule.get(k), v) for k, v in (("framework", framework), ("model", model), ("task", task)))


def matches(pattern: str | None, name: str) -> bool:
    """A cell pattern: fnmatch, with "|" between alternatives; missing means every name."""
    return pattern is None or any(fnmatch(name, alternative) for alternative in pattern.split("|"))


def _check_patterns(rule: dict, config: dict, key: str, precisions: bool = False) -> None:
    """A pattern that matches no defined name never applies: a typo would silently change nothing."""
    for field, known in (("framework", config["framework_defs"]), ("model", config["model_defs"]),
                         ("task", TASKS), *((("precision", precision.PRECISIONS),) if precisions else ())):
        if not any(matches(rule.get(field), name) for name in known):
            raise ConfigError(f"config key {key}.{field}: {rule[field]!r} matches nothing; allowed: "
                              f"{', '.join(sorted(known))}, patterns such as '*' or 'a|b'")


def stacks_with_lock(accelerator: str, repo: Path = REPO) -> list[str]:
    return [stack for stack, _ in locks(repo, accelerator)]


def not_applicable_reason(config: dict, model: str, task: str, framework: str,
                          precision_name: str | None = None) -> str | None:
    gpu_only = precision_name and precision.PRECISIONS[precision_name].gpu_only
    if gpu_only and not on_gpu(config["accelerator"]):
        return gpu_only
    for rule in config["not_applicable"]:
        if (matches(rule["framework"], framework) and matches(rule["model"], model) and matches(rule["task"], task)
                and (precision_name is None or matches(rule.get("precision"), precision_name))
                and rule.get("accelerator", config["accelerator"]) == config["accelerator"]):
            return rule["reason"]
    return None


def cells(config: dict, suite: str | None = None) -> list[Cell]:
    """Every cell of `suite` (default: the configured one) for the selected models and frameworks."""
    suite = suite or config["suite"]
    check_references({**config, "suite": suite})
    found = []
    for model in config["models"]:
        model_def = config["model_defs"][model]
        precisions = [p for p in model_def["precisions"] if p in config["precisions"]]
        size_def = model_def["sizes"][config["suites"][suite]["size"]]
        for task, task_def in model_def["tasks"].items():
            for batch_size in size_def.get("batch_sizes", {}).get(task, task_def["batch_sizes"]):
                for name in precisions:
                    for framework in config["frameworks"]:
                        found.append(Cell(suite, "", model, task, batch_size, name, framework,
                                          not_applicable_reason(config, model, task, framework, name)))
    return [dataclasses.replace(c, profile=profile) for profile in config["profiles"] for c in found]


# ---------------------------------------------------------------- the batch study's ladders

def ladder(config: dict, suite: str) -> dict | None:
    """The suite's batch ladder (config batch_study.ladders.<suite>), or None: the study is off, the suite is not in
    batch_study.suites, or it has no ladder."""
    study = config.get("batch_study") or {}
    runs = study.get("enabled") and suite in (study.get("suites") or [])
    return (study.get("ladders") or {}).get(suite) if runs else None


def ladder_frameworks(config: dict, suite: str) -> list[str]:
    """The ladder's columns that are selected, in the config's column order."""
    chosen = (ladder(config, suite) or {}).get("frameworks")
    return [f for f in config["frameworks"] if chosen is None or f in chosen]


def own_batches(config: dict, suite: str, model: str, task: str) -> list[int]:
    """The batches the benchmark's own table runs for a model's task in a suite (the published ones, or the size's)."""
    model_def = config["model_defs"][model]
    size_def = model_def["sizes"][config["suites"][suite]["size"]]
    return list(size_def.get("batch_sizes", {}).get(task, model_def["tasks"][task]["batch_sizes"]))


def ladder_rows(config: dict, suite: str) -> dict[tuple, int]:
    """(model, task, precision) -> the row's own batch (its largest), for every row of the suite's ladder."""
    rows = (ladder(config, suite) or {}).get("rows") or {}
    return {(model, task, name): max(own_batches(config, suite, model, task))
            for model, entry in rows.items() if model in config["models"]
            for task in entry if task != "precisions" for name in entry["precisions"]}


def batch_cells(config: dict, suite: str | None = None) -> list[Cell]:
    """The batch study's cells of a suite: every rung of each selected model's ladder, in the ladder's selected
    columns and precisions, per profile; a rung at the row's own batch is the benchmark's own cell (the same id)."""
    suite = suite or config["suite"]
    found = []
    for model, rows in ((ladder(config, suite) or {}).get("rows") or {}).items():
        if model not in config["models"]:
            continue
        precisions = [p for p in rows["precisions"] if p in config["precisions"]]
        for task, rungs in rows.items():
            if task == "precisions":
                continue
            for batch in rungs:
                for name in precisions:
                    for framework in ladder_frameworks(config, suite):
                        found.append(Cell(suite, "", model, task, batch, name, framework,
                                          not_applicable_reason(config, model, task, framework, name)))
    return [dataclasses.replace(c, profile=profile) for profile in ladder_profiles(config) for c in found]


def ladder_profiles(config: dict) -> list[str]:
    """The selected profiles whose runs include the ladder (batch_study.profiles; null: every selected one)."""
    chosen = (config.get("batch_study") or {}).get("profiles")
    return [p for p in config["profiles"] if chosen is None or p in chosen]


def every_cell(config: dict, suite: str | None = None) -> list[Cell]:
    """The suite's cells: the benchmark's own, then the batch study's other rungs (each cell once)."""
    own = cells(config, suite)
    ids = {c.cell_id for c in own}
    return own + [c for c in batch_cells(config, suite) if c.cell_id not in ids]


def cell_spec(config: dict, c: Cell) -> CellSpec:
    return spec(config, c.suite, c.model, c.task, c.batch_size, c.precision, c.framework, c.profile)


def compiles_into_cache(config: dict, c: Cell) -> bool:
    """A runnable cell whose framework compiles it into a persistent compile cache (kbench.instruments.compile_cache)."""
    return not c.not_applicable and compile_cache.has_cache(cell_spec(config, c))


def warm_cells(config: dict, suite: str | None = None) -> list[Cell]:
    """The cells that get a warm twin (first_step.warm_runs): the suite's own cells (not the batch study's other
    rungs) that compile into a persistent cache and match one of first_step.warm_cells' patterns (none: every one)."""
    if not config["first_step"]["warm_runs"]:
        return []
    return [c for c in cells(config, suite) if compiles_into_cache(config, c)
            and not_warm_because(config["first_step"]["warm_cells"], c.framework, c.model, c.task, c.precision) is None]


def not_warm_because(warm_cells: list[dict], framework: str, model: str, task: str, precision_name: str) -> str | None:
    """Why first_step.warm_cells gives a compiled cell no warm twin (its patterns' reasons), None where one matches
    (or there are none: every compiled cell gets one)."""
    if not warm_cells or any(applies(rule, framework, model, task) and matches(rule.get("precision"), precision_name)
                             for rule in warm_cells):
        return None
    return "not in first_step.warm_cells: " + "; ".join(rule["reason"] for rule in warm_cells)


def cache_sources(config: dict, c: Cell, repeat: int) -> list[int] | None:
    """Which repeats of the cell a run's compile cache starts from: None, none (no persistent cache); [], an empty one
    (the first repeat: cold); [1], the first repeat's (a later repeat where first_step.reuse_caches says so)."""
    if not compiles_into_cache(config, c):
        return None
    return [1] if repeat > 1 and config["first_step"]["reuse_caches"] else []


def equivalence_cache_cells(config: dict, suite: str, profile: str, model: str, framework: str) -> list[Cell]:
    """The cells whose first repeats' compile caches an equivalence job of the column starts from
    (first_step.reuse_caches): those of its cell specs the run times, where they compile into a cache."""
    if not config["first_step"]["reuse_caches"]:
        return []
    planned = {c.cell_id: c for c in cells(config, suite) if c.profile == profile and c.model == model
               and c.framework == framework}
    job = equivalence_job(config, suite, profile, model, framework)
    return [planned[s["cell_id"]] for s in job["cells"]
            if s["cell_id"] in planned and compiles_into_cache(config, planned[s["cell_id"]])]


def previous_rung(config: dict, c: Cell) -> Cell | None:
    """The rung a study cell waits for: above the row's own batches each rung runs only after the one below it (so
    a column's ladder stops at its first out-of-memory rung); at or below them, none (a smaller batch fits where
    the row's own does)."""
    rows = ((ladder(config, c.suite) or {}).get("rows") or {}).get(c.model) or {}
    rungs = sorted(rows.get(c.task) or [])
    if c.batch_size not in rungs or c.batch_size <= max(own_batches(config, c.suite, c.model, c.task)):
        return None
    below = rungs[rungs.index(c.batch_size) - 1]
    return dataclasses.replace(c, batch_size=below)


def check_batch_study(config: dict) -> None:
    """The ladders' names and rungs, each message naming the key and what is allowed."""
    study = config.get("batch_study") or {}
    for i, suite in enumerate(study.get("suites") or []):
        _require(suite, study.get("ladders") or {}, f"batch_study.suites[{i}] (see batch_study.ladders)")
    for i, profile in enumerate(study.get("profiles") or []):
        _require(profile, config["profile_defs"], f"batch_study.profiles[{i}] (see profile_defs)")
    for suite, entry in (study.get("ladders") or {}).items():
        key = f"batch_study.ladders.{suite}"
        _require(suite, config["suites"], key.rsplit(".", 1)[0] + " (see suites)")
        for i, framework in enumerate(entry.get("frameworks") or []):
            _require(framework, config["framework_defs"], f"{key}.frameworks[{i}] (see framework_defs)")
        for model, rows in (entry.get("rows") or {}).items():
            _require(model, config["model_defs"], f"{key}.rows (see model_defs)")
            model_def = config["model_defs"][model]
            for i, name in enumerate(rows["precisions"]):
                _require(name, model_def["precisions"], f"{key}.rows.{model}.precisions[{i}] ({model}'s precisions)")
            for task, rungs in rows.items():
                if task == "precisions":
                    continue
                _require(task, model_def["tasks"], f"{key}.rows.{model} (a task of {model}, or precisions)")
                where = f"{key}.rows.{model}.{task}"
                if not isinstance(rungs, list):
                    raise ConfigError(f"config key {where}: {rungs!r} is not a ladder; allowed: a list of batch sizes, "
                                      "integers from 1, each once ([]: none for this task)")
                for j, batch in enumerate(rungs):
                    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                        raise ConfigError(f"config key {where}[{j}]: {batch!r} is not a batch size; allowed: "
                                          "integers from 1")
                    if batch in rungs[:j]:
                        raise ConfigError(f"config key {where}[{j}]: batch {batch} is listed twice; allowed: each "
                                          "batch size once")


def repeats(config: dict, suite: str) -> int:
    """How many fresh processes run each cell: config `repeats`, else the suite's own."""
    return config["repeats"] or config["suites"][suite]["repeats"]


def stack_of(config: dict, framework: str) -> str:
    return config["framework_defs"][framework]["stack"]


def adapter_of(config: dict, framework: str) -> str:
    return config["framework_defs"][framework]["adapter"]


def native_torch_frameworks(config: dict) -> list[str]:
    return [f for f in config["frameworks"] if adapter_of(config, f) == "native_torch"]


def keras3_frameworks(config: dict) -> list[str]:
    return [f for f in config["frameworks"] if adapter_of(config, f) == "keras3"]


# Every GPU cell: CUDA numbers its devices as NVML and nvidia-smi do (by PCI bus), not fastest first, so a
# CUDA_VISIBLE_DEVICES index (a SLURM job's, an exported one) names one device for the framework, NVML and the lease.
GPU_CELL_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def cell_env(config: dict, framework: str, cell_settings: dict) -> dict:
    """The cell process's environment: every cell's, the framework's, on a GPU CUDA's device order (GPU_CELL_ENV) and
    the framework's GPU settings (memory policy, no silent CPU fall-back), and NVIDIA_TF32_OVERRIDE=0 where TF32 is
    off (it reaches cuBLAS and cuDNN before any framework loads; each framework's own switches are set in the
    cell)."""
    definition = config["framework_defs"][framework]
    gpu = {**GPU_CELL_ENV, **definition.get("gpu_env", {})} if on_gpu(config["accelerator"]) else {}
    tf32 = {"NVIDIA_TF32_OVERRIDE": "0"} if cell_settings["tf32"] == "off" else {}
    return {**config["cell_env"], **definition["env"], **gpu, **tf32}


def tuning_ids(config: dict) -> dict[str, list[str]]:
    """"model/task/framework" -> the ids of the `tuning` entries that apply to it, for every selected model and
    column (an empty list: its tuned cells are its strict cells re-run, so their gain is run-to-run variation)."""
    return {f"{model}/{task}/{framework}": [entry["id"] for entry in config.get("tuning") or []
                                            if any(applies(rule, framework, model, task) for rule in entry["applies"])]
            for model in config["models"] for task in config["model_defs"][model]["tasks"]
            for framework in config["frameworks"]}


def settings(config: dict, profile: str, model: str, task: str, framework: str) -> dict:
    """A cell's settings: config `settings` and its framework's jit_compile, then, in list order, every departure its
    profile keeps that applies to the cell, then (a profile that tunes) every `tuning` setting that applies to it; a
    cell its framework cannot compile runs uncompiled in any profile."""
    base = config["settings"]
    jit = config["framework_defs"][framework]["jit_compile"]
    resolved = {"tf32": base["tf32"], "warmup": base["warmup"], "sync_blocks": base["sync_blocks"], "jit_compile": jit}
    if "lora_rank" in config["model_defs"][model]["tasks"][task]:
        resolved["lora_dtype"] = base["lora_dtype"]
    if model in GELU_MODELS:
        resolved["gelu"] = base["gelu"]
    for departure in config["departures"]:
        if profile in departure["kept_by"]:
            for rule in departure.get("applies", []):
                if applies(rule, framework, model, task):
                    resolved.update(rule.get("settings", {}))
    if config["profile_defs"][profile].get("tunes"):
        for entry in config.get("tuning") or []:
            for rule in entry["applies"]:
                if applies(rule, framework, model, task):
                    resolved.update(rule["settings"])
    for rule in config["not_compilable"]:
        if applies(rule, framework, model, task):
            resolved.update(jit_compile=False, not_compilable=rule["reason"])
    if adapter_of(config, framework) == "native_torch":      # where torch.compile goes (Keras compiles the step)
        resolved.setdefault("compile_site", base["compile_site"][task])
        if not resolved["jit_compile"]:
            resolved["compile_site"] = "none"
    else:
        resolved.pop("compile_site", None)
    return resolved


def breakdown_steps(config: dict, model: str, task: str, framework: str) -> int:
    """The steps profiled after a cell's window for its breakdown by kind (config breakdown): its steps where the
    cell matches one of its cells' patterns (none: every cell), else 0."""
    chosen = config["breakdown"]
    picked = not chosen["cells"] or any(applies(rule, framework, model, task) for rule in chosen["cells"])
    return chosen["steps"] if picked else 0


def spec(config: dict, suite_name: str, model: str, task: str, batch_size: int, precision_name: str,
         framework: str, profile: str = "strict") -> CellSpec:
    """The resolved cell config: everything the cell process needs, and nothing about where it runs."""
    suite = config["suites"][suite_name]
    model_def = config["model_defs"][model]
    size_def = model_def["sizes"][suite["size"]]
    task_options = {k: v for k, v in model_def["tasks"][task].items() if k != "batch_sizes"}
    if task == "fit":
        task_options["optimizers"] = config["optimizers"]
    cell_settings = settings(config, profile, model, task, framework)
    if precision.PRECISIONS[precision_name].tf32:        # the precision is a TF32 mode: it sets it in every profile
        cell_settings["tf32"] = precision.PRECISIONS[precision_name].tf32
    return CellSpec.from_dict({
        "cell_id": Cell(suite_name, profile, model, task, batch_size, precision_name, framework).cell_id,
        "suite": suite_name,
        "profile": profile,
        "size": suite["size"],
        "accelerator": config["accelerator"],
        "model": model,
        "task": task,
        "batch_size": batch_size,
        "framework": framework,
        "framework_def": config["framework_defs"][framework],
        "settings": cell_settings,
        "env": cell_env(config, framework, cell_settings),
        "precision": precision_name,
        "dtypes": precision.dtypes(precision_name),      # what the adapters read: never the name
        "arch": size_def["arch"],
        "inputs": size_def["inputs"],
        "task_options": task_options,
        "steps": {"warmup": cell_settings["warmup"], "timed": suite["steps"]["timed"],
                  "blocks": cell_settings["sync_blocks"], "breakdown": breakdown_steps(config, model, task, framework)},
        "seed": config["seed"],
    })


# ---------------------------------------------------------------- the equivalence check's jobs

def equivalence_models(config: dict) -> list[str]:
    """The selected models the equivalence check runs for: config equivalence.models where given, else every one."""
    chosen = config["equivalence"].get("models")
    return [m for m in config["models"] if chosen is None or m in chosen]


def equivalence_frameworks(config: dict, suite: str, profile: str, model: str) -> list[str]:
    """The selected columns that run at least one cell of the model (the reference column runs its own job)."""
    return [f for f in config["frameworks"]
            if any(c.model == model and c.framework == f and not c.not_applicable and c.profile == profile
                   for c in cells(config, suite))]


def equivalence_job(config: dict, suite: str, profile: str, model: str, framework: str,
                    reference: bool = False) -> dict:
    """What an equivalence job process gets (kbench.equivalence.check): a cell spec per task and precision of the model
    runnable in the column, float32 first; reference: this job makes the reference (weights and outputs) instead of
    comparing.

    One batch size per task, its first configured: the check compares functions, and its reference holds one set of
    outputs per task. float32 is the check's own precision (every column against the reference, every other
    precision against the column's float32): where the model's precisions lack it (Gemma and Mistral run bfloat16
    only), the job adds a float32 spec of each task, so the configured precisions show their accuracy cost."""
    settings = config["equivalence"]
    runnable = [c for c in cells(config, suite) if c.model == model and c.framework == framework
                and c.profile == profile and not c.not_applicable]
    batch = {}
    for c in runnable:
        batch.setdefault(c.task, c.batch_size)
    found = [c for c in runnable if c.batch_size == batch[c.task]]
    found += [Cell(suite, profile, model, task, size, "float32", framework) for task, size in batch.items()
              if not any(c.task == task and c.precision == "float32" for c in found)]
    found.sort(key=lambda c: (c.precision != "float32", c.task, c.precision))
    specs = [spec(config, suite, c.model, c.task, c.batch_size, c.precision, c.framework, profile) for c in found]
    name = "reference" if reference else framework
    return {"cell_id": f"{suite}/{profile}/equivalence/{model}/{name}", "job": "equivalence", "suite": suite,
            "profile": profile, "model": model, "framework": framework, "accelerator": config["accelerator"],
            "framework_def": config["framework_defs"][framework],
            "env": dict(specs[0].env) if specs else cell_env(config, framework, config["settings"]),
            "cells": [s.to_dict() for s in specs], "reference": None if reference else "reference",
            "fit_steps": settings["fit_steps"], "differences": settings["differences"], "seed": config["seed"]}
