"""The tuned profile: its settings cite their sources and exist for the columns they name, its cells get them, a tuned
cell whose outputs differ is marked, and the out-of-the-box finding's verdict reads each case right."""
import copy

import pandas as pd
import pytest

from kbench.plan import config_check, departures, matrix
from kbench.results import stats, tuning
from kbench.results import departures_page

from conftest import CONFIG, REPO
from dag import plan

SCHEMA = REPO / "schemas" / "config.schema.yaml"


def with_tuning(*entries) -> dict:
    config = copy.deepcopy(CONFIG)
    config["tuning"] = list(entries)
    return config


def entry(**overrides) -> dict:
    return {"id": "made-up", "what": "a setting", "source": "https://example.org/guide",
            "applies": [{"framework": "native-torch-compiled", "settings": {"compile_mode": "max-autotune"}}],
            **overrides}


@pytest.mark.parametrize("bad, message", [
    (entry(source=""), "config key tuning[made-up].source: missing; allowed: the framework's documentation that "
                       "recommends the setting for performance (a URL or file, with its words)"),
    ({k: v for k, v in entry().items() if k != "source"}, "config key tuning[made-up].source: missing"),
    (entry(applies=[{"framework": "native-torch-*", "settings": {"turbo": True}}]),
     "config key tuning[made-up].applies[0].settings.turbo: not a tuning setting; allowed: compile_mode, fused_optimizer, "
     "cudnn_benchmark, channels_last"),
    (entry(applies=[{"framework": "keras3-*", "settings": {"compile_mode": "max-autotune"}}]),
     "config key tuning[made-up].applies[0].settings.compile_mode: column keras3-jax (adapter keras3) has no "
     "compile_mode; allowed for columns of adapter native_torch"),
    (entry(applies=[{"framework": "native-torch-compiled", "settings": {"compile_mode": "fastest"}}]),
     "config key tuning[made-up].applies[0].settings.compile_mode: 'fastest' is not allowed; allowed: default, "
     "reduce-overhead, max-autotune"),
    (entry(applies=[{"framework": "native-torch-compyled", "settings": {"compile_mode": "max-autotune"}}]),
     "config key tuning[made-up].applies[0].framework: 'native-torch-compyled' matches nothing"),
])
def test_a_bad_tuning_setting_is_one_line_naming_it(bad, message):
    with pytest.raises(config_check.ConfigError) as error:
        config_check.check(with_tuning(bad), SCHEMA)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_the_tuned_profile_takes_its_settings_and_strict_keeps_its_own():
    config = copy.deepcopy(CONFIG)
    compiled_fit = matrix.settings(config, "tuned", "bert", "fit", "native-torch-compiled")
    assert compiled_fit["compile_mode"] == "max-autotune" and compiled_fit["fused_optimizer"] is True
    assert matrix.settings(config, "tuned", "bert", "predict", "native-torch-eager") == \
        matrix.settings(config, "strict", "bert", "predict", "native-torch-eager")
    assert "fused_optimizer" not in matrix.settings(config, "tuned", "resnet50", "fit", "native-torch-eager")
    for profile in ("strict", "anchor"):
        assert "compile_mode" not in matrix.settings(config, profile, "bert", "fit", "native-torch-compiled")
    # what Keras documents for performance applies to none of these cells: tuned = strict, arithmetic included
    assert matrix.settings(config, "tuned", "bert", "fit", "keras3-jax") == \
        matrix.settings(config, "strict", "bert", "fit", "keras3-jax")
    assert matrix.settings(config, "tuned", "bert", "fit", "native-torch-compiled")["tf32"] == "off"


CONVOLUTION_ROWS = [("resnet50", "fit"), ("stable_diffusion", "fit"), ("stable_diffusion", "predict"), ("sam", "fit"),
                    ("sam", "predict")]


@pytest.mark.parametrize("model, task", CONVOLUTION_ROWS)
def test_the_tuned_native_convolution_rows_get_cudnn_benchmark_and_channels_last_and_strict_does_not(model, task):
    """PyTorch's performance tuning guide: cuDNN's auto-tuner and channels_last for convolutional networks, in both
    native torch columns' ResNet-50, SD and SAM cells of the tuned profile; never in strict or anchor."""
    for framework in ("native-torch-eager", "native-torch-compiled"):
        batch = CONFIG["model_defs"][model]["tasks"][task]["batch_sizes"][0]
        precision = CONFIG["model_defs"][model]["precisions"][0]
        tuned = matrix.spec(CONFIG, "tiny", model, task, batch, precision, framework, "tuned").settings
        assert tuned["cudnn_benchmark"] is True and tuned["channels_last"] is True, (framework, tuned)
        for profile in ("strict", "anchor"):
            settings = matrix.spec(CONFIG, "tiny", model, task, batch, precision, framework, profile).settings
            assert not {"cudnn_benchmark", "channels_last"} & set(settings), (profile, framework, settings)
    for other in ("keras3-torch", "keras3-jax"):           # Keras's columns: none applies (their adapter has neither)
        assert "channels_last" not in matrix.settings(CONFIG, "tuned", model, task, other)


