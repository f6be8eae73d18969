"""Every bad config gets one short message before any job: the file and line or the key path, the bad value, what is
allowed. The table below is the list of bad inputs tried, each with the message it must get."""

import pytest

from conftest import CONFIG, REPO, copy_from_repo, snakemake
from dag import plan
from kbench.plan import config_check

SCHEMA = REPO / "schemas" / "config.schema.yaml"


def check(config):
    config_check.check(config, SCHEMA)


def test_shipped_config_is_valid(config):
    check(config)


def lock_with(tmp_path, edit):
    """A copy of the repo's envs/ whose keras3-jax cpu lock is edited, for the checks that read locks."""
    copy_from_repo(tmp_path, "envs", "scripts")
    lock = tmp_path / "envs" / "keras3-jax.cpu.lock"
    lock.write_text(edit(lock.read_text()))
    return tmp_path


# (what is wrong, the change to a valid config, a part of the one message it must get)
BAD = [
    # shape: the schema, reworded to one line
    ("unknown top-level key", lambda c: c.update(bogus=1), "config key bogus is not a known key; allowed: accelerator,"),
    ("unknown nested key", lambda c: c["containers"].update(size=1), "config key containers.size is not a known key;"),
    ("wrong type", lambda c: c.update(seed="zero"), "config key seed: 'zero': not of type 'integer'"),
    ("accelerator", lambda c: c.update(accelerator="tpu"),
     "config key accelerator: 'tpu' is not allowed; allowed: gpu, gpu-cuda12, cpu"),
    ("runtime", lambda c: c.update(runtime="lxc"), "config key runtime: 'lxc' is not allowed; allowed: auto, host,"),
    ("timed steps 0", lambda c: c["suites"]["paper"]["steps"].update(timed=0),
     "config key suites.paper.steps.timed: 0: less than the minimum of 1"),
    ("warm-up 0", lambda c: c["settings"].update(warmup=0), "config key settings.warmup: 0: less than the minimum"),
    ("tf32 value", lambda c: c["settings"].update(tf32="sometimes"),
     "config key settings.tf32: 'sometimes' is not allowed; allowed: off, on, library-default"),
    ("negative batch", lambda c: c["model_defs"]["bert"]["tasks"]["fit"].update(batch_sizes=[-4]),
     "config key model_defs.bert.tasks.fit.batch_sizes.0: -4: less than the minimum of 1"),
    ("unknown task", lambda c: c["model_defs"]["gemma"]["tasks"].update(train={"batch_sizes": [1]}),
     "config key model_defs.gemma.tasks.train is not a known key; allowed: fit, generate, predict"),
    ("fit without learning rate", lambda c: c["model_defs"]["resnet50"]["tasks"]["fit"].pop("learning_rate"),
     "config key model_defs.resnet50.tasks.fit: 'learning_rate' is a required property"),
    ("zero arch width", lambda c: c["model_defs"]["sam"]["sizes"]["tiny"]["arch"].update(image_size=0),
     "config key model_defs.sam.sizes.tiny.arch.image_size"),
    ("repeats 0", lambda c: c.update(repeats=0), "config key repeats: 0: less than the minimum of 1"),
    ("ship_images value", lambda c: c.update(ship_images="maybe"),
     "config key ship_images: 'maybe' is not allowed; allowed: auto, True, False"),
    ("departure setting", lambda c: c["departures"][0]["applies"][0]["settings"].update(tf32="maybe"),
     "'maybe' is not allowed; allowed: off, on, library-default"),
    ("departure kept by none without a reason", lambda c: c["departures"][-1].pop("not_reproducible"),
     "'not_reproducible' is a required property"),
    # names: defined in one section, used in another
    ("unknown suite", lambda c: c.update(suite="huge"), "config key suite: 'huge' is not defined; allowed: paper, smoke, tiny"),
    ("unknown framework", lambda c: c["frameworks"].append("keras4"),
     "config key frameworks[8] (see framework_defs): 'keras4' is not defined; allowed: keras2, keras3-jax"),
    ("unknown model", lambda c: c["models"].append("no-such-model"),
     "config key models[7] (see model_defs): 'no-such-model' is not defined; allowed: bert, gemma, llama, mistral, "
     "resnet50"),
    ("unknown precision", lambda c: c["precisions"].append("float8"),
     "config key precisions[5]: 'float8' is not defined; allowed: bfloat16, float32, mixed_bfloat16, mixed_float16, "
     "tf32"),
    ("model precision", lambda c: c["model_defs"]["resnet50"].update(precisions=["fp16"]),
     "config key model_defs.resnet50.precisions[0]: 'fp16' is not defined"),
    ("unknown adapter", lambda c: c["framework_defs"]["keras3-jax"].update(adapter="keras4"),
     "config key framework_defs.keras3-jax.adapter: 'keras4' is not defined; allowed: keras2, keras3, native_torch, "
     "paddle, synthetic"),
    ("stack without a lock", lambda c: c["framework_defs"]["keras3-jax"].update(stack="keras3-jux"),
     "config key framework_defs.keras3-jax.stack: 'keras3-jux' has no lock envs/keras3-jux.gpu.lock"),
    ("n/a for a task the model lacks", lambda c: c["not_applicable"].append(
        {"framework": "keras2", "model": "bert", "task": "generate", "reason": "x"}),
     f"config key not_applicable[{len(CONFIG['not_applicable'])}].task: 'generate' matches no task of bert; "
     "allowed: fit, predict"),
    ("n/a for an unknown model", lambda c: c["not_applicable"].append(
        {"framework": "keras3-jax", "model": "no-such-model", "task": "*", "reason": "x"}),
     f"config key not_applicable[{len(CONFIG['not_applicable'])}].model: 'no-such-model' matches nothing; allowed: bert, "
     "gemma"),
    ("equivalence for an unknown model", lambda c: c["equivalence"].update(models=["bert", "no-such-model"]),
     "config key equivalence.models[1]: 'no-such-model' is not defined"),
    ("n/a for a precision the model lacks", lambda c: c["not_applicable"].append(
        {"framework": "keras3-jax", "model": "resnet50", "task": "fit", "precision": "bfloat16", "reason": "x"}),
     f"config key not_applicable[{len(CONFIG['not_applicable'])}].precision: 'bfloat16' matches no precision of "
     "resnet50; allowed: float32, mixed_bfloat16, mixed_float16, tf32"),
    ("claim for a task the model lacks", lambda c: c["precision_study"]["claims"].append(
        {"model": "resnet50", "task": "predict", "speedup": 2, "quote": "x"}),
     "config key precision_study.claims[2].task: 'predict' is not defined; allowed: fit"),
    ("unknown profile", lambda c: c["profiles"].append("fair"),
     "config key profiles[1] (see profile_defs): 'fair' is not defined; allowed: anchor, strict"),
    ("departure kept by an unknown profile", lambda c: c["departures"][1].update(kept_by=["anchr"]),
     "config key departures[warmup].kept_by: 'anchr' is not defined"),
    ("departure for no framework", lambda c: c["departures"][2]["applies"][0].update(framework="keras-2"),
     "config key departures[keras2-without-xla].applies[0].framework: 'keras-2' matches nothing"),
    ("model without the suite's size", lambda c: (c["model_defs"]["sam"]["sizes"].pop("tiny"), c.update(suite="tiny")),
     "config key model_defs.sam.sizes (suite 'tiny'): 'tiny' is not defined; allowed: paper, smoke"),
    # paths
    ("results_dir with braces", lambda c: c.update(results_dir="results/{run}"),
     "config key results_dir: 'results/{run}' has braces, which Snakemake reads as wildcards"),
    ("results_dir is a file", lambda c: c.update(results_dir=str(REPO / "config.yaml")),
     "is a file; allowed: a folder (made if missing)"),
    ("results_dir under a file", lambda c: c.update(results_dir=str(REPO / "config.yaml" / "results")),
     "cannot be made"),
    # combinations
    ("LoRA on a task without LoRA", lambda c: c["model_defs"]["bert"]["tasks"]["fit"].update(lora_rank=4),
     "config key model_defs.bert.tasks.fit.lora_rank: LoRA applies to the fit of a causal LM"),
    ("LoRA on generate", lambda c: c["model_defs"]["gemma"]["tasks"]["generate"].update(lora_rank=4),
     "config key model_defs.gemma.tasks.generate.lora_rank: LoRA applies to the fit of a causal LM"),
    ("a selection that runs no cell", lambda c: c.update(models=["sam"], precisions=["bfloat16"]),
     "the selection runs no cell: models ['sam'] at precisions ['bfloat16'] (each model runs the selected "
     "precisions it lists: sam: float32)"),
    # time to the first step: the payback's eager twin
    ("an eager twin that is no column", lambda c: c["first_step"]["eager_twin"].update({"native-torch-compiled": "x"}),
     "config key first_step.eager_twin.native-torch-compiled: 'x' is not a column"),
    ("an eager twin that compiles", lambda c: c["first_step"]["eager_twin"].update({"keras3-jax": "keras3-torch"}),
     "config key first_step.eager_twin.keras3-jax: 'keras3-torch' is compiled"),
    ("a compiled key that does not compile",
     lambda c: c["first_step"]["eager_twin"].update({"native-torch-eager": "paddle-dygraph"}),
     "config key first_step.eager_twin.native-torch-eager: 'native-torch-eager' is not compiled"),
    ("a steady band of 0", lambda c: c["first_step"].update(steady_band=0), "first_step.steady_band"),
]


