"""scripts/archive.py's commands: verify, sign, compare or keep runs. `archive.py verify X.tar.gz [--allowed-signers F
--identity I]`, `archive.py sign X.tar.gz --key K` (kbench.lifecycle.archive), `archive.py compare OLD NEW [--suite S]`
(kbench.lifecycle.compare), `archive.py ingest X.tar.gz [--store DIR]` (into the history, kbench.lifecycle.history;
the archive itself is the workflow's target results/archive/<run-id>.tar.gz)."""
from __future__ import annotations

import sys

from kbench.lifecycle import archive, compare, history

USAGE = ("verify ARCHIVE [--allowed-signers F --identity I] | sign ARCHIVE --key K | compare OLD NEW [--suite S] "
         "[--noise-floor PCT] [--out CSV] | ingest ARCHIVE [--store DIR]")


def ingest(argv: list[str]) -> int:
    store = argv[argv.index("--store") + 1] if "--store" in argv else str(history.STORE)
    rest = [a for i, a in enumerate(argv) if a != "--store" and (i == 0 or argv[i - 1] != "--store")]
    return history.main(["--store", store, "ingest", *rest])


COMMANDS = {"verify": lambda argv: archive.main(["verify", *argv]), "sign": lambda argv: archive.main(["sign", *argv]),
            "compare": compare.main, "ingest": ingest}


def main(argv: list[str] | None = None, program: str = "archive.py") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: {program} {USAGE}")
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
