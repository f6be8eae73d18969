"""The disk preflight (kbench.stacks.disk): a plan's images, archives, venvs and results against fake free space, on
both sides of the threshold, one file system or two; the expected image sizes from records or the measured table."""
import json
import os

import pytest
import yaml

from conftest import CONFIG, REPO, snakemake
from dag import plan
from kbench.stacks import disk

GB = disk.GB
BUILDS = ["base", "keras3-torch.cpu", "keras2.cpu"]      # 0.54 + 8.11 + 3.17 GB, 8.11 the largest


def storage_need() -> float:
    sizes = [disk.MEASURED_GB[image] * GB for image in BUILDS]
    return sum(sizes) + (disk.BUILD_PEAK - 1) * max(sizes)


def needs(tmp_path, jobs=100):
    return disk.plan_needs(tmp_path / "storage", tmp_path / "results", tmp_path / ".envs", BUILDS, [], [], jobs)


def two_file_systems(tmp_path, storage_free: float, results_free: float):
    """free() and device() of a host whose podman storage and results are on file systems of their own."""
    def which(path):
        return "storage" if "storage" in str(path) else "results"
    free = {"storage": storage_free, "results": results_free}
    return (lambda path: free[which(path)]), (lambda path: hash(which(path)))


def test_the_storage_needs_every_new_image_and_the_largest_build_peak(tmp_path):
    storage, results = needs(tmp_path)
    assert storage.bytes == pytest.approx(storage_need())
    assert storage.bytes == pytest.approx((0.54 + 8.11 + 3.17 + 2.5 * 8.11) * GB)
    assert results.bytes == 100 * disk.RESULT_BYTES


@pytest.mark.parametrize("short_by, fits", [(0, True), (1, False), (-1, True)])
def test_a_plan_that_just_fits_passes_and_one_just_short_is_refused(tmp_path, short_by, fits):
    """Free space exactly the need passes; a byte less is refused, with both figures and what to free in one line."""
    free, device = two_file_systems(tmp_path, storage_need() - short_by, 1e12)
    if fits:
        lines = disk.check(needs(tmp_path), free, device)
        assert any(line.startswith("podman's storage") for line in lines)
        return
    with pytest.raises(disk.DiskShort) as error:
        disk.check(needs(tmp_path), free, device)
    said = str(error.value)
    assert "\n" not in said and said.startswith("not enough disk for this plan: podman's storage (")
    assert f": about {storage_need() / GB:.1f} GB needed (" in said and f"), {(storage_need() - 1) / GB:.1f} GB free" in said
    assert "3 image(s) to build" in said and "podman image prune" in said and "--config disk_check=False" in said
    assert ": free 1 MB more there" in said                 # a byte short: rounded up, never "0"
    assert "results/" not in said.split(": free")[0]       # the results' file system has room: not named short


def test_half_a_gigabyte_short_names_the_gap(tmp_path):
    free, device = two_file_systems(tmp_path, storage_need() - 0.5 * GB, 1e12)
    with pytest.raises(disk.DiskShort, match=r": free 0\.5 GB more there"):
        disk.check(needs(tmp_path), free, device)


def test_storage_and_results_on_one_file_system_add_up(tmp_path):
    """Each alone would fit; together they are a byte short."""
    total = storage_need() + 100 * disk.RESULT_BYTES
    for free_space, fits in ((total, True), (total - 1, False)):
        free, device = (lambda path: free_space), (lambda path: 1)
        if fits:
            assert disk.check(needs(tmp_path), free, device)[0].startswith("podman's storage (")
        else:
            with pytest.raises(disk.DiskShort, match=r"podman's storage \(.*\) and results/ \(.*\): about"):
                disk.check(needs(tmp_path), free, device)


def test_a_results_folder_too_small_for_the_jobs_is_refused(tmp_path):
    free, device = two_file_systems(tmp_path, 1e12, 100 * disk.RESULT_BYTES - 1)
    with pytest.raises(disk.DiskShort, match=r"results/ \(.*\): about 0\.1 GB needed \(100 job\(s\)' results"):
        disk.check(needs(tmp_path), free, device)


