"""The results lifecycle on fixture cells: plots, the HTML report (rendered in headless Chromium), the archive,
verify (and its tamper cases) and compare."""
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from conftest import CONFIG, snakemake
from kbench.contract import cell
from kbench.machine import environment_records
from kbench.instruments import timing
from kbench.lifecycle import archive, compare
from kbench.plan import matrix
from kbench.results import registry

FRAMEWORKS = ["native-torch-eager", "keras3-jax"]
ARGS = ["--config", "suite=tiny", "accelerator=cpu", "runtime=podman", "models=[bert]",
        f"frameworks=[{','.join(FRAMEWORKS)}]", "precisions=[float32]", "profiles=[strict]"]


def fixture_cell(framework, task, batch, mean_ms, record, keras="3.15.1", runtime="podman"):
    config = {**CONFIG, "accelerator": "cpu"}
    spec = matrix.spec(config, "tiny", "bert", task, batch, "float32", framework, "strict")
    packages = {"keras": keras} if framework.startswith("keras3") else {"torch": "2.13.0"}
    result = cell.new_result(spec, {"runtime": runtime, "environment": record, "device": "cpu",
                                    "packages": packages, "git_commit": "abc"}, "ok")
    steps = [mean_ms * (0.99 if i % 2 else 1.01) for i in range(20)]      # +-1% around the mean
    result.timing = {**timing.summarize(steps), "first_step_ms": 50 * mean_ms, "window_ms": sum(steps),
                     "examples_per_s": 1.0, "tokens_per_s": None, "step_ms": steps,
                     "block_ms": [steps[i] + steps[i + 1] for i in range(0, 20, 2)], "block_steps": [2] * 10}
    result.params = {"total": 1000, "trainable": 1000}
    result.loss = {"first_timed_step": 0.7, "last_timed_step": 0.6} if task == "fit" else None
    return result


def write_run(results, ms, keras="3.15.1", image_id="sha256:" + "11" * 32, runtime="podman", repeats=1):
    """Environment records, then cells (newer than every input), as a finished tiny run leaves them; repeat r of a
    cell runs 1% slower per repeat (a spread of 2% over 3 repeats)."""
    environments = {}
    for framework in FRAMEWORKS:
        stack = matrix.stack_of(CONFIG, framework)
        if runtime == "podman":
            record = {"stack": stack, "kind": "image", "image": f"localhost/kbench/{stack}:cpu-x",
                      "id": image_id if stack == "keras3-jax" else "sha256:" + "22" * 32}
        else:
            record = {"stack": stack, "kind": "venv", "prefix": f"/x/.envs/{stack}.cpu"}
        record["lock_sha256"] = "sha256:" + "33" * 32
        environment_records.write(results / environment_records.path(runtime, stack, "cpu"), record)
        environments[framework] = record
    for (framework, task, batch), mean in ms.items():
        cell_id = matrix.Cell("tiny", "strict", "bert", task, batch, "float32", framework).cell_id
        for repeat in range(1, repeats + 1):
            result = fixture_cell(framework, task, batch, mean * (1 + 0.01 * (repeat - 1)), environments[framework],
                                  keras, runtime)
            result.repeat = repeat
            result.write(results / "cells" / f"{cell_id}.r{repeat}.json")


MS = {("native-torch-eager", "fit", 32): 80.0, ("keras3-jax", "fit", 32): 100.0,
      ("native-torch-eager", "predict", 256): 150.0, ("keras3-jax", "predict", 256): 200.0}


def leave_strays(results):
    """What launches, retries and interrupted writes leave beside cells and tables (none may enter an archive)."""
    cells = results / "cells/tiny/strict/bert/fit/bs32/float32"
    for stray in (".keras3-jax.r1.json.lock", ".staging-kbench-0/result.json", "attempts/keras3-jax.r1.json.20261130T0",
                  ".keras3-jax.r1.json.tmp"):
        (cells / stray).parent.mkdir(parents=True, exist_ok=True)
        (cells / stray).write_text("{}")
    (results / "tables/tiny/strict").mkdir(parents=True, exist_ok=True)
    (results / "tables/tiny/strict/.ms_per_step.csv.tmp").write_text("")


