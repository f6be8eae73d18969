"""The device sync of every framework, called through recording stand-ins for jax, torch and tensorflow (the driver
has none of them): a hook that stopped calling its framework's own sync would let async device work escape the
timed window on a GPU, and no CPU timing would show it. And the numerics probes' convolution in every framework's
hooks (Paddle's too): the probe starts each framework's convolution library in the same part of the first step."""
import sys
import textwrap
import types

import numpy as np
import pytest

from conftest import image_record, python_in_image
from kbench.instruments import timing
from kbench.adapters import _hooks, synthetic


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, name, result=None):
        def record(*args, **kwargs):
            self.calls.append((name, args))
            return result
        return record


@pytest.fixture
def calls():
    return Recorder()


def install(monkeypatch, name, module):
    monkeypatch.setitem(sys.modules, name, module)


def test_jax_sync_is_block_until_ready(monkeypatch, calls):
    device = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H100", memory_stats=lambda: {})
    install(monkeypatch, "jax", types.SimpleNamespace(devices=lambda: [device],
                                                      block_until_ready=calls("block_until_ready")))
    hooks = _hooks.jax_hooks()
    hooks["sync"]("step output")
    assert calls.calls == [("block_until_ready", ("step output",))]
    assert hooks["sync_name"] == "jax.block_until_ready"


@pytest.mark.parametrize("cuda", [True, False])
def test_torch_sync_is_cuda_synchronize_on_a_gpu(monkeypatch, calls, cuda):
    fake_cuda = types.SimpleNamespace(is_available=lambda: cuda, synchronize=calls("synchronize"),
                                      get_device_name=lambda i: "NVIDIA A100", max_memory_allocated=lambda: 1)
    fake_cuda.init = lambda: None
    install(monkeypatch, "torch", types.SimpleNamespace(cuda=fake_cuda, zeros=lambda *a, **k: None))
    hooks = _hooks.torch_hooks()
    hooks["sync"]("step output")
    assert calls.calls == ([("synchronize", ())] if cuda else [])
    assert hooks["sync_name"] == ("torch.cuda.synchronize" if cuda else "none: torch runs synchronously on a CPU")


@pytest.mark.parametrize("cuda", [True, False])
def test_torch_starts_its_cuda_context_in_the_import_part_of_the_first_step(monkeypatch, calls, cuda):
    """torch starts CUDA lazily: without this its context (0.5-3 s) started in the numerics probe, which no part of
    the time to the first step counts; JAX starts its device in jax.devices(), inside the hooks already."""
    fake_cuda = types.SimpleNamespace(is_available=lambda: cuda, init=calls("cuda.init"))
    install(monkeypatch, "torch", types.SimpleNamespace(cuda=fake_cuda, zeros=calls("zeros")))
    _hooks.torch_hooks()
    assert calls.calls == ([("cuda.init", ()), ("zeros", (1,))] if cuda else [])


def test_tensorflow_starts_its_gpu_in_the_import_part_of_the_first_step(monkeypatch, calls):
    import contextlib
    placed = []
    config = types.SimpleNamespace(list_physical_devices=lambda kind: ["GPU:0"],
                                   experimental=types.SimpleNamespace(get_synchronous_execution=lambda: True))
    constant = types.SimpleNamespace(numpy=calls("numpy"))
    install(monkeypatch, "tensorflow", types.SimpleNamespace(
        config=config, constant=lambda value: constant,
        device=lambda name: placed.append(name) or contextlib.nullcontext()))
    _hooks.tf_hooks()
    assert placed == ["/GPU:0"] and calls.calls == [("numpy", ())]


@pytest.mark.parametrize("gpus, synchronous, synced", [(["GPU:0"], True, True), ([], False, True), ([], True, False)])
def test_tensorflow_sync_is_sync_devices_where_execution_is_asynchronous(monkeypatch, calls, gpus, synchronous,
                                                                           synced):
    config = types.SimpleNamespace(
        list_physical_devices=lambda kind: gpus,
        experimental=types.SimpleNamespace(get_synchronous_execution=lambda: synchronous,
                                           get_device_details=lambda d: {"device_name": "NVIDIA A100"},
                                           get_memory_info=lambda d: {"peak": 5}))
    import contextlib
    tf = types.SimpleNamespace(config=config, test=types.SimpleNamespace(
        experimental=types.SimpleNamespace(sync_devices=calls("sync_devices"))),
        device=lambda name: contextlib.nullcontext(), constant=lambda v: types.SimpleNamespace(numpy=lambda: v))
    install(monkeypatch, "tensorflow", tf)
    hooks = _hooks.tf_hooks()
    hooks["sync"]("step output")
    assert calls.calls == ([("sync_devices", ())] if synced else [])
    assert hooks["sync_name"].startswith("tf.test.experimental.sync_devices" if synced else "none:")