def test_the_convolution_settings_leave_the_transformer_rows_alone():
    for model, task in (("bert", "fit"), ("gemma", "generate")):
        assert not {"cudnn_benchmark", "channels_last"} & set(matrix.settings(CONFIG, "tuned", model, task,
                                                                              "native-torch-compiled"))


def summary(rows):
    frame = pd.DataFrame(rows)
    frame["status"], frame["repeats"], frame["ci_method"], frame["repeat_means"] = "ok", 1, "blocks", "[]"
    frame["ci_low_ms"], frame["ci_high_ms"] = frame.estimate_ms * 0.97, frame.estimate_ms * 1.03
    return frame


def cells(ms: dict[str, float]) -> pd.DataFrame:
    return summary([{"model": "bert", "task": "fit", "batch_size": 32, "precision": "float32", "framework": f,
                     "estimate_ms": v} for f, v in ms.items()])


def test_a_tuned_cell_whose_outputs_differ_is_marked_not_tuning():
    strict = cells({"native-torch-compiled": 20.0, "keras3-jax": 10.0})
    tuned = cells({"native-torch-compiled": 10.0, "keras3-jax": 10.0})
    flags = {("bert", "fit", 32, "float32"): "native-torch-compiled: differs (rel 3e-2)"}
    gains = tuning.gain_table(strict, tuned, flags).set_index("framework")
    assert gains.at["native-torch-compiled", "tuned outputs"] == tuning.NOT_TUNING
    assert gains.at["keras3-jax", "tuned outputs"] == ""
    assert gains.at["native-torch-compiled", "gain x"] == 2.0
    low, high = gains.at["native-torch-compiled", "gain low"], gains.at["native-torch-compiled", "gain high"]
    assert low == pytest.approx(19.4 / 10.3, abs=1e-3) and high == pytest.approx(20.6 / 9.7, abs=1e-3)
    columns = tuning.column_table(gains.reset_index(), ["native-torch-compiled", "keras3-jax"])
    assert list(columns["rows whose tuned outputs differ"]) == [1, 0]


def test_a_column_no_setting_applies_to_is_named_the_null_control():
    config = copy.deepcopy(CONFIG)
    applied = matrix.tuning_ids(config)
    assert applied["bert/fit/native-torch-compiled"] == ["torch-compile-max-autotune", "torch-fused-adamw"]
    assert applied["bert/fit/native-torch-eager"] == ["torch-fused-adamw"]
    assert applied["bert/predict/native-torch-eager"] == [] and applied["bert/fit/keras3-jax"] == []
    strict = cells({"native-torch-compiled": 20.0, "keras3-jax": 10.0})
    tuned = cells({"native-torch-compiled": 10.0, "keras3-jax": 9.0})
    gains = tuning.gain_table(strict, tuned, {}, applied).set_index("framework")
    assert gains.at["keras3-jax", "tuned settings"] == tuning.NO_SETTING
    assert gains.at["native-torch-compiled", "tuned settings"] == "torch-compile-max-autotune, torch-fused-adamw"


def est(ms, half=0.03):
    return stats.Estimate(ms, ms * (1 - half), ms * (1 + half), 1, "blocks", (ms,))


@pytest.mark.parametrize("keras_strict, native_tuned, native_gain, keras_gain, expected", [
    (10.0, 10.1, (2.0, 1.8, 2.2), (1.0, 0.95, 1.05), tuning.HOLDS),       # Keras not slower; native gains more
    (12.0, 10.0, (2.0, 1.8, 2.2), (1.0, 0.95, 1.05), tuning.FAILS),       # Keras out of the box shown slower
    (8.0, 10.0, (0.9, 0.85, 0.95), (1.0, 0.95, 1.05), tuning.NOT_SHOWN),   # native's gain not shown larger
    (8.0, 10.0, (0.8, 0.75, 0.85), (1.2, 1.1, 1.3), tuning.FAILS),        # native's gain shown smaller
])
def test_the_out_of_the_box_verdict(keras_strict, native_tuned, native_gain, keras_gain, expected):
    assert tuning.verdict(est(keras_strict), est(native_tuned), native_gain, keras_gain) == expected
    assert tuning.verdict(None, est(native_tuned), native_gain, keras_gain) == tuning.NOT_MEASURED


