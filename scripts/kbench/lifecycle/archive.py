"""A finished run as one verifiable file.

    pack     results/ -> <run_id>.tar.gz: cells, logs, tables, plots, report, resolved config, locks and container
             recipes, environment records (image IDs), optionally the OCI images, run.json (git commit, host, GPU),
             and MANIFEST.sha256 listing the SHA-256 of every other file
    verify   an archive against its manifest (altered, missing and extra files are named) and against itself: every
             cell in the tables has its JSON, every cell ran in the environment its stack's record names, every
             cell's statistics are those of its own step times, and every table is what the archived cells give
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import pandas as pd
import yaml

from kbench.contract import cell
from kbench.instruments import compile_cache, timing
from kbench.machine import host, environment_records
from kbench.breakdown import measure
from kbench.machine.host import REPO
from kbench.results import facts, registry
from kbench.files import BadFile, kind, parse_json, read_bytes, read_text, refuse, text, unreadable

MANIFEST = "MANIFEST.sha256"
WARM = cell.WARM_SUFFIX


# ---------------------------------------------------------------- pack

def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack(run_id: str, suite: str, results: Path, config: dict, report: Path, cells: list[str],
         environment_records: list[str], images: list[str], out: Path, repo: Path = REPO) -> None:
    """Everything a second person needs to check and compare the run, under <run_id>/ in one tar.gz: the run's own
    cells and their logs (not other selections' cells lying in the same folders), tables, plots and the rest."""
    files: dict[str, Path | bytes] = {}       # archive path (below <run_id>/) -> source file or content
    for cell_path in map(Path, cells):
        name = cell_path.resolve().relative_to(results.resolve())
        files[str(name)] = cell_path
        log = results / "logs" / name.with_suffix(".log")
        if log.is_file():
            files[str(log.relative_to(results))] = log
        for kept in measure.kept_files(cell_path):      # its breakdown's trace and XSpaces, where the cell kept them
            files[str(name.with_name(kept.name))] = kept
    profiles = config["profiles"]
    folders = [f"tables/{suite}/{p}" for p in profiles] + [f"plots/{suite}/{p}" for p in profiles]
    for folder in folders:
        for path in sorted((results / folder).rglob("*")):
            if path.is_file() and not path.name.endswith(".tmp"):
                files[str(path.relative_to(results))] = path
    for path in registry.files(config, suite, results / "tables" / suite, results / "plots" / suite, archived=True):
        if Path(path).parent in (results / "tables" / suite, results / "plots" / suite):    # the suite's own (the
            files[str(Path(path).relative_to(results))] = Path(path)                       # profiles' are above)
    files[f"report/{suite}.html"] = report
    base = results / "images" / "base.json"      # the base's full Debian package manifest, where podman built it
    for record in [*environment_records, *images, *([base] if base.exists() else [])]:
        files[str(Path(record).resolve().relative_to(results.resolve()))] = Path(record)
    for folder in ("envs", "containers"):
        for path in sorted((repo / folder).iterdir()):
            if path.is_file():
                files[f"{folder}/{path.name}"] = path
    files["config.resolved.yaml"] = yaml.safe_dump(config, sort_keys=False).encode()
    run = {"run_id": run_id, "suite": suite, "created_utc": cell.utc_now(), "git_commit": host.git_commit(),
           "host": facts.host_facts()}
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

ARCHIVE = "expected a run archive as the workflow's archive rule writes it, results/archive/<run-id>.tar.gz"
SOURCE = "expected a run archive, results/archive/<run-id>.tar.gz, or a results folder"
WHOLE = "expected a whole run archive: copy it again from where it was made"
RECORD = "expected a cell JSON as the workflow writes it: rerun the cell"


def read_archive(path: Path) -> dict[str, bytes]:
    """name (below the run's folder) -> bytes, of every file in a tar archive; a BadFile for one that is missing,
    empty, cut short or not a tar archive at all."""
    try:
        with tarfile.open(path) as tar:
            return {member.name.partition("/")[2]: tar.extractfile(member).read() for member in tar.getmembers()
                    if member.isfile()}
    except EOFError:
        raise BadFile(path, "cut short: its gzip stream ends before the end marker", WHOLE) from None
    except (zlib.error, gzip.BadGzipFile) as error:     # (BadGzipFile is an OSError: before that)
        raise BadFile(path, f"damaged: {error}", WHOLE) from None
    except tarfile.ReadError:          # (its message lists every compression tried, over several lines)
        with open(path, "rb") as f:
            found = kind(f.read(4096))
        if found == "gzip data":
            raise BadFile(path, "gzip data without a whole tar archive in it", WHOLE) from None
        if found == "an uncompressed tar archive":
            raise BadFile(path, "a tar archive, cut short or damaged", WHOLE) from None
        raise BadFile(path, "empty" if found == "empty" else f"not a tar.gz archive: it is {found}", ARCHIVE) from None
    except OSError as error:
        raise unreadable(path, error, ARCHIVE) from None


def cell_names(files, suite: str) -> list[str]:
    """The names of a run's cell records, every repeat (not the warm twins: Run.warm()), in name order."""
    prefix = f"cells/{suite}/"
    return sorted(name for name in files if name.startswith(prefix) and name.endswith(".json")
                  and not name.endswith(WARM))


class Run:
    """The files of one run, from an archive (name -> bytes, hashed as read) or a results directory (its cells)."""

    def __init__(self, source: str | Path, suite: str | None = None):
        self.source = Path(source)
        self.files: dict[str, bytes] = {}
        if not self.source.exists():
            raise BadFile(self.source, "no such file or folder", SOURCE)
        if self.source.is_dir():
            self.suite = suite or self._only_suite()
            for folder in ("cells", "equivalence"):
                for path in (self.source / folder / self.suite).rglob("*.json"):
                    name = path.relative_to(self.source)
                    # not what launches and retries leave beside (attempts/, staging), nor a kept compile cache
                    if not any(part.startswith(".") or part == "attempts" or part.endswith(compile_cache.CACHE_SUFFIX)
                               for part in name.parts):
                        self.files[str(name)] = read_bytes(path, RECORD)
            return
        self.files = read_archive(self.source)
        if "run.json" not in self.files and not any(name.startswith("cells/") for name in self.files):
            raise BadFile(self.source, "a tar archive, but not of a run: no run.json, no cells/", ARCHIVE)
        self.suite = suite or self.json("run.json", {}).get("suite")
        if not self.suite:
            raise ValueError(f"{self.source}: run.json names no suite; give --suite")

    def _only_suite(self) -> str:
        """A results directory holds one folder per suite under cells/: without --suite it must hold exactly one."""
        found = sorted(p.name for p in (self.source / "cells").glob("*") if p.is_dir())
        if not found:
            raise BadFile(self.source, "no cells/<suite>/ in it: not a results folder", SOURCE)
        if len(found) != 1:
            raise ValueError(f"{self.source}: give --suite; cells/ holds suites: {', '.join(found) or 'none'}")
        return found[0]

    def where(self, name: str) -> str:
        """One of the run's files, as a message names it: its path, or the archive and the name inside."""
        return str(self.source / name) if self.source.is_dir() else f"{self.source}: {name}"

    def json(self, name: str, default=None):
        """A JSON file of the run (default: where it has none); a BadFile names it when it is not whole JSON."""
        if name not in self.files:
            return default
        return parse_json(self.files[name], self.where(name), "expected JSON as the workflow writes it")

    def record(self, name: str) -> cell.CellResult:
        return cell.CellResult.from_json(parse_json(self.files[name], self.where(name), RECORD), self.where(name))

    def equivalence(self, profile: str) -> list[cell.CellResult]:
        """The equivalence jobs of one profile (kbench.equivalence.check), in path order."""
        prefix = f"equivalence/{self.suite}/{profile}/"
        return [self.record(name) for name in sorted(self.files) if name.startswith(prefix) and name.endswith(".json")]

    def cell_names(self) -> list[str]:
        return cell_names(self.files, self.suite)

    def cells(self) -> dict[str, list[cell.CellResult]]:
        """cell_id -> its repeats, in repeat order (not the warm twins: warm())."""
        results = [self.record(name) for name in self.cell_names()]
        found: dict[str, list[cell.CellResult]] = {}
        for result in sorted(results, key=lambda r: (r.cell_id, r.repeat)):
            found.setdefault(result.cell_id, []).append(result)
        return found

    def warm(self) -> list[cell.CellResult]:
        """The compiled cells' warm twins (rule warm_cell), in name order."""
        prefix = f"cells/{self.suite}/"
        return [self.record(name) for name in sorted(self.files) if name.startswith(prefix) and name.endswith(WARM)]


# ---------------------------------------------------------------- verify

def verify(archive: Path, allowed_signers: Path | None = None, identity: str | None = None) -> list[str]:
    """All problems found, each naming its file; [] when the archive is intact and consistent. With allowed_signers
    (an ssh-keygen allowed-signers file) and identity, also the manifest's signature: an unsigned archive, or one
    signed with another key, is refused (a forger can rewrite the manifest, not sign it with the publisher's key)."""
    if allowed_signers:
        read_text(allowed_signers, SIGNERS)     # missing, empty, not text: named before GBs of archive are read
    run = archive_run(archive)
    if MANIFEST not in run.files:
        return [f"{MANIFEST}: missing, nothing can be checked"]
    listed = {}
    for line in text(run.files[MANIFEST], run.where(MANIFEST), ARCHIVE).splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    problems = []
    for name, digest in sorted(listed.items()):
        if name not in run.files:
            problems.append(f"{name}: missing (listed in {MANIFEST})")
        elif sha256_bytes(run.files[name]) != digest:
            problems.append(f"{name}: altered (SHA-256 differs from {MANIFEST})")
    for name in sorted(set(run.files) - set(listed) - {MANIFEST, SIGNATURE}):
        problems.append(f"{name}: extra (not listed in {MANIFEST})")
    if allowed_signers:
        problems += signature_problems(run, allowed_signers, identity)
    return problems + consistency(run)


# ---------------------------------------------------------------- signatures (ssh-keygen -Y, offline)

SIGNATURE = f"{MANIFEST}.sig"
NAMESPACE = "kbench-archive"
KEY = "expected an SSH private key, e.g. ~/.ssh/id_ed25519"
SIGNERS = "expected an ssh-keygen allowed-signers file: lines of <identity> <key type> <public key>"


def archive_run(path: Path) -> Run:
    """The run in an archive file: verify and sign take no results folder (it has no manifest)."""
    if Path(path).is_dir():
        raise BadFile(path, "a folder, not an archive", ARCHIVE)
    if not Path(path).exists():
        raise BadFile(path, "no such file", ARCHIVE)
    return Run(path)


def manifest_digest(archive: Path) -> str:
    """The SHA-256 of the archive's manifest: one line a publication can quote, which pins every file."""
    return "sha256:" + sha256_bytes(archive_run(archive).files.get(MANIFEST, b""))


def sign(archive: Path, key: Path) -> None:
    """Sign the archive's manifest with an SSH private key (ssh-keygen -Y sign); the signature goes in beside it."""
    run = archive_run(archive)
    if MANIFEST not in run.files:
        raise BadFile(archive, f"no {MANIFEST} in it, nothing to sign", ARCHIVE)
    found = kind(read_bytes(key, KEY))
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / MANIFEST
        manifest.write_bytes(run.files[MANIFEST])
        if subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", NAMESPACE, str(manifest)],
                          capture_output=True).returncode:      # (its message blames a "public key" whatever it was)
            why = ("cut short, damaged or passphrase-protected" if found == "an OpenSSH private key" else
                   f"it is {found}")
            raise BadFile(key, f"ssh-keygen cannot sign with it: {why}", KEY)
        signature = (Path(tmp) / SIGNATURE).read_bytes()
    top = _top(archive)
    rewritten = archive.with_suffix(".signing")
    with tarfile.open(archive) as old, tarfile.open(rewritten, "w:gz") as new:
        for member in old.getmembers():
            if member.name != f"{top}/{SIGNATURE}":
                new.addfile(member, old.extractfile(member) if member.isfile() else None)
        add(new, f"{top}/{SIGNATURE}", signature)
    os.replace(rewritten, archive)


