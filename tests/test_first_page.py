"""The report's first page (kbench.report.first_page) and the findings it re-tests (kbench.claims.findings): the
findings' rules read the published page's own numbers as the page reads them, fail where a row contradicts them,
never turn a CPU run into a GPU conclusion (and every GPU accelerator's run reads as a GPU's), the published table
shows which float32 numbers cannot have been FP32, a run of strict and tuned plans and reads the batch verdicts of
the profiles with a ladder only, and a claim of a kind the registry holds stands on the page with no other edit."""
import json

import pandas as pd
import pytest

from conftest import CONFIG, REPO, run_context
from dag import plan
from kbench.claims import registry
from kbench.claims.evidence import Evidence
from kbench.plan import matrix
from kbench.report import first_page
from kbench.results import breakdown_tables, first_step_tables, tables
from kbench.results.context import published_flops
from kbench.results.verdicts import HOLDS, Verdict

KERAS3 = matrix.keras3_frameworks(CONFIG)
FINDINGS = {f["kind"] + f.get("against", ""): f for f in CONFIG["published"]["findings"]}


def summary_of(rows: list[dict], spread: float = 1e-6) -> pd.DataFrame:
    """cells_summary rows from (model, task, batch, precision, ms per framework): one repeat each, an interval of
    +-spread around the mean."""
    cells = []
    for entry in rows:
        for framework, ms in entry["ms"].items():
            if ms is None:
                continue
            cells.append(dict(model=entry["model"], task=entry["task"], batch_size=entry["batch_size"],
                              precision=entry["precision"], framework=framework, status="ok", estimate_ms=ms,
                              ci_low_ms=ms * (1 - spread), ci_high_ms=ms * (1 + spread), repeats=1,
                              ci_method="blocks", repeat_means=json.dumps([ms]), text=f"{ms}"))
    return pd.DataFrame(cells)


def finding_verdicts(findings: list[dict], summary: pd.DataFrame, claims=(), on_gpu=True) -> pd.DataFrame:
    """The findings' section of a run whose cells' summary is `summary` (precision_study.claims: `claims`)."""
    run = run_context(".", "strict", accelerator="gpu" if on_gpu else "cpu", keras3=tuple(KERAS3),
                      precision_claims=tuple(claims))
    (title, lines, _), = registry.on_page(tuple(findings), Evidence.given(run, {tables.SUMMARY: summary}))
    assert title == "The published findings, re-tested on this run (profile strict)"
    return lines


def verdicts(summary: pd.DataFrame, on_gpu=True) -> dict[str, str]:
    table = finding_verdicts(CONFIG["published"]["findings"], summary, CONFIG["precision_study"]["claims"], on_gpu)
    return dict(zip([f["kind"] + f.get("against", "") for f in CONFIG["published"]["findings"]], table.verdict))


def test_the_rules_read_the_published_numbers_as_the_page_does():
    found = verdicts(summary_of(CONFIG["published"]["rows"]))
    assert found == {"no_single_fastest_keras3": "holds", "keras3_beatsnative-torch-compiled": "holds",
                     "keras3_beatskeras2": "holds", "precision_claims": "not measured here"}
    rests_on = finding_verdicts([FINDINGS["keras3_beatsnative-torch-compiled"]],
                                summary_of(CONFIG["published"]["rows"]))
    assert rests_on["rests on"].item().startswith("5 of 10 rows: sam fit bs1 float32: keras3-tensorflow +244%")


def test_one_contradicting_row_and_ties_make_findings_fail():
    rows = [dict(r, ms=dict(r["ms"])) for r in CONFIG["published"]["rows"]]
    bert_predict = next(r for r in rows if (r["model"], r["task"]) == ("bert", "predict"))
    bert_predict["ms"]["keras2"] = 400.0                       # Keras 2 faster than every Keras 3 backend here
    assert verdicts(summary_of(rows))["keras3_beatskeras2"] == "does not hold"
    for r in rows:                                              # every Keras 3 backend within 2% of the others
        r["ms"].update({f: 100.0 + i for i, f in enumerate(KERAS3)})
    assert verdicts(summary_of(rows, spread=0.05))["no_single_fastest_keras3"] == "does not hold"


