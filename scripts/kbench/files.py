"""JSON files that are either whole or absent: every record the pipeline writes goes through here. And the files a user
hands a command: read here, a bad one is one line naming it (BadFile), not a traceback."""
from __future__ import annotations

import codecs
import errno
import json
import os
import sys
import tempfile
from pathlib import Path


def write_json(path: str | os.PathLike, obj) -> None:
    """Write via a temp file and rename, so a killed writer never leaves half a JSON for a reader."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o644)                   # mkstemp makes it private; results are for reading
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | os.PathLike):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- files a user hands a command

class BadFile(ValueError):
    """A file handed to a command that it cannot use: missing, empty, cut short, or another kind of file. Each
    command's main() prints it as its one line, `<command>: <path>: <what is wrong> (<what was expected>)`: the user
    has a file to fix, not a traceback to read (a bug in the code still gets one)."""

    def __init__(self, path, wrong: str, expected: str):
        self.path, self.wrong, self.expected = str(path), wrong, expected
        super().__init__(f"{path}: {wrong} ({expected})")


def refuse(command: str, error: ValueError) -> int:
    """A command's one line for a bad file (or a bad config: config_check.ConfigError), and its exit status."""
    print(f"{command}: {error}", file=sys.stderr)
    return 1


# The first bytes of files a user may hand over instead of the right one: a message says what the file is.
_MAGIC = [(0, b"\x89PNG", "a PNG image"), (0, b"\x1f\x8b", "gzip data"), (0, b"PK\x03\x04", "a zip file"),
          (0, b"%PDF", "a PDF"), (0, b"\x7fELF", "a program (ELF)"), (0, b"PAR1", "a Parquet file"),
          (8, b"DUCK", "a DuckDB database"), (257, b"ustar", "an uncompressed tar archive"),
          (0, b"-----BEGIN OPENSSH PRIVATE KEY", "an OpenSSH private key")]


def kind(data: bytes) -> str:
    """What a file's first bytes say it is (a PNG image, text, ...), for the message about a foreign file."""
    if not data:
        return "empty"
    for offset, magic, name in _MAGIC:
        if data[offset:offset + len(magic)] == magic:
            return name
    try:                # a prefix may end inside a character: the incremental decoder waits for the rest
        codecs.getincrementaldecoder("utf-8")().decode(data[:4096])
    except UnicodeDecodeError:
        return "binary data"
    return "binary data" if b"\0" in data[:4096] else "text"


def unreadable(path, error: OSError, expected: str) -> BadFile:
    """The BadFile for an OSError from opening path."""
    wrong = {errno.ENOENT: "no such file", errno.EISDIR: "a folder, not a file", errno.ENOTDIR: "no such file",
             errno.EACCES: "not readable: permission denied"}.get(error.errno, f"cannot be read: {error.strerror}")
    return BadFile(path, wrong, expected)


def read_bytes(path: str | os.PathLike, expected: str) -> bytes:
    """The whole file, or a BadFile saying why not: missing, a folder, not readable, empty."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise unreadable(path, error, expected) from error
    if not data:
        raise BadFile(path, "empty", expected)
    return data


def text(data: bytes, path, expected: str) -> str:
    """UTF-8 bytes as text; a BadFile says what else they are (a PNG image, binary data)."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise BadFile(path, f"not text: it is {kind(data)}", expected) from None


def read_text(path: str | os.PathLike, expected: str) -> str:
    return text(read_bytes(path, expected), path, expected)


def parse_json(data: bytes, path, expected: str):
    """JSON from bytes read elsewhere (an archive member), or a BadFile: not text, or not whole JSON."""
    try:
        return json.loads(text(data, path, expected))
    except json.JSONDecodeError as error:
        raise BadFile(path, f"not valid JSON{', cut short' if _unclosed(error.doc) else ''}: {error.msg} at line "
                            f"{error.lineno} column {error.colno}", expected) from None


def _unclosed(doc: str) -> bool:
    """Whether JSON text ends inside a string, an object or an array: cut short, rather than written wrong."""
    depth, in_string, escaped = 0, False, False
    for char in doc:
        if escaped:
            escaped = False
        elif in_string:
            escaped, in_string = char == "\\", char != '"'
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return in_string or depth > 0


def load_json(path: str | os.PathLike, expected: str):
    """A JSON file a user hands a command (read_json is for the pipeline's own records)."""
    return parse_json(read_bytes(path, expected), path, expected)
