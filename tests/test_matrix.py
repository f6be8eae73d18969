import copy
import dataclasses

import pytest

from kbench.contract import precision
from kbench.plan import matrix

from conftest import CONFIG


MIXED = ("float32", "tf32", "mixed_float16", "mixed_bfloat16")


ANCHOR_MODELS = ("bert", "gemma", "mistral", "sam", "stable_diffusion", "resnet50")


def test_paper_suite_has_every_anchor_row_and_the_precision_study_for_every_framework(config):
    """The published benchmark's rows and the precision study's, exactly (a model added beyond them adds its own)."""
    cells = matrix.cells(config)
    rows = {(c.model, c.task, c.batch_size, c.precision) for c in cells}
    assert {row for row in rows if row[0] in ANCHOR_MODELS} == {*(("bert", "fit", 32, p) for p in MIXED), *(("bert", "predict", 256, p) for p in MIXED),
                    ("gemma", "fit", 8, "bfloat16"), ("gemma", "generate", 32, "bfloat16"),
                    ("gemma", "generate", 1, "bfloat16"),
                    ("mistral", "fit", 8, "bfloat16"), ("mistral", "generate", 32, "bfloat16"),
                    ("mistral", "generate", 1, "bfloat16"),
                    ("sam", "fit", 1, "float32"), ("sam", "predict", 4, "float32"),
                    ("stable_diffusion", "fit", 8, "float32"), ("stable_diffusion", "predict", 13, "float32"),
                    *(("resnet50", "fit", 128, p) for p in MIXED)}
    assert len(cells) == len(rows) * len(config["frameworks"])
    assert [c.framework for c in cells[:8]] == ["native-torch-eager", "native-torch-compiled", "keras2",
                                                "keras3-tensorflow", "keras3-jax", "keras3-torch", "paddle-dygraph",
                                                "paddle-static"]


def test_not_applicable_cells_are_the_keras2_llms_and_the_paddle_llms_and_sam(config):
    """Native compiled LoRA fits run (the anchor compiled them); Keras 2 has no Gemma and no bf16 Mistral or Llama 3;
    the Paddle columns have no Gemma, Mistral or SAM class in their packages and no bf16 Llama (no other
    architecture stands in)."""
    na = {(c.model, c.task, c.batch_size, c.framework) for c in matrix.cells(config) if c.not_applicable}
    llm = {(m, t, b) for m in ("gemma", "mistral", "llama") for t, b in (("fit", 8), ("generate", 32), ("generate", 1))}
    paddle = ("paddle-dygraph", "paddle-static")
    assert na == {(*row, "keras2") for row in llm} | {(*row, f) for row in llm | {("sam", "fit", 1),
                                                                                  ("sam", "predict", 4)}
                                                      for f in paddle}
    assert {c.not_applicable for c in matrix.cells(config) if c.framework == "native-torch-compiled"} == {None}


def test_paddle_na_reasons_name_the_missing_class_in_the_locked_packages(config):
    """The reasons say what is missing where (never that another architecture would do)."""
    reasons = {(c.model, c.framework): c.not_applicable for c in matrix.cells(config)
               if c.framework.startswith("paddle-")}
    for framework in ("paddle-dygraph", "paddle-static"):
        assert "no Gemma (v1) class" in reasons["gemma", framework]
        assert "no Mistral class" in reasons["mistral", framework]
        assert "paddlenlp 2.8.1" in reasons["gemma", framework] and "paddlenlp 2.8.1" in reasons["mistral", framework]
        assert "no PaddlePaddle Segment Anything on PyPI" in reasons["sam", framework]
        assert all(reasons[m, framework] is None for m in ("bert", "stable_diffusion", "resnet50"))
        assert not any("llama" in (reasons[m, framework] or "").lower() for m in ("gemma", "mistral"))
        assert "paddlenlp 2.8.1" in reasons["llama", framework] and "bfloat16" in reasons["llama", framework]


def test_paddle_columns_share_a_stack_and_only_the_static_one_compiles(config):
    spec = lambda framework: matrix.spec(config, "tiny", "bert", "fit", 32, "float32", framework)   # noqa: E731
    assert matrix.stack_of(config, "paddle-dygraph") == matrix.stack_of(config, "paddle-static") == "paddle"
    assert spec("paddle-dygraph").settings["jit_compile"] is False
    assert spec("paddle-static").settings["jit_compile"] is True
    assert "compile_site" not in spec("paddle-static").settings       # torch.compile's alone


def test_selection_narrows_rows_and_columns(config):
    config.update(models=["bert"], frameworks=["keras3-jax"], precisions=["mixed_bfloat16", "float32"], suite="tiny",
                  profiles=["strict", "anchor"])
    assert [c.cell_id for c in matrix.cells(config)] == [      # profiles in config order, the model's precisions
        f"tiny/{profile}/bert/{task}/{precision}/keras3-jax" for profile in ("strict", "anchor")
        for task in ("fit/bs32", "predict/bs256") for precision in ("float32", "mixed_bfloat16")]


