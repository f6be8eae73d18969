"""Which CUDA a stack's lock carries, and the oldest NVIDIA Linux driver that runs it: derived from the lock's pins,
never from a hand-kept list of stacks.

The CUDA version comes from the CUDA runtime wheel (nvidia-cuda-runtime-cu12==12.9.79, or nvidia-cuda-runtime==13.0.96
in CUDA 13's naming), else from the cuda-toolkit meta package. A lock without either is CPU-only.

Driver floors (Linux x86_64), CUDA minor-version compatibility: CUDA 11.x >= 450.80.02, 12.x >= 525.60.13,
13.x >= 580.65.06 (the first R580 release). Sources: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Minimum
Required Driver Version for CUDA Minor Version Compatibility"; CUDA Compatibility guide, "Minor Version
Compatibility" (docs.nvidia.com/deploy/cuda-compatibility). The release driver of each CUDA minor is given beside
it: PTX that a driver has to compile itself needs at least that one (minor-version compatibility covers compiled
SASS only); JAX/XLA and Triton compile with their own ptxas and so run on the floor, XLA warning and compiling
serially on a driver older than its ptxas.
"""
from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from typing import NamedTuple

MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
RELEASE_DRIVER = {(12, 0): "525.60.13", (12, 2): "535.54.03", (12, 4): "550.54.14", (12, 6): "560.28.03",
                  (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\d+)\.(\d+)[^\s;\\]*", re.M)
_RUNTIME = re.compile(r"nvidia-cuda-runtime(-cu\d+)?")
_TOOLKIT = re.compile(r"cuda-toolkit")


# Wheels whose GPU code covers only some architectures, by the pin a lock carries: the compute capabilities of its
# SASS (cubins) and of its PTX. A cubin for sm_XY runs on X.Z for Z >= Y only (the same major; CUDA C Programming
# Guide, "Binary Compatibility"), PTX is compiled by the driver for any newer GPU; a GPU neither covers runs none of
# its kernels ("no kernel image is available for execution on the device"). paddlepaddle-gpu 2.6.2 (CUDA 11.8):
# counted in its libphi.so and libpaddle.so fatbins, sm_61/70/75/80/86 cubins and no PTX (one sm_90 cubin holds only
# the gradient-compression kernels, paddle::communication::dgc), so no Paddle compute kernel runs on Hopper (9.0).
KERNEL_ARCHS = {"paddlepaddle-gpu==2.6.2": {"sass": ((6, 1), (7, 0), (7, 5), (8, 0), (8, 6)), "ptx": ()}}


def kernel_archs(lock_text: str) -> tuple[str, dict] | None:
    """(pin, {"sass", "ptx"}) of the lock's pin that KERNEL_ARCHS lists, or None: its kernels cover every GPU."""
    pins = {f"{_normalize(m[1])}=={m[0].split('==', 1)[1].split()[0]}" for m in _PIN.finditer(lock_text)}
    return next(((pin, archs) for pin, archs in KERNEL_ARCHS.items() if pin in pins), None)


def runs_on(archs: dict, capability: tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability runs the kernels: a cubin of its major at or below its minor, or
    PTX at or below it."""
    return (any(major == capability[0] and minor <= capability[1] for major, minor in archs["sass"])
            or any(ptx <= capability for ptx in archs["ptx"]))


def kernel_refusal(pin: str, capability: tuple[int, int]) -> str | None:
    """Why a wheel of KERNEL_ARCHS cannot run on a GPU of this compute capability (None: it can, or it is not
    listed): the reason its cells read as unsupported (the adapter asks at prepare) and the preflight's note."""
    archs = KERNEL_ARCHS.get(pin)
    if archs is None or runs_on(archs, capability):
        return None
    built = ", ".join(f"sm_{major}{minor}" for major, minor in archs["sass"])
    ptx = ", ".join(f"compute_{major}{minor}" for major, minor in archs["ptx"]) or "no PTX"
    return (f"{pin} is built with kernels for {built} and {ptx}: a GPU of compute capability "
            f"{capability[0]}.{capability[1]} runs none of them")


class CudaRequirement(NamedTuple):
    cuda: str                    # "12.9": major.minor of the CUDA runtime the lock carries
    min_driver: str              # the oldest Linux driver that runs it (minor-version compatibility)
    release_driver: str | None   # the driver of that CUDA minor's release (None: not in the table)
    pin: str                     # the pin it was read from


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def driver_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def requirement(lock_text: str) -> CudaRequirement | None:
    """The CUDA a lock carries and the driver it needs; None for a CPU-only lock."""
    pins = [(_normalize(m[1]), (int(m[2]), int(m[3])), m[0].split()[0]) for m in _PIN.finditer(lock_text)]
    source = ([(v, p) for n, v, p in pins if _RUNTIME.fullmatch(n)]
              or [(v, p) for n, v, p in pins if _TOOLKIT.fullmatch(n)])
    if not source:
        return None
    version, pin = max(source)
    if version[0] not in MIN_DRIVER:
        raise ValueError(f"no driver floor known for CUDA {version[0]}.x ({pin})")
    return CudaRequirement(f"{version[0]}.{version[1]}", MIN_DRIVER[version[0]], RELEASE_DRIVER.get(version), pin)


# XLA's ptxas: the nvidia-cuda-nvcc wheel the JAX and TensorFlow GPU locks install (jax[cuda12], tensorflow[and-cuda];
# CUDA 13's wheels drop the -cu suffix), whose ptxas XLA finds in the CUDA folder the framework hands it
PTXAS_WHEELS = ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu13", "nvidia-cuda-nvcc-cu11")
_PTXAS_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def ptxas_cuda(run=subprocess.run, which=shutil.which) -> tuple[str, str] | None:
    """The CUDA version (major.minor) of the ptxas XLA compiles with, and where it was read: the nvidia-cuda-nvcc
    wheel installed beside the framework, else `ptxas --version` of the ptxas on PATH (a preinstalled interpreter's
    CUDA toolkit); None where there is neither."""
    for name in PTXAS_WHEELS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return ".".join(version.split(".")[:2]), f"{name} {version}"
    path = which("ptxas")
    if path is None:
        return None
    try:
        found = _PTXAS_RELEASE.search(run([path, "--version"], capture_output=True, text=True, timeout=30).stdout)
    except (OSError, subprocess.SubprocessError):
        return None
    return (f"{found[1]}.{found[2]}", f"{path} --version") if found else None


def xla_serial_compile(driver_cuda: str, ptxas: str) -> bool:
    """Whether XLA compiles its kernels one at a time: the driver's CUDA version older than its ptxas's, both as
    major.minor (XLA's own condition: xla/service/gpu/nvptx_compiler.cc, ChooseLinkingMethod, compares
    cuDriverGetVersion's major * 1000 + minor * 10 with ptxas's; the driver cannot link the newer ptxas's output, so
    XLA gives up splitting a module into parts compiled side by side, and warns "XLA is disabling parallel
    compilation"). XLA spares itself this where it links with an nvlink at least as new as its ptxas, or with
    libnvjitlink (--xla_gpu_enable_libnvjitlink): the GPU locks' wheels carry no nvlink, and neither is looked for."""
    return driver_tuple(driver_cuda)[:2] < driver_tuple(ptxas)[:2]
