"""The results side's room: one registry of table modules over one typed run. A table module declares its TABLE and
the registry lists it; the run's context travels as JSON and comes back the same or not at all; a record's spec is
typed at the JSON edge. Each guard is shown failing."""
import ast
import json

import pytest

from conftest import CONFIG, REPO, run_context
from kbench.contract import cell
from kbench.contract.spec import CellSpec, JobSpec
from kbench.plan import matrix
from kbench.results import context, registry
from kbench.results.context import RunContext, Table

RESULTS = REPO / "scripts" / "kbench" / "results"


def declared_tables(folder=RESULTS) -> set[str]:
    """The results modules that declare a TABLE, read from their source."""
    found = set()
    for path in folder.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TABLE" for t in node.targets):
                found.add(path.stem)
    return found


def test_every_module_that_declares_a_table_is_registered(monkeypatch):
    registered = {table.build.__module__.rsplit(".", 1)[1] for table in registry.TABLES}
    assert declared_tables() == registered
    monkeypatch.setattr(registry, "TABLES", registry.TABLES[:-1])       # one dropped: the check names it
    assert declared_tables() - {t.build.__module__.rsplit(".", 1)[1] for t in registry.TABLES} == {"jax_numpy_tables"}


def test_each_rule_is_one_table_and_no_two_write_one_file():
    assert len(registry.BY_RULE) == len(registry.TABLES)
    files = registry.files({**CONFIG, "profiles": ["strict", "tuned"]}, "tiny", "t", "p")
    assert len(files) == len(set(files))


def test_a_tables_files_follow_what_the_run_plans():
    tiny = set(registry.files(CONFIG, "tiny", "t", "p"))
    assert {"t/strict/ms_per_step.csv", "t/strict/batch_verdicts.csv", "t/departures.md", "t/run_facts.html",
            "p/strict/time_by_kind.png", "t/jax_numpy_claim.csv"} <= tiny
    assert not any("tuning_gain" in f for f in tiny)                   # no tuned profile, no tuning gain
    tuned = registry.files({**CONFIG, "profiles": ["strict", "tuned"]}, "tiny", "t", "p")
    assert "t/tuning_gain.csv" in tuned and "t/tuned/ms_per_step.csv" in tuned
    assert not any("batch_" in f for f in registry.files(CONFIG, "paper", "t", "p"))     # paper has no ladder here
    archived = registry.files(CONFIG, "tiny", "t", "p", archived=True)
    assert "t/jax_numpy.csv" not in archived and "t/run_facts.html" in archived


def test_the_run_context_comes_back_from_json_the_same_or_not_at_all():
    run = RunContext.of(CONFIG, "tiny", "strict", "results/tables/tiny", "results/plots/tiny")
    assert RunContext.from_json(run.to_json()) == run
    assert run.tables_dir.as_posix() == "results/tables/tiny/strict" and run.own_batch and run.frameworks
    assert list(json.loads(run.to_json())["profile_defs"]) == list(CONFIG["profile_defs"])    # the config's order
    bad = json.dumps({**json.loads(run.to_json()), "frameworkz": []})
    with pytest.raises(ValueError, match="unknown keys frameworkz"):
        RunContext.from_json(bad)


def test_a_run_that_predates_a_study_has_no_such_table():
    old = {k: v for k, v in CONFIG.items() if k not in ("first_step", "batch_study", "jax_numpy", "tuning")}
    rules = {table.rule for table, _ in registry.planned(old, "tiny")}
    assert "first_step" not in rules and "batch_study" not in rules and "jax_numpy_table" not in rules
    assert RunContext.of(old, "tiny", "strict", "t").first_step is None


def test_a_table_that_reads_an_unknown_kind_of_record_is_refused():
    with pytest.raises(ValueError, match="table x: unknown record kinds cellz; kinds: cells, ladder"):
        Table(rule="x", outputs=(), build=lambda records, run: None, category="X", reads=("cellz",))


def test_the_command_refuses_an_unknown_kind_of_record_in_one_line(tmp_path):
    run = run_context(tmp_path).to_json()
    with pytest.raises(SystemExit, match="--records cellz: not a kind of record; kinds: cells, ladder"):
        registry.main(["tables", "--run", run, "--records", "cellz", "x.json"])
    with pytest.raises(SystemExit):
        registry.main(["no-such-table", "--run", run])