def test_the_synthetic_device_really_runs_behind_the_steps():
    """The stand-in for a GPU queue the runner tests rely on: without its sync a window closes before the work is
    done, with it the window holds the work."""
    def step():
        synthetic.DEVICE.submit(0.02)
    unsynced = timing.measure(step, lambda _: None, warmup=0, timed=5).summary()["mean_ms"]
    synthetic.DEVICE.sync()
    synced = timing.measure(step, synthetic.DEVICE.sync, warmup=0, timed=5).summary()["mean_ms"]
    assert unsynced < 5 and synced >= 20


def fake_jax(monkeypatch, calls):
    device = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H100", memory_stats=lambda: {})
    config = types.SimpleNamespace(jax_default_matmul_precision=None, update=calls("config.update"))
    install(monkeypatch, "jax", types.SimpleNamespace(devices=lambda: [device], config=config,
                                                      block_until_ready=calls("block_until_ready")))
    return _hooks.jax_hooks()


def test_jax_float32_cells_get_highest_generate_cells_the_f32_preset_and_half_precision_cells_none(monkeypatch,
                                                                                                   calls):
    """A global precision tags every dot, bf16 too (no Triton GEMM fusion): only float32-compute cells get one,
    "highest" (it reaches convolutions, the F32_F32_F32 preset does not), and a generate cell the preset (jax issue
    34917's crash on a non-default precision inside while loops, keras-hub's generate); a half-precision cell gets
    JAX's default back (None), since one process may run a float32 cell before it (the equivalence job);
    library-default touches nothing."""
    hooks = fake_jax(monkeypatch, calls)
    hooks["set_tf32"]("off", "float32", "fit")
    assert calls.calls == [("config.update", ("jax_default_matmul_precision", "highest"))]
    calls.calls.clear()
    hooks["set_tf32"]("off", "float32", "generate")
    assert calls.calls == [("config.update", ("jax_default_matmul_precision", "F32_F32_F32"))]
    calls.calls.clear()
    for compute in ("bfloat16", "float16"):
        hooks["set_tf32"]("off", compute)
    assert calls.calls == [("config.update", ("jax_default_matmul_precision", None))] * 2
    calls.calls.clear()
    hooks["set_tf32"]("library-default", "float32")
    assert calls.calls == []


class FakeProfile:
    """torch.profiler.profile as the hook drives it: a schedule of one warm-up step and one recorded step; the events
    of the recorded step only (torch discards the warm-up's). kineto_stops: the step at which Kineto reports itself
    stopped (torch.autograd._is_kineto_stopped), as at its CUPTI buffer limit."""

    def __init__(self, log, activities, schedule):
        self.log, self.step_num = log, 0
        self.log.append(("profile", tuple(activities), schedule))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.step_num))
        return False

    def step(self):
        self.step_num += 1
        self.log.append(("step", self.step_num))

    def events(self):
        def event(kind, start, end):
            return types.SimpleNamespace(device_type=kind, time_range=types.SimpleNamespace(start=start, end=end))
        return [event("CUDA", 1000, 4000), event("CPU", 0, 9000), event("CUDA", 5000, 8000)]


def fake_torch_profiler(monkeypatch, log, stopped):
    autograd = types.SimpleNamespace(DeviceType=types.SimpleNamespace(CUDA="CUDA", CPU="CPU"))
    if stopped is not None:
        autograd._is_kineto_stopped = lambda: stopped
    profiler = types.SimpleNamespace(
        ProfilerActivity=types.SimpleNamespace(CUDA="activity CUDA", CPU="activity CPU"),
        schedule=lambda **kwargs: kwargs, profile=lambda activities, schedule: FakeProfile(log, activities, schedule))
    install(monkeypatch, "torch", types.SimpleNamespace(autograd=autograd, profiler=profiler))
    install(monkeypatch, "torch.autograd", autograd)
    install(monkeypatch, "torch.profiler", profiler)


@pytest.mark.parametrize("stopped", [True, False, None])
def test_torch_profiles_a_discarded_warm_step_then_the_steps_and_reports_a_stopped_kineto(monkeypatch, stopped):
    """The warm step runs as the schedule's warm-up (its activities discarded), the steps as its one recorded step;
    the CUDA activities come back in ms. A Kineto that stopped collecting (torch 2.13's _is_kineto_stopped; an older
    torch has no such call: None) is reported, never returned as a short list that reads as an idle device."""
    log = []
    fake_torch_profiler(monkeypatch, log, stopped)
    found = _hooks.torch_activities(lambda: log.append("warm"), lambda: log.append("run"))
    assert log == [("profile", ("activity CUDA",), {"wait": 0, "warmup": 1, "active": 1, "repeat": 1}),
                   "warm", ("step", 1), "run", ("step", 2), ("exit", 2)]
    assert found.intervals == [(1.0, 4.0), (5.0, 8.0)]
    assert (found.stopped is not None) is bool(stopped)
    if stopped:
        assert "_is_kineto_stopped" in found.stopped


