"""The cell's GPU as the driver sees it, through NVML (nvidia-ml-py, in every stack's lock): which device (index,
UUID, name), the driver and the CUDA version it supports, the device memory in use (device-wide, and per process
where NVML gives it), and, around the timed window, its energy counter, clocks, temperature and the reasons the
driver held its clocks down. Everything is None where NVML is absent (a CPU cell, a host without the NVIDIA driver).

The cell's GPU is the first of CUDA_VISIBLE_DEVICES (an index, a GPU- or a MIG- UUID), else NVML's device 0: inside
a container that was handed one GPU (podman CDI, docker --gpus device=...) NVML sees only that one. A container handed
one MIG instance (podman's CDI nvidia.com/gpu=0:1, docker's --gpus device=MIG-...) has no CUDA_VISIBLE_DEVICES, and
NVML's device 0 there is the instance's parent GPU, in MIG mode, with that instance among its MIG devices: the cell's
device is then that MIG device (nvmlDeviceGetMigDeviceHandleByIndex), as it is where CUDA_VISIBLE_DEVICES=MIG-...
names it (host, apptainer). On a MIG instance NVML's energy counter, clocks, temperature and clock-event reasons are
the whole GPU's, its other instances' work included: the window monitor measures none of them and says why.

Views of memory: NVML's `used` is device-wide (every process; on a MIG instance the instance's own memory); its
per-process list names host PIDs (the driver knows no PID namespaces), so inside a container a cell cannot pick
itself out of it: with one process on the GPU (one cell per GPU) that process is the cell.
"""
from __future__ import annotations

import os
import threading
import time
from typing import NamedTuple

# Clock-event reasons that mean the GPU was slowed below what it was asked for during the window: thermal and
# hardware slowdowns flag the cell's number (NVML nvmlClocksEventReason*; idle, application clocks and sync boost
# are not slowdowns). The software power cap is recorded apart and flags nothing: an H100/H200 running a heavy bf16
# step at its power limit reports it all the time, and that is the GPU's normal full speed.
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "thermal (software)", 0x40: "thermal (hardware)",
             0x80: "power brake (hardware)"}
POWER_CAP = 0x4
# NVML's ApplicationsClocksSetting: the clocks were limited by the application clocks set on the device (`nvidia-smi
# -ac`). No slowdown either, but a cell measured so is not at the GPU's default clocks, and another host's cells may
# not be: recorded by name, with the application clocks in effect and the device's defaults.
APPLICATION_CLOCKS = 0x2
SAMPLE_S = 0.05
# NVML's energy counter advances in steps of about 100 ms (and on A100/H100 the power behind it is sampled only part
# of the time): a window shorter than this gives J/step off by up to a tenth or more, so it gives none.
MIN_ENERGY_WINDOW_S = 1.0
# How a record on a MIG instance begins to say why it has no energy, clocks or temperature (not_measured_on)
NOT_ON_MIG_INSTANCE = "not measured on a MIG instance"


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:       # no bindings, no driver library, no device: nothing to report
        return None


class Device(NamedTuple):
    """The cell's device as NVML holds it: handle (a GPU's, or a MIG device's), parent (a MIG device's GPU; None for
    a whole GPU, or where NVML would not say), mig (handle is a MIG device's) and instances (the MIG UUIDs NVML showed
    under the GPU, where the cell's device was found among them: no CUDA_VISIBLE_DEVICES named it)."""
    handle: object
    parent: object = None
    mig: bool = False
    instances: tuple = ()

    @property
    def gpu(self):
        """The whole GPU's handle: the MIG device's parent, else the device's own (a MIG device NVML gave no parent
        for answers nothing of the whole GPU)."""
        return self.parent if self.parent is not None else self.handle


def _device(nvml) -> Device:
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    if first.startswith("MIG-"):
        handle = nvml.nvmlDeviceGetHandleByUUID(first)
        return Device(handle, _call(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle), True)
    if first.startswith("GPU-"):
        return Device(nvml.nvmlDeviceGetHandleByUUID(first))
    gpu = nvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)
    found = mig_devices(nvml, gpu)
    if not found:
        return Device(gpu)
    # one instance in a container; several only where nothing narrowed them (a cell outside the launcher): CUDA then
    # runs on one of them, taken here to be the first
    return Device(found[0], gpu, True, tuple(_text(nvml.nvmlDeviceGetUUID(handle)) for handle in found))