RUN_CONFIG = {**CONFIG, "suite": "tiny", "accelerator": "cpu", "runtime": "podman", "models": ["bert"],
              "frameworks": FRAMEWORKS, "precisions": ["float32"], "profiles": ["strict"]}


def pack_in_process(results: Path, out: Path, runtime="podman") -> Path:
    """What the workflow's tables, plots, run_facts and archive rules make of a fixture run, by the same functions
    in this process (the report a placeholder page): an archive to verify, tamper with, compare and ingest."""
    from kbench.results import facts, plots
    from kbench.results.context import Records, RunContext
    config = {**RUN_CONFIG, "runtime": runtime}
    cells_by_id: dict = {}
    paths = sorted(p for p in (results / "cells").rglob("*.r*.json") if "attempts" not in p.parts
                   and not p.name.startswith("."))
    for path in paths:
        result = cell.read(path)
        cells_by_id.setdefault(result.cell_id, []).append(result)
    registry.rebuild(config, "tiny", cells_by_id, results / "tables" / "tiny")
    plots.TABLE.build(Records(), RunContext.of(config, "tiny", "strict", results / "tables/tiny", results / "plots/tiny"))
    kind = "images" if runtime == "podman" else "environments"
    environments = sorted(str(p) for p in (results / kind).glob("*.json"))
    facts.TABLE.build(registry.read_records([["environments", *environments], ["cells", *map(str, paths)]]),
                      RunContext.of(config, "tiny", None, results / "tables/tiny"))
    (results / "report").mkdir(exist_ok=True)
    (results / "report" / "tiny.html").write_text("<html><body>report</body></html>")
    archive.pack(out.name.removesuffix(".tar.gz"), "tiny", results, config, results / "report" / "tiny.html",
                 list(map(str, paths)), environments, [], out)
    return out


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory):
    """A fixture run packed in this process (pack_in_process), its archive at archive/tiny-run1.tar.gz."""
    results = tmp_path_factory.mktemp("packed")
    write_run(results, MS)
    leave_strays(results)
    pack_in_process(results, results / "archive" / "tiny-run1.tar.gz")
    return results


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """Tables, plots, report and archive of a fixture run, made by the workflow's own commands (the real Snakemake
    CLI: the workflow tier)."""
    results = tmp_path_factory.mktemp("results")
    write_run(results, MS)
    leave_strays(results)
    args = [*ARGS, f"results_dir={results}"]
    for step in (["--cores", "1", "--rerun-triggers", "mtime"],
                 ["--cores", "1", "--report", str(results / "report" / "tiny.html")],
                 [str(results / "archive" / "tiny-run1.tar.gz"), "--cores", "1", "--rerun-triggers", "mtime"]):
        proc = snakemake(*step, *args)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return results


@pytest.mark.workflow
def test_plots_are_written_as_png_and_svg(finished_run):
    for name in ("ms_per_step", "speedup", "first_step"):
        assert (finished_run / "plots" / "tiny" / "strict" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (finished_run / "plots" / "tiny" / "strict" / f"{name}.svg").read_bytes()[:2000]


class VisibleText(HTMLParser):
    """The text a reader sees: everything outside <script> and <style> (where the report's raw data sits)."""

    def __init__(self):
        super().__init__()
        self.hidden, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.hidden -= tag in ("script", "style")

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)

    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def rendered_text(page) -> str:
    """The page after Chromium ran its JavaScript, reduced to what a reader sees."""
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    parser = VisibleText()
    parser.feed(dom)
    return parser.text()


@pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("KBENCH_REQUIRE_CHROMIUM"),
                    reason="needs Debian's chromium (.ci/run installs it and requires this test)")
