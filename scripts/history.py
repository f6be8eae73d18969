#!/usr/bin/env python3
"""The history of runs (kbench.lifecycle.history): `history.py ingest RESULTS_OR_ARCHIVE`, `history.py query "SQL"`,
`history.py changes --suite S --profile P --out DIR --plots DIR`; `--store DIR` before the command (default
results/history)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kbench.lifecycle import history  # noqa: E402

if __name__ == "__main__":
    sys.exit(history.main())