def test_a_cpu_run_never_reads_as_a_gpu_conclusion():
    found = verdicts(summary_of(CONFIG["published"]["rows"]), on_gpu=False)
    assert found["keras3_beatskeras2"] == "not measured here (no GPU in this run; its CPU rows read: holds)"


def test_the_fp16_claims_read_every_framework():
    rows = [{"model": "resnet50", "task": "fit", "batch_size": 128, "precision": p, "ms": ms}
            for p, ms in (("float32", {"keras3-jax": 300.0, "native-torch-eager": 300.0}),
                          ("mixed_float16", {"keras3-jax": 150.0, "native-torch-eager": 250.0}))]
    table = finding_verdicts([FINDINGS["precision_claims"]], summary_of(rows), CONFIG["precision_study"]["claims"])
    assert table.verdict.item() == "does not hold"             # torch 1.2x against the claimed 1.5x
    assert "native-torch-eager: 1.20x (claimed 1.5x)" in table["rests on"].item()


def test_the_published_table_names_the_float32_numbers_above_the_fp32_peak():
    table = first_page.published_table(CONFIG["published"], published_flops(CONFIG), None).set_index("row")
    assert table.at["bert fit bs32 float32", "TFLOP/step"] == pytest.approx(9.28, abs=0.01)
    assert table.at["bert fit bs32 float32", "reading"] == (
        "above the FP32 peak (19.5 TFLOP/s): not FP32 in native-torch-compiled, keras3-tensorflow, keras3-jax")
    assert "native-torch-eager 13.4" in table.at["bert fit bs32 float32", "implied TFLOP/s"]   # under the peak
    assert table.at["gemma fit bs8 bfloat16", "keras2"] == "NA"


def test_the_headline_ties_only_the_columns_whose_intervals_overlap_the_fastests():
    """keras3-tensorflow's interval overlaps keras3-jax's (a tie, not a loss); keras2's lies beyond it (a loss): only
    the tie is 'not shown to differ'. The row's flags (an equivalence verdict among them) come along."""
    row = {"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32",
           "ms": {"keras3-jax": 10.0, "keras3-tensorflow": 10.4, "keras2": 20.0}}
    summary = summary_of([row], spread=0.05)
    flags = pd.DataFrame({"params_parity": [""], "equivalence": ["keras2: differs: rel 3.1e-03 > 7.4e-06"]},
                         index=pd.MultiIndex.from_tuples([("bert", "fit", 32, "float32")]))
    found = first_page.headline(summary, ["keras2", "keras3-tensorflow", "keras3-jax"], flags).iloc[0]
    assert found["fastest"] == "keras3-jax" and found["not shown to differ from it"] == "keras3-tensorflow"
    assert found["flags"] == "equivalence: keras2: differs: rel 3.1e-03 > 7.4e-06"


def test_a_row_without_an_ok_column_says_whether_it_is_a_shared_limit_or_a_failure():
    """tf32 on a CPU is n/a in every column for one reason: the headline says so; a row where a cell failed must not
    read as a limit."""
    na = "n/a: TF32 is a tensor-core arithmetic of NVIDIA GPUs (Ampere and later): a CPU has none"
    cells = pd.DataFrame([dict(model="bert", task="fit", batch_size=32, precision="tf32", framework=f,
                               status="unsupported", text=na) for f in ("keras3-jax", "native-torch-eager")])
    row = first_page.headline(cells, ["keras3-jax", "native-torch-eager"]).iloc[0]
    assert row["fastest"] == ("n/a in every column (TF32 is a tensor-core arithmetic of NVIDIA GPUs (Ampere and "
                              "later): a CPU has none)") and row["columns ok"] == "0 of 2"
    cells.loc[1, ["status", "text"]] = ["failed", "failed: PrecisionMismatch"]
    assert first_page.headline(cells, ["keras3-jax", "native-torch-eager"]).iloc[0]["fastest"] == (
        "no column ok: 1 unsupported, 1 failed")