@pytest.mark.workflow
def test_report_renders_in_headless_chromium_with_tables_plots_and_run_facts(finished_run):
    """The report is a JavaScript app whose content sits in script data until it runs: only the rendered DOM,
    scripts removed, shows the navigation with our categories, the workflow description with the suite, and the
    rule graph (drawn by Vega, whose action menu appears only once it has rendered)."""
    text = rendered_text(finished_run / "report" / "tiny.html")
    # the first page, before anything else: the headline, what changed, the findings, the published table
    first = text.index("Headline, profile strict: the fastest column of each row")
    assert first < text.index("What changed since the previous run, profile strict") < text.index(
        "The published findings, re-tested on this run") < text.index("The published A100 table")
    assert "bert fit 32 float32 native-torch-eager 80.00" in text          # this run's fastest column of the row
    assert "No history yet" in text or "No earlier comparable run" in text
    assert "Snakemake Report" in text and "Results Batch study Departures First step History JAX against NumPy Plots Run Tables" in text
    assert "suite tiny on accelerator cpu , runtime podman , profiles strict" in text
    assert "Save as SVG" in text


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("tesseract"))
                    and not os.environ.get("KBENCH_REQUIRE_CHROMIUM"),
                    reason="needs Debian's chromium and tesseract-ocr (.ci/run installs them and requires this test)")
@pytest.mark.workflow
def test_the_report_opens_on_its_answer_in_a_common_window(finished_run):
    """As a person sees it: the report in a 1366x768 window, screenshot, read back by OCR. The headline's title is in
    the visible part (the landing page once opened mid-page, its top out of reach, while the DOM had everything).
    The screenshot stays beside the report for a person to look at."""
    shot = finished_run / "report" / "tiny-1366x768.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1366,768", "--virtual-time-budget=15000", f"--screenshot={shot}",
                    (finished_run / "report" / "tiny.html").as_uri()], capture_output=True, timeout=120, check=True)
    # OCR reads the main pane: Snakemake's navigation to its left (a grey column, 226-246 px wide at this size as the
    # fonts come) is another column of text, which tesseract's page segmentation may run into the pane's first lines.
    # The pane starts at the first white pixel of a row the navigation spans.
    from PIL import Image
    image = Image.open(shot).convert("RGB")
    edge = next((x for x in range(image.width) if image.getpixel((x, 400)) == (255, 255, 255)), 0)
    pane = shot.with_name("tiny-1366x768-pane.png")
    image.crop((edge, 0, image.width, image.height)).save(pane)
    seen = " ".join(subprocess.run(["tesseract", str(pane), "stdout"], capture_output=True, text=True,
                                   timeout=120, check=True).stdout.split())
    assert "Headline, profile strict: the fastest column of each row" in seen, seen[:1500]


@pytest.mark.workflow
def test_the_departures_page_lists_every_configured_departure(finished_run):
    page = (finished_run / "tables" / "tiny" / "departures.html").read_text()
    assert "Departures from the published benchmark" in page and "tag v0.0.5, commit 4f1d20e" in page
    for departure in CONFIG["departures"]:
        assert f"<td>{departure['id']}</td>" in page
    assert "none: Trainer-only work" in page       # kept by no profile: why not


@pytest.mark.workflow
def test_run_facts_name_suite_images_and_host(finished_run):
    page = (finished_run / "tables" / "tiny" / "run_facts.html").read_text()
    assert "tiny" in page and "sha256:" + "11" * 32 in page and "localhost/kbench/keras3-jax:cpu-x" in page


@pytest.mark.workflow
def test_archive_holds_the_run_and_verifies(finished_run):
    path = finished_run / "archive" / "tiny-run1.tar.gz"
    with tarfile.open(path) as tar:
        names = {m.name.removeprefix("tiny-run1/") for m in tar.getmembers()}
    assert {"MANIFEST.sha256", "run.json", "config.resolved.yaml", "report/tiny.html", "tables/tiny/strict/ms_per_step.csv",
            "plots/tiny/strict/ms_per_step.svg", "images/keras3-jax.cpu.json", "envs/keras3-jax.gpu.lock",
            "containers/Containerfile", "cells/tiny/strict/bert/fit/bs32/float32/keras3-jax.r1.json"} <= names
    assert not [n for n in names if n.endswith(".tmp") or "/." in n or "attempts/" in n]
    assert archive.verify(path) == []
    assert archive.main(["verify", str(path)]) == 0