def signature_problems(run: Run, allowed_signers: Path, identity: str | None) -> list[str]:
    if SIGNATURE not in run.files:
        return [f"{SIGNATURE}: missing, the archive is unsigned"]
    with tempfile.TemporaryDirectory() as tmp:
        signature = Path(tmp) / SIGNATURE
        signature.write_bytes(run.files[SIGNATURE])
        check = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed_signers), "-I", identity or "",
                                "-n", NAMESPACE, "-s", str(signature)], input=run.files[MANIFEST], capture_output=True)
    for line in check.stderr.decode().splitlines():       # the signers file, not the signature, is at fault
        if line.startswith(f"{allowed_signers}:"):
            raise BadFile(allowed_signers, f"line {line.removeprefix(f'{allowed_signers}:')}", SIGNERS)
    if check.returncode != 0:
        return [f"{SIGNATURE}: does not verify for {identity!r} with {allowed_signers} "
                f"({check.stderr.decode().strip() or check.stdout.decode().strip()})"]
    return []


def _top(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        return tar.getmembers()[0].name.split("/")[0]


def consistency(run: Run) -> list[str]:
    problems = []
    long_names = sorted(name for name in run.files
                        if name.startswith(f"tables/{run.suite}/") and name.endswith(("/cells_long.csv",
                                                                                         "/batch_cells_long.csv")))
    cells = run.cells()
    if not long_names:
        return [f"tables/{run.suite}/<profile>/cells_long.csv: missing, cells cannot be checked against the tables"]
    in_tables = {f"{r.cell_id}.r{r.repeat}" for name in long_names for r in table(run, name).itertuples()}
    archived = {f"{cell_id}.r{r.repeat}": r for cell_id, repeats in cells.items() for r in repeats}
    for name in sorted(in_tables - set(archived)):
        problems.append(f"cells/{name}.json: missing (the tables list this cell)")
    for name in sorted(set(archived) - in_tables):
        problems.append(f"cells/{name}.json: not in any {', '.join(long_names)}")
    for name, result in sorted(archived.items()):
        prov, spec = result.provenance, result.spec
        environment = prov.get("environment")
        if not environment:      # n/a cells never start an environment
            continue
        record_name = environment_records.path(prov["runtime"], spec.stack, spec.accelerator)
        if record_name not in run.files:
            problems.append(f"{record_name}: missing (cells/{name}.json ran in it)")
            continue
        key, recorded = environment_records.identity(run.json(record_name))
        if recorded != environment.get(key):
            problems.append(f"cells/{name}.json: ran in {key} {environment.get(key)}, but {record_name} "
                            f"records {recorded}")
    for cell_id, repeats in sorted(cells.items()):
        problems += [f"cells/{cell_id}.r{r.repeat}.json: {p}" for r in repeats for p in timing_arithmetic(r)]
    return problems + rebuilt_tables(run, cells)


def table(run: Run, name: str) -> pd.DataFrame:
    """One of the run's CSV tables; a BadFile names one that is empty or not CSV."""
    try:
        return pd.read_csv(io.BytesIO(run.files[name]))
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise BadFile(run.where(name), f"not a CSV table: {str(error).strip().splitlines()[0]}", ARCHIVE) from None


def timing_arithmetic(result: cell.CellResult) -> list[str]:
    """An ok cell's statistics must be those of its own per-step times, and the steps must add up to the window:
    an edited mean (or median, ...) no longer is."""
    timing_record = result.timing
    if result.status != "ok" or not timing_record:
        return []
    steps = timing_record["step_ms"]
    found = []
    if len(steps) != result.cell_spec.steps.timed:
        found.append(f"{len(steps)} per-step times, but the spec times {result.cell_spec.steps.timed} steps")
    if not math.isclose(sum(steps), timing_record["window_ms"], rel_tol=1e-6):
        found.append(f"window_ms {timing_record['window_ms']} is not the sum of its step_ms ({sum(steps)})")
    if "block_ms" in timing_record:         # the synced blocks (schema 6): the same window, the same steps
        if not math.isclose(sum(timing_record["block_ms"]), timing_record["window_ms"], rel_tol=1e-6):
            found.append(f"window_ms {timing_record['window_ms']} is not the sum of its block_ms")
        if sum(timing_record["block_steps"]) != len(steps):
            found.append(f"block_steps add up to {sum(timing_record['block_steps'])}, not its {len(steps)} steps")
    for key, value in timing.summarize(steps).items():
        if not math.isclose(timing_record[key], value, rel_tol=1e-9, abs_tol=1e-9):
            found.append(f"{key} {timing_record[key]} is not that of its step_ms ({value})")
    return found


def rebuilt_tables(run: Run, cells: dict[str, list[cell.CellResult]]) -> list[str]:
    """Every table file of the archive must be what the registry's tables (kbench.results.registry.rebuild) make
    of the archived cells and config: a figure edited in a table (or in a cell) shows as a difference even under a
    regenerated manifest."""
    config_name = "config.resolved.yaml"
    if config_name not in run.files:
        return [f"{config_name}: missing, the tables cannot be rebuilt"]
    try:
        config = yaml.safe_load(run.files[config_name])
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BadFile(run.where(config_name), f"not valid YAML{where}: {getattr(error, 'problem', None) or error}",
                      ARCHIVE) from None
    if not isinstance(config, dict):
        raise BadFile(run.where(config_name), f"not a config: {type(config).__name__} at the top", ARCHIVE)
    prefix = f"tables/{run.suite}/"
    kept = {name for table in registry.TABLES if not table.rebuilt for name in table.outputs}    # the host's facts
    archived = {name.removeprefix(prefix): data for name, data in run.files.items()
                if name.startswith(prefix) and Path(name).name not in kept}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        registry.rebuild(config, run.suite, cells, out, [job for profile in config["profiles"]
                                                         for job in run.equivalence(profile)], run.warm())
        rebuilt = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    problems = [f"{prefix}{name}: differs from the table rebuilt from the cell JSONs"
                for name in sorted(set(archived) & set(rebuilt)) if archived[name] != rebuilt[name]]
    problems += [f"{prefix}{name}: missing (kbench.results.registry makes it)" for name in sorted(set(rebuilt) - set(archived))]
    problems += [f"{prefix}{name}: not a table kbench.results.registry makes" for name in sorted(set(archived) - set(rebuilt))]
    return problems


# ---------------------------------------------------------------- command line

def verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("archive", type=Path)
    p.add_argument("--allowed-signers", type=Path, help="ssh-keygen allowed-signers file: require a good signature")
    p.add_argument("--identity", help="the signer's identity in that file")


def sign_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("archive", type=Path)
    p.add_argument("--key", required=True, type=Path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="results -> <run_id>.tar.gz (rule archive)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--suite", required=True)
    p.add_argument("--results", required=True, type=Path)
    p.add_argument("--config-json", required=True, type=json.loads)
    p.add_argument("--report", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--cells", nargs="*", default=[])
    p.add_argument("--environments", nargs="*", default=[])
    p.add_argument("--images", nargs="*", default=[])
    verify_arguments(commands.add_parser("verify", help="check an archive against its manifest, its signature and "
                                                        "itself"))
    sign_arguments(commands.add_parser("sign", help="sign the archive's manifest with an SSH private key (ssh-keygen "
                                                    "-Y sign)"))
    args = parser.parse_args(argv)
    if args.command == "pack":
        pack(args.run_id, args.suite, args.results, args.config_json, args.report, args.cells, args.environments,
             args.images, args.out)
        return 0
    return checked(parser, args)


def command(name: str, argv: list[str], parser: argparse.ArgumentParser) -> int:
    """verify or sign on a parser of its own (`kbench verify`, `kbench sign`: kbench.frontdoor.cli)."""
    {"verify": verify_arguments, "sign": sign_arguments}[name](parser)
    args = parser.parse_args(argv)
    args.command = name
    return checked(parser, args)


def checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """verify or sign, a bad file refused in one line."""
    try:
        return verify_or_sign(parser, args)
    except BadFile as error:
        return refuse(f"archive {args.command}", error)


def verify_or_sign(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "sign":
        sign(args.archive, args.key)
        print(f"signed: {args.archive} (manifest {manifest_digest(args.archive)})")
        return 0
    if args.allowed_signers and not args.identity:
        parser.error("--allowed-signers needs --identity (the signer's name in that file)")
    problems = verify(args.archive, args.allowed_signers, args.identity)
    digest = manifest_digest(args.archive)
    if problems:
        print(f"verify FAILED: {args.archive}: {len(problems)} problem(s) (manifest {digest})", file=sys.stderr)
        print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
        return 1
    signed = ("signature OK" if args.allowed_signers else
              "signed, signature not checked (give --allowed-signers)" if SIGNATURE in Run(args.archive).files
              else "unsigned")
    print(f"verify OK: {args.archive} (manifest {digest}; {signed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