def test_a_record_reads_its_spec_typed_and_writes_it_back_as_it_was():
    spec = matrix.spec(CONFIG, "tiny", "bert", "fit", 32, "float32", "keras3-jax", "strict")
    record = cell.new_result(spec, {}, "ok")
    back = cell.CellResult.from_json(json.loads(json.dumps(record.to_json())))
    assert isinstance(back.spec, CellSpec) and back.spec == spec and back.spec_digest == record.spec_digest
    assert back.to_json()["spec"] == spec.to_dict()
    job = matrix.equivalence_job(CONFIG, "tiny", "strict", "bert", "keras3-jax", reference=True)
    kept = cell.CellResult.from_json(json.loads(json.dumps(cell.new_result(job, {}, "ok").to_json())))
    assert isinstance(kept.spec, JobSpec) and kept.spec.to_dict() == job and kept.spec.reference is None
    assert kept.spec.model == "bert" and kept.spec.stack == matrix.stack_of(CONFIG, "keras3-jax")
    with pytest.raises(ValueError, match="not of a cell"):
        kept.cell_spec


def test_a_record_whose_spec_lost_a_key_is_refused_in_one_line_naming_it():
    spec = matrix.spec(CONFIG, "tiny", "bert", "fit", 32, "float32", "keras3-jax", "strict")
    data = cell.new_result(spec, {}, "ok").to_json()
    del data["spec"]["seed"]
    with pytest.raises(cell.SchemaError, match=r"cells/x.json: a cell spec with missing keys seed"):
        cell.CellResult.from_json(data, "cells/x.json")
    with pytest.raises(cell.SchemaError, match="no spec"):
        cell.CellResult.from_json({**data, "spec": None}, "cells/x.json")


def test_the_registry_rebuilds_each_profiles_tables_from_records(tmp_path):
    """What the archive's check does: a profile's tables rebuilt into a folder of their own, no plots."""
    config = {**CONFIG, "models": ["bert"], "frameworks": ["keras3-jax"], "equivalence": {
        **CONFIG["equivalence"], "enabled": False}}
    spec = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax", "strict")
    record = cell.new_result(spec, {}, "failed", cell.error_info("MemoryError", "x"))
    registry.rebuild(config, "tiny", {spec.cell_id: [record]}, tmp_path)
    assert (tmp_path / "strict" / "ms_per_step.csv").is_file() and (tmp_path / "departures.md").is_file()
    assert not (tmp_path / "run_facts.html").exists() and not list(tmp_path.rglob("*.png"))
    assert "failed: MemoryError" in (tmp_path / "strict" / "ms_per_step.md").read_text()


def test_a_figure_saved_twice_is_the_same_bytes(tmp_path):
    """SVG ids are drawn at random by matplotlib unless salted: the same records must give the same files."""
    from kbench.results import plots
    fig, ax = plots.plt.subplots()
    ax.bar(["a", "b"], [1, 2], hatch="//")
    ax.set_clip_on(True)
    for name in ("one", "two"):
        for fmt in ("svg", "png"):
            plots.save(fig, tmp_path / f"{name}.{fmt}")
    plots.plt.close(fig)
    for fmt in ("svg", "png"):
        assert (tmp_path / f"one.{fmt}").read_bytes() == (tmp_path / f"two.{fmt}").read_bytes(), fmt


def test_the_gpu_check_imports_where_only_numpy_and_pyyaml_are():
    """The GPU check runs with what a GPU host already has (kbench.gpucheck.check): the rows it reads of its cells'
    records (kbench.results.flat.row) must not bring pandas, matplotlib, scipy, DuckDB or Snakemake along."""
    import os
    import subprocess
    import sys
    blocked = ("pandas", "matplotlib", "scipy", "duckdb", "snakemake")
    code = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked) + \
        "import kbench.gpucheck.check, kbench.gpucheck.steps\nprint(kbench.gpucheck.check.flat.row)\n"
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO / "scripts")},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