def rewrite(source, target, change, extra=None, remanifest=False):
    """Copy an archive member by member; change(name, data) -> new data, or None to drop the member;
    extra: {name: data} members to add; remanifest: write MANIFEST.sha256 anew for the changed files, as a forger
    who knows the format would."""
    with tarfile.open(source) as old:
        members = {m.name: change(m.name, old.extractfile(m).read()) for m in old.getmembers()}
    members.update(extra or {})
    if remanifest:
        top = next(iter(members)).split("/")[0]
        members[f"{top}/MANIFEST.sha256"] = "".join(
            f"{archive.sha256_bytes(data)}  {name.removeprefix(top + '/')}\n" for name, data in sorted(members.items())
            if data is not None and not name.endswith(("/MANIFEST.sha256", "/MANIFEST.sha256.sig"))).encode()
    with tarfile.open(target, "w:gz") as new:
        for name, data in members.items():
            if data is not None:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                new.addfile(info, io.BytesIO(data))


CELL = "cells/tiny/strict/bert/fit/bs32/float32/keras3-jax.r1.json"


def test_verify_names_one_changed_byte(packed_run, tmp_path):
    def flip(name, data):
        if name.endswith(CELL):
            assert b'"mean_ms": 100.0,' in data
            return data.replace(b'"mean_ms": 100.0,', b'"mean_ms": 10.00,')
        return data
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz", flip)
    problems = archive.verify(tmp_path / "t.tar.gz")
    assert problems[0] == f"{CELL}: altered (SHA-256 differs from MANIFEST.sha256)"
    assert f"{CELL}: mean_ms 10.0 is not that of its step_ms (100.0)" in problems
    assert archive.main(["verify", str(tmp_path / "t.tar.gz")]) == 1


def test_verify_names_a_removed_file_and_the_table_row_it_leaves_unbacked(packed_run, tmp_path):
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz",
            lambda name, data: None if name.endswith(CELL) else data)
    problems = archive.verify(tmp_path / "t.tar.gz")
    assert problems[:2] == [f"{CELL}: missing (listed in MANIFEST.sha256)", f"{CELL}: missing (the tables list this cell)"]
    assert "tables/tiny/strict/ms_per_step.csv: differs from the table rebuilt from the cell JSONs" in problems


def test_verify_names_an_extra_file(packed_run, tmp_path):
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz", lambda name, data: data,
            extra={"tiny-run1/tables/tiny/better_numbers.csv": b"1,2"})
    assert archive.verify(tmp_path / "t.tar.gz") == [
        "tables/tiny/better_numbers.csv: extra (not listed in MANIFEST.sha256)",
        "tables/tiny/better_numbers.csv: not a table kbench.results.registry makes"]


def test_verify_names_a_cell_whose_image_differs_from_the_record(packed_run, tmp_path):
    """Internally inconsistent although the manifest was rewritten to match: the cell ran in another image."""
    def swap(name, data):
        if name.endswith("images/keras3-jax.cpu.json"):
            return data.replace(b"11" * 32, b"44" * 32)
        return data
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz", swap, remanifest=True)
    problems = archive.verify(tmp_path / "t.tar.gz")
    assert len(problems) == 2 and all("but images/keras3-jax.cpu.json records sha256:4444" in p for p in problems)


def test_verify_names_an_edited_mean_even_under_a_rewritten_manifest(packed_run, tmp_path):
    """A forger edits one cell's mean and writes the manifest anew: the cell's own step times and the tables
    rebuilt from the cells give it away."""
    def edit(name, data):
        if name.endswith(CELL):
            result = json.loads(data)
            result["timing"]["mean_ms"] = 10.0
            return json.dumps(result).encode()
        return data
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz", edit, remanifest=True)
    problems = archive.verify(tmp_path / "t.tar.gz")
    assert f"{CELL}: mean_ms 10.0 is not that of its step_ms (100.0)" in problems
    assert "tables/tiny/strict/ms_per_step.csv: differs from the table rebuilt from the cell JSONs" in problems
    assert "tables/tiny/strict/cells_long.csv: differs from the table rebuilt from the cell JSONs" in problems


