"""The report's first page (kbench.report.first_page): the findings' rules read the published page's own numbers as the
page reads them, fail where a row contradicts them, never turn a CPU run into a GPU conclusion, the published
table shows which float32 numbers cannot have been FP32, and a run of strict and tuned plans and reads the batch
verdicts of the profiles with a ladder only."""
import json

import pandas as pd
import pytest

from conftest import CONFIG, REPO
from dag import plan
from kbench.plan import matrix
from kbench.report import first_page
from kbench.results import breakdown_tables

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


def verdicts(summary: pd.DataFrame, on_gpu=True) -> dict[str, str]:
    table = first_page.finding_verdicts(CONFIG["published"]["findings"], summary, KERAS3,
                                        CONFIG["precision_study"]["claims"], "float32", on_gpu)
    return dict(zip([f["kind"] + f.get("against", "") for f in CONFIG["published"]["findings"]], table.verdict))


def test_the_rules_read_the_published_numbers_as_the_page_does():
    found = verdicts(summary_of(CONFIG["published"]["rows"]))
    assert found == {"no_single_fastest_keras3": "holds", "keras3_beatsnative-torch-compiled": "holds",
                     "keras3_beatskeras2": "holds", "precision_claims": "not measured here"}
    rests_on = first_page.finding_verdicts([FINDINGS["keras3_beatsnative-torch-compiled"]],
                                           summary_of(CONFIG["published"]["rows"]), KERAS3, [], "float32", True)
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
    table = first_page.finding_verdicts([FINDINGS["precision_claims"]], summary_of(rows), KERAS3,
                                        CONFIG["precision_study"]["claims"], "float32", True)
    assert table.verdict.item() == "does not hold"             # torch 1.2x against the claimed 1.5x
    assert "native-torch-eager: 1.20x (claimed 1.5x)" in table["rests on"].item()


def test_the_published_table_names_the_float32_numbers_above_the_fp32_peak():
    table = first_page.published_table(CONFIG, "paper", None).set_index("row")
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
    table = first_page.finding_verdicts([finding], summary_of(rows, spread=0.2), KERAS3, [], "float32", True)
    assert table.verdict.item() == "does not hold"
    assert table["rests on"].item().startswith("0 of 2 rows: bert fit bs32 float32: keras3-jax +30% (not beyond)")
    table = first_page.finding_verdicts([finding], summary_of(rows, spread=0.01), KERAS3, [], "float32", True)
    assert table.verdict.item() == "holds" and table["rests on"].item().startswith("2 of 2 rows")


def test_no_single_fastest_keras3_backend_reads_the_keras3_columns_only():
    """A native column fastest in every row says nothing about the Keras 3 backends: here keras3-jax wins one row and
    keras3-tensorflow the other, beyond their intervals, so no single Keras 3 backend is fastest everywhere."""
    rows = [{"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32",
             "ms": {"native-torch-compiled": 50.0, "keras3-jax": 100.0, "keras3-tensorflow": 150.0}},
            {"model": "bert", "task": "predict", "batch_size": 256, "precision": "float32",
             "ms": {"native-torch-compiled": 50.0, "keras3-jax": 150.0, "keras3-tensorflow": 100.0}}]
    table = first_page.finding_verdicts([FINDINGS["no_single_fastest_keras3"]], summary_of(rows), KERAS3, [],
                                        "float32", True)
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
    pd.DataFrame([{"model": "bert", "task": "fit", "verdict": "strict's batch verdict"}]).to_csv(
        tmp_path / "strict" / "batch_verdicts.csv", index=False)
    pd.DataFrame([{"model": "bert", "task": "fit", "verdict": "the tuning verdict"}]).to_csv(
        tmp_path / "tuning_verdicts.csv", index=False)
    _, page = first_page.build(STRICT_AND_TUNED, "tiny", tmp_path, tmp_path / "history")
    assert "### The batch study's rows: a step's fixed cost against its cost per example (profile strict)" in page
    assert "strict's batch verdict" in page and "the tuning verdict" in page and "this row's fit reads" in page
    assert "### Headline, profile tuned" in page and page.count("### The batch study") == 1
