"""config.yaml's keys are described in one place, the schema's descriptions; docs/config.md is made from them
(kbench.plan.config_docs) and must be what they make now."""
import yaml

from conftest import REPO
from kbench.plan import config_docs

REGENERATE = "PYTHONPATH=scripts .venv/bin/python -m kbench.plan.config_docs > docs/config.md"


def test_docs_config_md_is_what_the_schema_makes():
    assert (REPO / "docs" / "config.md").read_text() == config_docs.page(), f"docs/config.md is stale: {REGENERATE}"


def test_every_key_of_the_schema_has_a_description():
    schema = yaml.safe_load(config_docs.SCHEMA.read_text())
    found = config_docs.rows(schema, schema["$defs"]) + config_docs.shared_rows(schema)
    assert len(found) > 150
    assert [path for path, _, about in found if not about.strip()] == []


def test_every_key_of_the_shipped_config_is_on_the_page():
    """Each top-level key of config.yaml, and each key of its sections, by its path on the page."""
    page, config = config_docs.page(), yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in config.items():
        assert f"`{key}`" in page or f"## {key}\n" in page, key
        for inner in value if key in ("containers", "settings", "optimizers", "equivalence", "jax_numpy") else ():
            assert f"`{key}.{inner}`" in page, f"{key}.{inner}"
