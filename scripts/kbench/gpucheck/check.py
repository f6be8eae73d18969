"""The first thing to run on a new GPU host or cluster node: the pipeline's GPU path in minutes, with what the host
already has (Python 3.11 or 3.12 with NumPy and PyYAML; no Snakemake, no network, no containers).

    python3 scripts/cli.py gpucheck --deadline 480 [--python /opt/conda/bin/python] [--out DIR]
    .venv/bin/kbench gpucheck ...                      the same, where the driver venv is

It finds which frameworks the interpreter has (and says which it lacks: a missing one is skipped, never a failure),
probes what a float32 matmul gets in torch and JAX with TF32 off, on and at the library's default, times a bf16
matmul of known size against the device's datasheet peak (a sanity MFU), then runs the most telling cells through
the `preinstalled` runtime (each its own process, the launcher's GPU lease, preflight and device checks, the same
runner and records as the workflow) in priority order until the deadline, at the smoke suite's sizes. It prints one
table (status, device, probe, ms/step, MFU, memory, J/step, compiles in the window, graph breaks) and writes every
cell JSON under --out. Around them, its acceptance steps (kbench.gpucheck.steps: the CPU shares by core, a
second account's lease, a process started as a cell is in each runtime on its CPUs and its leased GPU, a cell on a
MIG instance in podman where the host has one, a float32 conv probe, the busy share against the window, the cells'
device UUIDs, the cells' breakdowns by kind), one table: each passed, FAILED or not measured with why. --plan synthetic runs the harness alone (the synthetic stack pretending to a GPU): the GPU
plumbing without any framework.

Exit status: 0 where a GPU was seen and every step that ran passed; 1 where a step failed (an import that crashed or
hung, a probe error, a failed cell) or the input was bad; 2 where no GPU was visible. A framework the interpreter lacks
is skipped and a cell the deadline left out is not run: neither fails the check.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import errno
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kbench.contract import cell
from kbench import files
from kbench.adapters import _packages
from kbench.machine.host import REPO
from kbench.gpu import peaks, preflight
from kbench.plan import matrix
from kbench.results import flat, flops
from kbench.run import launch
from kbench.stacks import envs, lock_path
from kbench.gpucheck import steps as steps_of

PACKAGES = ("torch", "torchvision", "transformers", "peft", "diffusers", "segment_anything", "keras", "keras_hub",
            "keras_cv", "keras_nlp", "jax", "tensorflow", "tf_keras", "paddle", "paddlenlp", "numpy", "yaml",
            "pynvml")
# What a plan cell imports beyond its column's required packages (kbench.adapters._packages.REQUIRED, which names
# none for Paddle): a missing one skips the cell, as a missing framework does, rather than failing it
CELL_NEEDS = {("paddle", "bert"): ("paddle", "paddlenlp"), ("keras2", "sam"): ("keras_cv",)}
# The cells that say most about a GPU host, first first: (model, task, batch, precision, framework[, profile]) at
# smoke size, in the strict profile unless one is named. Each has its breakdown by kind (config breakdown), read by the
# breakdown step: after the torch and JAX cells, the other profilers' GPU traces (Keras 3 on TensorFlow under XLA,
# Keras 2 without XLA, as the anchor runs SAM predict: TensorFlow's kernels tied to their ops, and Paddle's).
PLAN = [
    ("bert", "fit", 32, "float32", "native-torch-compiled"),
    ("gemma", "generate", 1, "bfloat16", "native-torch-compiled"),
    ("gemma", "fit", 8, "bfloat16", "native-torch-compiled"),
    ("bert", "fit", 32, "float32", "keras3-jax"),
    ("bert", "fit", 32, "float32", "keras3-tensorflow"),
    ("sam", "predict", 4, "float32", "keras2", "anchor"),
    ("bert", "fit", 32, "float32", "paddle-dygraph"),
    ("bert", "fit", 32, "float32", "keras3-torch"),
    ("resnet50", "fit", 128, "mixed_float16", "native-torch-eager"),
    ("resnet50", "fit", 128, "mixed_float16", "keras3-jax"),
    ("bert", "predict", 256, "mixed_bfloat16", "native-torch-compiled"),
    ("bert", "fit", 32, "float32", "native-torch-eager"),
]
SANITY_SIZE = 8192
# The least a cell needs to start and reach the end of its timed window at the smoke suite's sizes (the process, its
# imports, the model built, the warm-up with any compilation): estimates, not yet run on a GPU. A cell with less time
# left than this is not started ("not run: deadline") rather than killed at the deadline ("failed: Timeout").
CELL_START_S = {"compiled": 120, "eager": 60}
SYNTHETIC_START_S = 10   # the synthetic stack: process and imports, on top of its KBENCH_SYNTHETIC_BUILD_S
STOP_S = 5               # the deadline's margin: a cell's timeout is the time left less this
PYTHON = "expected a Python 3.11 or 3.12 interpreter, e.g. --python /opt/conda/bin/python"


# Keras 3 reads KERAS_BACKEND when it is imported and takes TensorFlow without it: on an interpreter with JAX or torch
# but no TensorFlow, `import keras` (and keras_hub) would then fail and both Keras 3 columns read missing. Each Keras 3
# cell gets its column's backend (config framework_defs); the check imports Keras on the first backend installed.
KERAS_BACKENDS = ("jax", "torch", "tensorflow")
# zlib before paddle: paddle's libpaddle.so exports an old zlib that the system's would call (kbench.adapters.paddle)
IMPORTS = ("import importlib, importlib.util, json, os, sys, zlib\n"
           "if not os.environ.get('KERAS_BACKEND'):\n"
           f"    os.environ['KERAS_BACKEND'] = next((b for b in {KERAS_BACKENDS!r} if importlib.util.find_spec(b)), "
           "'tensorflow')\n"
           "found = {}\nfor name in sys.argv[1:]:\n    try:\n"
           "        module = importlib.import_module(name)\n        found[name] = str(getattr(module, '__version__', 'yes'))\n"
           "    except Exception:\n        found[name] = None\nprint('PACKAGES ' + json.dumps(found))")
DEADLINE_S = 480         # the whole check, by default (--deadline)
IMPORT_S = 240           # every package in one process (cold caches on a network file system), at most
ONE_IMPORT_S = 60        # one package, where that process crashed or hung


def run_python(python: str, code: str, args=(), timeout_s: float = 60, env: dict | None = None):
    """The interpreter checked, with the environment a preinstalled cell gets; the completed process, or None where it
    ran past timeout_s (killed); a BadFile for an interpreter that cannot be started."""
    try:
        return subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=max(1, timeout_s),
                              env=env or launch.process_env("preinstalled"))
    except subprocess.TimeoutExpired:
        return None
    except OSError as error:            # missing, a folder, not executable, not a program
        wrong = ("a folder" if Path(python).is_dir() else "not found" if error.errno == errno.ENOENT else
                 "not executable" if error.errno == errno.EACCES else f"cannot be run: {error.strerror.lower()}")
        raise files.BadFile(python, wrong, PYTHON) from None


def _listed(proc) -> dict | None:
    lines = [line for line in (proc.stdout if proc else "").splitlines() if line.startswith("PACKAGES ")]
    return json.loads(lines[-1].removeprefix("PACKAGES ")) if lines else None


def import_budget(deadline_s: float) -> float:
    """The seconds the imports may take of the check's deadline: half of it at most, so the probes and cells get
    the other half however slowly the interpreter imports."""
    return min(IMPORT_S, deadline_s / 2)


def installed(python: str, budget_s: float = IMPORT_S) -> tuple[dict[str, str | None], dict[str, str]]:
    """package -> version (None: missing), as a cell of this interpreter would import it (the cells' environment),
    and package -> why it could not be told (a crash or a hang while importing it, or no time left for it). Every
    package is imported in one child process; where that process crashes (importing tensorflow then triton in one
    process segfaults: tensorflow issue 124205) or hangs, each package gets a process of its own, so one bad import
    costs only its own row. All of it within budget_s. A BadFile for an interpreter that does not run, or is no
    Python."""
    ends = time.monotonic() + budget_s
    left = lambda cap: min(cap, ends - time.monotonic())        # noqa: E731
    together = run_python(python, IMPORTS, PACKAGES, left(IMPORT_S))
    found = _listed(together)
    if found is not None:
        return found, {}
    alone = run_python(python, "print('PACKAGES {}')", timeout_s=max(left(ONE_IMPORT_S), 5))
    if _listed(alone) is None:
        said = ((alone.stderr or alone.stdout) if alone else "").strip().splitlines()[-1:] or ["no output"]
        raise files.BadFile(python, f"ran, but not as a Python interpreter: exit {alone.returncode if alone else '?'}, "
                                    f"{said[0][:120]!r}", PYTHON)
    found, unknown = {}, {}
    for name in PACKAGES:
        timeout_s = left(ONE_IMPORT_S)
        if timeout_s < 1:
            found[name], unknown[name] = None, f"not imported: the imports' {budget_s:.0f} s were spent"
            continue
        proc = run_python(python, IMPORTS, (name,), timeout_s)
        one = _listed(proc)
        found[name] = one.get(name) if one else None
        if one is None:
            unknown[name] = (f"import hung past {timeout_s:.0f} s" if proc is None else
                             f"import crashed the interpreter (exit {proc.returncode})")
    return found, unknown


# ---------------------------------------------------------------- the probes (run in the interpreter checked)

PROBE = """
import json, sys, time
sys.path.insert(0, {scripts!r})
from kbench.instruments import numerics
from kbench.adapters import _hooks
framework, mode = sys.argv[1], sys.argv[2]
hooks = _hooks.torch_hooks() if framework == "torch" else _hooks.jax_hooks()
switches = hooks["set_tf32"](mode, "float32")
device = hooks["device"]()
result = {{"switches": switches, "device_kind": device["kind"], "device": device["name"],
          **numerics.probe(hooks["matmul"], hooks.get("conv"))}}
if mode == "library-default" and framework == "torch" and hooks["device"]()["kind"] == "gpu":
    import torch                      # a bf16 matmul of known size: the sanity MFU
    n = {size}
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    result["bf16_tflops"] = 10 * 2 * n ** 3 / (time.perf_counter() - start) / 1e12
    result["device"] = torch.cuda.get_device_name(0)
print("PROBE " + json.dumps(result))
"""


PROBE_S = 300


def probe(python: str, framework: str, mode: str, timeout_s: float = PROBE_S) -> dict:
    """One fresh process per framework and TF32 mode (the switches are process-wide, library-default must be
    read before anything was set), on the GPU only: JAX may not fall back to the CPU (JAX_PLATFORMS=cuda), and a
    probe that ran anywhere else says so instead of timing the CPU."""
    code = PROBE.format(scripts=str(REPO / "scripts"), size=SANITY_SIZE)
    env = {**launch.process_env("preinstalled"), **({"NVIDIA_TF32_OVERRIDE": "0"} if mode == "off" else {}),
           **({"JAX_PLATFORMS": "cuda"} if framework == "jax" else {})}
    proc = run_python(python, code, (framework, mode), min(PROBE_S, timeout_s), env)
    if proc is None:
        return {"error": f"timed out after {min(PROBE_S, timeout_s):.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    if not lines:
        return {"error": ((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"])[0][:200]}
    result = json.loads(lines[-1].removeprefix("PROBE "))
    if result.get("device_kind") != "gpu":
        result["error"] = f"ran on {result.get('device_kind')} ({result.get('device')}), not a GPU"
    return result


def probe_row(framework: str, mode: str, result: dict) -> dict:
    """One probe's row of the table: what its float32 matmul and conv ran as, the sanity matmul's share of the peak."""
    peak = peaks.peak_tflops(result.get("device"), "bf16")
    return {"framework": framework, "TF32 mode": mode, "float32 matmul is": result.get("observed_class"),
            "relative error": _round(result.get("matmul_relative_error"), 8),
            "float32 conv is": result.get("conv_class"),
            "conv relative error": _round(result.get("conv_relative_error"), 8),
            "bf16 TFLOP/s": _round(result.get("bf16_tflops"), 1),
            "of bf16 peak %": _round(100 * result["bf16_tflops"] / peak, 1) if peak and result.get(
                "bf16_tflops") else None, "error": result.get("error")}


# ---------------------------------------------------------------- the cells

def synthetic_config(config: dict) -> tuple[dict, list[tuple]]:
    """The harness alone: the synthetic model in four columns that pretend to a GPU, 3 s to build each."""
    config = copy.deepcopy(config)
    env = {"KBENCH_SYNTHETIC_GPU": "1", "KBENCH_SYNTHETIC_BUILD_S": "3"}
    names = [f"synthetic-{i}" for i in range(1, 5)]
    config["framework_defs"].update({n: {"stack": "synthetic", "adapter": "synthetic", "env": env,
                                         "jit_compile": False} for n in names})
    config["model_defs"]["synthetic"] = {"precisions": ["float32"], "tasks": {"fit": {"batch_sizes": [4],
                                                                                     "learning_rate": 1e-3}},
                                         "sizes": {"smoke": {"arch": {"matrix_size": 256}, "inputs": {}}}}
    return config, [("synthetic", "fit", 4, "float32", n) for n in names]


def run_plan(config: dict, plan: list[tuple], python: str, found: dict, out: Path, deadline: float,
             timed: int | None) -> list[dict]:
    rows = []
    records_dir = out / "environments"
    for model, task, batch, precision_name, framework, *named in plan:
        profile = named[0] if named else "strict"
        definition = config["framework_defs"][framework]
        # what the column needs importable in the interpreter (kbench.adapters._packages)
        needs = (_packages.required_modules(definition["adapter"], definition["env"].get("KERAS_BACKEND"))
                 + CELL_NEEDS.get((definition["adapter"], model), ()))
        missing = [p for p in needs if not found.get(p)]
        row = {"cell": f"{model} {task} bs{batch} {precision_name} {framework}"
                       + (f" ({profile})" if profile != "strict" else "")}
        remaining = deadline - time.monotonic()
        if missing:
            rows.append({**row, "status": f"skipped: {', '.join(missing)} missing"})
            continue
        spec = matrix.spec(config, "smoke", model, task, batch, precision_name, framework, profile)
        if remaining - STOP_S < start_s(definition, spec.settings):
            rows.append({**row, "status": "not run: deadline"})
            continue
        if timed:
            spec = spec.replace(steps=dataclasses.replace(spec.steps, timed=timed, blocks=min(spec.steps.blocks, timed)))
        stack = definition["stack"]
        record = records_dir / f"{stack}.{config['accelerator']}.json"
        if not record.exists():
            envs.record_preinstalled(stack, config["accelerator"], lock_path(stack, config["accelerator"], REPO),
                                     python, record)
        target = out / "cells" / f"{spec.cell_id}.r1.json"
        result = launch.run_cell(spec, "preinstalled", record, target, out / "logs" / f"{spec.cell_id}.r1.log",
                                 launch.Options(timeout_s=remaining - STOP_S))
        rows.append({**row, **summary(result)})
    return rows


def start_s(definition: dict, settings: dict | None = None) -> float:
    """The seconds a cell of this column needs at least (CELL_START_S): compiled cells more than eager ones (the
    cell's own settings where given: a profile may run a compiled column uncompiled); the synthetic stack its build
    time and its process."""
    if definition["adapter"] == "synthetic":
        return float(definition["env"].get("KBENCH_SYNTHETIC_BUILD_S", 0)) + SYNTHETIC_START_S
    compiled = (settings or definition)["jit_compile"]
    return CELL_START_S["compiled" if compiled else "eager"]


def summary(result: cell.CellResult) -> dict:
    """The table's figures of one cell, without pandas (the interpreter checked may have none)."""
    row = flat.row(result)
    if result.status != "ok":
        return {"status": result.text(), "device": row["gpu_name"] or row["device"]}
    spec = result.cell_spec
    seconds = result.timing["mean_ms"] / 1e3
    classes = peaks.arithmetic(row["compute_dtype"], row["probe_class"], row["precision_switches"],
                               {"NVIDIA_TF32_OVERRIDE": row["tf32_override"]})
    device = row["gpu_name"] or row["device"]
    least = peaks.peak_seconds(device, flops.by_kind(spec), classes) if flops.known(spec.model, spec.task) \
        else None
    return {"status": "ok", "device": device, "probe": row["probe_class"], "ms/step": round(result.timing["mean_ms"], 2),
            "MFU %": round(100 * least / seconds, 1) if least else None,
            "peak MiB": row["peak_device_mib"], "J/step": _round(row["energy_j_per_step"], 3),
            "compiles in window": row["compiles_in_window"], "graph breaks": row["graph_breaks"],
            "slowdowns": row["slowdowns"] or None}


def _round(value, digits):
    return None if value is None else round(value, digits)


def text_table(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"   # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, cells)])


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=DEADLINE_S,
                        help=f"seconds for the whole check (default {DEADLINE_S})")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose frameworks are checked")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "gpucheck", help="cell JSONs, logs, table")
    parser.add_argument("--plan", choices=["cells", "synthetic"], default="cells")
    parser.add_argument("--timed", type=int, help="timed steps per cell (default: the smoke suite's)")
    args = parser.parse_args(argv)
    try:
        return check(args)
    except files.BadFile as error:
        return files.refuse("gpucheck", error)


def listed_gpus() -> list[dict]:
    """nvidia-smi's GPUs, printed; an nvidia-smi that fails (a driver whose library does not match its kernel
    module after an update, say) is one line, and the cells then say what they find."""
    host = preflight.Host()
    gpus, trouble = [], None
    if host.which("nvidia-smi"):
        try:
            gpus = preflight.gpus(host)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as error:
            said = getattr(error, "stdout", None) or getattr(error, "stderr", None) or str(error)
            trouble = f"nvidia-smi failed: {said.strip().splitlines()[-1][:200] if said.strip() else error}"
    listed = ", ".join(f"{g['index']}: {g['name']} (driver {g['driver_version']})" for g in gpus)
    print(f"GPUs (nvidia-smi): {listed or trouble or 'none found'}")
    return gpus


def check(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.deadline
    out = args.out / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:            # (a file where the folder should be)
        raise files.BadFile(args.out, f"cannot hold the check's files: {error.strerror.lower()}",
                            "--out takes a folder, made if missing") from None
    config = {**yaml.safe_load((REPO / "config.yaml").read_text()), "accelerator": "gpu"}
    gpus = listed_gpus()
    found, unknown = installed(args.python, import_budget(args.deadline))
    print(f"interpreter {args.python}: found {', '.join(f'{k} {v}' for k, v in found.items() if v) or 'nothing'}; "
          f"missing {', '.join(k for k, v in found.items() if not v and k not in unknown) or 'nothing'}"
          + "".join(f"; {k}: {why}" for k, why in unknown.items()))
    steps = host_steps(gpus, args, out, deadline)
    steps.append(mig_container(config, out, deadline))
    probes = []
    for framework in ("torch", "jax"):
        if not found.get(framework) or args.plan == "synthetic":
            continue
        for mode in ("off", "on", "library-default"):
            if time.monotonic() > deadline - 60:
                break
            result = probe(args.python, framework, mode, deadline - time.monotonic() - 30)
            probes.append(probe_row(framework, mode, result))
    if probes:
        print("\nfloat32 matmul probe and bf16 sanity matmul\n" + text_table(probes))
    if args.plan == "synthetic":
        config, plan = synthetic_config(config)
    else:
        plan = PLAN
    rows = run_plan(config, plan, args.python, found, out, deadline, args.timed)
    table = text_table(rows)
    print(f"\ncells (smoke sizes, strict profile, runtime preinstalled; JSONs under {out / 'cells'})\n{table}")
    ran = [cell.read(path) for path in sorted((out / "cells").rglob("*.json"))]
    steps += [steps_of.conv_probe_step(probes), steps_of.busy_share_step(ran), steps_of.device_uuid_step(ran),
              steps_of.breakdown_step(ran)]
    print(f"\nacceptance steps\n{text_table(steps)}")
    (out / "gpucheck.md").write_text(f"{table}\n\n{text_table(steps)}\n")
    status, verdict = outcome(gpus, unknown, probes, rows, steps)
    (out / "gpucheck.json").write_text(json.dumps({"gpus": gpus, "packages": found, "import_problems": unknown,
                                                   "probes": probes, "cells": rows, "steps": steps,
                                                   "exit_status": status, "verdict": verdict}, indent=1))
    print(f"\ngpucheck: {verdict}")
    return status


LAUNCHED_S = 120         # a process started as a cell is, through each runtime: imports torch where it can


def host_steps(gpus: list[dict], args: argparse.Namespace, out: Path, deadline: float) -> list[dict]:
    """The acceptance steps of the host and the launcher (kbench.gpucheck.steps), before the probes: the CPU
    shares, a second account's lease, and a process started as a cell is, through the preinstalled interpreter and,
    where podman holds one of this repository's GPU images, through podman (as this account: rootless where it is
    not root)."""
    devices = preflight.visible(gpus)
    steps = [steps_of.cpu_shares_step(devices), steps_of.second_account_lease_step(devices),
             steps_of.cache_across_models_step(devices), steps_of.index_lease_identity_step(devices),
             steps_of.slurm_allocation_step(devices), steps_of.mig_step()]
    if not devices:
        return steps
    stack = "synthetic" if args.plan == "synthetic" else "native-torch"
    preinstalled = out / "environments" / f"{stack}.gpu.json"
    envs.record_preinstalled(stack, "gpu", lock_path(stack, "gpu", REPO), args.python, preinstalled)
    runs = [("preinstalled", preinstalled)]
    podman = steps_of.podman_image_record(REPO / "results")
    runs += [("podman", podman)] if podman else []
    for runtime, record in runs:
        left = deadline - time.monotonic() - STOP_S
        if left < LAUNCHED_S / 4:
            steps.append(steps_of.step(f"CPU pinning ({runtime})", steps_of.not_measured("deadline")))
            continue
        result = steps_of.launched(runtime, record, out / "launched", stack, min(LAUNCHED_S, left))
        steps += [steps_of.pinning_step(result), steps_of.launched_device_step(result, gpus)]
    if not podman:
        steps.append(steps_of.step("CPU pinning (podman)", steps_of.not_measured(
            "podman is not on PATH, or holds none of this repository's GPU images (results/images/*.gpu.json)")))
    return steps


MIG_CELL_S = 120        # a synthetic cell in a framework's image: the container's start, numpy, NVML, a 3 s build


def mig_container(config: dict, out: Path, deadline: float) -> dict:
    """The step "MIG in a container" (kbench.gpucheck.steps.mig_container_step): where the host has a MIG instance and
    podman holds one of this repository's framework images (NVML bindings), a synthetic GPU cell (its framework
    reports no UUID: the identity check reads NVML, as for JAX, TensorFlow and Paddle) leased that instance in
    podman; else not measured, and why."""
    instance = steps_of.mig_instance()
    if instance is None:
        return steps_of.mig_container_step(None, None)
    record = steps_of.podman_image_record(REPO / "results", nvml_bindings=True)
    if record is None:
        return steps_of.mig_container_step(None, instance, "podman is not on PATH, or holds none of this "
                                                           "repository's framework GPU images (results/images/*.gpu.json)")
    left = deadline - time.monotonic() - STOP_S
    if left < MIG_CELL_S / 4:
        return steps_of.mig_container_step(None, instance, "deadline")
    synthetic, plan = synthetic_config(config)
    spec = matrix.spec(synthetic, "smoke", *plan[0], "strict")
    return steps_of.mig_container_step(steps_of.mig_cell(spec, record, out / "mig", instance, min(MIG_CELL_S, left)),
                                       instance)


NO_GPU, FAILED = 2, 1


def outcome(gpus: list[dict], unknown: dict, probes: list[dict], rows: list[dict],
            steps: list[dict] = ()) -> tuple[int, str]:
    """The check's exit status and its last line: 0 where a GPU was seen and every step that ran passed (a framework
    the interpreter lacks is skipped, a cell the deadline left out is not run: neither fails); 2 where no GPU was
    visible (nvidia-smi listed none and no probe or cell ran on one); else 1 where a step failed: an import that
    crashed or hung, a probe with an error, a cell that failed, an acceptance step FAILED (gpucheck_steps)."""
    seen = bool(gpus) or any(p.get("error") is None for p in probes) or any(r["status"] == "ok" for r in rows)
    failed = ([f"import {name}: {why}" for name, why in unknown.items()]
              + [f"probe {p['framework']} {p['TF32 mode']}: {p['error']}" for p in probes if p.get("error")]
              + [f"{r['cell']}: {r['status']}" for r in rows
                 if r["status"] != "ok" and not r["status"].startswith(("skipped", "not run"))]
              + steps_of.failures(steps))
    if not seen:
        return NO_GPU, "FAILED: no GPU visible (nvidia-smi lists none, and no probe or cell ran on one)"
    if failed:
        return FAILED, f"FAILED: {len(failed)} step(s): {'; '.join(failed)}"
    return 0, "passed: every step that ran passed"


if __name__ == "__main__":
    sys.exit(main())
