"""Peak dense throughput per GPU model and arithmetic, for model FLOPs utilization (MFU).

Looked up by the whole device name NVML reports (nvmlDeviceGetName; torch.cuda.get_device_name gives the same), never
by a part of it: "NVIDIA L40S" contains "L4" and "NVIDIA H200 NVL" contains "H200", and each is another chip with
other clocks. A name not in the table (another GPU, a MIG slice such as "NVIDIA A100-SXM4-40GB MIG 1g.5gb", which has
a fraction of the chip, a CPU) gets no peak and so no MFU, never a guessed one; so does a cell its runner found on a
MIG instance whatever the name NVML gave (kbench.run.runner.check_device_identity: the summary looks up no device).

TFLOP/s without structured sparsity, from NVIDIA's datasheets (where a datasheet gives only the sparse figure, the
dense one is half of it, as NVIDIA states in its footnotes): A100 (A100 Tensor Core GPU datasheet, 2021; SXM and
PCIe, 40 and 80 GB alike: FP32 19.5, TF32 156, BF16/FP16 312), H100 SXM5 and PCIe (H100 datasheet, 2023: SXM 67 /
494.7 / 989.4, PCIe 51 / 378 / 756.5), H100 NVL and H200 NVL (per GPU: 60 / 417.5 / 835.5), H200 SXM (H200
datasheet, 2024: as H100 SXM, the same GH100 compute), L4 (30.3 / 60 / 121), L40 (90.5 / 90.5 / 181), L40S
(91.6 / 183 / 362).

The arithmetic of a step's products: bfloat16 or float16 where the cell computed in them; for float32 compute the
class the matmul probe saw for matrix products (kbench.instruments.numerics), and for convolutions what the recorded switches
allowed (torch's cuDNN TF32 switch is apart from its matmul one, and on by default; NVIDIA_TF32_OVERRIDE=0 turns
both off). MFU = the time the step's FLOPs take at the peak of each product's arithmetic / the measured time.
"""
from __future__ import annotations

KINDS = ("matmul", "convolution")
_A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
_H100_SXM = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}

# NVML device name -> {arithmetic: dense TFLOP/s}
PEAKS = {
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA A100-PCIE-80GB": _A100,             # the same board under a second name some drivers report
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    "NVIDIA H100 NVL": _NVL,
    "NVIDIA H200": _H100_SXM,
    "NVIDIA H200 NVL": _NVL,
    "NVIDIA L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
    "NVIDIA L40": {"fp32": 90.5, "tf32": 90.5, "bf16": 181.0, "fp16": 181.0},
    "NVIDIA L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0, "fp16": 362.0},
}
_HALF = {"bfloat16": "bf16", "float16": "fp16"}
# Recorded switches that let convolutions use TF32 apart from the matmul switch the probe sees.
_CONV_TF32_SWITCHES = ("torch.backends.cudnn.allow_tf32",)


def arithmetic(compute_dtype: str | None, probe_class: str | None, switches: dict | None,
               environment: dict | None = None) -> dict[str, str] | None:
    """{"matmul": class, "convolution": class} a cell's products could run in (None: not known)."""
    if compute_dtype in _HALF:
        return dict.fromkeys(KINDS, _HALF[compute_dtype])
    if compute_dtype != "float32":
        return None
    matmul = probe_class or "fp32"
    override_off = (environment or {}).get("NVIDIA_TF32_OVERRIDE") == "0"
    conv_tf32 = not override_off and any((switches or {}).get(name) is True for name in _CONV_TF32_SWITCHES)
    return {"matmul": matmul, "convolution": "tf32" if conv_tf32 or matmul == "tf32" else matmul}


def label(classes: dict[str, str] | None) -> str | None:
    if not classes:
        return None
    if classes["matmul"] == classes["convolution"]:
        return classes["matmul"]
    return f"{classes['matmul']} matmuls, {classes['convolution']} convolutions"


def peak_tflops(device: str | None, arithmetic_class: str | None) -> float | None:
    if not device or not arithmetic_class:
        return None
    return PEAKS.get(device.strip(), {}).get(arithmetic_class)


def peak_seconds(device: str | None, flops_by_kind: dict[str, int], classes: dict[str, str] | None) -> float | None:
    """The least time the step's FLOPs can take on the device: each kind of product at the peak of its arithmetic.
    None where the device or an arithmetic has no peak."""
    if not classes:
        return None
    seconds = 0.0
    for kind, count in flops_by_kind.items():
        if count:
            peak = peak_tflops(device, classes[kind])
            if peak is None:
                return None
            seconds += count / (peak * 1e12)
    return seconds