def test_nothing_to_build_or_write_needs_nothing(tmp_path):
    assert disk.plan_needs(tmp_path, tmp_path, tmp_path, [], [], [], 0) == []
    assert disk.check([], lambda path: 0, lambda path: 1) == []


def test_an_image_is_expected_at_its_recorded_size_else_its_kind(tmp_path):
    """A record of an earlier build gives the size (the lock may have moved, the size hardly); a GPU stack without
    one takes another GPU accelerator's record; else the measured table; else the kind's default."""
    (tmp_path / "keras3-jax.gpu-cuda12.json").write_text(json.dumps({"id": "sha256:x", "size_bytes": 9.5e9}))
    (tmp_path / "native-torch.cpu.json").write_text(json.dumps({"size_bytes": 6.0e9}))
    (tmp_path / "base.history.json").write_text("[]")
    assert disk.expected_bytes("keras3-jax.gpu", tmp_path) == 9.5e9
    assert disk.expected_bytes("native-torch.cpu", tmp_path) == 6.0e9
    assert disk.expected_bytes("keras3-torch.cpu", tmp_path) == 8.11 * GB
    assert disk.expected_bytes("base", tmp_path) == 0.54 * GB
    assert disk.expected_bytes("paddle.cpu", tmp_path) == disk.DEFAULT_GB["cpu"] * GB
    assert disk.expected_bytes("paddle.gpu", None) == disk.DEFAULT_GB["gpu"] * GB


def test_a_folder_not_made_yet_is_measured_on_its_parent(tmp_path):
    assert disk.existing(tmp_path / "results" / "images") == tmp_path
    assert disk.free_bytes(tmp_path / "not" / "yet") > 0


def test_an_image_podman_already_holds_is_no_build(tmp_path, monkeypatch):
    """A fake podman holding the base and the keras2 CPU image (its lock's tag): both are held, the JAX one is not."""
    from kbench.stacks import envs, images
    held = ["localhost/kbench/base:bookworm",
            images.stack_tag("keras2", "cpu", envs.sha256_file(REPO / "envs" / "keras2.cpu.lock"))]
    podman = tmp_path / "podman"
    podman.write_text("#!/bin/sh\n[ \"$1 $2\" = 'image exists' ] || exit 2\n"
                      f"case \"$3\" in {'|'.join(held)}) exit 0;; esac\nexit 1\n")
    podman.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert disk.held("base") and disk.held("keras2.cpu")
    assert not disk.held("keras3-jax.cpu") and not disk.held("no-such-stack.cpu")
    assert disk.held("base", "docker.io/library/debian@sha256:" + "0" * 64) is False