def test_verify_names_an_edited_table_even_under_a_rewritten_manifest(packed_run, tmp_path):
    def edit(name, data):
        if name.endswith("tables/tiny/strict/ms_per_step.csv"):
            assert b",100.0," in data
            return data.replace(b",100.0,", b",90.0,")
        return data
    rewrite(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "t.tar.gz", edit, remanifest=True)
    assert archive.verify(tmp_path / "t.tar.gz") == [
        "tables/tiny/strict/ms_per_step.csv: differs from the table rebuilt from the cell JSONs"]


def test_verify_checks_venv_cells_against_their_lock_digest(tmp_path):
    """Host-runtime cells name their venv by lock digest: a cell whose digest is not its record's is named."""
    results = tmp_path / "results"
    write_run(results, MS, runtime="host")
    pack_in_process(results, tmp_path / "venv.tar.gz", runtime="host")
    assert archive.verify(tmp_path / "venv.tar.gz") == []

    def swap(name, data):
        return data.replace(b"33" * 32, b"66" * 32) if name.endswith("environments/keras3-jax.cpu.json") else data
    rewrite(tmp_path / "venv.tar.gz", tmp_path / "t.tar.gz", swap, remanifest=True)
    problems = archive.verify(tmp_path / "t.tar.gz")
    assert len(problems) == 2 and all("ran in lock_sha256 sha256:3333" in p
                                      and "but environments/keras3-jax.cpu.json records sha256:6666" in p
                                      for p in problems)


def test_compare_marks_changes_noise_packages_images_and_cells_of_one_run(tmp_path):
    write_run(tmp_path / "old", MS)
    new = {**MS, ("keras3-jax", "fit", 32): 120.0, ("keras3-jax", "predict", 256): 205.0}
    del new[("native-torch-eager", "predict", 256)]
    write_run(tmp_path / "new", new, keras="3.15.0", image_id="sha256:" + "55" * 32)
    table = compare.compare(archive.Run(tmp_path / "old", "tiny"), archive.Run(tmp_path / "new", "tiny"))
    rows = table.set_index("cell")
    fit = rows.loc["tiny/strict/bert/fit/bs32/float32/keras3-jax"]
    assert (fit["old ms"], fit["new ms"], fit["change %"], fit["verdict"]) == (100.0, 120.0, 20.0, "slower")
    assert fit["packages changed"] == "keras 3.15.1 -> 3.15.0"
    assert fit["image changed"] == "sha256:111111111111 -> sha256:555555555555"
    assert rows.loc["tiny/strict/bert/predict/bs256/float32/keras3-jax", "verdict"] == "within noise (±10%)"
    assert rows.loc["tiny/strict/bert/predict/bs256/float32/native-torch-eager", "verdict"] == "only in old"
    unchanged = rows.loc["tiny/strict/bert/fit/bs32/float32/native-torch-eager"]
    assert unchanged["verdict"] == "same record (not rerun)" and unchanged["packages changed"] == ""


def test_compare_tests_the_repeats_of_both_sides(tmp_path):
    """Three repeats a side: Welch's test on the repeat means decides, not a fixed band."""
    write_run(tmp_path / "old", MS, repeats=3)
    new = {**MS, ("keras3-jax", "fit", 32): 110.0, ("keras3-jax", "predict", 256): 201.0}
    write_run(tmp_path / "new", new, repeats=3)
    rows = compare.compare(archive.Run(tmp_path / "old"), archive.Run(tmp_path / "new")).set_index("cell")
    fit, predict = rows.loc["tiny/strict/bert/fit/bs32/float32/keras3-jax"], rows.loc[
        "tiny/strict/bert/predict/bs256/float32/keras3-jax"]
    assert (fit["verdict"], fit["repeats"], fit["old ms"], fit["new ms"]) == ("slower", "3 / 3", 101.0, 111.1)
    assert fit["significant"].startswith("yes (Welch q=")
    assert predict["verdict"] == "no significant change" and predict["significant"].startswith("no (Welch q=")


