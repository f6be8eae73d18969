#!/usr/bin/env python3
"""Verify, sign, compare or keep runs: `archive.py verify X.tar.gz [--allowed-signers F --identity I]`, `archive.py
sign X.tar.gz --key K`, `archive.py compare OLD NEW [--suite S]`, `archive.py ingest X.tar.gz [--store DIR]` (into the
history, kbench.lifecycle.history; the archive itself is the workflow's target results/archive/<run-id>.tar.gz).
The commands: kbench.lifecycle.archive_command."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.lifecycle import archive_command  # noqa: E402

if __name__ == "__main__":
    sys.exit(archive_command.main(sys.argv[1:], sys.argv[0]))