@pytest.mark.workflow
def test_a_plan_that_will_not_fit_stops_before_its_first_job_and_the_switch_skips_the_check(tmp_path):
    """The real workflow with a fake podman (no image held, its storage in tmp_path) and a fake mmdebstrap that notes
    it ran: the Paddle CPU image's record from an earlier build says 1 PB, its lock is newer, so the plan rebuilds it.
    onstart refuses before any job; with disk_check=False the first job (the base image) starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(f"#!/bin/sh\ncase \"$1 $2\" in\n  'info --format') echo {tmp_path}/storage;;\n"
                                    "  *) exit 1;;\nesac\n")
    (bin_dir / "mmdebstrap").write_text(f"#!/bin/sh\ntouch {tmp_path}/mmdebstrap-ran\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    results = tmp_path / "results"
    (results / "images").mkdir(parents=True)
    record = results / "images" / "paddle.cpu.json"
    record.write_text(json.dumps({"kind": "image", "size_bytes": 1e15}))
    os.utime(record, (946684800, 946684800))            # 2000-01-01: older than the lock
    config = {**CONFIG, "accelerator": "cpu", "suite": "tiny", "runtime": "podman", "frameworks": ["paddle-dygraph"],
              "models": ["bert"], "results_dir": str(results)}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for shared in ("envs", "scripts", "containers"):
        (tmp_path / shared).symlink_to(REPO / shared)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    args = ["--cores", "1", "--configfile", str(tmp_path / "config.yaml")]
    proc = snakemake(*args, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode != 0, proc.stdout[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith("disk: ")]
    assert said, proc.stdout[-3000:]
    line = said[0]
    assert line.startswith(f"disk: not enough disk for this plan: podman's storage ({tmp_path}/storage)"), line
    assert "2 image(s) to build" in line and "--config disk_check=False" in line
    assert not (tmp_path / "mmdebstrap-ran").exists() and not (results / "logs" / "images").exists()
    proc = snakemake(*args, "--config", "disk_check=False", cwd=tmp_path, env=env, timeout=600)
    assert "disk: not enough disk" not in proc.stdout and (tmp_path / "mmdebstrap-ran").exists(), proc.stdout[-3000:]



def test_touching_a_plans_outputs_asks_no_disk(tmp_path, monkeypatch):
    """--touch writes no byte, so the disk preflight stays out of it: on a machine that holds no image yet (a bare CI
    machine) and whose every plan the check refuses, touching the outputs of a planned stack's cells still passes (the
    workflow tier's up-to-date fixture touches the whole tiny suite this way)."""
    def refuse(needs):
        raise disk.DiskShort("not enough disk for this plan: (refused by the test)")
    monkeypatch.setattr(disk, "held", lambda *args, **kwargs: False)
    monkeypatch.setattr(disk, "check", refuse)
    (tmp_path / "config.yaml").symlink_to(REPO / "config.yaml")
    for shared in ("envs", "scripts", "containers", "schemas"):
        (tmp_path / shared).symlink_to(REPO / shared)
    args = ["--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "runtime=podman", "models=[bert]",
            "frameworks=[keras3-jax]"]
    touched = plan("--touch", "--forceall", *args, cwd=tmp_path)     # (no output exists: touch only warns)
    assert touched.ok and touched.counts().get("base_image") == 1, touched.error

def test_what_the_cells_keep_is_counted_under_results(tmp_path):
    """A GPU plan's 110 compiled cold cells keep a compile cache each (XLA's executables with their cubins,
    Inductor's kernels: hundreds of MB a model), its profiled cells a trace each, and its warm twins copy a cache while
    they run (one at a time per GPU): none of it was counted at 1 MB a job."""
    kept = disk.Kept(caches=110, traces=200, copies=110, at_once=2, kind="gpu")
    results = disk.plan_needs(None, tmp_path / "results", tmp_path / ".envs", [], [], [], 400, None, kept)[0]
    expected = 400 * disk.RESULT_BYTES + 110 * disk.CACHE_BYTES["gpu"] + 200 * 8 * 2**20 + 2 * disk.CACHE_BYTES["gpu"]
    assert results.bytes == pytest.approx(expected)
    assert results.what == ["400 job(s)' results, 0.4 GB", "110 kept compile cache(s), 55.0 GB",
                            "200 trace(s), up to 1.7 GB", "2 cache copy(ies) at a time for 110 warm run(s), 1.0 GB"]
    assert disk.plan_needs(None, tmp_path, tmp_path, [], [], [], 0, None, disk.Kept())[:1] == []


def test_a_gpu_stack_without_a_record_is_taken_at_the_measured_ranges_top(tmp_path):
    """GPU images measured 5.8-10.5 GB over the 13 GPU locks, each stack's own not recorded: the top, never short."""
    assert disk.expected_bytes("keras3-jax.gpu", tmp_path) == pytest.approx(10.5 * GB)


def test_a_venv_is_its_image_less_the_base(tmp_path):
    """A host run's venv holds what the stack adds to the base image, not the whole image again."""
    venv = disk.plan_needs(None, tmp_path / "results", tmp_path / ".envs", [], [], ["keras2.cpu"], 0, None)[0]
    assert venv.bytes == pytest.approx((3.17 - 0.54) * GB) and venv.what == ["1 venv(s), 2.6 GB"]