def mig_devices(nvml, gpu) -> list:
    """The MIG devices NVML shows under a GPU in MIG mode, by their MIG device index ([] for a GPU not in MIG mode):
    nvmlDeviceGetMigDeviceHandleByIndex from 0 to nvmlDeviceGetMaxMigDeviceCount, an index without a device this
    process can see skipped (NVML_ERROR_NOT_FOUND)."""
    mode = _call(nvml, "nvmlDeviceGetMigMode", gpu)
    if not mode or not mode[0]:
        return []
    found = (_call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", gpu, index)
             for index in range(_call(nvml, "nvmlDeviceGetMaxMigDeviceCount", gpu) or 0))
    return [handle for handle in found if handle is not None]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _or_none(call, *args):
    try:
        return call(*args)
    except Exception:       # not supported on this device or driver
        return None


def _call(nvml, name: str, *args):
    """nvml.<name>(*args), None where the bindings lack it or NVML does not answer."""
    call = getattr(nvml, name, None)
    return None if call is None else _or_none(call, *args)


def not_measured_on(device: Device, nvml) -> str | None:
    """Why the window monitor measures no energy, clocks or temperature on this device (None: it does): on a MIG
    instance they are the whole GPU's."""
    if not device.mig:
        return None
    parent = _text(nvml.nvmlDeviceGetUUID(device.parent)) if device.parent is not None else "its GPU"
    return (f"{NOT_ON_MIG_INSTANCE}: NVML's energy counter, clocks, temperature and clock-event reasons are "
            f"the whole GPU's ({parent}), its other instances' work included")


