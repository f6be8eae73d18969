"""Bad config gets one error that names the key and what is allowed, before any job runs."""
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from conftest import REPO, snakemake
from kbench import matrix

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")


def check(config):
    validate(config, SCHEMA)
    matrix.check_references(config)


def test_shipped_config_is_valid(config):
    check(config)


@pytest.mark.parametrize("mutate, names", [
    (lambda c: c.update(bogus=1), ["'bogus' was unexpected"]),
    (lambda c: c.update(suite="huge"), ["config key suite: 'huge' is not defined; allowed: paper, smoke, tiny"]),
    (lambda c: c.update(seed="zero"), ["instance['seed']", "'integer'"]),
    (lambda c: c["frameworks"].append("keras4"), ["frameworks[6] (see framework_defs): 'keras4' is not defined",
                                                   "allowed: keras2, keras3-jax"]),
    (lambda c: c["models"].append("llama"), ["models[6] (see model_defs): 'llama' is not defined",
                                             "resnet50, sam, stable_diffusion"]),
    (lambda c: c["precisions"].append("float8"), ["precisions[4]: 'float8' is not defined; allowed: bfloat16, float32, "
                                                  "mixed_bfloat16, mixed_float16"]),
    (lambda c: c["model_defs"]["resnet50"].update(precisions=["fp16"]),
     ["model_defs.resnet50.precisions[0]: 'fp16' is not defined", "mixed_float16"]),
    (lambda c: c["framework_defs"]["keras3-jax"].update(adapter="keras4"),
     ["framework_defs.keras3-jax.adapter: 'keras4' is not defined; allowed: keras2, keras3, native_torch, synthetic"]),
    (lambda c: c["framework_defs"]["keras3-jax"].update(stack="keras3-jux"),
     ["framework_defs.keras3-jax.stack: 'keras3-jux' has no lock envs/keras3-jux.gpu.lock", "keras3-jax, keras3-tensorflow"]),
    (lambda c: c["not_applicable"].append({"framework": "keras2", "model": "bert", "task": "generate", "reason": "x"}),
     ["not_applicable[2].task: 'generate' matches no task of bert; allowed: fit, predict"]),
    (lambda c: c["model_defs"]["resnet50"]["tasks"]["fit"].pop("learning_rate"),
     ["['resnet50']['tasks']['fit']", "'learning_rate' is a required property"]),
    (lambda c: c["suites"]["paper"]["steps"].update(timed=0), ["['steps']['timed']", "minimum of 1"]),
    (lambda c: c["settings"].update(warmup=0), ["['settings']['warmup']", "minimum of 1"]),
    (lambda c: c["settings"].update(tf32="sometimes"), ["['settings']['tf32']", "'sometimes' is not one of"]),
    (lambda c: c["departures"][0]["applies"][0]["settings"].update(tf32="maybe"), ["'maybe' is not one of"]),
    (lambda c: c["profiles"].append("fair"), ["profiles[1] (see profile_defs): 'fair' is not defined; allowed: anchor, "
                                              "strict"]),
    (lambda c: c["departures"][1].update(kept_by=["anchr"]), ["departures[warmup].kept_by: 'anchr' is not defined"]),
    (lambda c: c["departures"][2]["applies"][0].update(framework="keras-2"),
     ["departures[keras2-without-xla].applies[0].framework: 'keras-2' matches nothing"]),
    (lambda c: c["departures"][-1].pop("not_reproducible"), ["'not_reproducible' is a required property"]),
    (lambda c: c["model_defs"]["bert"]["tasks"]["fit"].update(batch_sizes=[-4]),
     ["['bert']['tasks']['fit']['batch_sizes'][0]", "minimum of 1"]),
    (lambda c: c["model_defs"]["gemma"]["tasks"].update(train={"batch_sizes": [1]}), ["'train'", "generate"]),
    (lambda c: c["model_defs"]["sam"]["sizes"]["tiny"]["arch"].update(image_size=0), ["['image_size']"]),
])
def test_schema_error_names_key_and_allowed(config, mutate, names):
    mutate(config)
    with pytest.raises((WorkflowError, matrix.ConfigError)) as error:
        check(config)
    for name in names:
        assert name in str(error.value)


def test_undefined_framework_reference_is_named(config):
    del config["framework_defs"]["keras3-torch"]
    with pytest.raises(matrix.ConfigError, match=r"frameworks\[5\].*'keras3-torch' is not defined; allowed: keras2, keras3-jax"):
        check(config)


def test_model_without_the_suite_size_is_named(config):
    del config["model_defs"]["sam"]["sizes"]["tiny"]
    config["suite"] = "tiny"
    with pytest.raises(matrix.ConfigError, match=r"model_defs.sam.sizes .*'tiny' is not defined; allowed: paper"):
        check(config)


def test_not_applicable_rule_with_unknown_model(config):
    config["not_applicable"] = [{"framework": "keras3-jax", "model": "llama", "task": "*", "reason": "x"}]
    with pytest.raises(matrix.ConfigError, match=r"not_applicable\[0\].model: 'llama'"):
        check(config)


def test_precision_claim_for_a_task_the_model_lacks(config):
    config["precision_study"]["claims"].append({"model": "resnet50", "task": "predict", "speedup": 2, "quote": "x"})
    with pytest.raises(matrix.ConfigError, match=r"precision_study.claims\[2\].task: 'predict' is not defined; "
                                                  r"allowed: fit"):
        check(config)


def test_snakemake_refuses_bad_config_before_any_job(tmp_path):
    bad = yaml.safe_load((REPO / "config.yaml").read_text())
    bad["suites"]["paper"]["steps"]["timed"] = 0
    bad["results_dir"] = str(tmp_path / "results")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = snakemake("-n", "--cores", "1", "--configfile", str(tmp_path / "bad.yaml"))
    assert proc.returncode != 0
    assert "0 is less than the minimum of 1" in proc.stdout
    assert "instance['suites']['paper']['steps']['timed']" in proc.stdout
    assert not (tmp_path / "results").exists()
