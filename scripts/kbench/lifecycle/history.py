"""Every run joins a history: one DuckDB database under results/history/ (Parquet copies of its tables beside it),
fed by each finished run (rule history) and by any archive, so one SQL query answers "BERT fit on keras3-jax over
the last runs" and each run's changes name the packages that moved.

    kbench history [--store DIR] ingest RESULTS_DIR_OR_ARCHIVE [--suite S]
    kbench history [--store DIR] query "SELECT ... FROM trend WHERE ..."
    kbench history [--store DIR] changes --suite S --profile P --out DIR --plots DIR   (changes.{csv,md,html}, trends.png)

A run is the set of cell records it holds: its id is the digest of those files' bytes, so ingesting the same run again
(from its results directory or from its archive) adds nothing. A results directory where one stack was rerun after a
bump is a new run that shares the other stacks' records with the one before: a record seen before is the same
measurement (compare's "same record (not rerun)"), never a second point of a trend.

Comparable runs share suite, profile and device (NVML's GPU name, or "cpu on <host>"): a trend and a change are only
ever read within one such series, so a run on another device or profile never mixes with this one's.

Tables (see docs/report.md, "History"):
  runs      run_id, suite, source, ingested_utc, finished_utc (its newest cell), cells
  cells     run_id, cell_id, repeat, suite, profile, device, model, task, batch_size, precision, framework, status,
            mean_ms, runtime, image_id, lock_sha256, git_commit, finished_utc, record_sha256, record (the cell JSON)
  packages  run_id, cell_id, repeat, package, version
  trend     one row per cell and run where that cell was measured anew: estimate_ms, ci_low_ms, ci_high_ms, repeats,
            packages_changed (against the cell's previous point in its series)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import pandas as pd

from kbench.contract import cell
from kbench.results import flat, stats
from kbench.lifecycle.archive import Run, cell_names
from kbench.files import BadFile, kind

STORE = Path("results/history")
DATABASE = "history.duckdb"
SERIES = ["suite", "profile", "device"]        # what makes two runs comparable

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, suite VARCHAR, source VARCHAR, ingested_utc VARCHAR,
    finished_utc VARCHAR, cells INTEGER);
CREATE TABLE IF NOT EXISTS cells (run_id VARCHAR, cell_id VARCHAR, repeat INTEGER, suite VARCHAR, profile VARCHAR,
    device VARCHAR, model VARCHAR, task VARCHAR, batch_size INTEGER, precision VARCHAR, framework VARCHAR,
    status VARCHAR, mean_ms DOUBLE, runtime VARCHAR, image_id VARCHAR, lock_sha256 VARCHAR, git_commit VARCHAR,
    finished_utc VARCHAR, record_sha256 VARCHAR, record JSON, PRIMARY KEY (run_id, cell_id, repeat));
CREATE TABLE IF NOT EXISTS packages (run_id VARCHAR, cell_id VARCHAR, repeat INTEGER, package VARCHAR,
    version VARCHAR);
"""


@dataclass(frozen=True)
class Receipt:
    """What one ingest did: the run's id, and how many repeats it added (0: the run was already there)."""
    run_id: str
    suite: str
    source: str
    added: int
    cells: int

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def device_of(result: cell.CellResult) -> str:
    """The device a series is measured on: NVML's name for a GPU; a CPU is named with its host, since CPU timings
    from two machines are different series."""
    provenance = result.provenance
    nvml = (provenance.get("device_facts") or {}).get("nvml") or {}
    if nvml.get("name"):
        return nvml["name"]
    device = provenance.get("device") or "unknown"
    node = (provenance.get("launcher") or {}).get("node")
    return f"{device} on {node}" if device == "cpu" and node else device


def cell_files(run: Run) -> list[str]:
    """The run's cell records (a warm twin is not a cell of its own: its cold run's first step is, in first_step)."""
    return cell_names(run.files, run.suite)


def run_id(run: Run) -> str:
    """The digest of the run's cell records (name and bytes): the same run from any source, the same id."""
    digest = hashlib.sha256()
    for name in cell_files(run):
        digest.update(name.encode() + b"\0" + hashlib.sha256(run.files[name]).digest())
    return "run-" + digest.hexdigest()[:16]


REBUILD = ("expected the history's DuckDB database: move it aside and ingest the runs again; the .parquet files "
           "beside it hold its tables as of the last ingest")


