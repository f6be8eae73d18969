"""The results lifecycle on fixture cells: plots, the HTML report (rendered in headless Chromium), the archive,
verify (and its tamper cases) and compare."""
import io
import os
import shutil
import subprocess
import tarfile

import pytest

from conftest import CONFIG, snakemake
from kbench import archive, cell, matrix

FRAMEWORKS = ["native-torch-eager", "keras3-jax"]
ARGS = ["--config", "suite=tiny", "accelerator=cpu", "runtime=podman", "models=[bert]",
        f"frameworks=[{','.join(FRAMEWORKS)}]", "precisions=[float32]"]


def fixture_cell(framework, task, batch, mean_ms, record, keras="3.15.1"):
    config = {**CONFIG, "accelerator": "cpu"}
    spec = matrix.spec(config, "tiny", "bert", task, batch, "float32", framework)
    packages = {"keras": keras} if framework.startswith("keras3") else {"torch": "2.13.0"}
    result = cell.new_result(spec, {"runtime": "podman", "environment": record, "device": "cpu",
                                    "packages": packages, "git_commit": "abc"}, "ok")
    result["timing"] = {"n": 20, "mean_ms": mean_ms, "median_ms": mean_ms, "p90_ms": mean_ms, "stdev_ms": 1.0,
                        "min_ms": mean_ms, "max_ms": mean_ms, "first_step_ms": 50 * mean_ms,
                        "window_ms": 20 * mean_ms, "examples_per_s": 1.0, "tokens_per_s": None,
                        "step_ms": [mean_ms] * 20}
    result["params"] = {"total": 1000, "trainable": 1000}
    result["loss"] = {"first_timed_step": 0.7, "last_timed_step": 0.6} if task == "fit" else None
    return result


def write_run(results, ms, keras="3.15.1", image_id="sha256:" + "11" * 32):
    """Environment records, then cells (newer than every input), as a finished tiny run leaves them."""
    records = {}
    for framework in FRAMEWORKS:
        stack = matrix.stack_of(CONFIG, framework)
        record = {"stack": stack, "kind": "image", "id": image_id if stack == "keras3-jax" else "sha256:" + "22" * 32,
                  "image": f"localhost/kbench/{stack}:cpu-x", "lock_sha256": "sha256:" + "33" * 32}
        cell.write_atomic(results / "images" / f"{stack}.cpu.json", record)
        records[framework] = record
    for (framework, task, batch), mean in ms.items():
        path = results / "cells" / (matrix.Cell("tiny", "bert", task, batch, "float32", framework).cell_id + ".json")
        cell.write_atomic(path, fixture_cell(framework, task, batch, mean, records[framework], keras))


MS = {("native-torch-eager", "fit", 32): 80.0, ("keras3-jax", "fit", 32): 100.0,
      ("native-torch-eager", "predict", 256): 150.0, ("keras3-jax", "predict", 256): 200.0}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """Tables, plots, report and archive of a fixture run, made by the workflow's own commands."""
    results = tmp_path_factory.mktemp("results")
    write_run(results, MS)
    args = [*ARGS, f"results_dir={results}"]
    for step in (["--cores", "1", "--rerun-triggers", "mtime"],
                 ["--cores", "1", "--report", str(results / "report" / "tiny.html")],
                 [str(results / "archive" / "run1.tar.gz"), "--cores", "1", "--rerun-triggers", "mtime"]):
        proc = snakemake(*step, *args)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return results


def test_plots_are_written_as_png_and_svg(finished_run):
    for name in ("ms_per_step", "speedup", "first_step"):
        assert (finished_run / "plots" / "tiny" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (finished_run / "plots" / "tiny" / f"{name}.svg").read_bytes()[:2000]


@pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("KBENCH_REQUIRE_CHROMIUM"),
                    reason="needs Debian's chromium (.ci/run installs it and requires this test)")
def test_report_renders_in_headless_chromium_with_tables_plots_and_run_facts(finished_run):
    """The report is a JavaScript app: only a browser shows whether it renders. The DOM Chromium dumps after
    running it must hold the rendered app (navigation, categories) and the workflow description naming the suite."""
    page = finished_run / "report" / "tiny.html"
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    app = dom[dom.index('<div id="app">'):]
    assert "<nav" in app and all(category in app for category in ("Tables", "Plots", "Run"))
    assert "suite <strong>tiny</strong>" in app or "suite tiny" in app.replace("<strong>", "").replace("</strong>", "")


def test_run_facts_name_suite_images_and_host(finished_run):
    page = (finished_run / "tables" / "tiny" / "run_facts.html").read_text()
    assert "tiny" in page and "sha256:" + "11" * 32 in page and "localhost/kbench/keras3-jax:cpu-x" in page


