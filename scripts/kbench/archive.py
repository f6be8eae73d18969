"""A finished run as one verifiable file, and the diff of two runs.

    facts    the run's facts page for the report: suite, host, devices, the image (or venv) of every stack
    pack     results/ -> <run_id>.tar.gz: cells, logs, tables, plots, report, resolved config, locks and container
             recipes, environment records (image IDs), optionally the OCI images, run.json (git commit, host, GPU),
             and MANIFEST.sha256 listing the SHA-256 of every other file
    verify   an archive against its manifest (altered, missing and extra files are named) and against itself
             (every cell in the tables has its JSON, every cell ran in the image its record names)
    compare  two runs (archives or results directories): per cell old and new ms/step, % change, the packages and
             images that changed, and whether the change is inside the run-to-run noise
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from kbench import cell, launch, matrix, tables, timing

MANIFEST = "MANIFEST.sha256"
# Changes smaller than this floor (or than twice the two runs' combined standard error) are marked as noise. One run
# per side cannot show run-to-run spread: on the 2-core CI machine repeats of one tiny cell differed by 2% to 7%
# (BERT predict), and by up to 40% (keras3-jax BERT fit). A verdict outside the band is a lead; repeat the cell.
NOISE_FLOOR_PCT = 10.0


class VerifyError(Exception):
    pass


# ---------------------------------------------------------------- facts

def host_facts() -> dict:
    """The machine the workflow ran on (cells in containers report the container's hostname instead)."""
    facts = {"hostname": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
             "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        facts["gpus"] = subprocess.run(query, capture_output=True, text=True).stdout.strip().splitlines()
    else:
        facts["gpus"] = []
    return facts


def facts(suite: str, environment_records: list[str], cell_paths: list[str], out: Path) -> None:
    results = [cell.read(p) for p in cell_paths]
    environments = pd.DataFrame([{k: r.get(k) for k in ("stack", "kind", "image", "id", "lock_sha256", "prefix")}
                                 for r in map(cell.read, environment_records)])
    host = host_facts()
    devices = sorted({r["provenance"].get("device") for r in results if r["provenance"].get("device")})
    commits = sorted({r["provenance"].get("git_commit") for r in results if r["provenance"].get("git_commit")})
    runtimes = sorted({r["provenance"].get("runtime") for r in results if r["provenance"].get("runtime")})
    summary = pd.DataFrame([("suite", suite), ("cells", len(results)),
                            ("ok / failed / n/a", " / ".join(str(sum(r["status"] == s for r in results))
                                                            for s in cell.STATUSES)),
                            ("host", host["hostname"]), ("platform", host["platform"]), ("cpus", host["cpus"]),
                            ("memory GiB", host["memory_gib"]), ("GPUs", ", ".join(host["gpus"]) or "none"),
                            ("devices the cells saw", ", ".join(devices)), ("runtime", ", ".join(runtimes)),
                            ("git commit", ", ".join(commits))], columns=["fact", "value"])
    out.write_text("<html><body><h2>Run</h2>\n" + summary.to_html(index=False, border=0)
                   + "\n<h2>Images and environments</h2>\n" + environments.to_html(index=False, border=0, na_rep="")
                   + "\n</body></html>\n")


# ---------------------------------------------------------------- pack

def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack(run_id: str, suite: str, results: Path, config: dict, report: Path, environment_records: list[str],
         images: list[str], out: Path, repo: Path = launch.REPO) -> None:
    """Everything a second person needs to check and compare the run, under <run_id>/ in one tar.gz."""
    files: dict[str, Path | bytes] = {}       # archive path (below <run_id>/) -> source file or content
    for folder in (f"cells/{suite}", f"logs/cells/{suite}", f"tables/{suite}", f"plots/{suite}"):
        for path in sorted((results / folder).rglob("*")):
            if path.is_file():
                files[str(path.relative_to(results))] = path
    files[f"report/{suite}.html"] = report
    for record in [*environment_records, *images]:
        files[str(Path(record).resolve().relative_to(results.resolve()))] = Path(record)
    for folder in ("envs", "containers"):
        for path in sorted((repo / folder).iterdir()):
            if path.is_file():
                files[f"{folder}/{path.name}"] = path
    files["config.resolved.yaml"] = yaml.safe_dump(config, sort_keys=False).encode()
    run = {"run_id": run_id, "suite": suite, "created_utc": cell.utc_now(), "git_commit": launch.git_commit(),
           "host": host_facts()}
    files["run.json"] = (json.dumps(run, indent=1) + "\n").encode()

    manifest = []
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, source in sorted(files.items()):
            digest = add(tar, f"{run_id}/{name}", source)
            manifest.append(f"{digest}  {name}\n")
        add(tar, f"{run_id}/{MANIFEST}", "".join(manifest).encode())
    os.replace(tmp, out)
    print(f"packed {len(manifest)} files of suite {suite} into {out}")


def add(tar: tarfile.TarFile, name: str, source: Path | bytes) -> str:
    """Add one file (streamed: OCI images are GBs) and return its SHA-256."""
    if isinstance(source, bytes):
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(source), 0o644
        tar.addfile(info, io.BytesIO(source))
        return sha256_bytes(source)
    digest = hashlib.sha256()
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    tar.add(source, arcname=name, recursive=False)
    return digest.hexdigest()


# ---------------------------------------------------------------- read an archive or a results directory

class Run:
    """The files of one run, from an archive (name -> bytes, hashed as read) or a results directory."""

    def __init__(self, source: str | Path, suite: str | None = None):
        self.source = Path(source)
        self.files: dict[str, bytes] = {}
        if self.source.is_dir():
            self.suite = suite or "paper"
            for path in (self.source / "cells" / self.suite).rglob("*.json"):
                self.files[str(path.relative_to(self.source))] = path.read_bytes()
            return
        with tarfile.open(self.source) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    top, _, name = member.name.partition("/")
                    self.files[name] = tar.extractfile(member).read()
        run = json.loads(self.files.get("run.json", b"{}"))
        self.suite = suite or run.get("suite", "paper")

    def cells(self) -> dict[str, dict]:
        prefix = f"cells/{self.suite}/"
        results = [json.loads(data) for name, data in self.files.items()
                   if name.startswith(prefix) and name.endswith(".json")]
        return {result["cell_id"]: result for result in results}


# ---------------------------------------------------------------- verify

def verify(archive: Path) -> list[str]:
    """All problems found, each naming its file; [] when the archive is intact and consistent."""
    run = Run(archive)
    if MANIFEST not in run.files:
        return [f"{MANIFEST}: missing, nothing can be checked"]
    listed = {}
    for line in run.files[MANIFEST].decode().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    problems = []
    for name, digest in sorted(listed.items()):
        if name not in run.files:
            problems.append(f"{name}: missing (listed in {MANIFEST})")
        elif sha256_bytes(run.files[name]) != digest:
            problems.append(f"{name}: altered (SHA-256 differs from {MANIFEST})")
    for name in sorted(set(run.files) - set(listed) - {MANIFEST}):
        problems.append(f"{name}: extra (not listed in {MANIFEST})")
    return problems + consistency(run)


def consistency(run: Run) -> list[str]:
    problems = []
    long_name = f"tables/{run.suite}/cells_long.csv"
    cells = run.cells()
    if long_name not in run.files:
        return [f"{long_name}: missing, cells cannot be checked against the tables"]
    in_tables = set(pd.read_csv(io.BytesIO(run.files[long_name])).cell_id)
    for cell_id in sorted(in_tables - set(cells)):
        problems.append(f"cells/{cell_id}.json: missing (the tables list this cell)")
    for cell_id in sorted(set(cells) - in_tables):
        problems.append(f"cells/{cell_id}.json: not in {long_name}")
    for cell_id, result in sorted(cells.items()):
        prov, spec = result["provenance"], result["spec"]
        environment = prov.get("environment")
        if not environment:      # n/a cells never start an environment
            continue
        record_name = launch.environment_record(prov["runtime"], spec["framework_def"]["stack"], spec["accelerator"])
        if record_name not in run.files:
            problems.append(f"{record_name}: missing (cells/{cell_id}.json ran in it)")
            continue
        record = json.loads(run.files[record_name])
        key = "id" if environment.get("kind") == "image" else "lock_sha256"
        if record.get(key) != environment.get(key):
            problems.append(f"cells/{cell_id}.json: ran in {key} {environment.get(key)}, but {record_name} "
                            f"records {record.get(key)}")
    for cell_id, result in sorted(cells.items()):
        problems += [f"cells/{cell_id}.json: {p}" for p in timing_arithmetic(result)]
    return problems + rebuilt_tables(run, cells)


def timing_arithmetic(result: dict) -> list[str]:
    """An ok cell's statistics must be those of its own per-step times, and the steps must add up to the window:
    an edited mean (or median, ...) no longer is."""
    timing_record = result.get("timing")
    if result["status"] != "ok" or not timing_record:
        return []
    steps = timing_record["step_ms"]
    found = []
    if len(steps) != result["spec"]["steps"]["timed"]:
        found.append(f"{len(steps)} per-step times, but the spec times {result['spec']['steps']['timed']} steps")
    if not math.isclose(sum(steps), timing_record["window_ms"], rel_tol=1e-6):
        found.append(f"window_ms {timing_record['window_ms']} is not the sum of its step_ms ({sum(steps)})")
    for key, value in timing.summarize(steps).items():
        if not math.isclose(timing_record[key], value, rel_tol=1e-9, abs_tol=1e-9):
            found.append(f"{key} {timing_record[key]} is not that of its step_ms ({value})")
    return found


def rebuilt_tables(run: Run, cells: dict[str, dict]) -> list[str]:
    """Every table file of the archive must be what kbench.tables makes of the archived cells, with the archived
    config: a figure edited in a table (or in a cell) shows as a difference even under a regenerated manifest."""
    config_name = "config.resolved.yaml"
    if config_name not in run.files:
        return [f"{config_name}: missing, the tables cannot be rebuilt"]
    config = yaml.safe_load(run.files[config_name])
    archived = {name.removeprefix(f"tables/{run.suite}/"): data for name, data in run.files.items()
                if name.startswith(f"tables/{run.suite}/") and not name.endswith("run_facts.html")}
    in_run_order = [cells[c.cell_id] for c in matrix.cells(config, run.suite) if c.cell_id in cells]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, result in enumerate(in_run_order):
            paths.append(Path(tmp) / "cells" / f"{i}.json")
            cell.write_atomic(paths[-1], result)
        out = Path(tmp) / "tables"
        tables.build([str(p) for p in paths], config["frameworks"], matrix.keras3_frameworks(config), out,
                     config["precision_study"]["baseline"], config["precision_study"]["claims"])
        rebuilt = {p.name: p.read_bytes() for p in out.iterdir()}
    problems = [f"tables/{run.suite}/{name}: differs from the table rebuilt from the cell JSONs"
                for name in sorted(set(archived) & set(rebuilt)) if archived[name] != rebuilt[name]]
    problems += [f"tables/{run.suite}/{name}: missing (kbench.tables makes it)" for name in sorted(set(rebuilt) - set(archived))]
    problems += [f"tables/{run.suite}/{name}: not a table kbench.tables makes" for name in sorted(set(archived) - set(rebuilt))]
    return problems


# ---------------------------------------------------------------- compare

def compare(old: Run, new: Run, noise_floor_pct: float = NOISE_FLOOR_PCT) -> pd.DataFrame:
    old_cells, new_cells = old.cells(), new.cells()
    rows = []
    for cell_id in list(dict.fromkeys([*old_cells, *new_cells])):
        a, b = old_cells.get(cell_id), new_cells.get(cell_id)
        row = {"cell": cell_id, "old ms": ms(a), "new ms": ms(b), "change %": None, "verdict": "",
               "packages changed": package_changes(a, b), "image changed": image_change(a, b)}
        if a is None or b is None:
            row["verdict"] = "only in new" if a is None else "only in old"
        elif a == b:
            row["verdict"] = "same record (not rerun)"
        elif row["old ms"] is None or row["new ms"] is None:
            row["verdict"] = f"old {status(a)}, new {status(b)}"
        else:
            change = (row["new ms"] / row["old ms"] - 1) * 100
            band = noise_band_pct(a, b, noise_floor_pct)
            row["change %"] = round(change, 1)
            row["verdict"] = (f"within noise (±{band:.0f}%)" if abs(change) <= band
                              else "slower" if change > 0 else "faster")
        rows.append(row)
    return pd.DataFrame(rows)


def ms(result: dict | None) -> float | None:
    return round(result["timing"]["mean_ms"], 2) if result and result["status"] == "ok" else None


def status(result: dict) -> str:
    if result["status"] == "ok":
        return "ok"
    return f"{result['status']}: {(result.get('error') or {}).get('type')}"


def noise_band_pct(a: dict, b: dict, floor: float) -> float:
    """Twice the combined standard error of the two means, as % of the old mean, and never below the run-to-run
    floor, which one run's step spread cannot show. The spread is robust (median absolute deviation of the per-step
    times): the last step of an async window carries the drain of all queued work and would swamp a stdev."""
    def se(timing):
        steps = timing["step_ms"]
        median = statistics.median(steps)
        return 1.4826 * statistics.median(abs(x - median) for x in steps) / math.sqrt(len(steps))
    return max(floor, 200 * math.hypot(se(a["timing"]), se(b["timing"])) / a["timing"]["mean_ms"])


def package_changes(a: dict | None, b: dict | None) -> str:
    if a is None or b is None:
        return ""
    old, new = a["provenance"].get("packages") or {}, b["provenance"].get("packages") or {}
    return ", ".join(f"{name} {old.get(name, '-')} -> {new.get(name, '-')}" for name in sorted({*old, *new})
                     if old.get(name) != new.get(name))


def image_change(a: dict | None, b: dict | None) -> str:
    if a is None or b is None:
        return ""
    old, new = [(r["provenance"].get("environment") or {}).get("id") for r in (a, b)]
    return "" if old == new else f"{str(old)[:19]} -> {str(new)[:19]}"


# ---------------------------------------------------------------- command line

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("facts", help="the run's facts page (rule run_facts)")
    p.add_argument("--suite", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--environments", nargs="*", default=[])
    p.add_argument("--cells", nargs="*", default=[])
    p = commands.add_parser("pack", help="results -> <run_id>.tar.gz (rule archive)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--suite", required=True)
    p.add_argument("--results", required=True, type=Path)
    p.add_argument("--config-json", required=True, type=json.loads)
    p.add_argument("--report", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--environments", nargs="*", default=[])
    p.add_argument("--images", nargs="*", default=[])
    p = commands.add_parser("verify", help="check an archive against its manifest and itself")
    p.add_argument("archive", type=Path)
    p = commands.add_parser("compare", help="old and new run (archives or results directories), per cell")
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--suite", help="for a results directory (archives name their own suite)")
    p.add_argument("--noise-floor", type=float, default=NOISE_FLOOR_PCT, help="percent (default %(default)s)")
    p.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)

    if args.command == "facts":
        facts(args.suite, args.environments, args.cells, args.out)
    elif args.command == "pack":
        pack(args.run_id, args.suite, args.results, args.config_json, args.report, args.environments, args.images,
             args.out)
    elif args.command == "verify":
        problems = verify(args.archive)
        if problems:
            print(f"verify FAILED: {args.archive}: {len(problems)} problem(s)", file=sys.stderr)
            print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
            return 1
        print(f"verify OK: {args.archive}")
    else:
        table = compare(Run(args.old, args.suite), Run(args.new, args.suite), args.noise_floor)
        if args.out:
            table.to_csv(args.out, index=False)
        print(table.astype(object).where(table.notna(), "").to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
