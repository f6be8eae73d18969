"""Bad files, not only bad config: every command a user runs, handed a file that is missing, empty, cut short or of
another kind (or a damaged history store), ends with one line on stderr, `<command>: <path>: <what is wrong>
(<what was expected>)`, never a traceback, and loses nothing already made."""
import gzip
import os
import shutil
import subprocess
import tarfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO
from kbench.lifecycle import archive, bisect, compare, history
from kbench.results import departures_page, facts
from kbench.run import recover
from kbench.gpucheck import check as gpucheck
from test_lifecycle import CELL, MS, RUN_CONFIG, keypair, rewrite, write_run

PNG = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(16)
GARBAGE = bytes(range(256)) * 20
LOCK = REPO / "envs" / "synthetic.cpu.lock"


def small_archive(results: Path, out: Path) -> Path:
    """A fixture run packed as the workflow packs it (archive.pack), its tables, locks and recipes placeholders: what
    these tests read fails before verify would rebuild a table, the real tables cost seconds
    (test_lifecycle.pack_in_process), and the real locks make a MB to rewrite in each test."""
    repo = results.parent / "repo"
    for path in [*(results / "tables" / "tiny" / name for name in [*departures_page.OUTPUTS, facts.OUTPUT]),
                 results / "report.html", repo / "envs" / "synthetic.cpu.lock", repo / "containers" / "Containerfile"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("placeholder")
    cells = sorted(map(str, (results / "cells").rglob("*.json")))
    archive.pack("run1", "tiny", results, RUN_CONFIG, results / "report.html", cells, [], [], out, repo)
    return out


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Good files of every kind the commands read: a results folder, its archive (and a signed copy), a history
    store holding the run, a signing key and its allowed-signers file."""
    folder = tmp_path_factory.mktemp("good")
    write_run(folder / "run", MS)
    packed = small_archive(folder / "run", folder / "run1.tar.gz")
    history.ingest(folder / "run", store=folder / "store")
    key = keypair(folder, "alice")
    signers = folder / "allowed_signers"
    signers.write_text("alice@lab " + " ".join((folder / "alice.pub").read_text().split()[:2]) + "\n")
    signed = folder / "signed.tar.gz"
    shutil.copy(packed, signed)
    assert archive.main(["sign", str(signed), "--key", str(key)]) == 0
    return SimpleNamespace(run=folder / "run", archive=packed, signed=signed, store=folder / "store", key=key,
                           signers=signers)


# ---------------------------------------------------------------- bad files, each made in the test's folder

def missing(tmp, good):
    return tmp / "missing"


def empty(tmp, good):
    (tmp / "empty").write_bytes(b"")
    return tmp / "empty"


def png(tmp, good):
    (tmp / "picture.png").write_bytes(PNG)
    return tmp / "picture.png"


def folder(tmp, good):
    (tmp / "folder").mkdir()
    return tmp / "folder"


def half(of):
    """The first half of one of the good files: a copy cut short."""
    def cut_short(tmp, good):
        data = of(good).read_bytes()
        (tmp / "half").write_bytes(data[:len(data) // 2])
        return tmp / "half"
    return cut_short


def other_tar(tmp, good):
    """A tar.gz, but of something else."""
    (tmp / "notes").mkdir()
    (tmp / "notes" / "a.txt").write_text("notes\n")
    subprocess.run(["tar", "czf", str(tmp / "notes.tar.gz"), "-C", str(tmp), "notes"], check=True)
    return tmp / "notes.tar.gz"


def gzip_text(tmp, good):
    """gzip data, but of a text file, not of a tar archive."""
    (tmp / "notes.tar.gz").write_bytes(gzip.compress(b"notes\n" * 100))
    return tmp / "notes.tar.gz"


def archive_with(member: str, change, extra: dict | None = None):
    """The run's archive with one member changed (change(data) -> new data, or None to drop it) and extra members
    added (name below the run's folder -> data); its manifest as it was."""
    def damaged_archive(tmp, good):
        rewrite(good.archive, tmp / "damaged.tar.gz",
                lambda name, data: change(data) if name.endswith(member) else data,
                {f"run1/{name}": data for name, data in (extra or {}).items()})
        return tmp / "damaged.tar.gz"
    return damaged_archive


def in_two_gzip_members(tmp, good, damage=None) -> Path:
    """The run's archive, its tar recompressed as two gzip members (as concatenated gzip files or pigz make them;
    gzip reads on from one to the next) split where the data of a file midway through it begins: a reader of the
    archive crosses the split while it skips that data for the next header (a damage inside a header is tarfile's
    ReadError instead); damage(data, split) changes bytes of the result, split being where member two starts."""
    with gzip.open(good.archive) as whole:
        tar = whole.read()
    with tarfile.open(good.archive) as listing:
        members = listing.getmembers()
    middle = next(member for member in members[len(members) // 2:] if member.size).offset_data
    first = gzip.compress(tar[:middle], mtime=0)
    data = bytearray(first + gzip.compress(tar[middle:], mtime=0))
    if damage:
        damage(data, len(first))
    path = tmp / ("damaged.tar.gz" if damage else "split.tar.gz")
    path.write_bytes(bytes(data))
    return path


def deflate_damaged(tmp, good):
    """Member two's first deflate block header set to the reserved block type 3 (bits 1-2 of its first byte): zlib
    stops there, past the first tar header."""
    return in_two_gzip_members(tmp, good, lambda data, split: data.__setitem__(split + 10, data[split + 10] | 0b110))


def checksum_damaged(tmp, good):
    """One bit of member one's CRC-32 (its trailer's first 4 bytes) flipped: its data decompresses, the check at its
    end fails."""
    return in_two_gzip_members(tmp, good, lambda data, split: data.__setitem__(split - 8, data[split - 8] ^ 0x01))


CELLS_LONG = "tables/tiny/strict/cells_long.csv"


def cell_record(change):
    """A copy of the results folder whose cell record is changed (change(data) -> new data); the line names it."""
    def damaged_record(tmp, good):
        shutil.copytree(good.run, tmp / "run")
        path = tmp / "run" / CELL
        path.write_bytes(change(path.read_bytes()))
        return path
    return damaged_record


cut_cell = cell_record(lambda data: data[:len(data) // 2])
foreign_cell = cell_record(lambda data: b'{"name": "not a cell"}\n')


def store_with(database: bytes | None):
    """A copy of the good history store, its database replaced by these bytes (None: cut in half)."""
    def damaged_store(tmp, good):
        shutil.copytree(good.store, tmp / "store")
        path = tmp / "store" / history.DATABASE
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2] if database is None else database)
        return path
    return damaged_store


def store_file(tmp, good):
    (tmp / "store").write_text("not a folder\n")
    return tmp / "store"


def no_store(tmp, good):
    return tmp / "none" / history.DATABASE


def lock_cut_in_a_hash(tmp, good):
    text = LOCK.read_text()
    (tmp / "old.lock").write_text(text[:text.index("--hash=sha256:") + 24])
    return tmp / "old.lock"


def yaml_cut(tmp, good):
    (tmp / "config.yaml").write_text("suite: paper\nmodels: [bert, sam\n")
    return tmp / "config.yaml"


def script(body: str):
    """An executable that is not a Python interpreter."""
    def not_python(tmp, good):
        path = tmp / "python"
        path.write_text(body)
        path.chmod(0o755)
        return path
    return not_python


# ---------------------------------------------------------------- every command x bad input: its one line

def bisect_argv(old=LOCK, config=REPO / "config.yaml", out=None):
    return ["--stack", "synthetic", "--accelerator", "cpu", "--old-lock", str(old), "--new-lock", str(LOCK),
            "--cell", "tiny/strict/synthetic/fit/bs4/float32/synthetic", "--config", str(config),
            *(["--out", str(out)] if out else [])]


def run_of(record: Path) -> str:
    """The results folder that holds a cell record."""
    return str(record).split("/cells/")[0]


def the_archive(good):
    return good.archive


VERIFY = ("archive verify", archive.main, lambda bad, g: ["verify", str(bad)])
SIGNERS = ("archive verify", archive.main,
           lambda bad, g: ["verify", str(g.signed), "--allowed-signers", str(bad), "--identity", "alice@lab"])
SIGN = ("archive sign", archive.main, lambda bad, g: ["sign", str(bad), "--key", str(g.key)])
KEY = ("archive sign", archive.main, lambda bad, g: ["sign", str(g.archive), "--key", str(bad)])
COMPARE = ("archive compare", compare.main, lambda bad, g: [str(g.archive), str(bad)])
COMPARE_FOLDER = ("archive compare", compare.main, lambda bad, g: [str(g.run), run_of(bad)])
INGEST = ("history ingest", history.main, lambda bad, g: ["--store", str(g.store), "ingest", str(bad)])
INGEST_FOLDER = ("history ingest", history.main, lambda bad, g: ["--store", str(g.store), "ingest", run_of(bad)])
INTO_STORE = ("history ingest", history.main, lambda bad, g: ["--store", str(bad.parent), "ingest", str(g.run)])
INTO_STORE_FILE = ("history ingest", history.main, lambda bad, g: ["--store", str(bad), "ingest", str(g.run)])
QUERY = ("history query", history.main, lambda bad, g: ["--store", str(bad.parent), "query", "SELECT 1"])
QUERY_STORE_FILE = ("history query", history.main, lambda bad, g: ["--store", str(bad), "query", "SELECT 1"])
CHANGES = ("history changes", history.main, lambda bad, g: ["--store", str(bad.parent), "changes", "--suite", "tiny",
                                                            "--profile", "strict", "--out", str(bad.parents[1] / "o"),
                                                            "--plots", str(bad.parents[1] / "p")])
OLD_LOCK = ("bisect", bisect.main, lambda bad, g: bisect_argv(old=bad))
CONFIG = ("bisect", bisect.main, lambda bad, g: bisect_argv(config=bad))
OUT = ("bisect", bisect.main, lambda bad, g: bisect_argv(out=bad))
RESUME = ("resume", recover.main, lambda bad, g: ["resume", "--cores", "1", "--configfile", str(bad)])
RETRY = ("retry-failed", recover.main, lambda bad, g: ["retry-failed", f"--configfile={bad}"])
RETRY_CELL = ("retry-failed", recover.main, lambda bad, g: ["retry-failed", "--cores", "1"])
GPU_PYTHON = ("gpucheck", gpucheck.main, lambda bad, g: ["--python", str(bad), "--out", str(bad.parent / "out")])
GPU_OUT = ("gpucheck", gpucheck.main, lambda bad, g: ["--out", str(bad)])

CASES = [   # (command, main, argv), the bad file, what its line says
    (VERIFY, missing, "no such file (expected a run archive"),
    (VERIFY, empty, "empty (expected a run archive"),
    (VERIFY, half(the_archive), "cut short: its gzip stream ends before the end marker"),
    (VERIFY, png, "not a tar.gz archive: it is a PNG image"),
    (VERIFY, folder, "a folder, not an archive"),
    (VERIFY, other_tar, "a tar archive, but not of a run: no run.json, no cells/"),
    (VERIFY, gzip_text, "gzip data without a whole tar archive in it"),
    (VERIFY, archive_with(CELL, lambda data: data[:len(data) // 2]), f": {CELL}: not valid JSON, cut short"),
    (VERIFY, archive_with("/run.json", lambda data: data[:len(data) // 2]), ": run.json: not valid JSON, cut short"),
    (VERIFY, archive_with("/MANIFEST.sha256", lambda data: PNG), ": MANIFEST.sha256: not text: it is a PNG image"),
    (VERIFY, archive_with("/run.json", lambda data: data, {CELLS_LONG: b""}), f": {CELLS_LONG}: not a CSV table"),
    (VERIFY, archive_with("/config.resolved.yaml", lambda data: b"suite: [tiny\n", {CELLS_LONG: b"cell_id,repeat\n"}),
     ": config.resolved.yaml: not valid YAML"),
    (SIGNERS, missing, "no such file (expected an ssh-keygen allowed-signers file"),
    (SIGNERS, empty, "empty (expected an ssh-keygen allowed-signers file"),
    (SIGNERS, png, "not text: it is a PNG image"),
    (SIGNERS, half(lambda g: g.signers), "line 1: invalid key"),
    (SIGN, half(the_archive), "cut short"),
    (SIGN, other_tar, "not of a run"),
    (SIGN, archive_with("/MANIFEST.sha256", lambda data: None), "no MANIFEST.sha256 in it, nothing to sign"),
    (KEY, missing, "no such file (expected an SSH private key"),
    (KEY, empty, "empty (expected an SSH private key"),
    (KEY, png, "ssh-keygen cannot sign with it: it is a PNG image"),
    (KEY, half(lambda g: g.key), "ssh-keygen cannot sign with it: cut short, damaged or passphrase-protected"),
    (COMPARE, missing, "no such file or folder (expected a run archive, results/archive/<run-id>.tar.gz, or a results"),
    (COMPARE, half(the_archive), "cut short"),
    (COMPARE, png, "not a tar.gz archive: it is a PNG image"),
    (COMPARE, folder, "no cells/<suite>/ in it: not a results folder"),
    (COMPARE_FOLDER, cut_cell, "not valid JSON, cut short"),
    (COMPARE_FOLDER, foreign_cell, "not a cell record (this code reads schema 6"),
    (INGEST, half(the_archive), "cut short"),
    (INGEST, png, "not a tar.gz archive: it is a PNG image"),
    (INGEST, other_tar, "not of a run"),
    (INGEST_FOLDER, cut_cell, "not valid JSON, cut short"),
    (INTO_STORE, store_with(GARBAGE), "not a DuckDB database: it is binary data (expected the history's"),
    (INTO_STORE, store_with(b""), "empty (expected the history's DuckDB database"),
    (INTO_STORE, store_with(None), "cut short: DuckDB could not read a block it holds"),
    (INTO_STORE, store_with(PNG), "not a DuckDB database: it is a PNG image"),
    (INTO_STORE_FILE, store_file, "a file, not a folder (--store takes the history's folder"),
    (QUERY, no_store, "no history yet (ingest a run first"),
    (QUERY, store_with(GARBAGE), "not a DuckDB database: it is binary data"),
    (QUERY_STORE_FILE, store_file, "a file, not a folder"),
    (CHANGES, store_with(PNG), "not a DuckDB database: it is a PNG image"),
    (OLD_LOCK, missing, "no such file (expected a hash-locked lock, as scripts/lock-envs writes them)"),
    (OLD_LOCK, empty, "empty (expected a hash-locked lock"),
    (OLD_LOCK, png, "not text: it is a PNG image"),
    (OLD_LOCK, lock_cut_in_a_hash, "is not --hash=sha256:<64 hex digits>"),
    (CONFIG, missing, "no such file (expected the benchmark's config in YAML"),
    (CONFIG, png, "not text: it is a PNG image"),
    (CONFIG, yaml_cut, "line 3, column 1: not valid YAML"),
    (OUT, png, "a file, not a folder (--out takes the folder"),
    (RESUME, missing, "no such file (expected the benchmark's config in YAML"),
    (RESUME, empty, "empty (expected the benchmark's config in YAML"),
    (RESUME, png, "not text: it is a PNG image"),
    (RESUME, yaml_cut, "not valid YAML"),
    (RETRY, png, "not text: it is a PNG image"),
    (RETRY_CELL, cut_cell, "not valid JSON, cut short"),
    (RETRY_CELL, cell_record(lambda data: b"[1, 2]\n"), "a JSON list, not a cell record"),
    (GPU_PYTHON, missing, "not found (expected a Python 3.11 or 3.12 interpreter"),
    (GPU_PYTHON, folder, "a folder (expected a Python"),
    (GPU_PYTHON, png, "not executable"),
    (GPU_PYTHON, script("just text, marked executable\n"), "cannot be run: exec format error"),
    (GPU_PYTHON, script("#!/bin/sh\necho 'not python' >&2\nexit 3\n"), "ran, but not as a Python interpreter: "
                                                                          "exit 3, 'not python'"),
    (GPU_OUT, png, "cannot hold the check's files: not a directory (--out takes a folder"),
]


@pytest.fixture
def no_snakemake(monkeypatch):
    """resume and retry-failed must refuse before Snakemake starts (exec would replace this process)."""
    def started(*args):
        raise AssertionError(f"Snakemake started: {args}")
    monkeypatch.setattr(os, "spawnv", started)
    monkeypatch.setattr(os, "execv", started)


def status_of(main, argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:         # (bisect exits as argparse does)
        return exit_.code


@pytest.mark.parametrize("command, make, says", [
    pytest.param(c, m, s, id=f"{i}-{c[0].replace(' ', '-')}-{m.__name__}") for i, (c, m, s) in enumerate(CASES)])
def test_a_bad_file_gets_one_line_naming_it(command, make, says, good, tmp_path, capsys, monkeypatch, no_snakemake):
    name, main, argv = command
    bad = make(tmp_path, good)
    # retry-failed reads the cell records Snakemake's --summary lists: a summary naming the bad one, no Snakemake
    listed = f"{bad}\t-\tcell\tok\tno update\n" if bad.suffix == ".json" else ""
    monkeypatch.setattr(recover, "summary", lambda options: subprocess.CompletedProcess([], 0, listed, ""))
    status = status_of(main, argv(bad, good))
    err = capsys.readouterr().err
    assert status not in (0, None) and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith(f"{name}: {bad}"), err
    assert says in err, err


def read_every_member(path: Path) -> dict[str, bytes]:
    """The archive read as archive.read_archive reads it, without its handling of errors."""
    with tarfile.open(path) as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


@pytest.mark.parametrize("damage, raised, says", [
    (deflate_damaged, zlib.error, "damaged: Error -3 while decompressing data: invalid block type"),
    (checksum_damaged, gzip.BadGzipFile, "damaged: CRC check failed"),
], ids=["zlib-error", "crc-error"])
def test_an_archive_damaged_inside_its_gzip_stream_gets_one_line_not_a_traceback(damage, raised, says, good,
                                                                                   tmp_path, capsys):
    """A few bits changed midway through the compressed stream (a bad disk, a bad copy): zlib's error or gzip's
    checksum error, raised past the first tar header, is the archive's one line like any other bad file."""
    whole = in_two_gzip_members(tmp_path, good)
    assert read_every_member(whole) == read_every_member(good.archive)    # the split alone changes nothing
    bad = damage(tmp_path, good)
    with pytest.raises(raised):
        read_every_member(bad)
    status = archive.main(["verify", str(bad)])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"archive verify: {bad}: {says}") and err.endswith(f"({archive.WHOLE})\n"), err


def test_a_failed_ingest_or_sign_loses_nothing(good, tmp_path):
    """A bad archive into a good store leaves the store as it was; a good run into a damaged store leaves the damaged
    file as it was (to be restored, not overwritten); a bad key leaves the archive unsigned and whole."""
    store = tmp_path / "store"
    shutil.copytree(good.store, store)
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    assert history.main(["--store", str(store), "ingest", str(half(the_archive)(tmp_path, good))]) == 1
    assert {p.name: p.read_bytes() for p in store.iterdir()} == before
    with history.connect(store, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == len(MS)

    (tmp_path / "d").mkdir()
    damaged = store_with(PNG)(tmp_path / "d", good)
    assert history.main(["--store", str(damaged.parent), "ingest", str(good.run)]) == 1
    assert damaged.read_bytes() == PNG

    copy = tmp_path / "unsigned.tar.gz"
    shutil.copy(good.archive, copy)
    assert archive.main(["sign", str(copy), "--key", str(png(tmp_path, good))]) == 1
    assert copy.read_bytes() == good.archive.read_bytes() and not list(tmp_path.glob("*.signing"))


def test_retry_failed_passes_on_snakemakes_own_error(monkeypatch, capsys, no_snakemake):
    """A --summary that fails (the Snakefile's config check) is Snakemake's message, not a CalledProcessError."""
    monkeypatch.setattr(recover, "summary", lambda options: subprocess.CompletedProcess(
        [], 1, "", "config error: config key suite: 'x' is not allowed\n"))
    assert recover.main(["retry-failed", "--cores", "1"]) == 1
    assert capsys.readouterr().err == "config error: config key suite: 'x' is not allowed\n"


@pytest.mark.parametrize("options, files", [
    (["--cores", "1", "--configfile", "a.yaml", "b.yaml", "--config", "suite=tiny"], ["a.yaml", "b.yaml"]),
    (["--configfile=a.yaml", "--configfiles", "b.yaml", "target"], ["a.yaml", "b.yaml", "target"]),
    (["--cores", "1", "results/x.json"], []),
])
def test_the_config_files_among_snakemake_options(options, files):
    assert recover.configfiles(options) == files
