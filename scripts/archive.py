#!/usr/bin/env python3
"""Verify, sign or compare runs: `archive.py verify X.tar.gz [--allowed-signers F --identity I]`, `archive.py sign
X.tar.gz --key K`, `archive.py compare OLD NEW [--suite S]`
(kbench.archive and kbench.compare; the archive itself is the workflow's target results/archive/<run-id>.tar.gz)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench import archive, compare  # noqa: E402

COMMANDS = {"verify": lambda argv: archive.main(["verify", *argv]), "sign": lambda argv: archive.main(["sign", *argv]),
            "compare": compare.main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} verify ARCHIVE [--allowed-signers F --identity I] | sign ARCHIVE --key K | "
                 "compare OLD NEW [--suite S] [--noise-floor PCT] [--out CSV]")
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