def test_a_model_without_a_selected_precision_has_no_cells(config):
    config.update(precisions=["mixed_float16"])
    assert {c.model for c in matrix.cells(config)} == {"bert", "resnet50"}


def test_not_applicable_cells_are_listed_with_their_reason(config):
    config["not_applicable"] = [{"framework": "keras3-torch", "model": "gemma", "task": "gen*", "reason": "no"}]
    na = [c for c in matrix.cells(config) if c.not_applicable]
    assert [(c.model, c.task, c.batch_size, c.framework, c.not_applicable) for c in na] == [
        ("gemma", "generate", 32, "keras3-torch", "no"), ("gemma", "generate", 1, "keras3-torch", "no")]


def test_a_not_applicable_rule_with_a_precision_takes_that_precision_only(config):
    config["not_applicable"] = [{"framework": "keras3-torch", "model": "resnet50", "task": "fit",
                                 "precision": "mixed_float16", "reason": "no"}]
    found = {c.precision: c.not_applicable for c in matrix.cells(config)
             if c.model == "resnet50" and c.framework == "keras3-torch"}
    assert found == {"float32": None, "tf32": None, "mixed_float16": "no", "mixed_bfloat16": None}


@pytest.mark.parametrize("accelerator", ["gpu", "gpu-cuda12"])
def test_a_keras3_jax_gpu_cell_may_take_the_whole_device_as_the_other_columns_may(config, accelerator):
    """With preallocation off XLA's allocator still stops at its default fraction, 75% of the GPU, where torch's may
    take all of it: a keras3-jax GPU cell's env sets the fraction to the whole device (the name jaxlib 0.10.2 reads;
    its deprecated name beside it would be an error), and a CPU cell's env has no GPU settings at all."""
    config["accelerator"] = accelerator
    spec = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax")
    assert spec.env.get("XLA_CLIENT_MEM_FRACTION") == "1.0" and spec.env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in spec.env
    config["accelerator"] = "cpu"
    on_cpu = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax")
    assert not {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE", "JAX_PLATFORMS"} & set(on_cpu.env)


@pytest.mark.parametrize("accelerator", ["gpu", "gpu-cuda12", "cpu"])
def test_every_gpu_cell_numbers_its_devices_in_pci_order_as_nvml_does(config, accelerator):
    """CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML and nvidia-smi by PCI bus: a
    CUDA_VISIBLE_DEVICES index would name another GPU for the framework than for NVML and the lease. Every GPU cell
    (and the equivalence and JAX-NumPy jobs, which take the same env) sets the order; a CPU cell has no GPU settings."""
    config["accelerator"] = accelerator
    envs = [matrix.spec(config, "tiny", "bert", "fit", 32, "float32", framework).env
            for framework in config["frameworks"]]
    expected = None if accelerator == "cpu" else "PCI_BUS_ID"
    assert [env.get("CUDA_DEVICE_ORDER") for env in envs] == [expected] * len(envs)
    job = matrix.equivalence_job(config, "tiny", "strict", "bert", "keras3-jax")
    assert job["env"].get("CUDA_DEVICE_ORDER") == expected


def test_spec_resolves_size_steps_and_task_options(config):
    spec = matrix.spec(config, "tiny", "gemma", "generate", 1, "bfloat16", "keras3-torch")
    assert spec.size == "tiny" and dataclasses.asdict(spec.steps) == {
        "warmup": 3, "timed": config["suites"]["tiny"]["steps"]["timed"], "blocks": 10,
        "breakdown": config["breakdown"]["steps"]}
    assert spec.arch == config["model_defs"]["gemma"]["sizes"]["tiny"]["arch"]
    assert spec.task_options == {"prompt_length": 5, "new_tokens": 45}
    assert spec.precision == "bfloat16"
    assert spec.framework_def["env"] == {"KERAS_BACKEND": "torch"}
    assert spec.env == {"NVIDIA_TF32_OVERRIDE": "0", "KERAS_BACKEND": "torch", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert spec.cell_id == "tiny/strict/gemma/generate/bs1/bfloat16/keras3-torch" and spec.profile == "strict"


def test_paper_llm_fit_uses_lora_rank_4_and_bf16(config):
    for model in ("gemma", "mistral"):
        spec = matrix.spec(config, "paper", model, "fit", 8, "bfloat16", "keras3-jax")
        assert spec.task_options == {"lora_rank": 4, "learning_rate": 1e-3, "optimizers": config["optimizers"]}
        assert spec.precision == "bfloat16"


def test_a_size_may_give_its_own_batch_sizes(config):
    config.update(models=["resnet50"], frameworks=["keras3-jax"])
    assert {c.batch_size for c in matrix.cells(config, "paper")} == {128}
    assert {c.batch_size for c in matrix.cells(config, "tiny")} == {16}


def test_spec_carries_the_resolved_dtypes_every_adapter_reads(config):
    spec = matrix.spec(config, "tiny", "resnet50", "fit", 16, "mixed_float16", "native-torch-eager")
    assert dataclasses.asdict(spec.dtypes) == {"weights": "float32", "compute": "float16", "loss_scaling": True}
    spec = matrix.spec(config, "tiny", "gemma", "fit", 8, "bfloat16", "keras3-jax")
    assert dataclasses.asdict(spec.dtypes) == {"weights": "bfloat16", "compute": "bfloat16", "loss_scaling": False}


def test_every_precision_is_its_own_keras_policy():
    """The Keras adapters set a policy from the resolved dtypes: it must be the precision it came from (tf32 is
    float32 with TF32 switched on: the policy float32)."""
    for name in precision.PRECISIONS:
        assert precision.keras_policy(precision.dtypes(name)) == ("float32" if name == "tf32" else name)


def test_tf32_cells_switch_tf32_on_in_every_profile_and_are_na_on_a_cpu(config):
    for profile in ("strict", "anchor"):
        spec = matrix.spec(config, "paper", "resnet50", "fit", 128, "tf32", "keras3-jax", profile)
        assert spec.settings["tf32"] == "on" and "NVIDIA_TF32_OVERRIDE" not in spec.env
        assert dataclasses.asdict(spec.dtypes) == {"weights": "float32", "compute": "float32", "loss_scaling": False}
    cpu = {**config, "accelerator": "cpu", "suite": "tiny"}
    reasons = {c.not_applicable for c in matrix.cells(cpu) if c.precision == "tf32"}
    assert reasons == {"TF32 is a tensor-core arithmetic of NVIDIA GPUs (Ampere and later): a CPU has none"}
    assert all(c.not_applicable is None for c in matrix.cells(config) if c.precision == "tf32")



def test_a_profile_is_its_settings_after_the_departures_it_keeps(config):
    """strict: config settings; anchor: each departure it keeps, for the cells it names (later ones win)."""
    def settings(profile, model, task, framework):
        return matrix.settings(config, profile, model, task, framework)
    assert settings("strict", "bert", "fit", "native-torch-compiled") == {
        "tf32": "off", "warmup": 3, "sync_blocks": 10, "jit_compile": True, "compile_site": "module", "gelu": "tanh"}
    assert settings("anchor", "bert", "fit", "native-torch-compiled") == {       # HF Trainer switched TF32 on
        "tf32": "on", "warmup": 2, "sync_blocks": 10, "jit_compile": True, "compile_site": "module", "gelu": "exact"}
    assert settings("anchor", "sam", "predict", "keras2") == {"tf32": "library-default", "warmup": 1,
                                                               "sync_blocks": 10, "jit_compile": False}
    assert settings("anchor", "gemma", "generate", "native-torch-compiled")["compile_site"] == "model"
    assert settings("anchor", "stable_diffusion", "fit", "native-torch-compiled")["compile_site"] == "train-step"
    assert settings("anchor", "gemma", "fit", "native-torch-eager")["lora_dtype"] == "model"
    assert settings("strict", "gemma", "fit", "keras3-jax")["lora_dtype"] == "float32"
    for profile in ("strict", "anchor"):     # what a framework cannot compile runs uncompiled in every profile
        assert settings(profile, "gemma", "generate", "keras3-torch")["jit_compile"] is False
    assert settings("strict", "bert", "fit", "keras3-torch")["jit_compile"] is True
    assert settings("anchor", "bert", "fit", "keras3-torch")["jit_compile"] is False


@pytest.mark.parametrize("profile, hidden_act", [("strict", "gelu_pytorch_tanh"), ("anchor", "gelu")])
def test_the_profiles_gelu_reaches_hf_berts_config(config, profile, hidden_act):
    """strict: the tanh GELU every Keras column runs; anchor: HF's exact one, as the anchor's code ran it. The
    setting must reach BertConfig's hidden_act, or the anchor profile times another function unsaid."""
    from kbench.models import bert
    spec = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "native-torch-compiled", profile)
    assert bert.hf_config(spec.arch, spec.settings["gelu"])["hidden_act"] == hidden_act
    assert bert.paddlenlp_config(spec.arch)["hidden_act"] == "gelu"      # paddle sets tanh on its layers


def test_tf32_off_puts_the_override_in_the_cell_environment(config):
    strict = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax", "strict")
    anchor = matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax", "anchor")
    assert strict.env["NVIDIA_TF32_OVERRIDE"] == "0" and "NVIDIA_TF32_OVERRIDE" not in anchor.env


def test_equivalence_jobs_compare_in_float32_where_the_model_runs_bfloat16_only(config):
    """The check's own precision is float32 (every other one is its accuracy cost against it): a job of Gemma, whose
    rows run bfloat16 only, gets a float32 spec of each task too; one batch size per task (the first configured)."""
    config.update(suite="tiny", models=["gemma", "bert"], frameworks=["native-torch-eager", "keras3-jax"])
    job = matrix.equivalence_job(config, "tiny", "strict", "gemma", "native-torch-eager")
    assert [(c["task"], c["batch_size"], c["precision"]) for c in job["cells"]] == [
        ("fit", 8, "float32"), ("generate", 32, "float32"), ("fit", 8, "bfloat16"), ("generate", 32, "bfloat16")]
    assert job["cells"][0]["dtypes"] == dataclasses.asdict(precision.dtypes("float32"))
    assert job["cells"][0]["cell_id"] == "tiny/strict/gemma/fit/bs8/float32/native-torch-eager"
    bert = matrix.equivalence_job(config, "tiny", "strict", "bert", "keras3-jax", reference=True)
    found = [(c["task"], c["precision"]) for c in bert["cells"]]     # float32 configured: nothing added
    assert found[:2] == [("fit", "float32"), ("predict", "float32")] and len(found) == len(set(found))
    assert matrix.equivalence_job(config, "tiny", "strict", "gemma", "keras2")["cells"] == []   # n/a stays n/a


def test_the_equivalence_check_runs_for_the_models_it_names(config):
    assert matrix.equivalence_models(config) == config["models"]            # default: every selected model
    config["equivalence"]["models"] = ["sam", "bert"]
    config["models"] = ["bert", "gemma"]
    assert matrix.equivalence_models(config) == ["bert"]                  # of the selected models, in their order


def test_a_known_cpu_limit_is_planned_not_applicable_and_only_on_a_cpu():
    """Paddle's auto_cast computes float32 on a CPU: its mixed cells are n/a there with the reason, on a GPU they run."""
    on_cpu = {c.cell_id: c for c in matrix.cells({**copy.deepcopy(CONFIG), "accelerator": "cpu"}, "tiny")}
    on_gpu = {c.cell_id: c for c in matrix.cells(copy.deepcopy(CONFIG), "tiny")}
    cell_id = "tiny/strict/resnet50/fit/bs16/mixed_float16/paddle-static"
    assert "auto_cast on a CPU computes float32" in on_cpu[cell_id].not_applicable
    assert on_gpu[cell_id].not_applicable is None
    assert on_cpu["tiny/strict/resnet50/fit/bs16/float32/paddle-static"].not_applicable is None
    assert on_cpu["tiny/strict/resnet50/fit/bs16/mixed_float16/keras3-jax"].not_applicable is None


def test_a_not_applicable_pattern_that_matches_nothing_is_one_line():
    config = copy.deepcopy(CONFIG)
    config["not_applicable"].append({"framework": "padle-*", "model": "*", "task": "*", "reason": "x"})
    with pytest.raises(matrix.ConfigError, match=r"config key not_applicable\[\d+\].framework: 'padle-\*' matches nothing"):
        matrix.check_references(config)
    config["not_applicable"][-1].update(framework="paddle-*", precision="mixed_float32")
    with pytest.raises(matrix.ConfigError, match=r"precision: 'mixed_float32' matches no precision"):
        matrix.check_references(config)


@pytest.mark.parametrize("cells, expected", [
    ([], {"bert/fit/keras3-jax": 3, "sam/predict/native-torch-eager": 3}),
    ([{"framework": "native-torch-eager|keras3-jax", "model": "bert"}],
     {"bert/fit/keras3-jax": 3, "sam/predict/native-torch-eager": 0}),
    ([{"model": "sam", "task": "predict"}], {"bert/fit/keras3-jax": 0, "sam/predict/native-torch-eager": 3}),
])
def test_the_breakdown_goes_to_every_cell_or_to_those_its_patterns_name(config, cells, expected):
    config["breakdown"] = {"steps": 3, "cells": cells}
    found = {f"{m}/{t}/{f}": matrix.spec(config, "tiny", m, t, 2, "float32", f).steps.breakdown
             for m, t, f in (("bert", "fit", "keras3-jax"), ("sam", "predict", "native-torch-eager"))}
    assert found == expected
    config["breakdown"] = {"steps": 0, "cells": []}
    assert matrix.spec(config, "tiny", "bert", "fit", 2, "float32", "keras3-jax").steps.breakdown == 0
