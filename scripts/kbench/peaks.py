"""Peak dense throughput per GPU model and arithmetic, for model FLOPs utilization (MFU = achieved / peak).

TFLOP/s without structured sparsity, from NVIDIA's datasheets: A100 (Tensor Core GPU datasheet, 2021: FP32 19.5,
TF32 156, BF16/FP16 312), H100 SXM5 and PCIe (H100 datasheet, 2023: SXM 67 / 494.7 / 989.4, PCIe 51 / 378 / 756;
the datasheet's 989/1979 TF32/BF16 figures are with sparsity), H200 SXM (H200 datasheet, 2024: as H100 SXM, the same
GH100 compute), L4 (L4 datasheet: 30.3 / 60 / 121). A CPU has no entry: its peak depends on cores, clocks and vector
units that a cell does not record reliably, so CPU cells get no MFU.

The arithmetic a cell ran is the compute dtype it observed (bfloat16, float16), or for float32 compute the class its
matmul probe saw (fp32, or tf32 where TF32 was on): MFU is against the peak of that arithmetic.
"""
from __future__ import annotations

# (substring of the device name, in match order) -> {arithmetic: dense TFLOP/s}
PEAKS = [
    ("H100 NVL", {}),           # not in this table (its datasheet lists sparse figures only): no MFU
    ("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    ("H100", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),      # SXM5 (and "H100 80GB HBM3")
    ("H200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}),
]


def arithmetic(compute_dtype: str | None, probe_class: str | None) -> str | None:
    """The arithmetic class a cell's matrix products ran in."""
    if compute_dtype in ("bfloat16", "float16"):
        return {"bfloat16": "bf16", "float16": "fp16"}[compute_dtype]
    if compute_dtype == "float32":
        return probe_class or "fp32"
    return None


def peak_tflops(device: str | None, arithmetic_class: str | None) -> float | None:
    if not device or not arithmetic_class:
        return None
    for name, peaks in PEAKS:
        if name in device:
            return peaks.get(arithmetic_class)
    return None
