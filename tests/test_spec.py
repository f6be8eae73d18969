"""kbench.contract.spec.CellSpec: the plan's one typed record of a cell, a dict only at the JSON edge, read strictly there;
and on_gpu, the one meaning of "on a GPU" (every accelerator but the CPU), which no module restates."""
import ast
import json

import pytest
import yaml

from conftest import CONFIG, REPO, run_context
from kbench.contract import cell
from kbench.plan import matrix
from kbench.contract.spec import CellSpec, Dtypes, Steps, on_gpu

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


# ---------------------------------------------------------------- one meaning of "on a GPU"

@pytest.mark.parametrize("accelerator, expected", [("gpu", True), ("gpu-cuda12", True), ("cpu", False),
                                                   (None, False)])
def test_every_accelerator_but_the_cpu_is_a_gpu(accelerator, expected):
    assert on_gpu(accelerator) is expected
    if accelerator:
        assert run_context(".", "strict", accelerator=accelerator).on_gpu is expected
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert set(schema["properties"]["accelerator"]["enum"]) == {"gpu", "gpu-cuda12", "cpu"}
    assert a_spec().replace(accelerator=accelerator).on_gpu is expected


def accelerator_literals(source: str) -> list[str]:
    """Each comparison of something named accelerator with a string literal (a second meaning of "on a GPU")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any("accelerator" in ast.unparse(side) for side in sides) and any(
                    isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides):
                found.append(ast.unparse(node))
    return found


def test_no_module_compares_the_accelerator_with_a_literal():
    """kbench.contract.spec.on_gpu is the one meaning: `accelerator == "gpu"` read a gpu-cuda12 run as a CPU's."""
    assert accelerator_literals('on = config["accelerator"] == "gpu"') == ["config['accelerator'] == 'gpu'"]
    found = {str(path.relative_to(REPO)): accelerator_literals(path.read_text())
             for path in sorted((REPO / "scripts" / "kbench").rglob("*.py"))}
    assert not {path: hits for path, hits in found.items() if hits}
    rules = "\n".join(path.read_text() for path in sorted((REPO / "rules").glob("*.smk")))
    assert not [line for line in rules.splitlines() if "accelerator" in line and ('== "' in line or '!= "' in line)]