@contextmanager
def connect(store: Path, read_only: bool = False):
    """The history's database; a BadFile names a store that is not a folder, or a database DuckDB cannot read
    (DuckDB leaves such a file as it was: nothing is lost by the refusal)."""
    store, database = Path(store), Path(store) / DATABASE
    if store.exists() and not store.is_dir():
        raise BadFile(store, "a file, not a folder", "--store takes the history's folder, e.g. results/history")
    if read_only and not database.exists():
        raise BadFile(database, "no history yet", "ingest a run first: kbench history ingest RESULTS_OR_ARCHIVE")
    store.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(database), read_only=read_only)
    except duckdb.IOException as error:
        raise unreadable_store(database, error) from None
    try:
        if not read_only:
            con.execute(SCHEMA)
        yield con
    except duckdb.IOException as error:         # a block past the end of a cut-short file
        if str(database) not in str(error):
            raise
        raise unreadable_store(database, error) from None
    finally:
        con.close()


def unreadable_store(database: Path, error: duckdb.IOException) -> BadFile:
    """What is wrong with a history database, in words (DuckDB's own message repeats the path, and more)."""
    message = str(error)
    if database.is_dir():
        return BadFile(database, "a folder, not a file", REBUILD)
    if "not a valid DuckDB database" in message:
        with open(database, "rb") as f:
            found = kind(f.read(4096))
        return BadFile(database, "empty" if found == "empty" else f"not a DuckDB database: it is {found}", REBUILD)
    if "Could not read enough bytes" in message:
        return BadFile(database, "cut short: DuckDB could not read a block it holds", REBUILD)
    return BadFile(database, f"DuckDB cannot read it ({message.splitlines()[0]})", REBUILD)


def ingest(source: str | Path, suite: str | None = None, store: Path = STORE) -> Receipt:
    """One run (a results directory or an archive) into the history; nothing if it is there already."""
    run = Run(source, suite)
    rid = run_id(run)
    by_name = {name: run.record(name) for name in cell_files(run)}        # every record read before the store opens
    found = {r.cell_id for r in by_name.values()}
    with connect(store) as con:
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [rid]).fetchone()[0]:
            return Receipt(rid, run.suite, str(source), 0, len(found))
        rows, packages = [], []
        for name, result in by_name.items():
            data = run.files[name]
            row = flat.row(result)
            provenance = result.provenance
            environment = provenance.get("environment") or {}
            rows.append({
                "run_id": rid, "cell_id": result.cell_id, "repeat": result.repeat, "suite": row["suite"],
                "profile": row["profile"], "device": device_of(result), "model": row["model"], "task": row["task"],
                "batch_size": row["batch_size"], "precision": row["precision"], "framework": row["framework"],
                "status": result.status, "mean_ms": result.mean_ms, "runtime": provenance.get("runtime"),
                "image_id": environment.get("id"), "lock_sha256": environment.get("lock_sha256"),
                "git_commit": provenance.get("git_commit"), "finished_utc": provenance.get("finished_utc"),
                "record_sha256": "sha256:" + hashlib.sha256(data).hexdigest(), "record": data.decode()})
            packages += [{"run_id": rid, "cell_id": result.cell_id, "repeat": result.repeat, "package": package,
                          "version": version}
                         for package, version in sorted((provenance.get("packages") or {}).items())]
        finished = max((r["finished_utc"] for r in rows if r["finished_utc"]), default=None)
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                    [rid, run.suite, str(source), cell.utc_now(), finished, len(found)])
        if rows:
            cells_frame = pd.DataFrame(rows)
            con.execute("INSERT INTO cells BY NAME SELECT * FROM cells_frame")
        if packages:
            packages_frame = pd.DataFrame(packages)
            con.execute("INSERT INTO packages BY NAME SELECT * FROM packages_frame")
        _rebuild_trend(con)
        con.execute("COMMIT")
        _export(con, Path(store))
    return Receipt(rid, run.suite, str(source), len(rows), len(found))


def _export(con, store: Path) -> None:
    """Parquet copies of every table, for readers without DuckDB (pandas, Spark, Polars)."""
    for table in ("runs", "cells", "packages", "trend"):
        con.execute(f"COPY {table} TO '{store / (table + '.parquet')}' (FORMAT parquet)")


# ---------------------------------------------------------------- series: trends and changes

def measurements(con, where: str = "TRUE", args: list | None = None) -> pd.DataFrame:
    """Every repeat in the history with its run's time, one row each (the record parsed), oldest run first."""
    frame = con.execute(
        f"SELECT c.*, coalesce(r.finished_utc, r.ingested_utc) AS run_finished_utc FROM cells c JOIN runs r "
        f"USING (run_id) WHERE {where} ORDER BY run_finished_utc, r.run_id, c.cell_id, c.repeat", args or []).df()
    frame["result"] = [cell.CellResult.from_json(json.loads(text), f"history {rid} {cid}")
                       for text, rid, cid in zip(frame.record, frame.run_id, frame.cell_id)]
    return frame


