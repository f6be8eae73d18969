"""Every departure from the published benchmark's code (config.yaml `departures`), as data: the report's
"Departures from the published benchmark" page, and which ones a profile that reproduces the anchor cannot keep.

    python -m kbench.plan.departures --departures JSON --profiles JSON --out DIR     (rule departures)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from kbench.plan import matrix

OUTPUTS = ["departures.html", "departures.md", "departures.csv"]
ANCHOR = "keras-benchmarks v0.0.5 (github haifeng-jin/keras-benchmarks, tag v0.0.5, commit 4f1d20e)"


def unreproduced(config: dict, profile: str) -> list[dict]:
    """The departures no profile can keep, for a profile that claims to reproduce the anchor (its tables name them
    per row); none for a profile that does not make that claim."""
    if not config["profile_defs"][profile].get("reproduces_anchor"):
        return []
    return [{"id": d["id"], "applies": d.get("applies", [])} for d in config["departures"] if not d["kept_by"]]


def applying(departures: list[dict], model: str, task: str, frameworks: list[str]) -> list[str]:
    """The ids of the departures that apply to a table row (a model/task and the frameworks of its columns)."""
    def applies(rule) -> bool:
        return (matrix.matches(rule.get("model"), model) and matrix.matches(rule.get("task"), task)
                and any(matrix.matches(rule.get("framework"), f) for f in frameworks))
    return [d["id"] for d in departures if any(applies(rule) for rule in d["applies"])]


def table(departures: list[dict], profiles: dict) -> pd.DataFrame:
    rows = []
    for d in departures:
        kept = ", ".join(d["kept_by"]) if d["kept_by"] else f"none: {d['not_reproducible']}"
        cells = "; ".join(", ".join(f"{k} {r[k]}" for k in ("framework", "model", "task") if k in r)
                          + (f" -> {r['settings']}" if r.get("settings") else "")
                          for r in d.get("applies", [])) or "-"
        rows.append({"id": d["id"], "what": d["what"], "the anchor's code": d["anchor"],
                     "this project (strict)": d["strict"], "why": d["why"], "profiles keeping the anchor's": kept,
                     "cells": cells})
    return pd.DataFrame(rows)


def tuning_table(tuning: list[dict]) -> pd.DataFrame:
    """The tuned profile's settings: each departure from strict, the cells it applies to and its source."""
    rows = [{"id": t["id"], "what (tuned; strict in brackets)": t["what"],
             "cells": "; ".join(", ".join(f"{k} {r[k]}" for k in ("framework", "model", "task") if k in r)
                                + f" -> {r['settings']}" for r in t["applies"]),
             "source": t["source"]} for t in tuning]
    return pd.DataFrame(rows, columns=["id", "what (tuned; strict in brackets)", "cells", "source"])


def write(departures: list[dict], profiles: dict, out: Path, tuning: list[dict] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    frame = table(departures, profiles)
    tuned = tuning_table(list(tuning))
    tuned_md = ("\n## The tuned profile's departures from strict\n\nEach framework's documented performance "
                "settings, with the page that recommends it.\n\n" + tuned.to_markdown(index=False) + "\n"
                if len(tuned) else "")
    tuned_html = ("<h2>The tuned profile's departures from strict</h2>\n<p>Each framework's documented performance "
                  "settings, with the page that recommends it.</p>\n" + tuned.to_html(index=False, border=0)
                  if len(tuned) else "")
    frame.to_csv(out / "departures.csv", index=False)
    about = "".join(f"- **{name}**: {p['about']}\n" for name, p in profiles.items())
    (out / "departures.md").write_text(f"# Departures from the published benchmark\n\nThe published benchmark: "
                                       f"{ANCHOR}.\n\nProfiles:\n{about}\n" + frame.to_markdown(index=False) + "\n" + tuned_md)
    profile_list = "".join(f"<li><b>{name}</b>: {p['about']}</li>" for name, p in profiles.items())
    (out / "departures.html").write_text(
        "<html><body><h2>Departures from the published benchmark</h2>\n"
        f"<p>The published benchmark: {ANCHOR}. Each row is one way this project's cells differ from its code; the "
        f"profiles that keep the anchor's behaviour set the cells listed.</p><ul>{profile_list}</ul>\n"
        + frame.to_html(index=False, border=0) + "\n" + tuned_html + "\n</body></html>\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--departures", required=True, type=json.loads)
    parser.add_argument("--profiles", required=True, type=json.loads)
    parser.add_argument("--tuning", default="[]", type=json.loads, help="config `tuning` (the tuned profile's)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    write(args.departures, args.profiles, args.out, args.tuning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