def test_keras3_beats_a_column_only_where_their_intervals_separate():
    """Keras 2 30% slower than the best Keras 3 backend, but with intervals that overlap: not beaten (the page's
    'beats' is a claim about the frameworks, not about one noisy number)."""
    rows = [{"model": "bert", "task": task, "batch_size": 32, "precision": "float32",
             "ms": {"keras3-jax": 100.0, "keras3-tensorflow": 110.0, "keras2": 130.0}} for task in ("fit", "predict")]
    finding = FINDINGS["keras3_beatskeras2"]
    table = finding_verdicts([finding], summary_of(rows, spread=0.2))
    assert table.verdict.item() == "does not hold"
    assert table["rests on"].item().startswith("0 of 2 rows: bert fit bs32 float32: keras3-jax +30% (not beyond)")
    table = finding_verdicts([finding], summary_of(rows, spread=0.01))
    assert table.verdict.item() == "holds" and table["rests on"].item().startswith("2 of 2 rows")


def test_no_single_fastest_keras3_backend_reads_the_keras3_columns_only():
    """A native column fastest in every row says nothing about the Keras 3 backends: here keras3-jax wins one row and
    keras3-tensorflow the other, beyond their intervals, so no single Keras 3 backend is fastest everywhere."""
    rows = [{"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32",
             "ms": {"native-torch-compiled": 50.0, "keras3-jax": 100.0, "keras3-tensorflow": 150.0}},
            {"model": "bert", "task": "predict", "batch_size": 256, "precision": "float32",
             "ms": {"native-torch-compiled": 50.0, "keras3-jax": 150.0, "keras3-tensorflow": 100.0}}]
    table = finding_verdicts([FINDINGS["no_single_fastest_keras3"]], summary_of(rows))
    assert table.verdict.item() == "holds"
    assert table["rests on"].item() == ("bert fit bs32 float32: keras3-jax; "
                                        "bert predict bs256 float32: keras3-tensorflow")


# strict and tuned selected, the batch study's ladder in strict alone (config batch_study.profiles): the page reads
# the batch verdicts of strict only, as no job writes tuned's
STRICT_AND_TUNED = {**CONFIG, "suite": "tiny", "accelerator": "cpu", "profiles": ["strict", "tuned"],
                    "batch_study": {**CONFIG["batch_study"], "profiles": ["strict"]}}


def test_the_first_page_of_strict_and_tuned_plans_the_batch_verdicts_of_the_laddered_profile_only():
    """The page's job asks for strict's batch verdicts (a batch study job writes them) and no batch table of tuned,
    which no job would write from a ladder it never ran."""
    assert matrix.ladder_profiles(STRICT_AND_TUNED) == ["strict"] and matrix.tuned_profile(STRICT_AND_TUNED)
    found = plan("-n", "--cores", "1", "results/report/tiny/first_page.html", "--config", "suite=tiny",
                 "accelerator=cpu", "profiles=[strict,tuned]", "batch_study={profiles: [strict]}",
                 "frameworks=[native-torch-eager,keras3-jax]", "models=[bert]", "precisions=[float32]", cwd=REPO)
    assert found.ok, found.log[-2000:]
    assert found.counts()["first_page"] == 1 and found.counts()["tuning_gain"] == 1
    assert [p for p in found.outputs() if p.endswith("batch_verdicts.csv")] == [
        "results/tables/tiny/strict/batch_verdicts.csv"]
    assert not [p for p in found.outputs() if p.startswith(("results/tables/tiny/tuned/batch",
                                                            "results/plots/tiny/tuned/batch"))]