@pytest.mark.parametrize("keras_strict, native_gain, expected", [
    (10.5, (2.0, 1.8, 2.2), tuning.HOLDS),         # 10.19..10.82 against 9.7..10.3: not shown slower
    (10.5, (1.0, 0.95, 1.05), tuning.NOT_SHOWN),   # not shown slower, and native's gain not shown larger
    (12.0, (2.0, 1.8, 2.2), tuning.FAILS),         # 11.64..12.36 against 9.7..10.3: shown slower
])
def test_keras_slower_by_its_point_estimate_alone_is_not_keras_shown_slower(keras_strict, native_gain, expected):
    assert tuning.verdict(est(keras_strict), est(10.0), native_gain, (1.0, 0.95, 1.05)) == expected


@pytest.mark.parametrize("native_gain, keras_gain, expected", [
    ((1.3, 1.0, 1.6), (1.1, 0.9, 1.3), tuning.NOT_SHOWN),     # native's point gain larger, the intervals overlap
    ((1.1, 0.9, 1.3), (1.3, 1.0, 1.6), tuning.NOT_SHOWN),     # native's point gain smaller, the intervals overlap
    ((1.6, 1.4, 1.8), (1.1, 0.9, 1.3), tuning.HOLDS),         # native's gain shown larger
    ((1.1, 0.9, 1.3), (1.6, 1.4, 1.8), tuning.FAILS),         # native's gain shown smaller
])
def test_native_gaining_more_by_its_point_estimate_alone_is_not_native_shown_to_gain_more(native_gain, keras_gain,
                                                                                           expected):
    assert tuning.verdict(est(10.0), est(10.0), native_gain, keras_gain) == expected


def test_verdicts_pick_the_best_of_each_side_and_mark_a_cpu_run():
    strict = cells({"native-torch-eager": 30.0, "native-torch-compiled": 20.0, "keras3-jax": 10.0,
                    "keras3-torch": 15.0})
    tuned = cells({"native-torch-eager": 25.0, "native-torch-compiled": 10.0, "keras3-jax": 10.0,
                   "keras3-torch": 15.0})
    found = tuning.verdicts(strict, tuned, ["keras3-jax", "keras3-torch"], ["native-torch-eager",
                                                                           "native-torch-compiled"], on_gpu=False)
    assert list(found["best Keras 3 (strict)"]) == ["keras3-jax"] and list(found["best native (tuned)"]) == [
        "native-torch-compiled"]
    assert list(found.verdict) == ["holds (CPU: the pipeline's check)"]


def test_the_departures_page_lists_each_tuned_setting_with_its_source(tmp_path):
    departures_page.write(CONFIG["departures"], CONFIG["profile_defs"], tmp_path, CONFIG["tuning"])
    page = (tmp_path / "departures.md").read_text()
    assert "The tuned profile's departures from strict" in page
    for t in CONFIG["tuning"]:
        assert t["id"] in page and t["source"].split(" ")[0] in page


def test_a_planned_tuned_run_has_its_cells_and_its_gain_table():
    found = plan("-n", "--cores", "1", "--config", "suite=tiny", "accelerator=cpu", "profiles=[strict,tuned]",
                 "frameworks=[native-torch-compiled,keras3-jax]", "models=[bert]", "precisions=[float32]", cwd=REPO)
    assert found.ok, found.log[-2000:]
    assert "results/cells/tiny/tuned/bert/fit/bs32/float32/native-torch-compiled.r1.json" in found.outputs()
    assert found.counts()["tuning_gain"] == 1 and "results/tables/tiny/tuning_verdicts.csv" in found.outputs()


@pytest.mark.parametrize("profiles, compared", [("[tuned]", False), ("[strict,tuned]", True)])
def test_the_tuning_gain_is_planned_only_where_strict_cells_run_beside_the_tuned_ones(profiles, compared):
    """The gain divides strict ms/step by tuned: a run of the tuned profile alone has no strict cell to divide, so
    it plans no gain job, no gain table and no strict cell or table for one; beside strict it plans the gain."""
    config = {**copy.deepcopy(CONFIG), "profiles": profiles.strip("[]").split(",")}
    assert matrix.tuned_profile(config) == ("tuned" if compared else None)
    found = plan("-n", "--cores", "1", "--config", "suite=tiny", "accelerator=cpu", f"profiles={profiles}",
                 "frameworks=[native-torch-eager,keras3-jax]", "models=[bert]", "precisions=[float32]", cwd=REPO)
    assert found.ok, found.log[-2000:]
    assert "results/cells/tiny/tuned/bert/fit/bs32/float32/native-torch-eager.r1.json" in found.outputs()
    assert found.counts().get("tuning_gain", 0) == (1 if compared else 0)
    assert ("results/tables/tiny/tuning_verdicts.csv" in found.outputs()) is compared
    assert bool([p for p in found.outputs() if "/strict/" in p]) is compared
