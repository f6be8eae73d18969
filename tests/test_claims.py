"""The published claims (kbench.claims, kbench.plan.claims, kbench.results.verdicts): one loader of every place the
config quotes a claim, one registry of their kinds held equal to the schema's, each kind reading tables the table
registry lists, one vocabulary of verdicts with the CPU rule once."""

import pytest
import yaml

from conftest import CONFIG, REPO, run_context
from kbench.claims import registry
from kbench.claims.evidence import Evidence
from kbench.plan import claims as quoted
from kbench.results import registry as tables_registry
from kbench.results import tables
from kbench.results.verdicts import FAILS, HOLDS, NOT_MEASURED, NOT_MEASURED_HERE, NOT_SHOWN, on_this_run

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())


def claim_kinds(node) -> set[str]:
    """The kinds the schema allows wherever it describes a claim (an object with a kind and a quote)."""
    found = set()
    if isinstance(node, dict):
        properties = node.get("properties") or {}
        if "kind" in properties and "quote" in properties:
            found |= set(properties["kind"]["enum"])
        for value in node.values():
            found |= claim_kinds(value)
    elif isinstance(node, list):
        for value in node:
            found |= claim_kinds(value)
    return found


def test_the_schemas_claim_kinds_are_the_registrys():
    assert claim_kinds(SCHEMA) == set(registry.KINDS)


def test_every_claim_the_config_quotes_is_loaded_with_its_place_and_a_registered_kind():
    loaded = quoted.load(CONFIG)
    assert [c["place"] for c in loaded] == (
        [f"published.findings[{i}]" for i in range(len(CONFIG["published"]["findings"]))]
        + [f"published.explanations[{i}]" for i in range(len(CONFIG["published"]["explanations"]))]
        + ["first_step.claim", "batch_study.claim", "jax_numpy.claim", "profile_defs.tuned.claim"])
    assert {registry.kind_of(c).name for c in loaded} == set(registry.KINDS)      # every kind has its claim
    assert quoted.at(CONFIG, "jax_numpy.claim")["speedup"] == CONFIG["jax_numpy"]["claim"]["speedup"]
    assert quoted.speedups(CONFIG) == tuple(CONFIG["precision_study"]["claims"])


def test_an_archived_config_without_a_place_loads_what_is_there():
    old = {k: v for k, v in CONFIG.items() if k not in ("first_step", "jax_numpy", "batch_study")}
    assert "first_step.claim" not in [c["place"] for c in quoted.load(old)]
    assert quoted.at(old, "jax_numpy.claim") is None and quoted.speedups({}) == ()


def test_a_claim_of_no_registered_kind_is_refused_naming_its_place():
    assert registry.quoted(CONFIG) == quoted.load(CONFIG)
    typo = {**CONFIG, "published": {**CONFIG["published"],
                                    "findings": [*CONFIG["published"]["findings"], {"kind": "typo", "quote": "q"}]}}
    with pytest.raises(ValueError, match=r"published.findings\[4\]: no claim kind 'typo'"):
        registry.quoted(typo)


def test_every_kind_reads_tables_the_table_registry_lists_and_nothing_else():
    for kind in registry.KINDS.values():
        assert kind.reads and set(kind.reads) <= tables_registry.OUTPUTS, kind.name
        assert kind.section in registry.SECTIONS, kind.name
    evidence = Evidence(run_context(".", "strict"))
    with pytest.raises(ValueError, match="no table of kbench.results.registry writes it"):
        evidence.table("some_file.csv")


@pytest.mark.parametrize("said, on_a_gpu, reading, shown", [
    (HOLDS, True, "rows", HOLDS),
    (FAILS, False, "rows", "not measured here (no GPU in this run; its CPU rows read: does not hold)"),
    (NOT_MEASURED_HERE, False, "breakdowns", NOT_MEASURED_HERE),          # nothing decided: nothing to mark
    (NOT_SHOWN, True, None, NOT_SHOWN),
    (NOT_SHOWN, False, None, "not shown (CPU: the pipeline's check)"),     # a study's row marks itself
    (NOT_MEASURED, False, None, NOT_MEASURED),
])
def test_the_cpu_rule_states_a_verdict_as_its_run_may(said, on_a_gpu, reading, shown):
    assert on_this_run(said, on_a_gpu, reading) == shown
