"""What a cell keeps of its profile beside its record (kbench.breakdown.measure): the Chrome trace the breakdown
reads, and the profiler's own XSpace (JAX, TensorFlow), which XProf and TensorBoard open, both compressed and within
one cap together; the record says what was kept, and why where it was not. The archive packs both."""
import gzip
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kbench.adapters import synthetic
from kbench.breakdown import measure

from conftest import REPO

XSPACE = REPO / "tests" / "data" / "traces" / "jax-softmax-matmul.xplane.pb"     # a real one, 9.8 KB
LAYOUT = "plugins/profile/2026_01_01_00_00_00/host.xplane.pb"                   # as jax.profiler.trace writes it


def xla_hook(warm, run, folder):
    """A profiler as JAX's and TensorFlow's hooks are (kbench.adapters._hooks): its XSpace under its log folder in
    `folder`, and a Chrome trace (here the synthetic stack's recorder's)."""
    xspace = Path(folder) / "jax-profile" / LAYOUT
    xspace.parent.mkdir(parents=True)
    shutil.copy(XSPACE, xspace)
    return synthetic.RECORDER.trace(warm, run, folder)


def profiled(keep_in: Path, hook=xla_hook) -> dict:
    keep_in.mkdir(exist_ok=True)
    a = np.ones((32, 32), np.float32)
    return measure.measure(lambda: synthetic.RECORDER.op("synthetic::matmul", lambda: a @ a), lambda out: None, 3,
                           hook, "cpu", 1.0, keep_in)


def test_a_profilers_xspace_is_kept_beside_the_trace_within_the_cap_and_named_by_the_record(tmp_path):
    found = profiled(tmp_path)
    assert found["closes"], found
    kept = found["trace"]
    assert kept["kept"] and kept["xplane"] == {"kept": True, "bytes": (tmp_path / measure.XPLANE_NAME).stat().st_size,
                                               "files": {"xplane.pb.gz": LAYOUT}}, kept
    assert gzip.decompress((tmp_path / measure.XPLANE_NAME).read_bytes()) == XSPACE.read_bytes()
    assert kept["bytes"] + kept["xplane"]["bytes"] <= measure.TRACE_CAP_BYTES
    # the two files, and no scratch folder left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([measure.TRACE_NAME, measure.XPLANE_NAME])
    # a profiler without an XSpace (torch, Paddle): the record says nothing of one
    assert "xplane" not in profiled(tmp_path / "torch-like", synthetic.RECORDER.trace)["trace"]


def test_an_xspace_over_what_the_trace_left_of_the_cap_is_dropped_and_says_why(tmp_path, monkeypatch):
    """The cap counts the trace and the XSpace together: with room for the trace and 1 KB more (the XSpace is about
    4 KB compressed), the trace is kept whole and the XSpace is not, its record saying by how much."""
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", 8 * 2**20)
    trace_bytes = profiled(tmp_path / "whole")["trace"]["bytes"]
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", trace_bytes + 1024)
    kept = profiled(tmp_path)["trace"]
    assert kept["kept"] and "steps_kept" not in kept, kept
    assert not kept["xplane"]["kept"] and kept["xplane"]["bytes"] > 1024, kept
    assert kept["xplane"]["why"].endswith(f"MiB the trace left of the {measure.TRACE_CAP_BYTES / 2**20:.0f} MiB cap")
    assert not (tmp_path / measure.XPLANE_NAME).exists() and (tmp_path / measure.TRACE_NAME).is_file()


def packed_xspace() -> int:
    return len(gzip.compress(XSPACE.read_bytes(), compresslevel=6, mtime=0))