def points(frame: pd.DataFrame) -> list[dict]:
    """Per series and cell, the runs in which it was measured anew (its records differ from its previous point's),
    oldest first: each a point of the cell's trend."""
    found = []
    for key, group in frame.groupby([*SERIES, "cell_id"], sort=False):
        previous = None
        for rid, repeats in group.groupby("run_id", sort=False):
            records = tuple(sorted(repeats.record_sha256))
            if previous is not None and records == previous["records"]:
                continue
            point = {**dict(zip([*SERIES, "cell_id"], key)), "run_id": rid,
                     "run_finished_utc": repeats.run_finished_utc.iloc[0], "records": records,
                     "results": list(repeats.sort_values("repeat").result)}
            point["packages_changed"] = (package_changes(previous["results"], point["results"])
                                         if previous else "")
            found.append(point)
            previous = point
    return found


def package_changes(old: list[cell.CellResult], new: list[cell.CellResult]) -> str:
    from kbench.lifecycle.compare import package_changes as changed
    return changed(old, new)


def _estimate(results: list[cell.CellResult]) -> stats.Estimate | None:
    if not results or any(r.mean_ms is None for r in results):
        return None
    rows = [flat.row(r) for r in results]
    return stats.estimate([r["mean_ms"] for r in rows], [r["block_means"] for r in rows])


def _rebuild_trend(con) -> None:
    rows = []
    for point in points(measurements(con)):
        estimate = _estimate(point["results"])
        rows.append({**{k: point[k] for k in (*SERIES, "cell_id", "run_id", "run_finished_utc")},
                     "status": ", ".join(sorted({r.status for r in point["results"]})),
                     "estimate_ms": estimate.ms if estimate else None,
                     "ci_low_ms": estimate.low if estimate else None,
                     "ci_high_ms": estimate.high if estimate else None,
                     "repeats": len(point["results"]), "packages_changed": point["packages_changed"]})
    trend_frame = pd.DataFrame(rows, columns=[*SERIES, "cell_id", "run_id", "run_finished_utc", "status", "estimate_ms",
                                        "ci_low_ms", "ci_high_ms", "repeats", "packages_changed"])
    con.execute("CREATE OR REPLACE TABLE trend AS SELECT * FROM trend_frame")   # (a frame named as the table reads the table)


def consecutive_runs(frame: pd.DataFrame) -> list[tuple[tuple, str, str]]:
    """(series, older run, newer run) for each pair of consecutive runs within a series, newest pair first."""
    pairs = []
    for key, group in frame.groupby(SERIES, sort=False):
        runs = list(dict.fromkeys(group.run_id))
        pairs += [(key, old, new) for old, new in zip(runs, runs[1:])]
    return sorted(pairs, key=lambda p: frame[frame.run_id == p[2]].run_finished_utc.iloc[0], reverse=True)


def changes(con, suite: str, profile: str, noise_floor_pct: float | None = None) -> pd.DataFrame:
    """Between each pair of consecutive comparable runs of this suite and profile: every cell measured anew in the
    newer one, compared as `kbench.lifecycle.compare` compares two runs (Welch over repeats, BH-adjusted within the pair; the
    noise band with one repeat), with the packages whose versions differ."""
    from kbench.lifecycle import compare
    frame = measurements(con, "c.suite = ? AND c.profile = ?", [suite, profile])
    tables = []
    for key, old, new in consecutive_runs(frame):
        series = frame[(frame[SERIES] == pd.Series(dict(zip(SERIES, key)))).all(axis=1)]
        old_cells, new_cells = (_cells(series[series.run_id == rid]) for rid in (old, new))
        table = compare.compare_cells(old_cells, new_cells, noise_floor_pct or compare.NOISE_FLOOR_PCT)
        table = table[~table.verdict.isin(["same record (not rerun)", "only in old"])]
        table.insert(0, "new run", new)
        table.insert(0, "old run", old)
        table.insert(0, "device", key[2])
        tables.append(table)
    columns = ["device", "old run", "new run", "cell", "old ms", "new ms", "repeats", "change %", "verdict",
               "significant", "packages changed", "image changed"]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=columns)


def _cells(frame: pd.DataFrame) -> dict[str, list[cell.CellResult]]:
    found: dict[str, list[cell.CellResult]] = {}
    for result in frame.sort_values(["cell_id", "repeat"]).result:
        found.setdefault(result.cell_id, []).append(result)
    return found