@pytest.mark.parametrize("stopped", [True, False])
def test_torchs_trace_for_the_breakdown_refuses_a_kineto_that_stopped(monkeypatch, tmp_path, stopped):
    """As the busy share's hook does: a trace Kineto stopped filling would read its missing kernels as waiting."""
    log = []
    fake_torch_profiler(monkeypatch, log, stopped)
    import contextlib
    profiler = sys.modules["torch.profiler"]
    profiler.record_function = lambda name: contextlib.nullcontext()
    FakeProfile.export_chrome_trace = lambda self, path: open(path, "w").write("{}")
    sys.modules["torch"].autograd._is_kineto_stopped = lambda: stopped
    marks = []

    def run(mark=None):
        marks.append(mark is not None)
    if stopped:
        with pytest.raises(RuntimeError, match="Kineto stopped collecting"):
            _hooks.torch_trace(lambda: None, run, tmp_path, cuda=True)
    else:
        assert _hooks.torch_trace(lambda: None, run, tmp_path, cuda=True).exists()
    assert marks == [True]          # each profiled step inside its own mark


# ---------------------------------------------------------------- e2e: the schedule on a real torch (CPU activity)

# Runs inside the native-torch image (a CPU torch: its CPU activity stands in for CUDA's, same schedule).
TORCH_SCHEDULE = textwrap.dedent('''
    import json, torch
    from kbench.adapters import _hooks

    a = torch.ones(64, 64)

    def matmuls(n):
        def run():
            for _ in range(n):
                torch.mm(a, a)
        return run

    alone = _hooks.torch_activities(lambda: None, matmuls(2), activity="CPU")
    after_warm = _hooks.torch_activities(matmuls(7), matmuls(2), activity="CPU")
    print("SCHEDULE " + json.dumps({"alone": len(alone.intervals), "after_warm": len(after_warm.intervals),
                                    "stopped": after_warm.stopped,
                                    "kineto_check": hasattr(torch.autograd, "_is_kineto_stopped")}), flush=True)
''')


@pytest.fixture(scope="module")
def native_torch_image(tmp_path_factory, built):
    return image_record(tmp_path_factory, built, "native-torch")


@pytest.mark.e2e
def test_torchs_profiler_schedule_discards_the_warm_steps_activities(native_torch_image):
    """On the locked torch: the warm step's 7 matmuls run under the schedule's warm-up and are not among the
    activities (as many as the 2 matmuls profiled alone give), and its Kineto has _is_kineto_stopped. The CUDA
    activity is the GPU's: not yet run on a GPU."""
    found = python_in_image(native_torch_image, TORCH_SCHEDULE, "SCHEDULE")
    assert found["alone"] > 0 and found["after_warm"] == found["alone"], found
    assert found["stopped"] is None and found["kineto_check"] is True


@pytest.mark.parametrize("cuda", [True, False])
def test_torch_reports_the_uuid_cuda_gives_its_device(monkeypatch, cuda):
    """What the runner compares with the launcher's lease (kbench.run.runner.check_device_identity): the device's UUID
    from CUDA's own properties of device 0, the one the cell computes on; none on a CPU."""
    props = types.SimpleNamespace(uuid="8f4c6b2e-1d3a-4c5b-9e7f-0a1b2c3d4e5f")
    fake_cuda = types.SimpleNamespace(is_available=lambda: cuda, get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
                                      device_count=lambda: int(cuda), get_device_properties=lambda i: [props][i])
    fake_cuda.init = lambda: None
    install(monkeypatch, "torch", types.SimpleNamespace(cuda=fake_cuda, version=types.SimpleNamespace(cuda="12.8"),
                                                        zeros=lambda *a, **k: None))
    found = _hooks.torch_hooks()["device"]()
    assert found["uuid"] == ("8f4c6b2e-1d3a-4c5b-9e7f-0a1b2c3d4e5f" if cuda else None)


# ---------------------------------------------------------------- the numerics probes: a convolution in every framework

class FakeTensor:
    """A Paddle tensor as the hooks use it: where it was made (the device set when to_tensor ran), transpose, numpy."""

    def __init__(self, array, place):
        self.array, self.place = np.asarray(array, np.float32), place

    def transpose(self, perm):
        return FakeTensor(self.array.transpose(perm), self.place)

    def numpy(self):
        return self.array