@pytest.mark.parametrize("spare, kept", [(0, True), (-1, False)])
def test_an_xspace_that_just_fits_is_kept_and_one_a_byte_over_is_not(tmp_path, monkeypatch, spare, kept):
    raw = {"traceEvents": [{"ph": "X", "name": "op", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]}
    trace_bytes = len(measure._pack(raw))
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", trace_bytes + packed_xspace() + spare)
    found = measure.keep(raw, tmp_path, 1, {LAYOUT: XSPACE})
    assert found["xplane"]["kept"] is kept and (tmp_path / measure.XPLANE_NAME).exists() is kept, found


def test_a_trace_not_kept_leaves_the_whole_cap_to_the_xspace_and_several_xspaces_are_numbered(tmp_path,
                                                                                                monkeypatch):
    """A trace of whose steps not one fits is not kept: the XSpaces still are, the first as XPLANE_NAME and the next
    numbered, each with where it lay under its log folder."""
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", 2 * packed_xspace())
    raw = {"traceEvents": [{"ph": "X", "name": "%0480x" % i * 40, "ts": i, "dur": 1, "pid": 1, "tid": 1}
                           for i in range(400)]}
    found = measure.keep(raw, tmp_path, 1, {LAYOUT: XSPACE, "plugins/profile/run/other.xplane.pb": XSPACE})
    assert not found["kept"] and found["xplane"]["kept"], found
    assert found["xplane"]["files"] == {"xplane.pb.gz": LAYOUT, "xplane.1.pb.gz": "plugins/profile/run/other.xplane.pb"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.xplane.1.pb.gz", "result.xplane.pb.gz"]


def test_a_records_kept_files_are_its_own_trace_and_xspaces(tmp_path):
    """Beside x.r1.json: its trace and XSpaces, not repeat 10's nor its warm twin's."""
    for name in ("x.r1.trace.json.gz", "x.r1.xplane.pb.gz", "x.r1.xplane.1.pb.gz", "x.r10.xplane.pb.gz",
                 "x.r1.warm.xplane.pb.gz", "x.r1.json"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in measure.kept_files(tmp_path / "x.r1.json")] == [
        "x.r1.trace.json.gz", "x.r1.xplane.1.pb.gz", "x.r1.xplane.pb.gz"]
    assert measure.kept_files(tmp_path / "y.r1.json") == []


def test_the_archive_packs_a_cells_xspace_beside_its_trace(tmp_path, monkeypatch):
    """One cell's record with its trace and XSpace, packed (the run's tables left out: none were made here)."""
    from kbench.lifecycle import archive
    from test_lifecycle import MS, RUN_CONFIG, write_run
    write_run(tmp_path, MS)
    record = next((tmp_path / "cells").rglob("keras3-jax.r1.json"))
    for name in ("trace.json.gz", "xplane.pb.gz"):
        record.with_name(f"keras3-jax.r1.{name}").write_bytes(gzip.compress(b"{}", mtime=0))
    (tmp_path / "report.html").write_text("<html></html>")
    monkeypatch.setattr(archive.registry, "files", lambda *args, **kwargs: [])
    out = tmp_path / "archive" / "tiny-run1.tar.gz"
    archive.pack("tiny-run1", "tiny", tmp_path, RUN_CONFIG, tmp_path / "report.html", [str(record)], [], [], out)
    with tarfile.open(out) as packed:
        names = {Path(n).name for n in packed.getnames()}
    assert {"keras3-jax.r1.trace.json.gz", "keras3-jax.r1.xplane.pb.gz"} <= names, sorted(names)


def test_a_kineto_trace_over_the_cap_counts_its_host_step_marks_not_their_mirror(tmp_path, monkeypatch):
    """Kineto writes each kbench.step again on the GPU's stream (gpu_user_annotation): 3 steps are 3 marks to cut
    at, not 6; a 4-step trace over the cap (1 MiB here) keeps 3 and says 3 of 4."""
    from test_breakdown import big_trace
    monkeypatch.setattr(measure, "TRACE_CAP_BYTES", 2**20)
    raw = big_trace(4, 1.15)
    marks = [e for e in raw["traceEvents"] if e["name"] == measure.trace.STEP_MARKER]
    raw["traceEvents"] += [{"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}}] + [
        {**e, "pid": 0, "tid": 7, "cat": "gpu_user_annotation", "ts": e["ts"] + 1, "dur": e["dur"] - 2}
        for e in marks]        # around the step's kernels, which end before the host's mark (the step syncs)
    found = measure.keep(raw, tmp_path, 4)
    assert found["kept"] and found["steps_kept"] == 3 and "first 3 of 4 steps kept" in found["why"], found
    kept = gzip.decompress((tmp_path / measure.TRACE_NAME).read_bytes()).decode()
    assert kept.count('"cat":"gpu_user_annotation"') == 3          # each kept step's mirror, no more


def warned_hook(warning: bytes):
    """A profiler whose XSpace carries a warning (XSpace.warnings, field 3), as tsl's CUPTI collector writes one."""
    def hook(warm, run, folder):
        xspace = Path(folder) / "jax-profile" / LAYOUT
        xspace.parent.mkdir(parents=True)
        xspace.write_bytes(XSPACE.read_bytes() + bytes([(3 << 3) | 2, len(warning)]) + warning)
        return synthetic.RECORDER.trace(warm, run, folder)
    return hook


def test_a_profiler_that_says_it_dropped_events_gives_no_breakdown_and_its_trace_says_why(tmp_path):
    dropped = b"Detected GPU events dropped on node7: 12 events dropped because total device events reaches max."
    found = profiled(tmp_path, warned_hook(dropped))
    assert not found["closes"] and "dropped events" in found["why"], found
    assert found["profiler_warnings"] == [dropped.decode()]
    kept = measure.trace.read_trace(tmp_path / measure.TRACE_NAME)
    assert kept.warnings == (dropped.decode(),)            # read again later, it still does not close
    assert profiled(tmp_path / "other", warned_hook(b"a remark that is no drop"))["closes"]


@pytest.mark.parametrize("share, flags, says", [
    (0.8, "", "80% of the device's time ran from CUDA graphs"),
    (0.0, "", "none seen while profiling: every kernel launched on its own (XLA's default"),
    (0.0, f"{measure.XLA_PROFILING_FLAG}=true", "none seen while profiling: every kernel launched on its own though"),
])
def test_xlas_command_buffers_are_read_from_the_kernels_not_inferred_from_the_flags(share, flags, says, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", flags)
    found = measure._command_buffers("gpu", {("jit_f", "fusion.1")}, {"graph_launched_share": share})
    assert found["xla_command_buffers"].startswith(says)
    assert measure._command_buffers("cpu", {("jit_f", "fusion.1")}, {"graph_launched_share": share}) == {}
    assert measure._command_buffers("gpu", set(), {"graph_launched_share": share}) == {}