def test_archive_holds_the_run_and_verifies(finished_run):
    path = finished_run / "archive" / "run1.tar.gz"
    with tarfile.open(path) as tar:
        names = {m.name.removeprefix("run1/") for m in tar.getmembers()}
    assert {"MANIFEST.sha256", "run.json", "config.resolved.yaml", "report/tiny.html", "tables/tiny/ms_per_step.csv",
            "plots/tiny/ms_per_step.svg", "images/keras3-jax.cpu.json", "envs/keras3-jax.gpu.lock",
            "containers/Containerfile", "cells/tiny/bert/fit/bs32/float32/keras3-jax.json"} <= names
    assert archive.verify(path) == []
    assert archive.main(["verify", str(path)]) == 0


def rewrite(source, target, change, extra=None):
    """Copy an archive member by member; change(name, data) -> new data, or None to drop the member;
    extra: {name: data} members to add."""
    with tarfile.open(source) as old, tarfile.open(target, "w:gz") as new:
        for member in old.getmembers():
            data = change(member.name, old.extractfile(member).read())
            if data is not None:
                member.size = len(data)
                new.addfile(member, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))


CELL = "cells/tiny/bert/fit/bs32/float32/keras3-jax.json"


def test_verify_names_one_changed_byte(finished_run, tmp_path):
    def flip(name, data):
        return data.replace(b'"mean_ms": 100.0', b'"mean_ms": 10.00') if name.endswith(CELL) else data
    rewrite(finished_run / "archive" / "run1.tar.gz", tmp_path / "t.tar.gz", flip)
    assert archive.verify(tmp_path / "t.tar.gz") == [f"{CELL}: altered (SHA-256 differs from MANIFEST.sha256)"]
    assert archive.main(["verify", str(tmp_path / "t.tar.gz")]) == 1


def test_verify_names_a_removed_file_and_the_table_row_it_leaves_unbacked(finished_run, tmp_path):
    rewrite(finished_run / "archive" / "run1.tar.gz", tmp_path / "t.tar.gz",
            lambda name, data: None if name.endswith(CELL) else data)
    assert archive.verify(tmp_path / "t.tar.gz") == [f"{CELL}: missing (listed in MANIFEST.sha256)",
                                                     f"{CELL}: missing (the tables list this cell)"]


def test_verify_names_an_extra_file(finished_run, tmp_path):
    rewrite(finished_run / "archive" / "run1.tar.gz", tmp_path / "t.tar.gz", lambda name, data: data,
            extra={"run1/tables/tiny/better_numbers.csv": b"1,2"})
    assert archive.verify(tmp_path / "t.tar.gz") == [
        "tables/tiny/better_numbers.csv: extra (not listed in MANIFEST.sha256)"]


def test_verify_names_a_cell_whose_image_differs_from_the_record(finished_run, tmp_path):
    """Internally inconsistent although the manifest was rewritten to match: the cell ran in another image."""
    def swap(name, data):
        if name.endswith("images/keras3-jax.cpu.json"):
            return data.replace(b"11" * 32, b"44" * 32)
        return data
    rewrite(finished_run / "archive" / "run1.tar.gz", tmp_path / "t.tar.gz", swap)
    problems = archive.consistency(archive.Run(tmp_path / "t.tar.gz"))
    assert len(problems) == 2 and all("but images/keras3-jax.cpu.json records sha256:4444" in p for p in problems)


def test_compare_marks_changes_noise_packages_images_and_cells_of_one_run(tmp_path):
    write_run(tmp_path / "old", MS)
    new = {**MS, ("keras3-jax", "fit", 32): 120.0, ("keras3-jax", "predict", 256): 205.0}
    del new[("native-torch-eager", "predict", 256)]
    write_run(tmp_path / "new", new, keras="3.15.0", image_id="sha256:" + "55" * 32)
    table = archive.compare(archive.Run(tmp_path / "old", "tiny"), archive.Run(tmp_path / "new", "tiny"))
    rows = table.set_index("cell")
    fit = rows.loc["tiny/bert/fit/bs32/float32/keras3-jax"]
    assert (fit["old ms"], fit["new ms"], fit["change %"], fit["verdict"]) == (100.0, 120.0, 20.0, "slower")
    assert fit["packages changed"] == "keras 3.15.1 -> 3.15.0"
    assert fit["image changed"] == "sha256:111111111111 -> sha256:555555555555"
    assert rows.loc["tiny/bert/predict/bs256/float32/keras3-jax", "verdict"] == "within noise (±10%)"
    assert rows.loc["tiny/bert/predict/bs256/float32/native-torch-eager", "verdict"] == "only in old"
    unchanged = rows.loc["tiny/bert/fit/bs32/float32/native-torch-eager"]
    assert unchanged["verdict"] == "same record (not rerun)" and unchanged["packages changed"] == ""


def test_noise_band_ignores_the_drain_step_and_widens_with_step_spread():
    def timed(steps):
        return {"timing": {"step_ms": steps, "mean_ms": sum(steps) / len(steps), "n": len(steps)}}
    steady = timed([100.0] * 19 + [2000.0])                # one drain step: no spread that counts
    assert archive.noise_band_pct(steady, steady, 10.0) == 10.0
    jumpy = timed([50.0, 150.0] * 10)                      # every step 50% off the median
    assert archive.noise_band_pct(jumpy, jumpy, 10.0) > 40