def fake_paddle(monkeypatch, gpu: bool, log: list):
    """paddle with a CUDA build and one GPU (or none): to_tensor places on the device set_device last named, and
    conv2d is a real NCHW/OIHW convolution (its float64 reference), so a hook that hands it NHWC/HWIO arrays
    unpermuted computes something else."""
    from kbench.instruments import numerics
    place = ["cpu"]

    def set_device(name):
        log.append(("set_device", name))
        place[0] = name

    def conv2d(x, w):
        log.append(("conv2d", x.place, x.array.shape, w.array.shape))
        nhwc = numerics.conv_reference(x.array.transpose(0, 2, 3, 1), w.array.transpose(2, 3, 1, 0))
        return FakeTensor(nhwc.transpose(0, 3, 1, 2), x.place)
    cuda = types.SimpleNamespace(device_count=lambda: int(gpu), get_device_name=lambda i: "NVIDIA H100")
    device = types.SimpleNamespace(is_compiled_with_cuda=lambda: True, cuda=cuda, set_device=set_device)
    to_tensor = lambda a: FakeTensor(a, place[0])     # noqa: E731
    install(monkeypatch, "paddle", types.SimpleNamespace(
        device=device, to_tensor=to_tensor, zeros=lambda shape: FakeTensor(np.zeros(shape), place[0]),
        matmul=lambda a, b: FakeTensor(a.array @ b.array, a.place),
        nn=types.SimpleNamespace(functional=types.SimpleNamespace(conv2d=conv2d))))
    monkeypatch.setattr(_hooks, "paddle_graph_breaks", dict)       # SOT's breaks: not what these tests ask


@pytest.mark.parametrize("gpu", [True, False])
def test_paddle_has_a_convolution_probe_on_its_device_in_nchw(monkeypatch, gpu):
    """Paddle's conv models pay cuDNN's start-up in the numerics probe, as every other framework's do, not in their
    first step: its hooks have a convolution probe, run on the cell's device (gpu:0 where it has one), NHWC/HWIO
    turned into Paddle's NCHW/OIHW and back, so the probe reads float32 against the float64 reference."""
    from kbench.instruments import numerics
    log = []
    fake_paddle(monkeypatch, gpu, log)
    hooks = _hooks.paddle_hooks()
    found = numerics.probe(hooks["matmul"], hooks["conv"])
    assert found["conv_class"] == "fp32" and found["conv_relative_error"] < 1e-6, found
    where = "gpu:0" if gpu else "cpu"
    assert log == [*([("set_device", "gpu:0")] if gpu else []), ("conv2d", where, (1, 64, 16, 16), (64, 64, 3, 3))]


def every_backends_hooks(monkeypatch):
    """Each compute backend's hooks, its framework faked as the tests above fake it (jax, tensorflow, torch, paddle,
    and the synthetic stand-in's Backend)."""
    import contextlib
    calls = Recorder()
    yield "jax", fake_jax(monkeypatch, calls)
    install(monkeypatch, "tensorflow", types.SimpleNamespace(
        config=types.SimpleNamespace(list_physical_devices=lambda kind: [],
                                     experimental=types.SimpleNamespace(get_synchronous_execution=lambda: True)),
        device=lambda name: contextlib.nullcontext()))
    yield "tensorflow", _hooks.tf_hooks()
    install(monkeypatch, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False)))
    yield "torch", _hooks.torch_hooks()
    fake_paddle(monkeypatch, False, [])
    yield "paddle", _hooks.paddle_hooks()
    yield "numpy", vars(synthetic.backend())


def test_every_backend_has_a_convolution_probe(monkeypatch):
    """The libraries' start-up is counted in one part for every framework only where every framework's probe starts
    the same libraries: a backend without a convolution probe (conv None: its probe records conv_class None) would
    start its convolution library in its first step instead."""
    found = {name: hooks.get("conv") for name, hooks in every_backends_hooks(monkeypatch)}
    assert sorted(found) == ["jax", "numpy", "paddle", "tensorflow", "torch"]
    assert [name for name, conv in found.items() if conv is None] == []


@pytest.mark.parametrize("gpu", [True, False])
def test_paddle_starts_its_gpu_in_the_import_part_of_the_first_step(monkeypatch, gpu):
    """Paddle starts its CUDA context at the first tensor on the GPU: its hooks make one (after set_device("gpu:0"))
    and read it back, so the context's start-up lands in the import part as torch's and TensorFlow's do, not in the
    numerics probe. On a CPU: nothing is placed and nothing started."""
    log = []
    fake_paddle(monkeypatch, gpu, log)

    class Started:
        def numpy(self):
            log.append(("numpy",))
    monkeypatch.setattr(sys.modules["paddle"], "zeros", lambda shape: log.append(("zeros", shape)) or Started())
    _hooks.paddle_hooks()
    assert log == ([("set_device", "gpu:0"), ("zeros", [1]), ("numpy",)] if gpu else [])
