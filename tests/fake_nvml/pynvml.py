"""A stand-in for nvidia-ml-py on a machine without a GPU: four H100s (GPU-fake-0..3), each drawing 300 W (the
energy counter grows with `clock`: time.monotonic, or a fake clock a test sets so that the energy does not depend on
the machine's load), SM 1980 MHz, memory 2619 MHz, 61 C, one compute process holding 3 GiB (more in
KBENCH_FAKE_NVML_PIDS: comma-separated PIDs, each holding 1 GiB), application clocks at their defaults (SM 1980, memory
2619; the SM one in KBENCH_FAKE_NVML_APPLICATION_SM_MHZ), and the clock-event reasons in KBENCH_FAKE_NVML_REASONS (an
int bitmask, default none). Only what kbench.gpu.nvml calls.

KBENCH_FAKE_NVML_TREE (JSON) puts another tree of devices in their place: a list of GPUs, each {"uuid", "name",
"mig": [...]}, where "mig" (MIG mode on) lists the GPU's MIG devices by their MIG device index, a MIG UUID or null for
an index that holds none this process can see. A container handed one MIG instance (podman's CDI nvidia.com/gpu=0:1,
docker's --gpus device=MIG-...) sees its parent GPU, in MIG mode, with that one instance among its MIG devices:
[{"uuid": "GPU-a", "name": "NVIDIA A100-SXM4-40GB", "mig": [null, "MIG-2"]}]. As NVML does, a MIG device handle
(here a tuple: GPU index, MIG index) answers for its UUID, name, memory and processes, and refuses (NVMLError: Not
Supported) the energy counter, clocks, temperature, clock-event reasons, power limit, index and MIG mode, which are
the whole GPU's."""
import json
import os
import time
from types import SimpleNamespace

NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND, NVML_ERROR_INVALID_ARGUMENT = 3, 6, 2
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
MAX_MIG_DEVICES = 7             # an A100's or H100's most MIG devices
MIG_PROFILE, MIG_MEMORY = "3g.20gb", 20 * 2**30
clock = time.monotonic


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _gpus() -> list[dict]:
    tree = os.environ.get("KBENCH_FAKE_NVML_TREE")
    if tree:
        return json.loads(tree)
    return [{"uuid": f"GPU-fake-{i}", "name": "NVIDIA H100 80GB HBM3"} for i in range(4)]


def _gpu(handle) -> dict:
    return _gpus()[handle[0] if isinstance(handle, tuple) else handle]


def _whole_gpu_only(handle) -> None:
    """A MIG device handle: NVML answers this query for the whole GPU only."""
    if isinstance(handle, tuple):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlInit():
    pass


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_gpus()):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return index


def nvmlDeviceGetHandleByUUID(uuid):
    for index, gpu in enumerate(_gpus()):
        if gpu["uuid"] == uuid:
            return index
        if uuid in (gpu.get("mig") or []):
            return index, gpu["mig"].index(uuid)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetIndex(handle):
    _whole_gpu_only(handle)
    return handle


def nvmlDeviceGetUUID(handle):
    if isinstance(handle, tuple):
        return _gpu(handle)["mig"][handle[1]]
    return _gpu(handle)["uuid"]


def nvmlDeviceGetName(handle):
    name = _gpu(handle)["name"]
    return f"{name} MIG {MIG_PROFILE}" if isinstance(handle, tuple) else name


def nvmlSystemGetDriverVersion():
    return "580.95.05"


def nvmlSystemGetCudaDriverVersion():
    return 13000


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetMemoryInfo(handle, version=None):
    if isinstance(handle, tuple):           # the instance's own memory
        return SimpleNamespace(total=MIG_MEMORY, used=2 * 2**30, free=MIG_MEMORY - 2 * 2**30)
    return SimpleNamespace(total=80 * 2**30, used=4 * 2**30, free=76 * 2**30)


def nvmlDeviceGetMigMode(handle):
    _whole_gpu_only(handle)
    on = NVML_DEVICE_MIG_ENABLE if "mig" in _gpu(handle) else NVML_DEVICE_MIG_DISABLE
    return [on, on]


def nvmlDeviceGetMaxMigDeviceCount(handle):
    return MAX_MIG_DEVICES if "mig" in _gpu(handle) else 0


def nvmlDeviceGetMigDeviceHandleByIndex(handle, index):
    instances = _gpu(handle).get("mig")
    if instances is None or not 0 <= index < MAX_MIG_DEVICES:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if index >= len(instances) or instances[index] is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return handle, index


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle):
    if not isinstance(handle, tuple):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return handle[0]


def nvmlDeviceIsMigDeviceHandle(handle):
    return isinstance(handle, tuple)


def nvmlDeviceGetMaxClockInfo(handle, kind):
    _whole_gpu_only(handle)
    return 1980


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _whole_gpu_only(handle)
    return 700_000


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _whole_gpu_only(handle)
    return int(clock() * 300 * 1e3)        # mJ at 300 W since the clock's origin (NVML's: since the driver loaded)


def nvmlDeviceGetClockInfo(handle, kind):
    _whole_gpu_only(handle)
    return {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetTemperatureV(handle, sensor):
    _whole_gpu_only(handle)
    return 61


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    _whole_gpu_only(handle)
    return int(os.environ.get("KBENCH_FAKE_NVML_REASONS", "0"))


def nvmlDeviceGetApplicationsClock(handle, kind):
    _whole_gpu_only(handle)
    return {NVML_CLOCK_SM: int(os.environ.get("KBENCH_FAKE_NVML_APPLICATION_SM_MHZ", "1980")), NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetDefaultApplicationsClock(handle, kind):
    _whole_gpu_only(handle)
    return {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619}[kind]


def nvmlDeviceGetComputeRunningProcesses(handle):
    more = [int(pid) for pid in os.environ.get("KBENCH_FAKE_NVML_PIDS", "").split(",") if pid.strip()]
    return [SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30),
            *(SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in more)]