def test_noise_band_ignores_the_drain_step_and_widens_with_step_spread():
    def timed(steps):
        result = fixture_cell("keras3-jax", "fit", 32, 100.0, {})
        result.timing = {"step_ms": steps, "mean_ms": sum(steps) / len(steps), "n": len(steps)}
        return result
    steady = timed([100.0] * 19 + [2000.0])                # one drain step: no spread that counts
    assert compare.noise_band_pct(steady, steady, 10.0) == 10.0
    jumpy = timed([50.0, 150.0] * 10)                      # every step 50% off the median
    assert compare.noise_band_pct(jumpy, jumpy, 10.0) > 40


def test_compare_of_a_results_directory_needs_its_suite_only_when_it_holds_several(tmp_path):
    write_run(tmp_path / "one", MS)
    assert archive.Run(tmp_path / "one").suite == "tiny"
    (tmp_path / "one" / "cells" / "paper").mkdir()
    with pytest.raises(ValueError, match="give --suite; cells/ holds suites: paper, tiny"):
        archive.Run(tmp_path / "one")


def keypair(tmp_path, name):
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def test_a_signed_archive_verifies_only_with_its_publishers_key(packed_run, tmp_path):
    """A forger can edit a number and rewrite the manifest (and the tables) consistently; they cannot sign the new
    manifest with the publisher's key: verify with the publisher's allowed-signers file refuses it."""
    alice, mallory = keypair(tmp_path, "alice"), keypair(tmp_path, "mallory")
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"alice@lab {(tmp_path / 'alice.pub').read_text().split(' ', 2)[0]} "
                       f"{(tmp_path / 'alice.pub').read_text().split(' ', 2)[1]}\n")
    signed = tmp_path / "signed.tar.gz"
    shutil.copy(packed_run / "archive" / "tiny-run1.tar.gz", signed)
    assert archive.main(["sign", str(signed), "--key", str(alice)]) == 0
    assert archive.verify(signed, signers, "alice@lab") == []
    assert archive.manifest_digest(signed) == archive.manifest_digest(packed_run / "archive" / "tiny-run1.tar.gz")

    unsigned = packed_run / "archive" / "tiny-run1.tar.gz"
    assert archive.verify(unsigned, signers, "alice@lab") == ["MANIFEST.sha256.sig: missing, the archive is unsigned"]
    assert archive.verify(unsigned) == []                   # without a key: intact, and reported unsigned

    forged = tmp_path / "forged.tar.gz"
    rewrite(signed, forged, lambda name, data: data.replace(b"keras", b"kerax") if name.endswith(CELL) else data,
            remanifest=True)
    assert archive.main(["sign", str(forged), "--key", str(mallory)]) == 0
    problems = archive.verify(forged, signers, "alice@lab")
    assert problems[0].startswith("MANIFEST.sha256.sig: does not verify for 'alice@lab'")


def test_compare_takes_direction_size_and_test_from_the_same_means(tmp_path):
    """Old repeats 100, 100, 160 (median 100, mean 120), new 110 x 3: a median says 10% slower, the mean that the
    test compares says 8% faster. One statistic throughout: the mean."""
    write_run(tmp_path / "old", {("keras3-jax", "fit", 32): 100.0}, repeats=3)
    write_run(tmp_path / "new", {("keras3-jax", "fit", 32): 110.0}, repeats=3)
    path = tmp_path / "old/cells/tiny/strict/bert/fit/bs32/float32/keras3-jax.r3.json"
    third = cell.read(path)
    third.timing = {**third.timing, "mean_ms": 160.0}
    third.write(path)
    for r in (1, 2, 3):         # no spread on the new side
        path = tmp_path / f"new/cells/tiny/strict/bert/fit/bs32/float32/keras3-jax.r{r}.json"
        result = cell.read(path)
        result.timing = {**result.timing, "mean_ms": 110.0}
        result.write(path)
    row = compare.compare(archive.Run(tmp_path / "old"), archive.Run(tmp_path / "new")).iloc[0]
    assert (row["old ms"], row["new ms"]) == (pytest.approx(120.33, abs=0.01), 110.0)
    assert row["change %"] < 0 and row["verdict"] in ("faster", "no significant change")


