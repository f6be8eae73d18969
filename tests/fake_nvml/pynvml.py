"""A stand-in for nvidia-ml-py on a machine without a GPU: four H100s (GPU-fake-0..3), each drawing 300 W (the
energy counter grows with `clock`: time.monotonic, or a fake clock a test sets so that the energy does not depend on
the machine's load), SM 1980 MHz, memory 2619 MHz, 61 C, one compute process holding 3 GiB (more in
KBENCH_FAKE_NVML_PIDS: comma-separated PIDs, each holding 1 GiB), application clocks at their defaults (SM 1980, memory
2619; the SM one in KBENCH_FAKE_NVML_APPLICATION_SM_MHZ), and the clock-event reasons in KBENCH_FAKE_NVML_REASONS (an
int bitmask, default none). Only what kbench.gpu.nvml calls."""
import os
import time
from types import SimpleNamespace

NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
clock = time.monotonic
_UUIDS = [f"GPU-fake-{i}" for i in range(4)]


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetHandleByUUID(uuid):
    return _UUIDS.index(uuid)


def nvmlDeviceGetIndex(handle):
    return handle


def nvmlDeviceGetUUID(handle):
    return _UUIDS[handle]


def nvmlDeviceGetName(handle):
    return "NVIDIA H100 80GB HBM3"


def nvmlSystemGetDriverVersion():
    return "580.95.05"


def nvmlSystemGetCudaDriverVersion():
    return 13000


def nvmlDeviceGetCount():
    return len(_UUIDS)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    return SimpleNamespace(total=80 * 2**30, used=4 * 2**30, free=76 * 2**30)


def nvmlDeviceGetMigMode(handle):
    return (0, 0)


def nvmlDeviceGetMaxClockInfo(handle, kind):
    return 1980


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return 700_000


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return int(clock() * 300 * 1e3)        # mJ at 300 W since the clock's origin (NVML's: since the driver loaded)


def nvmlDeviceGetClockInfo(handle, kind):
    return {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetTemperatureV(handle, sensor):
    return 61


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return int(os.environ.get("KBENCH_FAKE_NVML_REASONS", "0"))


def nvmlDeviceGetApplicationsClock(handle, kind):
    return {NVML_CLOCK_SM: int(os.environ.get("KBENCH_FAKE_NVML_APPLICATION_SM_MHZ", "1980")), NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetDefaultApplicationsClock(handle, kind):
    return {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetComputeRunningProcesses(handle):
    more = [int(pid) for pid in os.environ.get("KBENCH_FAKE_NVML_PIDS", "").split(",") if pid.strip()]
    return [SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30),
            *(SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in more)]
