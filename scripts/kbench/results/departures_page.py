"""The report's "Departures from the published benchmark" page: every departure of config.yaml `departures` with the
profiles that keep the anchor's behaviour, and the tuned profile's departures from strict with their sources."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.plan.departures import ANCHOR
from kbench.results.context import Records, RunContext, Table

OUTPUTS = ["departures.html", "departures.md", "departures.csv"]


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


def build(records: Records, run: RunContext) -> None:
    write(list(run.departures), run.profile_defs, run.tables_dir, list(run.tuning))


TABLE = Table(rule="departures", outputs=tuple(OUTPUTS), build=build, category="Departures",
              per_profile=False)
