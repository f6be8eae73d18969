"""The history of runs (kbench.lifecycle.history): ingest is idempotent (a results directory and its archive are one run),
consecutive comparable runs give a changes table naming the packages that moved, series never mix devices, and one
SQL query prints a cell's trend."""
import json
import shutil

import pytest

from kbench.contract import cell
from kbench.lifecycle import history
from kbench.plan import matrix
from test_lifecycle import MS, packed_run, write_run  # noqa: F401  (packed_run: the module's fixture)

JAX_FIT = matrix.Cell("tiny", "strict", "bert", "fit", 32, "float32", "keras3-jax").cell_id


def stamp(results, when: str, **provenance):
    """Give every cell of a fixture run its finish time (and other provenance), as the runner writes them."""
    for path in (results / "cells").rglob("*.r*.json"):
        result = cell.read(path)
        result.provenance.update(finished_utc=when, **provenance)
        result.write(path)


def bumped_run(tmp_path, name, ms, keras, when, repeats=3, **provenance):
    results = tmp_path / name
    write_run(results, ms, keras=keras, repeats=repeats)
    stamp(results, when, **provenance)
    return results


def test_a_run_and_its_archive_are_one_run_and_ingesting_twice_adds_nothing(packed_run, tmp_path):
    store = tmp_path / "history"
    first = history.ingest(packed_run, "tiny", store)
    assert first.added == 4 and first.cells == 4
    again = history.ingest(packed_run / "archive" / "tiny-run1.tar.gz", None, store)
    assert (again.run_id, again.added) == (first.run_id, 0)
    assert history.ingest(packed_run / "archive" / "tiny-run1.tar.gz", None, store).added == 0
    with history.connect(store, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == 4
    assert (store / "cells.parquet").exists() and (store / "trend.parquet").exists()


def test_a_bump_is_named_in_changes_and_one_query_prints_the_trend(tmp_path, capsys):
    """Run 1 on keras 3.15.1; run 2 rebuilds the keras3-jax stack on 3.16.0, its fit 20% slower and predict the
    same; the native cells were not rerun (the same records)."""
    store = tmp_path / "history"
    old = bumped_run(tmp_path, "old", MS, "3.15.1", "2026-11-01T00:00:00+00:00")
    new = tmp_path / "new"
    shutil.copytree(old, new)
    rerun = {k: v * (1.2 if k[:2] == ("keras3-jax", "fit") else 1.0) for k, v in MS.items() if k[0] == "keras3-jax"}
    write_run(new, rerun, keras="3.16.0", repeats=3)
    for path in (new / "cells").rglob("keras3-jax.r*.json"):
        result = cell.read(path)
        result.provenance["finished_utc"] = "2026-11-02T00:00:00+00:00"
        result.write(path)
    assert history.ingest(old, "tiny", store).added == 12
    assert history.ingest(new, "tiny", store).added == 12
    with history.connect(store) as con:
        table = history.changes(con, "tiny", "strict")
        rows = table.set_index("cell")
        assert set(rows.index) == {JAX_FIT, JAX_FIT.replace("fit/bs32", "predict/bs256")}   # natives: same record
        assert rows.at[JAX_FIT, "verdict"] == "slower" and rows.at[JAX_FIT, "significant"].startswith("yes")
        assert rows.at[JAX_FIT, "packages changed"] == "keras 3.15.1 -> 3.16.0"
        assert rows.loc[rows.index != JAX_FIT, "verdict"].item() == "no significant change"
        trend = con.execute("SELECT run_finished_utc, estimate_ms, packages_changed FROM trend "
                            f"WHERE cell_id = '{JAX_FIT}' ORDER BY run_finished_utc").df()
    assert list(trend.packages_changed) == ["", "keras 3.15.1 -> 3.16.0"]
    assert trend.estimate_ms.iloc[1] / trend.estimate_ms.iloc[0] == pytest.approx(1.2)
    capsys.readouterr()
    printed = history.main(["--store", str(store), "query", "SELECT estimate_ms, packages_changed FROM trend "
                            f"WHERE cell_id = '{JAX_FIT}' ORDER BY run_finished_utc"])
    assert printed == 0
    lines = capsys.readouterr().out.splitlines()           # a Markdown table: header, rule, one row per point
    rows = [[part.strip() for part in line.split("|")[1:-1]] for line in lines]
    assert rows[0] == ["estimate_ms", "packages_changed"] and len(rows) == 4, lines
    assert rows[2:] == [["101", ""], ["121.2", "keras 3.15.1 -> 3.16.0"]], lines      # 100, 101, 102 ms; 20% slower
    from kbench.report import first_page
    moved, said = first_page.latest_changes(store, "tiny", "strict")
    assert list(moved.cell) == [JAX_FIT] and "2 cells measured anew, 1 moved" in said
    out, plots = tmp_path / "tables", tmp_path / "plots"
    with history.connect(store) as con:
        history.write_changes(con, "tiny", "strict", out, plots)
    assert "keras 3.15.1 -> 3.16.0" in (out / "changes.md").read_text()
    assert (plots / "trends.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_on_another_device_starts_its_own_series(tmp_path):
    store = tmp_path / "history"
    cpu = bumped_run(tmp_path, "cpu", MS, "3.15.1", "2026-11-01T00:00:00+00:00")
    gpu = bumped_run(tmp_path, "gpu", {k: v / 10 for k, v in MS.items()}, "3.16.0", "2026-11-02T00:00:00+00:00",
                     device_facts={"nvml": {"name": "NVIDIA H200"}})
    history.ingest(cpu, "tiny", store)
    history.ingest(gpu, "tiny", store)
    with history.connect(store) as con:
        assert history.changes(con, "tiny", "strict").empty          # ten times faster, but on another device
        series = con.execute("SELECT DISTINCT device FROM trend ORDER BY device").df().device.tolist()
    assert series == ["NVIDIA H200", "cpu"]


def test_one_repeat_a_side_reads_the_noise_band_not_a_test(tmp_path):
    store = tmp_path / "history"
    history.ingest(bumped_run(tmp_path, "a", MS, "3.15.1", "2026-11-01T00:00:00+00:00", repeats=1), "tiny", store)
    history.ingest(bumped_run(tmp_path, "b", {k: v * 1.02 for k, v in MS.items()}, "3.16.0",
                              "2026-11-02T00:00:00+00:00", repeats=1), "tiny", store)
    with history.connect(store) as con:
        table = history.changes(con, "tiny", "strict")
    assert len(table) == 4 and table.verdict.str.startswith("within noise").all()
    assert (table.significant == "untested (1 repeat)").all()


def test_a_missing_history_is_named(tmp_path, capsys):
    assert history.main(["--store", str(tmp_path / "none"), "query", "SELECT 1"]) == 1
    assert "no history yet" in capsys.readouterr().err


def test_a_runs_id_is_the_names_and_bytes_of_its_cell_records_only(tmp_path):
    """From a results directory and from its archive: one id. A byte changed, a record renamed, two records' bytes
    swapped: another run. What lies beside the cells (equivalence jobs, warm twins, the archive's run.json, manifest and
    tables, another suite's cells) and the order files are read in: not part of it."""
    import tarfile
    from types import SimpleNamespace
    from kbench.lifecycle.archive import Run
    fit, predict = (f"cells/tiny/strict/bert/{t}/float32/keras3-jax.r1.json" for t in ("fit/bs32", "predict/bs256"))
    records = {fit: b'{"mean_ms": 100.0}', predict: b'{"mean_ms": 200.0}'}
    beside = {"equivalence/tiny/strict/bert/keras3-jax.json": b"{}", "cells/paper/strict/x.r1.json": b"{}",
              fit.replace(".json", ".warm.json"): b"{}",         # a warm twin: in first_step, not a cell of its own
              "run.json": b'{"suite": "tiny"}', "MANIFEST.sha256": b"", "tables/tiny/strict/ms_per_step.csv": b"a"}
    results = tmp_path / "results"
    for name, data in {**records, **beside}.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_bytes(data)
    archive = tmp_path / "tiny-run1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in {**records, **beside}:
            tar.add(results / name, f"tiny-run1/{name}")
    one = history.run_id(Run(results, "tiny"))
    assert one.startswith("run-") and history.run_id(Run(archive)) == one

    def run_id(files):
        return history.run_id(SimpleNamespace(suite="tiny", files=files))
    assert run_id(records) == run_id({**beside, **dict(reversed(records.items()))}) == one
    assert run_id({**records, fit: b'{"mean_ms": 100.1}'}) != one
    assert run_id({fit: records[fit], predict.replace(".r1.", ".r2."): records[predict]}) != one
    assert run_id({fit: records[predict], predict: records[fit]}) != one
    assert run_id({fit: records[fit]}) != one