def test_compare_adjusts_its_welch_tests_for_the_many_cells_it_tests(tmp_path):
    """Forty cells that did not change (two of them, by chance, at Welch p of about 0.04) and one that did: an
    uncorrected p < 0.05 would report three changes; Benjamini-Hochberg over the 41 tests reports the real one."""
    means = {batch: ([100.0, 101.0, 102.0], [100.5, 101.5, 102.5]) for batch in range(1, 39)}
    means.update({39: ([100.0, 101.0, 102.0], [102.5, 103.5, 104.5]),       # p ~ 0.04: chance
                  40: ([102.5, 103.5, 104.5], [100.0, 101.0, 102.0]),
                  41: ([100.0, 101.0, 102.0], [140.0, 141.0, 142.0])})     # a real change
    for side, index in (("old", 0), ("new", 1)):
        write_run(tmp_path / side, {("keras3-jax", "fit", batch): 100.0 for batch in means}, repeats=3)
        for batch, pair in means.items():
            for repeat, mean in enumerate(pair[index], start=1):
                path = tmp_path / side / f"cells/tiny/strict/bert/fit/bs{batch}/float32/keras3-jax.r{repeat}.json"
                result = cell.read(path)
                result.timing = {**result.timing, "mean_ms": mean}
                result.write(path)
    table = compare.compare(archive.Run(tmp_path / "old"), archive.Run(tmp_path / "new")).set_index("cell")
    raw = {cell_id: float(text.split("p=")[1].rstrip(")")) for cell_id, text in table.significant.items()}
    assert sum(p < 0.05 for p in raw.values()) == 3          # what an uncorrected test would have reported
    changed = table[table.verdict.isin(["faster", "slower"])]
    assert list(changed.index) == ["tiny/strict/bert/fit/bs41/float32/keras3-jax"]
    assert changed.iloc[0].verdict == "slower" and changed.iloc[0].significant.startswith("yes (Welch q=")


def forge_consistently(source, target):
    """What a careful forger does: one cell made twice as fast (every step, block and window halved, its statistics
    recomputed), every table rebuilt from the cells by the project's own code, the manifest written anew."""
    with tarfile.open(source) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    top = next(iter(members)).split("/")[0]
    name = f"{top}/{CELL}"
    forged = cell.CellResult.from_json(json.loads(members[name]))
    steps = [ms / 2 for ms in forged.timing["step_ms"]]
    forged.timing = {**forged.timing, **timing.summarize(steps), "step_ms": steps, "window_ms": sum(steps),
                     "block_ms": [ms / 2 for ms in forged.timing["block_ms"]],
                     "examples_per_s": 2 * forged.timing["examples_per_s"]}
    members[name] = json.dumps(forged.to_json()).encode()
    cells = {}
    for n, data in sorted(members.items()):
        if n.startswith(f"{top}/cells/") and n.endswith(".json"):
            result = cell.CellResult.from_json(json.loads(data))
            cells.setdefault(result.cell_id, []).append(result)
    with tempfile.TemporaryDirectory() as tmp:
        registry.rebuild(yaml.safe_load(members[f"{top}/config.resolved.yaml"]), "tiny", cells, Path(tmp))
        for path in Path(tmp).rglob("*"):
            if path.is_file():
                members[f"{top}/tables/tiny/{path.relative_to(tmp)}"] = path.read_bytes()
    rewrite_members(members, target)