def facts() -> dict | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        device = _device(nvml)
        handle, gpu = device.handle, device.gpu
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        mig = _or_none(nvml.nvmlDeviceGetMigMode, gpu)
        found = {"index": _or_none(nvml.nvmlDeviceGetIndex, gpu), "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                 "name": _text(nvml.nvmlDeviceGetName(handle)),
                 "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
                 "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
                 "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                 "devices_seen": nvml.nvmlDeviceGetCount(),
                 "mig_mode": True if device.mig else None if mig is None else bool(mig[0]),
                 "max_sm_clock_mhz": _or_none(nvml.nvmlDeviceGetMaxClockInfo, gpu, nvml.NVML_CLOCK_SM),
                 "power_limit_w": _milli(_or_none(nvml.nvmlDeviceGetEnforcedPowerLimit, gpu)),
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        if device.mig:      # a MIG instance: its GPU, and the instances NVML showed where it was found among them
            found.update(mig_instance=True, mig_parent_uuid=_text(nvml.nvmlDeviceGetUUID(device.parent))
                         if device.parent is not None else None, mig_instances_seen=list(device.instances) or None)
        return found
    except Exception as error:      # a driver/library mismatch is worth recording, not worth failing the cell for
        return {"error": f"{type(error).__name__}: {error}"}


def _milli(value):
    return None if value is None else value / 1e3


def used_bytes() -> int | None:
    """Device memory in use on the cell's GPU (all processes: with one cell per GPU, the cell's own and the
    driver's context; on a MIG instance, the instance's)."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(_device(nvml).handle).used)
    except Exception:
        return None


def processes() -> list[dict] | None:
    """The compute processes on the cell's GPU and the device memory of each (host PIDs, see above)."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        handle = _device(nvml).handle
    except Exception:
        return None
    return _processes(nvml, handle)


def _processes(nvml, handle) -> list[dict] | None:
    try:
        found = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    return [{"pid": p.pid, "used_bytes": None if p.usedGpuMemory is None else int(p.usedGpuMemory)} for p in found]


def _application_clocks(nvml, handle) -> dict:
    """The SM and memory application clocks in effect and the device's defaults (MHz; None where not supported)."""
    found = {}
    for name, clock in (("sm", nvml.NVML_CLOCK_SM), ("memory", nvml.NVML_CLOCK_MEM)):
        found[f"application_{name}_clock_mhz"] = _or_none(getattr(nvml, "nvmlDeviceGetApplicationsClock", None),
                                                          handle, clock)
        found[f"default_application_{name}_clock_mhz"] = _or_none(
            getattr(nvml, "nvmlDeviceGetDefaultApplicationsClock", None), handle, clock)
    return found


def _reasons(nvml, handle) -> int:
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        call = getattr(nvml, name, None)
        if call is not None:
            value = _or_none(call, handle)
            if value is not None:
                return int(value)
    return 0


def _temperature(nvml, handle):
    if hasattr(nvml, "nvmlDeviceGetTemperatureV"):
        value = _or_none(nvml.nvmlDeviceGetTemperatureV, handle, nvml.NVML_TEMPERATURE_GPU)
        if value is not None:
            return value
    return _or_none(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)


class WindowMonitor:
    """Around the timed window: the energy counter's difference (mJ since the driver loaded; Volta and newer), and
    every SAMPLE_S the SM and memory clocks, the temperature and the clock-event reasons (OR-ed over the window).
    NVML's power reading is a one-second average on Ampere (but GA100) and newer, so energy comes from the counter,
    never from integrating power. Just before the window, the compute processes already on the GPU (the cell's own,
    and any other that shares it: host PIDs, see above) and the application clocks in effect. On a MIG instance only
    the window's length and the processes: the rest would be the whole GPU's (not_measured says so)."""

    def __init__(self):
        self.nvml = _nvml()
        self.handle = self.not_measured = None
        if self.nvml is not None:
            try:
                device = _device(self.nvml)
                self.handle, self.not_measured = device.handle, not_measured_on(device, self.nvml)
            except Exception:
                self.nvml = None
        self.samples, self.reasons, self._stop = [], 0, threading.Event()
        self._thread = None
        self.energy_start = self.started = None
        self.before = {}
        self.record = None

    def start(self) -> None:
        if self.nvml is None:
            return
        if self.not_measured:
            self.before = {"processes_before_window": _processes(self.nvml, self.handle)}
            self.started = time.monotonic()
            return
        self.before = {"processes_before_window": _processes(self.nvml, self.handle),
                       **_application_clocks(self.nvml, self.handle)}
        self.energy_start = _or_none(self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        nvml, handle = self.nvml, self.handle
        while not self._stop.is_set():
            self.samples.append((_or_none(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
                                 _or_none(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
                                 _temperature(nvml, handle)))
            self.reasons |= _reasons(nvml, handle)
            self._stop.wait(SAMPLE_S)

    def stop(self) -> dict | None:
        if self.nvml is not None and self.not_measured and self.started is not None:
            return self._not_measured()
        if self.nvml is None or self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        seconds = time.monotonic() - self.started
        self.reasons |= _reasons(self.nvml, self.handle)
        energy_end = _or_none(self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        joules = (energy_end - self.energy_start) / 1e3 if None not in (energy_end, self.energy_start) else None
        note = None
        if joules is not None and seconds < MIN_ENERGY_WINDOW_S:
            joules, note = None, (f"no energy: the timed window lasted {seconds:.2f} s, under the {MIN_ENERGY_WINDOW_S:g} s "
                                  "the energy counter's ~100 ms steps resolve")

        def column(i, reduce):
            values = [s[i] for s in self.samples if s[i] is not None]
            return reduce(values) if values else None
        mean = lambda values: round(sum(values) / len(values), 1)        # noqa: E731
        self.record = {
            "window_s": seconds, "energy_j": joules, "energy_note": note,
            "mean_power_w": joules / seconds if joules and seconds else None,
            "samples": len(self.samples), "sm_clock_mhz_mean": column(0, mean), "sm_clock_mhz_min": column(0, min),
            "memory_clock_mhz_mean": column(1, mean), "temperature_c_max": column(2, max),
            "clock_event_reasons": self.reasons, "power_capped": bool(self.reasons & POWER_CAP),
            "application_clocks_set": bool(self.reasons & APPLICATION_CLOCKS),
            "slowdowns": [name for bit, name in SLOWDOWNS.items() if self.reasons & bit], **self.before}
        return self.record

    def _not_measured(self) -> dict:
        """The record of a window on a MIG instance: its length and the processes, no energy, clocks, temperature or
        clock-event reasons (the whole GPU's), and why."""
        self.record = {
            "window_s": time.monotonic() - self.started, "energy_j": None, "energy_note": self.not_measured,
            "clocks_note": self.not_measured, "mean_power_w": None, "samples": 0,
            **dict.fromkeys(("sm_clock_mhz_mean", "sm_clock_mhz_min", "memory_clock_mhz_mean", "temperature_c_max",
                             "clock_event_reasons", "power_capped", "application_clocks_set")),
            "slowdowns": [], **self.before}
        return self.record