def moved(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a changes table whose cell really moved (faster or slower by its test or beyond the noise band)."""
    return table[table.verdict.isin(["faster", "slower"])]


def trend(con, suite: str, profile: str, cell_ids: list[str] | None = None) -> pd.DataFrame:
    """The trend table of one suite and profile (every series), oldest point first."""
    frame = con.execute("SELECT * FROM trend WHERE suite = ? AND profile = ? ORDER BY run_finished_utc, run_id",
                        [suite, profile]).df()
    return frame if cell_ids is None else frame[frame.cell_id.isin(cell_ids)]


def plot_trends(points_frame: pd.DataFrame, out: Path) -> Path:
    """One panel per cell and device: its estimate per run with the 95% interval, each package change written at
    the point where it happened."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = list(points_frame.groupby(["device", "cell_id"], sort=False)) or [(("", "no cell changed"), None)]
    cols = min(len(groups), 2)
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, ((device, cell_id), group) in zip(axes.flat, groups):
        ax.set_title(f"{cell_id}\n{device}", fontsize=8)
        if group is None:
            ax.text(0.5, 0.5, "no cell changed between comparable runs", ha="center", transform=ax.transAxes)
            continue
        x = list(range(len(group)))
        y = group.estimate_ms.to_numpy(dtype=float)
        low = (y - group.ci_low_ms.to_numpy(dtype=float))
        high = (group.ci_high_ms.to_numpy(dtype=float) - y)
        ax.errorbar(x, y, yerr=[pd.Series(low).fillna(0), pd.Series(high).fillna(0)], marker="o", capsize=3)
        for i, changed in zip(x, group.packages_changed):
            if changed:
                ax.axvline(i - 0.5, color="grey", lw=0.8, ls="--")
                ax.annotate(changed.replace(", ", "\n"), (i - 0.45, max(y[~pd.isna(y)], default=0)), fontsize=6,
                            va="top")
        ax.set_xticks(x, [f"{str(t)[:16]}\n{rid[-6:]}" for t, rid in zip(group.run_finished_utc, group.run_id)],
                      fontsize=6)
        ax.set_ylabel("ms/step (mean, 95% interval)", fontsize=7)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


CHANGES_NOTE = ("Between each pair of consecutive comparable runs (same suite, profile and device), the cells "
                "measured anew in the newer one: verdict from Welch's test on the repeats' means, Benjamini-Hochberg "
                "adjusted within the pair (q < 0.05), or, with one repeat a side, a noise band that is not a test; "
                "the packages whose versions differ between the two records. Newest pair first.")


def write_changes(con, suite: str, profile: str, out: Path, plots: Path) -> pd.DataFrame:
    """changes.{csv,md,html} of one suite and profile, and trends.png of the cells that moved (every cell whose
    packages changed where none moved)."""
    from kbench.results import tables
    table = changes(con, suite, profile)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "changes.csv", index=False)
    shown = table.astype(object).where(table.notna(), "")
    (out / "changes.md").write_text(f"## changes, profile {profile}\n\n{CHANGES_NOTE}\n\n"
                                    + (flat.markdown(shown.set_index("cell")) if len(table) else
                                       "No two comparable runs in the history yet.\n"))
    (out / "changes.html").write_text(f"<html><body><h2>changes, profile {profile}</h2><p>{CHANGES_NOTE}</p>\n"
                                      + (shown.to_html(index=False, border=0) if len(table) else
                                         "<p>No two comparable runs in the history yet.</p>") + "\n</body></html>\n")
    picked = moved(table)
    if picked.empty:
        picked = table[table["packages changed"].astype(str) != ""]
    plot_trends(trend(con, suite, profile, list(dict.fromkeys(picked.cell))), plots / "trends.png")
    return table


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=STORE, help="the history's folder (default %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("ingest", help="a results directory or a run archive into the history")
    p.add_argument("source")
    p.add_argument("--suite", help="for a results directory holding several suites")
    p.add_argument("--receipt", type=Path, help="also write what was ingested as JSON (rule history)")
    p = commands.add_parser("query", help="run one SQL statement against the history and print its result")
    p.add_argument("sql")
    p = commands.add_parser("changes", help="changes.{csv,md,html} and trends.png of one suite and profile")
    p.add_argument("--suite", required=True)
    p.add_argument("--profile", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--plots", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "ingest":
            receipt = ingest(args.source, args.suite, args.store)
            if args.receipt:
                receipt.write(args.receipt)
            print(f"{receipt.source}: run {receipt.run_id} ({receipt.suite}, {receipt.cells} cells): "
                  + (f"{receipt.added} repeats added" if receipt.added else "already in the history, nothing added"))
            return 0
        with connect(args.store, read_only=args.command == "query") as con:
            if args.command == "query":
                result = con.execute(args.sql).df()
                print(result.to_markdown(index=False) if len(result) else "(no rows)")
                return 0
            table = write_changes(con, args.suite, args.profile, args.out, args.plots)
            print(f"{len(table)} cells compared, {len(moved(table))} moved: {args.out / 'changes.md'}")
            return 0
    except (ValueError, FileNotFoundError, duckdb.Error) as error:
        print(f"history {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
