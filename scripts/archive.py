#!/usr/bin/env python3
"""Verify, sign, compare or keep runs: `archive.py verify X.tar.gz [--allowed-signers F --identity I]`, `archive.py
sign X.tar.gz --key K`, `archive.py compare OLD NEW [--suite S]`, `archive.py ingest X.tar.gz [--store DIR]` (into the
history, kbench.lifecycle.history; the archive itself is the workflow's target results/archive/<run-id>.tar.gz)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.lifecycle import archive, compare, history  # noqa: E402


def ingest(argv: list[str]) -> int:
    store = argv[argv.index("--store") + 1] if "--store" in argv else str(history.STORE)
    rest = [a for i, a in enumerate(argv) if a != "--store" and (i == 0 or argv[i - 1] != "--store")]
    return history.main(["--store", store, "ingest", *rest])


COMMANDS = {"verify": lambda argv: archive.main(["verify", *argv]), "sign": lambda argv: archive.main(["sign", *argv]),
            "compare": compare.main, "ingest": ingest}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} verify ARCHIVE [--allowed-signers F --identity I] | sign ARCHIVE --key K | "
                 "compare OLD NEW [--suite S] [--noise-floor PCT] [--out CSV] | ingest ARCHIVE [--store DIR]")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
