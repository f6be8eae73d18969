"""config.yaml's keys as a page (docs/config.md), from the one place they are described: the descriptions of the JSON
schema (schemas/config.schema.yaml). Nothing is written by hand: a key's path, its type or allowed values, its default
where the schema has one, and its description, one table per top-level section.

    PYTHONPATH=scripts .venv/bin/python -m kbench.plan.config_docs > docs/config.md

tests/test_config_docs.py regenerates the page in process and fails when docs/config.md is stale.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from kbench.machine.host import REPO

SCHEMA = REPO / "schemas" / "config.schema.yaml"
# What a map's key stands for, by the map's path (any other map: <name>)
PLACEHOLDERS = {"suites": "suite", "framework_defs": "framework", "model_defs": "model", "profile_defs": "profile",
                "model_defs.<model>.sizes": "size", "jax_numpy.workloads": "workload", "jax_numpy.suites": "suite"}
HEADER = """# config.yaml, key by key

Generated from the descriptions in `schemas/config.schema.yaml` (the one place they are written) by
`PYTHONPATH=scripts .venv/bin/python -m kbench.plan.config_docs > docs/config.md`; edit the schema, not this page
(tests/test_config_docs.py fails when it is stale). A top-level key can be set for one run with `--config`, e.g.
`snakemake --cores all --config suite=tiny accelerator=cpu models=[bert]`. Back to the [README](../README.md).
"""


def _refs(node: dict) -> list[str]:
    """The $defs a node takes its keys from, directly or through allOf."""
    return [part["$ref"].rsplit("/", 1)[-1] for part in [node, *node.get("allOf", [])] if "$ref" in part]


def resolve(node: dict, defs: dict, refs: bool = True) -> dict:
    """The node with its allOf merged in (its own keys win; properties and required are joined), and with refs, its
    $refs too."""
    merged: dict = {}
    parts = [resolve(defs[name], defs) for name in _refs(node)] if refs else []
    parts += [resolve(part, defs, refs) for part in node.get("allOf", []) if "$ref" not in part]
    for part in [*parts, {k: v for k, v in node.items() if k not in ("$ref", "allOf")}]:
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged[key] = value
    return merged


def _value(value) -> str:
    return f"`{json.dumps(value) if not isinstance(value, str) else value}`"


def kind(node: dict, defs: dict) -> str:
    """Type or allowed values, in a few words."""
    node = resolve(node, defs)
    if "enum" in node:
        return "one of " + ", ".join(_value(v) for v in node["enum"])
    if "anyOf" in node:
        return " or ".join(kind(option, defs) for option in node["anyOf"])
    types = node.get("type", "any")
    text = " or ".join(types) if isinstance(types, list) else types
    if text == "array":
        text = f"list of {kind(node.get('items', {}), defs)}" + (", non-empty" if node.get("minItems") else "")
    elif text == "object" and "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        keys = node.get("propertyNames", {}).get("enum")
        text = f"map: {' / '.join(keys) if keys else 'name'} -> {kind(node['additionalProperties'], defs)}"
    for word, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
        if word in node:
            text += f" {sign} {node[word]}"
    if "pattern" in node:
        text += f" matching `{node['pattern']}`"
    return text


def rows(node: dict, defs: dict, path: str = "") -> list[tuple[str, str, str]]:
    """(key path, type, description) of every key below `node`, depth first; a key that takes its keys or values from
    a $def names it (the definitions section has its own rows)."""
    node, found = resolve(node, defs), []
    for key, child in node.get("properties", {}).items():
        here, refs = f"{path}.{key}" if path else key, _refs(child) or _refs(child.get("items", {}))
        text = kind(child, defs) + ("" if key in node.get("required", []) else ", optional")
        text += f", default {_value(child['default'])}" if "default" in child else ""
        text += "".join(f", see `{name}` in Definitions" for name in refs)
        found.append((here, text, child.get("description", "")))
        found += rows_below(resolve(child, defs, refs=False), defs, here)
    return found


def rows_below(node: dict, defs: dict, path: str) -> list[tuple[str, str, str]]:
    """The keys inside a mapping, a map's entries or a list's items (those of a $def aside)."""
    if "properties" in node:
        return rows(node, defs, path)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return rows_below(resolve(node["items"], defs, refs=False), defs, f"{path}[]")
    entry = node.get("additionalProperties")
    if isinstance(entry, dict) and "properties" in resolve(entry, defs):
        return rows(entry, defs, f"{path}.<{PLACEHOLDERS.get(path, 'name')}>")
    return []


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def table(found: list[tuple[str, str, str]]) -> str:
    lines = ["| key | type | description |", "|---|---|---|"]
    return "\n".join(lines + [f"| `{path}` | {_cell(text)} | {_cell(about)} |" for path, text, about in found])


def shared_rows(schema: dict) -> list[tuple[str, str, str]]:
    """The rows of the $defs: values and keys that several keys share."""
    defs, found = schema.get("$defs", {}), []
    for name, node in defs.items():
        found += [(name, kind(node, defs), node.get("description", "")), *rows_below(resolve(node, defs), defs, name)]
    return found


def render(schema: dict) -> str:
    """The page: the top-level keys without keys below them in one table, then a section per top-level key with,
    then the $defs that keys share."""
    top = rows(schema, schema.get("$defs", {}))
    nested = [path for path, _, _ in top if "." not in path and "[" not in path
              and any(other.startswith((path + ".", path + "[")) for other, _, _ in top)]
    parts = [HEADER, _cell(schema.get("description", "")), "", "## Top-level keys", "",
             table([row for row in top if row[0].split(".")[0].split("[")[0] not in nested])]
    for name in nested:
        own = next(row for row in top if row[0] == name)
        parts += ["", f"## {name}", "", f"{_cell(own[2])} ({own[1]})", "",
                  table([row for row in top if row[0].startswith((name + ".", name + "["))])]
    parts += ["", "## Definitions", "", "Values and keys that several keys share.", "", table(shared_rows(schema))]
    return "\n".join(parts) + "\n"


def page(path: Path = SCHEMA) -> str:
    return render(yaml.safe_load(Path(path).read_text()))


if __name__ == "__main__":
    sys.stdout.write(page())
