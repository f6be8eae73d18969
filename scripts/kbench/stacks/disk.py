"""Will the plan fit on disk? Before the first image build: what the images still to build, their archives, the venvs
and the cells' results will take, against the free space where each goes (podman's storage, the results folder,
the venvs' folder), and one line that refuses, with both figures and what to free, when a file system is short.

An image podman already holds (its lock's tag: the build job records it again without a build) needs nothing. An
image's expected size is its record's (results/images/<stack>.<accelerator>.json, an earlier build: the lock may
have moved, the size hardly), else the same stack's record for another GPU accelerator, else the measured table
below. Builds run one at a time (kbench.stacks.images: a host-wide lock), and a podman build holds about BUILD_PEAK
times its image while it commits the layer (docs/tests.md: 28 GB for the 8.1 GB Keras 3 on torch image); in an order
nobody controls the largest may come last, so the storage must hold every new image and BUILD_PEAK - 1 more of the
largest. Under results/, beside each job's JSON and log: each compiled cold cell's compile cache, kept beside its
record (CACHE_BYTES: on a GPU XLA's executables embed their cubins and Inductor keeps .cubin/.ptx/.ttir and autotune
variants per kernel, hundreds of MB a model, not yet measured on a GPU; a tiny CPU cell's is under 1 MB), each
profiled cell's trace and its profiler's XSpace (at most the trace cap together, kbench.breakdown.measure), and
while a warm twin, a later repeat or an equivalence job runs, its copy of the caches it starts from (one at a time per cell running at once). Not counted: the uv download cache (containers.uv_cache), the equivalence reference's weights (.npz, the
model's size in float32: tens of GB for the paper suite's 7B models), docker's and apptainer's own copies. The
workflow's onstart calls it (rules/common.smk, disk_preflight_before_jobs); config disk_check: false skips it.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kbench.machine import host
from kbench.breakdown.measure import TRACE_CAP_BYTES
from kbench.contract.spec import on_gpu
from kbench.machine.lockpaths import lock_path
from kbench.stacks import envs, images

GB = 1e9
BUILD_PEAK = 3.5
# Measured image sizes, GB (podman's image Size): the CPU images a tiny-suite run built from today's locks (paddle's
# not built); GPU images 5.8-10.5 GB over the 13 GPU locks (docs/tests.md), each stack's own not recorded: a GPU
# stack without a record of its own is taken at the range's top, so the plan is never short.
MEASURED_GB = {"base": 0.54, "synthetic.cpu": 0.61, "synthetic.gpu": 0.61, "keras2.cpu": 3.17, "keras3-jax.cpu": 3.75,
               "keras3-tensorflow.cpu": 3.21, "keras3-torch.cpu": 8.11, "native-torch.cpu": 5.83}
DEFAULT_GB = {"cpu": 4.0, "gpu": 10.5}      # a stack not in the table: the tiny run's mean CPU image, the GPU range's top
RESULT_BYTES = 1_000_000     # a job's results: its JSON and log (a tiny cell's are under 20 KB; compile logs more)
CACHE_BYTES = {"cpu": 50_000_000, "gpu": 500_000_000}      # a compiled cell's kept compile cache (see above)
SKIP = "or skip this check with --config disk_check=False"


def _size(value: float, up: bool = False) -> str:
    """GB to a tenth, under a tenth in MB; up: rounded up (what to free is never understated)."""
    if value >= 0.1 * GB:
        return f"{(math.ceil(value / GB * 10 - 1e-9) / 10 if up else value / GB):.1f} GB"
    return f"{math.ceil(value / 1e6) if up else round(value / 1e6)} MB"


class DiskShort(Exception):
    """A file system the plan needs more of than it has free: one line."""


@dataclass
class Need:
    """What the plan will write on one folder's file system, and what it is."""
    where: str                   # a name for the reader: podman's storage, results/, the venvs
    path: Path
    bytes: float = 0
    what: list[str] = field(default_factory=list)


def expected_bytes(image: str, records: Path | None = None) -> float:
    """image: "base" or "<stack>.<accelerator>". Its record's size where one exists (an earlier build), else the
    same stack's record for another GPU accelerator, else MEASURED_GB, else DEFAULT_GB of its kind."""
    stack, _, accelerator = image.partition(".")
    kind = "gpu" if on_gpu(accelerator) else "cpu"
    if records is not None:
        same_kind = [records / f"{image}.json"] + ([] if kind == "cpu" or image == "base" else
                                                   sorted(records.glob(f"{stack}.gpu*.json")))
        for path in same_kind:
            try:
                size = json.loads(path.read_text()).get("size_bytes")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(size, (int, float)) and size > 0:
                return float(size)
    if image in MEASURED_GB:
        return MEASURED_GB[image] * GB
    if image == "base":
        return MEASURED_GB["base"] * GB
    if on_gpu(accelerator) and f"{stack}.gpu" in MEASURED_GB:
        return MEASURED_GB[f"{stack}.gpu"] * GB
    return DEFAULT_GB[kind] * GB


