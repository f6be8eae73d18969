from kbench import matrix


def test_paper_suite_has_every_anchor_row_for_every_framework(config):
    cells = matrix.cells(config)
    rows = {(c.model, c.task, c.batch_size) for c in cells}
    assert rows == {("bert", "fit", 32), ("bert", "predict", 256),
                    ("gemma", "fit", 8), ("gemma", "generate", 32), ("gemma", "generate", 1),
                    ("mistral", "fit", 8), ("mistral", "generate", 32), ("mistral", "generate", 1),
                    ("sam", "fit", 1), ("sam", "predict", 4),
                    ("stable_diffusion", "fit", 8), ("stable_diffusion", "predict", 13)}
    assert len(cells) == len(rows) * 6
    assert [c.framework for c in cells[:6]] == ["native-torch-eager", "native-torch-compiled", "keras2",
                                                "keras3-tensorflow", "keras3-jax", "keras3-torch"]


def test_not_applicable_cells_are_the_anchors_na_and_uncompiled_lora_fits(config):
    na = {(c.model, c.task, c.batch_size, c.framework) for c in matrix.cells(config) if c.not_applicable}
    keras2_llm = {(m, t, b, "keras2") for m in ("gemma", "mistral") for t, b in (("fit", 8), ("generate", 32),
                                                                                ("generate", 1))}
    assert na == keras2_llm | {("gemma", "fit", 8, "native-torch-compiled"), ("mistral", "fit", 8,
                                                                             "native-torch-compiled")}
    reasons = {c.not_applicable for c in matrix.cells(config) if c.framework == "native-torch-compiled"}
    assert reasons == {None, "the anchor ran LoRA fit without torch.compile (see native-torch-eager)"}


def test_selection_narrows_rows_and_columns(config):
    config.update(models=["bert"], frameworks=["keras3-jax"], suite="tiny")
    assert [c.cell_id for c in matrix.cells(config)] == ["tiny/bert/fit/bs32/keras3-jax",
                                                         "tiny/bert/predict/bs256/keras3-jax"]


def test_not_applicable_cells_are_listed_with_their_reason(config):
    config["not_applicable"] = [{"framework": "keras3-torch", "model": "gemma", "task": "gen*", "reason": "no"}]
    na = [c for c in matrix.cells(config) if c.not_applicable]
    assert [(c.model, c.task, c.batch_size, c.framework, c.not_applicable) for c in na] == [
        ("gemma", "generate", 32, "keras3-torch", "no"), ("gemma", "generate", 1, "keras3-torch", "no")]


def test_spec_resolves_size_steps_and_task_options(config):
    spec = matrix.spec(config, "tiny", "gemma", "generate", 1, "keras3-torch")
    assert spec["size"] == "tiny" and spec["steps"] == config["suites"]["tiny"]["steps"]
    assert spec["arch"] == config["model_defs"]["gemma"]["sizes"]["tiny"]["arch"]
    assert spec["task_options"] == {"prompt_length": 5, "new_tokens": 45}
    assert spec["dtype"] == "bfloat16"
    assert spec["framework_def"]["env"] == {"KERAS_BACKEND": "torch"}
    assert spec["cell_id"] == "tiny/gemma/generate/bs1/keras3-torch"


def test_paper_llm_fit_uses_lora_rank_4_and_bf16(config):
    for model in ("gemma", "mistral"):
        spec = matrix.spec(config, "paper", model, "fit", 8, "keras3-jax")
        assert spec["task_options"]["lora_rank"] == 4 and spec["dtype"] == "bfloat16"