def rewrite_members(members, target):
    top = next(iter(members)).split("/")[0]
    members = {n: d for n, d in members.items() if not n.endswith(("/MANIFEST.sha256", "/MANIFEST.sha256.sig"))}
    members[f"{top}/MANIFEST.sha256"] = "".join(f"{archive.sha256_bytes(data)}  {n.removeprefix(top + '/')}\n"
                                                for n, data in sorted(members.items())).encode()
    with tarfile.open(target, "w:gz") as new:
        for n, data in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))


def test_a_consistent_forgery_passes_unsigned_verify_and_is_refused_with_the_publishers_key(packed_run, tmp_path):
    """The README's claim, exactly: halve one cell's steps, recompute its statistics, rebuild the tables with this
    project's code and rewrite the manifest: without a key verify finds nothing wrong; with the publisher's
    allowed-signers line it refuses the archive, whether unsigned or re-signed by the forger."""
    alice, mallory = keypair(tmp_path, "alice"), keypair(tmp_path, "mallory")
    signers = tmp_path / "allowed_signers"
    signers.write_text("alice@lab " + " ".join((tmp_path / "alice.pub").read_text().split()[:2]) + "\n")
    signed = tmp_path / "signed.tar.gz"
    shutil.copy(packed_run / "archive" / "tiny-run1.tar.gz", signed)
    assert archive.main(["sign", str(signed), "--key", str(alice)]) == 0
    forged = tmp_path / "forged.tar.gz"
    forge_consistently(signed, forged)
    before = cell.CellResult.from_json(json.loads(archive.Run(signed).files[CELL])).mean_ms
    after = cell.CellResult.from_json(json.loads(archive.Run(forged).files[CELL])).mean_ms
    assert after == pytest.approx(before / 2)
    assert archive.verify(forged) == []                         # consistent: nothing for an unkeyed verify to find
    assert archive.verify(forged, signers, "alice@lab") == ["MANIFEST.sha256.sig: missing, the archive is unsigned"]
    assert archive.main(["sign", str(forged), "--key", str(mallory)]) == 0
    assert archive.verify(forged, signers, "alice@lab")[0].startswith(
        "MANIFEST.sha256.sig: does not verify for 'alice@lab'")


def test_the_readmes_verify_walkthrough_runs_as_printed(packed_run, tmp_path):
    from test_readme import verify_walkthrough
    from conftest import REPO
    (tmp_path / "results" / "archive").mkdir(parents=True)
    shutil.copy(packed_run / "archive" / "tiny-run1.tar.gz", tmp_path / "results" / "archive")
    for name in (".venv", "scripts"):
        (tmp_path / name).symlink_to(REPO / name)
    *setup, check = verify_walkthrough()
    for line in setup:
        subprocess.run(line, shell=True, cwd=tmp_path, check=True)
    proc = subprocess.run(check, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{CELL}: altered" in proc.stdout + proc.stderr


def test_verify_rebuilds_the_equivalence_table_in_the_jobs_order_not_the_paths():
    """An archive lists equivalence/<suite>/<profile>/<model>/{keras3-jax,native-torch-eager,reference}.json in path
    order; rule tables got them reference first, then the columns in config order: the rebuilt table must too (the
    demo's archive failed verify on equivalence_long.csv before)."""
    config = {**CONFIG, "models": ["bert"], "frameworks": ["native-torch-eager", "keras3-jax"]}

    def job(name, framework):
        spec = {"cell_id": f"tiny/strict/equivalence/bert/{name}", "job": "equivalence", "model": "bert",
                "framework": framework,
                "reference": None if name == "reference" else "reference"}
        return cell.new_result(spec, {}, "ok")
    in_paths = [job("keras3-jax", "keras3-jax"), job("native-torch-eager", "native-torch-eager"),
                job("reference", "keras3-jax")]
    ordered = sorted(in_paths, key=registry.job_order(config))
    assert [r.cell_id.rsplit("/", 1)[1] for r in ordered] == ["reference", "native-torch-eager", "keras3-jax"]
