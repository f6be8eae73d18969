"""The one list of table modules (each declares its TABLE: kbench.results.context.Table), in the order they are built
(a table that reads another's files comes after it). The Snakemake table rules (rules/tables.smk), the file lists of
rules/common.smk, the archive's check (which rebuilds the tables from the archived records) and the first page's
inputs all loop over it; a new table is one module and one line here (ADDING.md, "A new table").

    python -m kbench.results.registry RULE --run CONTEXT_JSON [--records KIND PATH...]...     (the table rules)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kbench.contract import cell
from kbench.machine import environment_records
from kbench.plan import matrix
from kbench.results import (batch, breakdown_tables, departures_page, facts, first_step_tables, jax_numpy_tables,
                            plots, tables, tuning)
from kbench.results.context import RECORD_KINDS, Records, RunContext, Table, folder

TABLES: tuple[Table, ...] = (tables.TABLE, plots.TABLE, breakdown_tables.TABLE, first_step_tables.TABLE, batch.TABLE,
                             tuning.TABLE, departures_page.TABLE, facts.TABLE, jax_numpy_tables.TABLE)
BY_RULE = {table.rule: table for table in TABLES}
OUTPUTS = frozenset(name for table in TABLES for name in table.outputs)     # every file a table writes, by name


def planned(config: dict, suite: str) -> list[tuple[Table, str | None]]:
    """Every (table, profile) the suite's run makes; a profile of None: the table is the suite's."""
    return [(table, profile) for table in TABLES for profile in table.profiles(config, suite)]


def made(config: dict, suite: str, profile: str | None) -> frozenset[str]:
    """The names of the files the suite's run makes for a profile (None: the suite's own tables)."""
    return frozenset(name for table, planned_for in planned(config, suite) if planned_for == profile
                     for name in table.outputs)


def files(config: dict, suite: str, tables_root: str | Path, plots_root: str | Path,
          archived: bool = False) -> list[str]:
    """The paths of every file the planned tables write (archived: only those a run's archive packs)."""
    found = []
    for table, profile in planned(config, suite):
        if archived and not table.archived:
            continue
        found += [str(folder(tables_root, profile) / name) for name in table.outputs]
        found += [str(folder(plots_root, profile) / name) for name in table.plots]
    return found


def job_order(config: dict):
    """The order the equivalence jobs reach a table (rules/common.smk equivalence_jsons): per model, the reference
    job, then the columns in the config's order; the tables keep it (another order writes a different CSV)."""
    models, frameworks = config["models"], config["frameworks"]

    def key(job: cell.CellResult):
        spec = job.spec
        return (models.index(spec.model) if spec.model in models else len(models), spec.reference is not None,
                frameworks.index(spec.framework) if spec.framework in frameworks else -1)
    return key


def rebuild(config: dict, suite: str, cells: dict[str, list[cell.CellResult]], out: Path,
            equivalence: list[cell.CellResult] = (), warm: list[cell.CellResult] = ()) -> None:
    """Every table the archive's check rebuilds, from a run's archived config and records, into out/ as the rules
    make them (no plots): cells by cell id, every repeat; equivalence: every profile's jobs; warm: the warm twins."""
    for table, profile in planned(config, suite):
        if not (table.archived and table.rebuilt):
            continue

        def of(plan_cells):
            return tuple(r for c in plan_cells if c.profile == profile for r in cells.get(c.cell_id, []))
        records = Records(
            cells=of(matrix.cells(config, suite)) if profile else (),
            ladder=of(matrix.batch_cells(config, suite)) if profile and config.get("batch_study") else (),
            warm=tuple(w for w in warm if w.spec.profile == profile),
            equivalence=tuple(sorted((j for j in equivalence if j.spec.profile == profile), key=job_order(config))))
        table.build(records, RunContext.of(config, suite, profile, out, None))


def read_records(kinds: list[list[str]]) -> Records:
    """--records KIND PATH... groups -> Records (cell records read by kbench.contract.cell; environment records by
    kbench.machine.environment_records)."""
    found: dict[str, list] = {}
    for kind, *paths in kinds:
        if kind not in RECORD_KINDS:
            raise SystemExit(f"--records {kind}: not a kind of record; kinds: {', '.join(RECORD_KINDS)}")
        read = environment_records.read if kind == "environments" else cell.read
        found.setdefault(kind, []).extend(read(path) for path in paths)
    return Records(**{kind: tuple(values) for kind, values in found.items()})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rule", choices=sorted(BY_RULE), help="the table's rule")
    parser.add_argument("--run", required=True, type=RunContext.from_json, help="the run's context, as JSON")
    parser.add_argument("--records", nargs="+", action="append", default=[], metavar="KIND PATH",
                        help=f"a kind of record ({', '.join(RECORD_KINDS)}) and its files, in the plan's order")
    args = parser.parse_args(argv)
    BY_RULE[args.rule].build(read_records(args.records), args.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
