"""The GPU-stack check's library columns: a library that loads only with the NVIDIA driver is the GPU host's to
provide, named apart; any other library that does not load is the image's defect."""
from kbench.gpucheck import stacks as gpu_stacks


def test_a_library_that_needs_only_the_driver_is_the_hosts_and_any_other_failure_is_the_images():
    found = {"libraries": {
        "libcublas.so.12": "ok",
        "libcudnn_engines_runtime_compiled.so.9": "libcuda.so.1: cannot open shared object file: No such file",
        "libcufft.so.11": "libnvJitLink.so.12: cannot open shared object file: No such file or directory"},
        "unresolved": {"libcuda.so.1": "jaxlib/cuda/_versions.so", "libfoo.so.2": "torch/lib/libtorch_cuda.so"}}
    columns = gpu_stacks.library_columns(found)
    assert columns["CUDA libraries"] == ("2 of 3 load (1 with the driver only); not: libcufft.so.11; "
                                         "unresolved links: libfoo.so.2 (by torch/lib/libtorch_cuda.so)")
    assert columns["driver libraries the host provides"] == (
        "libcuda.so.1, libcudnn_engines_runtime_compiled.so.9 (needs libcuda.so.1)")