def test_the_first_page_of_strict_and_tuned_reads_the_batch_verdicts_of_the_laddered_profile_only(tmp_path):
    """Each profile's tables are there, the batch verdicts in strict's folder alone (the tuned run has no ladder):
    the page has strict's batch study and the tuning verdicts, and no batch study of tuned."""
    row = {"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32",
           "ms": {"native-torch-eager": 20.0, "keras3-jax": 10.0}}
    for profile in ("strict", "tuned"):
        (tmp_path / profile).mkdir()
        summary = summary_of([row])
        summary.to_csv(tmp_path / profile / "cells_summary.csv", index=False)
        summary.pivot(index=["model", "task", "batch_size", "precision"], columns="framework",
                      values="estimate_ms").to_csv(tmp_path / profile / "ms_per_step.csv")
        breakdown_tables.breakdown_long([]).to_csv(tmp_path / profile / breakdown_tables.LONG, index=False)
        first_step_tables.first_step_long([], [], 0.1, {}).to_csv(tmp_path / profile / first_step_tables.LONG,
                                                                  index=False)
    pd.DataFrame([{"model": "bert", "task": "fit", "verdict": "strict's batch verdict"}]).to_csv(
        tmp_path / "strict" / "batch_verdicts.csv", index=False)
    pd.DataFrame([{"model": "bert", "task": "fit", "verdict": "the tuning verdict"}]).to_csv(
        tmp_path / "tuning_verdicts.csv", index=False)
    pd.DataFrame([{"workload": "matmul", "verdict": "the JAX verdict"}]).to_csv(tmp_path / "jax_numpy_claim.csv",
                                                                                 index=False)
    _, page = first_page.build(first_page.Page.of(STRICT_AND_TUNED, "tiny", tmp_path, tmp_path / "history"))
    assert "### The batch study's rows: a step's fixed cost against its cost per example (profile strict)" in page
    assert "strict's batch verdict" in page and "the tuning verdict" in page and "this row's fit reads" in page
    assert "### Headline, profile tuned" in page and page.count("### The batch study") == 1
    assert "The finding: Keras 3 gives the best out-of-the-box performance" in page      # its words: the config's
    assert page.index("### Out of the box against tuned") < page.index("### JAX against NumPy") < page.index(
        "### The published A100 table") and "the JAX verdict" in page


# one profile, three columns, no study beside the cells: the page reads the cells' tables, the breakdowns and the
# first step's table
ONE_PROFILE = {**CONFIG, "suite": "tiny", "profiles": ["strict"], "frameworks": ["native-torch-eager", "keras2",
                                                                                  "keras3-jax"],
               "batch_study": {**CONFIG["batch_study"], "enabled": False},
               "jax_numpy": {**CONFIG["jax_numpy"], "enabled": False}}


def one_profiles_tables(tables_root) -> None:
    """strict's tables of one row where keras3-jax beats keras2 beyond the intervals (a finding that decides)."""
    row = {"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32",
           "ms": {"native-torch-eager": 30.0, "keras2": 20.0, "keras3-jax": 10.0}}
    strict = tables_root / "strict"
    strict.mkdir(parents=True)
    summary = summary_of([row])
    summary.to_csv(strict / tables.SUMMARY, index=False)
    summary.pivot(index=["model", "task", "batch_size", "precision"], columns="framework",
                  values="estimate_ms").to_csv(strict / tables.MS_PER_STEP)
    breakdown_tables.breakdown_long([]).to_csv(strict / breakdown_tables.LONG, index=False)
    first_step_tables.first_step_long([], [], 0.1, {}).to_csv(strict / first_step_tables.LONG, index=False)


def page_of(config, tables_root) -> str:
    return first_page.build(first_page.Page.of(config, "tiny", tables_root, tables_root / "history"))[1]


