"""kbench.contract.spec.CellSpec: the plan's one typed record of a cell, a dict only at the JSON edge, read strictly there."""
import json

import pytest

from conftest import CONFIG
from kbench.contract import cell
from kbench.plan import matrix
from kbench.contract.spec import CellSpec, Dtypes, Steps

pytestmark = pytest.mark.unit


def a_spec() -> CellSpec:
    return matrix.spec(CONFIG, "tiny", "bert", "fit", 32, "float32", "keras3-jax")


def test_the_plan_makes_a_typed_spec_and_its_json_form_reads_back_equal():
    spec = a_spec()
    assert isinstance(spec, CellSpec) and isinstance(spec.dtypes, Dtypes) and isinstance(spec.steps, Steps)
    assert spec.batch_size == 32 and spec.adapter == "keras3" and spec.dtypes.compute == "float32"
    assert CellSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert cell.spec_digest(spec) == cell.spec_digest(spec.to_dict())


def test_a_spec_with_an_unknown_or_a_missing_key_is_refused_naming_it():
    data = a_spec().to_dict()
    with pytest.raises(ValueError, match="unknown keys batchsize"):
        CellSpec.from_dict({**data, "batchsize": 8})
    del data["seed"]
    with pytest.raises(ValueError, match="missing keys seed"):
        CellSpec.from_dict(data)


def test_a_spec_is_frozen_and_changed_only_by_replace():
    spec = a_spec()
    with pytest.raises(AttributeError):
        spec.batch_size = 8
    assert spec.replace(batch_size=8).batch_size == 8 and spec.batch_size == 32


def test_the_equivalence_variant_is_optional_and_read_as_aligned():
    spec = a_spec()
    assert "equivalence" not in spec.to_dict() and not spec.aligned
    aligned = spec.replace(equivalence={"aligned": True})
    assert aligned.aligned and CellSpec.from_dict(aligned.to_dict()) == aligned
