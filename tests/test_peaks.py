"""Datasheet peaks are looked up by the whole device name NVML reports, never by a part of it, and MFU is taken
against the arithmetic every product of the step could run in."""
import pytest

from kbench.gpu import peaks
from kbench.plan import matrix
from kbench.results import flops

# Device names exactly as NVML's nvmlDeviceGetName (and torch.cuda.get_device_name) report them, and the dense
# (no sparsity) TF32 / BF16 peaks of each from its datasheet.
NAMES = {
    "NVIDIA A100-SXM4-40GB": (19.5, 156.0, 312.0),
    "NVIDIA A100-SXM4-80GB": (19.5, 156.0, 312.0),
    "NVIDIA A100-PCIE-40GB": (19.5, 156.0, 312.0),
    "NVIDIA A100 80GB PCIe": (19.5, 156.0, 312.0),
    "NVIDIA A100-PCIE-80GB": (19.5, 156.0, 312.0),
    "NVIDIA H100 80GB HBM3": (67.0, 494.7, 989.4),
    "NVIDIA H100 PCIe": (51.0, 378.0, 756.5),
    "NVIDIA H100 NVL": (60.0, 417.5, 835.5),
    "NVIDIA H200": (67.0, 494.7, 989.4),
    "NVIDIA H200 NVL": (60.0, 417.5, 835.5),
    "NVIDIA L4": (30.3, 60.0, 121.0),
    "NVIDIA L40": (90.5, 90.5, 181.0),
    "NVIDIA L40S": (91.6, 183.0, 362.0),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_known_gpu_gets_its_own_datasheet_peaks(name):
    fp32, tf32, bf16 = NAMES[name]
    assert [peaks.peak_tflops(name, c) for c in ("fp32", "tf32", "bf16", "fp16")] == [fp32, tf32, bf16, bf16]


@pytest.mark.parametrize("name", ["NVIDIA L40S", "NVIDIA L40", "NVIDIA H200 NVL", "NVIDIA H100 NVL",
                                  "NVIDIA H100 PCIe"])
def test_a_name_that_contains_another_gpus_name_is_not_that_gpu(name):
    """'NVIDIA L40S' contains 'L4', 'NVIDIA H200 NVL' contains 'H200': a substring match gave them the wrong peaks."""
    shorter = {"NVIDIA L40S": "NVIDIA L4", "NVIDIA L40": "NVIDIA L4", "NVIDIA H200 NVL": "NVIDIA H200",
               "NVIDIA H100 NVL": "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe": "NVIDIA H100 80GB HBM3"}[name]
    assert peaks.peak_tflops(name, "bf16") != peaks.peak_tflops(shorter, "bf16")


@pytest.mark.parametrize("name", ["NVIDIA A800-SXM4-80GB", "NVIDIA H800", "NVIDIA GeForce RTX 4090", "cpu", "",
                                  None, "Tesla V100-SXM2-16GB", "NVIDIA L4 (MIG 1g.6gb)"])
def test_an_unknown_device_gets_no_peak_rather_than_a_guess(name):
    assert peaks.peak_tflops(name, "bf16") is None


def test_names_are_matched_whole_after_surrounding_whitespace_only():
    assert peaks.peak_tflops("  NVIDIA L40S \n", "bf16") == 362.0
    assert peaks.peak_tflops("nvidia l40s", "bf16") is None          # NVML's spelling, not a fuzzy match


def spec(config, model, task, batch, framework="native-torch-eager", precision="float32"):
    return matrix.spec(config, "paper", model, task, batch, precision, framework)


def test_half_precision_cells_are_measured_against_that_arithmetic(config):
    s = spec(config, "gemma", "fit", 8, precision="bfloat16")
    arithmetic = peaks.arithmetic("bfloat16", "fp32", {})
    assert arithmetic == {"matmul": "bf16", "convolution": "bf16"}
    assert peaks.label(arithmetic) == "bf16"
    assert peaks.peak_seconds("NVIDIA H200", flops.by_kind(s), arithmetic) == pytest.approx(
        flops.per_step(s) / 989.4e12)


def test_float32_follows_the_probe_for_matmuls_and_the_recorded_switches_for_convolutions():
    # torch with TF32 left at its library default: matmuls fp32 (the probe), cuDNN convolutions TF32
    default = {"torch.backends.cuda.matmul.allow_tf32": False, "torch.backends.cudnn.allow_tf32": True}
    assert peaks.arithmetic("float32", "fp32", default) == {"matmul": "fp32", "convolution": "tf32"}
    # NVIDIA_TF32_OVERRIDE=0 reaches cuDNN too, whatever the switch says
    assert peaks.arithmetic("float32", "fp32", default, {"NVIDIA_TF32_OVERRIDE": "0"}) == {
        "matmul": "fp32", "convolution": "fp32"}
    off = {**default, "torch.backends.cudnn.allow_tf32": False}
    assert peaks.arithmetic("float32", "fp32", off) == {"matmul": "fp32", "convolution": "fp32"}
    # TensorFlow and JAX: one switch for both, which the probe sees
    assert peaks.arithmetic("float32", "tf32", {"tensor_float_32_execution": True}) == {
        "matmul": "tf32", "convolution": "tf32"}
    assert peaks.label({"matmul": "fp32", "convolution": "tf32"}) == "fp32 matmuls, tf32 convolutions"
    assert peaks.arithmetic(None, None, {}) is None


def test_a_convolutional_float32_cell_with_cudnn_tf32_on_never_exceeds_its_peak(config):
    """The anchor profile's torch float32 SD fit: TF32 convolutions, fp32 matmuls. Against the fp32 peak alone its
    MFU could exceed 100%; against the peak of each product's own arithmetic it cannot."""
    s = spec(config, "stable_diffusion", "fit", 8)
    by_kind = flops.by_kind(s)
    assert by_kind["convolution"] > 0.9 * sum(by_kind.values())
    mixed = {"matmul": "fp32", "convolution": "tf32"}
    fastest_possible = peaks.peak_seconds("NVIDIA A100-SXM4-40GB", by_kind, mixed)
    assert fastest_possible == pytest.approx(by_kind["convolution"] / 156e12 + by_kind["matmul"] / 19.5e12)
    # a step as fast as the published A100 number (385.58 ms) is 37% of that peak, not 360% of the fp32 one
    assert 0.2 < fastest_possible / 0.38558 < 1.0
    assert sum(by_kind.values()) / 19.5e12 / 0.38558 > 3


def test_by_kind_adds_up_to_the_step_and_names_only_convolutions_as_convolutions(config):
    for model, task, batch in (("resnet50", "fit", 128), ("sam", "predict", 4), ("bert", "fit", 32),
                               ("stable_diffusion", "predict", 13)):
        s = spec(config, model, task, batch)
        kinds = flops.by_kind(s)
        assert sum(kinds.values()) == flops.per_step(s)
        assert (kinds["convolution"] == 0) == (model == "bert")