@pytest.mark.parametrize("accelerator, on_gpu", [("gpu", True), ("gpu-cuda12", True), ("cpu", False)])
def test_the_first_page_of_every_gpu_accelerator_reads_as_a_gpus_run(tmp_path, accelerator, on_gpu):
    """gpu-cuda12 (the CUDA 12 locks, for R535-R570 drivers) is a GPU as gpu is: its page states its verdicts; a
    CPU run's page says it is one and reads "not measured here" with what its CPU rows read."""
    one_profiles_tables(tmp_path)
    page = page_of({**ONE_PROFILE, "accelerator": accelerator}, tmp_path)
    beats_keras2 = next(line for line in page.splitlines() if "Keras 3 beats Keras 2" in line)
    assert ("This run is on a CPU" in page) is not on_gpu
    if on_gpu:
        assert "| holds " in beats_keras2 and "no GPU in this run" not in page
    else:
        assert "not measured here (no GPU in this run; its CPU rows read: holds)" in beats_keras2


def toy(claim: dict, evidence: Evidence) -> Verdict:
    """A claim kind of the test's own: it counts the cells it reads."""
    return Verdict(HOLDS, f"{len(evidence.table(tables.SUMMARY))} cells read, {claim['threshold']} asked")


def test_a_claim_of_a_new_kind_stands_on_the_first_page_with_no_other_edit(tmp_path, monkeypatch):
    """Its rule and its registry entry, and its quote in the config: the page shows it in its kind's section, with
    its verdict and what it rests on."""
    monkeypatch.setitem(registry.KINDS, "toy", registry.Kind("toy", registry.stated(toy, "rows"), (tables.SUMMARY,),
                                                             registry.FINDINGS))
    one_profiles_tables(tmp_path)
    findings = [*CONFIG["published"]["findings"], {"kind": "toy", "threshold": 3, "quote": "a toy claim holds"}]
    page = page_of({**ONE_PROFILE, "accelerator": "gpu", "published": {**CONFIG["published"], "findings": findings}},
                   tmp_path)
    line = next(line for line in page.splitlines() if "a toy claim holds" in line)
    assert "| holds " in line and "3 cells read, 3 asked" in line
    section = page[page.index("### The published findings"):page.index("### The benchmark's explanations")]
    assert line in section


def test_a_claim_stands_only_where_the_run_makes_every_table_it_reads(tmp_path, monkeypatch):
    """A kind that reads the batch study's verdicts: absent from a run without the study (not "not measured"), on the
    page of one with it."""
    from kbench.results import batch
    monkeypatch.setitem(registry.KINDS, "toy", registry.Kind("toy", registry.stated(toy, "rows"),
                                                             (tables.SUMMARY, batch.VERDICTS), registry.FINDINGS))
    one_profiles_tables(tmp_path)
    findings = [{"kind": "toy", "threshold": 1, "quote": "a toy claim of the ladder"}]
    config = {**ONE_PROFILE, "accelerator": "gpu", "published": {**CONFIG["published"], "findings": findings}}
    assert "a toy claim of the ladder" not in page_of(config, tmp_path)
    run = run_context(tmp_path, "strict", accelerator="gpu")
    assert registry.on_page(tuple(findings), Evidence(run, frozenset({tables.SUMMARY, batch.VERDICTS})))


def test_a_long_unbroken_token_in_a_cell_gets_places_to_break_and_short_ones_none():
    """A failed job's reason can hold an image digest (71 characters): unbroken, it widened the JAX section's table
    past the report's pane, which slid the whole first page under the navigation (seen in the 1366x768 screenshot of
    tests/test_lifecycle.py); the page's text reads the same, with zero-width breaks in that token alone."""
    digest = "sha256:" + "1" * 64
    frame = pd.DataFrame({"rests on": [f"image {digest} is not in podman's storage"], "n": [10]})
    cell = first_page._html_table(frame)
    assert digest not in cell and digest in cell.replace("\u200b", "")
    assert all(len(part) <= first_page.LONGEST_TOKEN for part in first_page._breakable(digest).split("\u200b"))
    assert "podman's" in cell.replace("&#x27;", "'") and ">10<" in cell
    short = "native-torch-compiled"
    assert first_page._breakable(short) == short and first_page._breakable(3.5) == 3.5