@dataclass(frozen=True)
class Kept:
    """What the plan's cells keep beside their records, and copy while they run: compiled cold cells' caches,
    profiled cells' traces, and the cache copies of the runs that start warm (at most `at_once` at a time)."""
    caches: int = 0
    traces: int = 0
    copies: int = 0
    at_once: int = 1
    kind: str = "cpu"           # cpu or gpu: a cache's size

    def bytes(self) -> float:
        cache = CACHE_BYTES[self.kind]
        return self.caches * cache + self.traces * TRACE_CAP_BYTES + min(self.copies, self.at_once) * cache

    def what(self) -> list[str]:
        cache = CACHE_BYTES[self.kind]
        said = [f"{self.caches} kept compile cache(s), {_size(self.caches * cache)}"] if self.caches else []
        said += [f"{self.traces} trace(s), up to {_size(self.traces * TRACE_CAP_BYTES)}"] if self.traces else []
        said += [f"{min(self.copies, self.at_once)} cache copy(ies) at a time for {self.copies} warm run(s), "
                 f"{_size(min(self.copies, self.at_once) * cache)}"] if self.copies else []
        return said


def plan_needs(storage: Path | None, results: Path, venvs: Path, builds: list[str], archives: list[str],
               venv_stacks: list[str], jobs: int, records: Path | None = None, kept: Kept = Kept()) -> list[Need]:
    """The plan's needs: builds (images to build, "base" or "<stack>.<accelerator>") on podman's storage (None: no
    podman, the builds fail before they write), archives (images saved as files: shipped, exported, archived), jobs'
    results and what the cells keep and copy (kept) under results/, venv_stacks ("<stack>.<accelerator>", runtime
    host) as venvs."""
    needs = []
    if builds and storage is not None:
        sizes = [expected_bytes(image, records) for image in builds]
        largest = max(sizes)
        needs.append(Need("podman's storage", storage, sum(sizes) + (BUILD_PEAK - 1) * largest,
                          [f"{len(builds)} image(s) to build, {sum(sizes) / GB:.1f} GB, and {BUILD_PEAK:g}x the "
                           f"largest ({largest / GB:.1f} GB) while it builds"]))
    if archives or jobs or kept.bytes():
        size = sum(expected_bytes(image, records) for image in archives)
        what = ([f"{len(archives)} image archive(s), {_size(size)}"] if archives else []) + \
            ([f"{jobs} job(s)' results, {_size(jobs * RESULT_BYTES)}"] if jobs else []) + kept.what()
        needs.append(Need(f"{results.name}/", results, size + jobs * RESULT_BYTES + kept.bytes(), what))
    if venv_stacks:
        base = expected_bytes("base", records)
        size = sum(max(expected_bytes(stack, records) - base, 0) for stack in venv_stacks)
        needs.append(Need(f"{venvs.name}/", venvs, size, [f"{len(venv_stacks)} venv(s), {_size(size)}"]))
    return needs


def existing(path: Path) -> Path:
    """The folder itself, or its nearest parent that exists (a folder a run makes later is on its parent's file
    system)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> float:
    return float(shutil.disk_usage(existing(path)).free)


def device_of(path: Path) -> int:
    return os.stat(existing(path)).st_dev


def check(needs: list[Need], free=free_bytes, device=device_of) -> list[str]:
    """Raises DiskShort (one line: what each short file system needs, what it has, how much to free) where the needs
    on one file system add up to more than it has free; else the lines saying what fits."""
    by_device: dict[int, list[Need]] = {}
    for need in needs:
        if need.bytes > 0:
            by_device.setdefault(device(need.path), []).append(need)
    short, fits = [], []
    for group in by_device.values():
        total, has = sum(n.bytes for n in group), free(group[0].path)
        names = " and ".join(f"{n.where} ({n.path})" for n in group)
        said = "; ".join(w for n in group for w in n.what)
        line = f"{names}: about {_size(total)} needed ({said}), {_size(has)} free"
        (short if total > has else fits).append((line, total - has))
    if short:
        raise DiskShort("not enough disk for this plan: " + "; ".join(
            f"{line}: free {_size(gap, up=True)} more there" for line, gap in short)
            + " (`podman system df` shows what the images hold, `podman image prune` removes the unused ones; "
              f"old results/ can go), or plan fewer stacks, {SKIP}")
    return [line for line, _ in fits]


def held(image: str, base_source: str = "debian") -> bool:
    """podman already holds the image a build job would make ("base": the Debian base's tag or the pinned image;
    "<stack>.<accelerator>": the tag derived from the stack's lock), so the job records it again without a build
    (kbench.stacks.images) and takes no new space. False where podman is missing or has no such image."""
    if not shutil.which("podman"):
        return False
    if image == "base":
        tag = f"localhost/kbench/base:{images.DEBIAN_SUITE}" if base_source == "debian" else base_source
    else:
        stack, _, accelerator = image.partition(".")
        lock = lock_path(stack, accelerator, host.REPO)
        if not lock.exists():
            return False
        tag = images.stack_tag(stack, accelerator, envs.sha256_file(lock))
    try:
        return subprocess.run(["podman", "image", "exists", tag], capture_output=True, timeout=60,
                              env=host.client_env("podman")).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def graphroot() -> Path | None:
    """podman's storage folder (podman info's GraphRoot, with this pipeline's podman settings), or None where podman
    is missing or does not answer."""
    if not shutil.which("podman"):
        return None
    try:
        proc = subprocess.run(["podman", "info", "--format", "{{.Store.GraphRoot}}"], capture_output=True, text=True,
                              timeout=60, env=host.client_env("podman"))
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = proc.stdout.strip()
    return Path(root) if proc.returncode == 0 and root else None