@pytest.mark.parametrize("what, mutate, message", BAD, ids=[b[0] for b in BAD])
def test_every_bad_config_gets_one_line_naming_key_value_and_what_is_allowed(config, what, mutate, message):
    mutate(config)
    with pytest.raises(config_check.ConfigError) as error:
        check(config)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.replace("--hash=sha256:", "--hash=sha256:zz", 1), "is not --hash=sha256:<64 hex digits>"),
    (lambda text: "\n".join(line for line in text.splitlines() if "--hash" not in line), "has no --hash"),
    (lambda text: text.replace("keras==3.15.1", "keras>=3.15", 1), "is not a pinned requirement (name==version)"),
])
def test_an_edited_lock_is_named_with_its_line(config, tmp_path, edit, message):
    repo = lock_with(tmp_path, edit)
    config["accelerator"] = "cpu"
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(config, SCHEMA, repo)
    assert "envs/keras3-jax.cpu.lock, line " in str(error.value) and message in str(error.value)
    assert "scripts/lock-envs keras3-jax.cpu" in str(error.value)


@pytest.mark.parametrize("text, message", [
    ("suite: paper\n  accelerator: cpu\n", "config.yaml, line 2, column 14: not valid YAML: mapping values"),
    ("suite: paper\nmodels: [bert, sam\n", "config.yaml, line 3, column 1: not valid YAML"),
    ("suite: paper\n\tmodels: [bert]\n", "config.yaml, line 2: a tab in the indentation"),
    ("", "config.yaml: empty"),
    ("- a list\n", "config.yaml: a list at the top"),
])
def test_yaml_errors_name_the_file_and_line(tmp_path, text, message):
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(config_check.ConfigError) as error:
        config_check.load_yaml(tmp_path / "config.yaml")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_workflow_copy_leaves_the_bytecode_caches_behind(tmp_path):
    """Another worker may be renaming a .pyc into scripts/ while a copy lists it: the copy takes no __pycache__."""
    cache = tmp_path / "repo" / "scripts" / "kbench" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "spec.cpython-311.pyc").write_bytes(b"")
    (cache.parent / "spec.py").write_text("")
    copy = copy_from_repo(tmp_path / "copy", "scripts", source=tmp_path / "repo")
    assert (copy / "scripts" / "kbench" / "spec.py").is_file()
    assert not any((copy / "scripts").rglob("__pycache__"))


def workflow_copy(tmp_path):
    return copy_from_repo(tmp_path, "Snakefile", "config.yaml", "rules", "schemas", "envs", "scripts", "containers",
                          "report", "profiles")


BROKEN = [
    (lambda text: text.replace("suite: paper", "suite: [paper", 1), "config error: config.yaml, line "),
    (lambda text: "", "config error: config.yaml: empty"),
    (lambda text: text + "bogus: 1\n", "config error: config key bogus is not a known key; allowed:"),
    (lambda text: text.replace("results_dir: results", "results_dir: results/{x}", 1),
     "config error: config key results_dir: 'results/{x}' has braces"),
]


@pytest.mark.parametrize("break_config, message", BROKEN)
def test_a_plan_stops_at_one_line_and_starts_nothing(tmp_path, break_config, message):
    """The real workflow, a broken config.yaml, a dry run planned in process: the Snakefile exits with one line."""
    copy = workflow_copy(tmp_path)
    (copy / "config.yaml").write_text(break_config((REPO / "config.yaml").read_text()))
    found = plan("-n", "--cores", "1", cwd=copy)
    assert not found.ok and found.error.startswith(message) and "\n" not in found.error, found.error
    assert not found.jobs and not (copy / "results" / "cells").exists()


@pytest.mark.workflow
def test_snakemake_prints_one_line_and_starts_nothing(tmp_path):
    """As a user meets it (the CLI smoke of the plans above): one line, no traceback, no schema."""
    break_config, message = BROKEN[2]
    copy = workflow_copy(tmp_path)
    (copy / "config.yaml").write_text(break_config((REPO / "config.yaml").read_text()))
    proc = snakemake("-n", "--cores", "1", cwd=copy)
    assert proc.returncode != 0 and message in proc.stdout
    assert "Traceback" not in proc.stdout and "$schema" not in proc.stdout and len(proc.stdout.splitlines()) < 8
    assert not (copy / "results" / "cells").exists()
