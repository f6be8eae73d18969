import pandas as pd
import pytest

from kbench.contract import cell
from kbench.plan import departures, matrix
from kbench.results import equivalence_tables, flat, flops, tables
from kbench.results.context import Records

from conftest import run_context

FRAMEWORKS = ["keras3-jax", "keras3-tensorflow", "keras3-torch"]


def result(config, model, task, batch, framework, mean_ms=None, status="ok", error=None, precision=None, repeat=1,
           steps=None, device="cpu", compute="float32"):
    precision = precision or config["model_defs"][model]["precisions"][0]
    spec = matrix.spec(config, "tiny", model, task, batch, precision, framework)
    out = cell.new_result(spec, {"runtime": "host", "device": device, "packages": {"keras": "3.15.1"}}, status, error,
                          repeat)
    if status == "ok":
        steps = steps or [mean_ms] * 3
        mean_ms = sum(steps) / len(steps)
        out.timing = {"n": len(steps), "mean_ms": mean_ms, "median_ms": mean_ms, "p90_ms": mean_ms, "stdev_ms": 0.0,
                      "min_ms": min(steps), "max_ms": max(steps), "first_step_ms": 900.0, "window_ms": sum(steps),
                      "examples_per_s": batch * 1e3 / mean_ms, "tokens_per_s": None, "step_ms": steps,
                      "block_ms": steps, "block_steps": [1] * len(steps)}      # a sync after every step
        out.params = {"total": 1000, "trainable": 1000}
        out.memory = {"peak_host_rss_bytes": 2**30, "peak_device_bytes": 3 * 2**20, "nvml_used_bytes_after_steps": None}
        out.numerics = {"weights_dtype": "float32", "compute_dtype": compute, "probe": {"observed_class": "fp32"}}
    return out


@pytest.fixture
def results(config):
    return [
        result(config, "bert", "fit", 32, "keras3-jax", 10.0),
        result(config, "bert", "fit", 32, "keras3-tensorflow", 20.0),
        result(config, "bert", "fit", 32, "keras3-torch", 40.0),
        result(config, "sam", "predict", 4, "keras3-jax", status="failed",
               error=cell.error_info("MemoryError", "out of memory")),
        result(config, "sam", "predict", 4, "keras3-tensorflow", 8.0),
        result(config, "sam", "predict", 4, "keras3-torch", status="unsupported",
               error=cell.error_info("NotApplicable", "needs Keras 3")),
    ]


def summary(results):
    return tables.summary_table(flat.long_table(results))


def test_ms_per_step_has_anchor_shape_and_status_texts(results):
    readable = tables.ms_per_step_table(summary(results), FRAMEWORKS, readable=True)
    assert list(readable.columns) == FRAMEWORKS + ["params_parity", tables.NETWORKS, tables.FLAGS, tables.EQUIVALENCE]
    assert readable.loc[("bert", "fit", 32, "float32")].tolist() == [
        "10.00 ± 0.00*", "20.00 ± 0.00*", "40.00 ± 0.00*", "", "", "", ""]           # one repeat each: within-run intervals
    assert readable.loc[("sam", "predict", 4, "float32")].tolist() == [
        "failed: MemoryError", "8.00 ± 0.00*", "n/a: needs Keras 3", "", "", "", ""]
    numbers = tables.ms_per_step_table(summary(results), FRAMEWORKS)
    assert list(numbers.columns) == [c for f in FRAMEWORKS for c in (f, f"{f} low", f"{f} high")] + [
        "params_parity", tables.NETWORKS, tables.FLAGS, tables.EQUIVALENCE]
    assert numbers.loc[("bert", "fit", 32, "float32"), "keras3-jax"] == 10.0


def test_a_cell_is_the_mean_of_its_repeats_with_a_t_interval_around_it(config):
    repeats = [result(config, "bert", "fit", 32, "keras3-jax", ms, repeat=i + 1) for i, ms in enumerate([10, 11, 15])]
    row = summary(repeats).iloc[0]
    assert (row.repeats, row.estimate_ms, row.ci_method) == (3, 12.0, "repeats")       # the median would be 11
    assert row.ci_low_ms == pytest.approx(12 - 6.5725, abs=1e-3) and row.ci_high_ms == pytest.approx(18.5725,
                                                                                                   abs=1e-3)
    assert row.text == "12.00 ± 6.57"          # exactly the interval the verdicts use
    numbers = tables.ms_per_step_table(summary(repeats), ["keras3-jax"]).iloc[0]
    assert (numbers["keras3-jax low"] + numbers["keras3-jax high"]) / 2 == pytest.approx(numbers["keras3-jax"])


def test_a_cell_with_a_failed_repeat_is_failed_and_says_how_many(config):
    repeats = [result(config, "bert", "fit", 32, "keras3-jax", 10.0, repeat=1),
               result(config, "bert", "fit", 32, "keras3-jax", status="failed", repeat=2,
                      error=cell.error_info("Timeout", "too slow"))]
    row = summary(repeats).iloc[0]
    assert (row.status, row.text, row.repeats_ok) == ("failed", "failed: Timeout (1 of 2 repeats)", 1)


def test_speedup_is_other_over_best_keras3_minus_one(results):
    table = tables.speedup_table(summary(results), FRAMEWORKS, FRAMEWORKS)
    bert = table.loc[("bert", "fit", 32, "float32")]
    assert bert[tables.BEST] == "keras3-jax" and bert["best Keras 3 ms"] == 10.0
    assert bert[["vs keras3-jax %", "vs keras3-tensorflow %", "vs keras3-torch %"]].tolist() == [0, 100, 300]
    # one repeat a cell: the verdicts rest on within-run intervals, and say so
    assert bert[["vs keras3-jax", "vs keras3-tensorflow", "vs keras3-torch"]].tolist() == ["best", "+100%*", "+300%*"]
    assert "vs keras3-tensorflow Welch" not in bert.index          # no repeats on either side: no Welch verdict
    sam = table.loc[("sam", "predict", 4, "float32")]
    assert sam[tables.BEST] == "keras3-tensorflow" and pd.isna(sam["vs keras3-jax %"])


def test_speedup_names_a_winner_only_where_the_intervals_separate(config):
    def repeats(framework, means):
        return [result(config, "bert", "fit", 32, framework, ms, repeat=i + 1) for i, ms in enumerate(means)]
    cells = repeats("keras3-jax", [10, 11, 12]) + repeats("keras3-tensorflow", [11, 12, 13]) + repeats(
        "keras3-torch", [30, 31, 32])
    bert = tables.speedup_table(summary(cells), FRAMEWORKS, FRAMEWORKS).loc[("bert", "fit", 32, "float32")]
    assert bert[tables.BEST] == "keras3-jax (not shown to differ: keras3-tensorflow)"
    assert bert[["vs keras3-tensorflow", "vs keras3-torch"]].tolist() == ["not shown to differ", "+182%"]
    assert bert["vs keras3-tensorflow %"] == 9        # the number stays in the CSV
    # Welch's verdict beside it, BH-adjusted over the table's two tests: the torch column is slower
    assert bert["vs keras3-tensorflow Welch"].startswith("not shown to differ (q=")
    assert bert["vs keras3-torch Welch"].startswith("slower (q=")


def test_speedup_row_whose_keras3_cells_all_failed_has_no_best(config, results):
    failed = cell.error_info("MemoryError", "out of memory")
    long = summary([result(config, "sam", "fit", 1, f, status="failed", error=failed) for f in FRAMEWORKS]
                   + results)
    table = tables.speedup_table(long, FRAMEWORKS, FRAMEWORKS)
    assert pd.isna(table.loc[("sam", "fit", 1, "float32"), tables.BEST])
    assert table.loc[("bert", "fit", 32, "float32"), tables.BEST] == "keras3-jax"


def test_throughput_has_model_flops_and_mfu_against_the_devices_peak(config):
    cells = [result(config, "bert", "fit", 32, "keras3-jax", 100.0),
             result(config, "gemma", "fit", 8, "keras3-jax", 50.0, device="NVIDIA H100 80GB HBM3", compute="bfloat16")]
    table = tables.throughput_table(summary(cells))
    bert, gemma = table.loc[("bert", "fit", 32, "float32", "keras3-jax")], table.loc[
        ("gemma", "fit", 8, "bfloat16", "keras3-jax")]
    bert_flops = flops.per_step(matrix.spec(config, "tiny", "bert", "fit", 32, "float32", "keras3-jax"))
    assert bert.tflops_per_s == pytest.approx(bert_flops * 10 / 1e12, rel=1e-3) and pd.isna(bert["MFU %"])
    assert gemma.arithmetic == "bf16" and gemma.peak_tflops == 989.4
    assert gemma["MFU %"] == pytest.approx(100 * gemma.tflops_per_s / 989.4, abs=0.01)


def test_memory_is_the_largest_over_the_repeats(config):
    cells = [result(config, "bert", "fit", 32, "keras3-jax", 10.0, repeat=r) for r in (1, 2)]
    cells[1].memory["peak_device_bytes"] = 5 * 2**20
    row = tables.memory_table(summary(cells)).iloc[0]
    assert row["peak device MiB (framework)"] == 5.0 and row["peak host RSS MiB"] == 1024.0


def test_build_writes_csv_and_markdown_from_json_files(tmp_path, results):
    paths = []
    for i, r in enumerate(results):
        paths.append(tmp_path / "cells" / f"{i}.json")
        r.write(paths[-1])
    tables.build(Records(cells=tuple(cell.read(p) for p in paths)),
                 run_context(tmp_path, "tables", frameworks=tuple(FRAMEWORKS), keras3=tuple(FRAMEWORKS)))
    long = pd.read_csv(tmp_path / "tables" / "cells_long.csv")
    assert len(long) == 6 and set(long.status) == {"ok", "failed", "unsupported"}
    assert {"median_ms", "p90_ms", "stdev_ms", "first_step_ms", "params_total", "peak_host_rss_mib",
            "spec_digest", "packages", "repeat"} <= set(long.columns)
    markdown = (tmp_path / "tables" / "ms_per_step.md").read_text()
    assert "failed: MemoryError" in markdown and "n/a: needs Keras 3" in markdown and "10.00 ± 0.00*" in markdown
    assert pd.read_csv(tmp_path / "tables" / "speedup.csv").shape[0] == 2
    assert {"estimate_ms", "ci_low_ms", "ci_high_ms", "mfu"} <= set(pd.read_csv(tmp_path / "tables" /
                                                                               "cells_summary.csv").columns)


def counted(config, framework, total, trainable, model="gemma", task="fit", batch=8, status="ok"):
    out = result(config, model, task, batch, framework, 10.0, status=status,
                 error=None if status == "ok" else cell.error_info("LoRANotApplied", "nothing trainable"))
    out.params = {"total": total, "trainable": trainable}
    return out


def test_parity_flags_rows_whose_counts_differ_by_more_than_one_percent(config):
    long = summary([
        counted(config, "keras3-jax", 152_128, 4_352), counted(config, "native-torch-eager", 149_824, 2_048),
        counted(config, "keras3-jax", 78_092, 78_060, "sam", "predict", 4),
        counted(config, "native-torch-eager", 78_060, 78_060, "sam", "predict", 4),   # 0.04 %: same model
    ])
    flags = tables.parity_flags(long)
    assert flags[("gemma", "fit", 8, "bfloat16")] == "total +1.5%, trainable +112.5%"
    assert flags[("sam", "predict", 4, "float32")] == ""
    table = tables.params_table(long, ["native-torch-eager", "keras3-jax"])
    assert table.loc[("gemma", "fit", 8, "bfloat16")].tolist() == ["149,824 (2,048 trainable)", "152,128 (4,352 trainable)",
                                                       "total +1.5%, trainable +112.5%"]
    assert table.loc[("sam", "predict", 4, "float32"), "native-torch-eager"] == "78,060"


def test_parity_counts_failed_cells_that_built_their_model(config):
    """A LoRA fit that trained nothing is failed, yet its counts still show it differs from the others."""
    long = summary([counted(config, "keras3-jax", 208_448, 3_328),
                              counted(config, "keras2", 205_120, 0, status="failed")])
    assert tables.parity_flags(long)[("gemma", "fit", 8, "bfloat16")] == "total +1.6%, trainable +inf%"
    assert tables.ms_per_step_table(long, ["keras2", "keras3-jax"], readable=True).loc[
        ("gemma", "fit", 8, "bfloat16")].tolist() == ["failed: LoRANotApplied", "10.00 ± 0.00*",
                                                      "total +1.6%, trainable +inf%", "", "", ""]


# ---------------------------------------------------------------- the mixed-precision study

STUDY = ["native-torch-eager", "keras3-jax"]


@pytest.fixture
def study(config):
    """ResNet-50 fit on two frameworks at three precisions (native fp16 overflowed), and a fp32-only SAM row."""
    def run(framework, precision, ms=None, **kw):
        return result(config, "resnet50", "fit", 128, framework, ms, precision=precision, **kw)
    return summary([
        run("native-torch-eager", "float32", 300.0), run("native-torch-eager", "mixed_float16", status="failed",
                                                         error=cell.error_info("NonFiniteLoss", "non-finite loss")),
        run("native-torch-eager", "mixed_bfloat16", 150.0),
        run("keras3-jax", "float32", 240.0), run("keras3-jax", "mixed_float16", 160.0),
        run("keras3-jax", "mixed_bfloat16", 200.0),
        result(config, "sam", "fit", 1, "keras3-jax", 50.0),
    ])


CLAIMS = [{"model": "resnet50", "task": "fit", "speedup": 1.5, "quote": "1.5x faster ResNet-50 training"}]


def test_precision_table_has_frameworks_by_precision_for_study_rows_only(study):
    table = tables.precision_table(study, STUDY, "float32")
    assert list(table.columns) == ["float32", "mixed_float16", "mixed_bfloat16"]
    assert table.index.tolist() == [("resnet50", "fit", 128, "native-torch-eager"),
                                    ("resnet50", "fit", 128, "keras3-jax")]
    assert table.loc[("resnet50", "fit", 128, "native-torch-eager")].tolist() == [
        "300.00 ± 0.00*", "failed: NonFiniteLoss", "150.00 ± 0.00*"]


def test_precision_speedup_is_baseline_over_precision_beside_the_claim(study):
    table = tables.precision_speedup_table(study, STUDY, "float32", CLAIMS)
    assert list(table.columns) == ["fp32 / fp16 x", "fp32 / fp16 verdict", "fp32 / bf16 x", "fp32 / bf16 verdict",
                                   "claimed x", "claim against", "claim"]
    jax = table.loc[("resnet50", "fit", 128, "keras3-jax")]
    assert jax.tolist() == [1.5, "different*", 1.2, "different*", 1.5, "fp32", "1.5x faster ResNet-50 training"]
    native = table.loc[("resnet50", "fit", 128, "native-torch-eager")]
    assert pd.isna(native["fp32 / fp16 x"]) and native["fp32 / bf16 x"] == 2.0     # a failed cell has no ratio


def test_precision_markdown_has_one_section_per_model_task(tmp_path, study):
    flat.write(tables.precision_speedup_table(study, STUDY, "float32", CLAIMS), tmp_path, "ps", "strict",
                 by_section=True)
    text = (tmp_path / "ps.md").read_text()
    assert text.startswith("## ps, profile strict\n\n### resnet50 fit, batch 128\n") and text.count("###") == 1
    assert "| keras3-jax " in text and "1.5x faster ResNet-50 training" in text and "nan" not in text


def test_cells_long_carries_precision_and_losses(config):
    out = result(config, "resnet50", "fit", 128, "keras3-jax", 10.0, precision="mixed_float16")
    out.loss = {"first_timed_step": 6.9, "last_timed_step": 6.2}
    row = flat.long_table([out]).iloc[0]
    assert (row.precision, row.loss_first, row.loss_last) == ("mixed_float16", 6.9, 6.2)


def test_an_adapters_unsupported_reads_apart_from_a_configured_na(config):
    long = summary([
        result(config, "sam", "predict", 4, "keras3-jax", status="unsupported",
               error=cell.error_info("NotApplicable", "not configured")),
        result(config, "sam", "predict", 4, "keras3-torch", status="unsupported",
               error=cell.error_info("NotSupported", "keras3 adapter has no sam predict"))])
    assert tables.ms_per_step_table(long, FRAMEWORKS, readable=True).loc[("sam", "predict", 4, "float32")].tolist() \
        == ["n/a: not configured", "unsupported: keras3 adapter has no sam predict", "", "", "", ""]


def test_speedup_carries_the_parity_flag_of_its_row(config):
    long = summary([counted(config, "keras3-jax", 152_128, 4_352), counted(config, "keras3-torch", 149_824,
                                                                                     2_048)])
    table = tables.speedup_table(long, FRAMEWORKS, FRAMEWORKS)
    assert table.loc[("gemma", "fit", 8, "bfloat16"), "params_parity"] == "total +1.5%, trainable +112.5%"


def test_a_profile_reproducing_the_anchor_names_what_it_cannot_per_row(config, results):
    unreproduced = departures.unreproduced({**config, "profiles": ["anchor"]}, "anchor")
    assert {d["id"] for d in unreproduced} >= {"timing-rules", "generate-inputs", "native-trainer-loop"}
    assert departures.unreproduced(config, "strict") == []
    table = tables.ms_per_step_table(summary(results), FRAMEWORKS, unreproduced)
    # every Keras 3 column: the timer and the versions; the Keras LoRA dtype only on LLM fit rows
    assert table.loc[("bert", "fit", 32, "float32"), tables.UNREPRODUCED] == "timing-rules, versions"
    assert "native-trainer-loop" not in table[tables.UNREPRODUCED].str.cat()     # no native column in this table


def test_precision_verdicts_with_repeats_get_welchs_beside_the_intervals(config):
    def run(precision, means):
        return [result(config, "resnet50", "fit", 128, "keras3-jax", ms, precision=precision, repeat=i + 1)
                for i, ms in enumerate(means)]
    table = tables.precision_speedup_table(summary(run("float32", [300, 302, 304]) + run("mixed_float16",
                                                                                          [200, 201, 202])),
                                           ["keras3-jax"], "float32", CLAIMS)
    row = table.loc[("resnet50", "fit", 128, "keras3-jax")]
    assert row["fp32 / fp16 verdict"] == "different" and row["fp32 / fp16 Welch"].startswith("faster (q=")


def test_a_one_repeat_cell_without_synced_blocks_shows_no_interval_and_gets_no_verdict(config):
    """A record made before synced blocks: its step times may be dispatch times, so no interval is drawn."""
    old = result(config, "bert", "predict", 256, "keras3-jax", steps=[0.3] * 19 + [5360.0])
    del old.timing["block_ms"], old.timing["block_steps"]
    other = result(config, "bert", "predict", 256, "keras3-tensorflow", 100.0)
    rows = summary([old, other]).set_index("framework")
    assert rows.loc["keras3-jax", "text"] == "268.28 (no interval)" and pd.isna(rows.loc["keras3-jax", "ci_low_ms"])
    table = tables.speedup_table(summary([old, other]), FRAMEWORKS, FRAMEWORKS)
    assert table.iloc[0]["vs keras3-jax"] == "no interval"


def test_resnet50_columns_are_counted_as_the_networks_they_built_and_the_row_says_so(config):
    """keras.applications builds ResNet v1 (stride on the first 1x1 conv), torchvision v1.5 (on the 3x3): their
    FLOPs per step differ, so their MFU is each against its own count, and the row is flagged."""
    cells = [result(config, "resnet50", "fit", 16, f, 100.0) for f in ("native-torch-eager", "keras3-jax", "keras2")]
    rows = summary(cells).set_index("framework")
    keras_flops, torch_flops = rows.loc["keras3-jax", "flops_per_step"], rows.loc["native-torch-eager",
                                                                                    "flops_per_step"]
    assert keras_flops == rows.loc["keras2", "flops_per_step"] and 0.90 < keras_flops / torch_flops < 0.97
    flag = tables.network_flags(summary(cells))[("resnet50", "fit", 16, "float32")]
    assert flag.startswith("FLOPs/step differ by ") and "ResNet v1 (stride on the first 1x1 conv" in flag
    assert "torchvision): native-torch-eager (" in flag and "keras.applications): keras3-jax, keras2 (" in flag
    table = tables.ms_per_step_table(summary(cells), ["native-torch-eager", "keras2", "keras3-jax"])
    assert table.iloc[0][tables.NETWORKS] == flag
    assert tables.network_flags(summary([result(config, "bert", "fit", 32, f, 10.0) for f in FRAMEWORKS])).eq(
        "").all()


def test_mfu_uses_the_nvml_name_and_the_arithmetic_every_product_could_run_in(config):
    """The anchor profile's torch float32 SD fit on an A100: the probe says fp32 matmuls, cuDNN's TF32 switch was
    left on. Its MFU is against TF32 for the convolutions, not the fp32 peak alone (which a fast step exceeds)."""
    out = result(config, "stable_diffusion", "fit", 8, "native-torch-eager", 0.05, device="cpu")
    out.provenance["device_facts"] = {"nvml": {"name": "NVIDIA A100-SXM4-40GB"}}
    out.numerics["precision_switches"] = {"torch.backends.cuda.matmul.allow_tf32": False,
                                          "torch.backends.cudnn.allow_tf32": True}
    row = summary([out]).iloc[0]
    assert row.arithmetic == "fp32 matmuls, tf32 convolutions"
    assert 19.5 < row.peak_tflops < 156.0 and row.mfu == pytest.approx(row.tflops_per_s / row.peak_tflops)
    out.provenance["environment_variables"] = {"NVIDIA_TF32_OVERRIDE": "0"}       # TF32 off everywhere
    assert summary([out]).iloc[0].arithmetic == "fp32"


def test_throughput_says_what_an_example_is(config):
    table = tables.throughput_table(summary([result(config, "stable_diffusion", "predict", 13, "keras3-jax", 10.0),
                                             result(config, "bert", "predict", 256, "keras3-jax", 10.0)]))
    assert table.loc[("stable_diffusion", "predict", 13, "float32", "keras3-jax"), "one example is"].startswith(
        "latent through one guided denoising step")
    assert table.loc[("bert", "predict", 256, "float32", "keras3-jax"), "one example is"] == "sequence"


def test_half_precision_is_also_measured_against_tf32_where_it_ran(config):
    """On a GPU float32 with TF32 on is what most users get: the study gives both ratios, and says which one the
    claim is read against (FP32: the guides the quotes come from compared with it)."""
    cells = [result(config, "resnet50", "fit", 128, "native-torch-eager", ms, precision=p)
             for p, ms in (("float32", 600.0), ("tf32", 200.0), ("mixed_float16", 150.0))]
    table = tables.precision_speedup_table(summary(cells), ["native-torch-eager"], "float32", CLAIMS)
    row = table.loc[("resnet50", "fit", 128, "native-torch-eager")]
    assert (row["fp32 / fp16 x"], row["tf32 / fp16 x"]) == (4.0, 1.33)
    assert "fp32 / tf32 x" in table.columns and "tf32 / fp32 x" not in table.columns
    assert row["claim against"] == "fp32"


@pytest.mark.parametrize("before, in_window, device, jit, flag", [
    ({"graphs": 1, "graph_breaks": 0, "unsupported": 0, "cudagraph_skips": 0}, {"graphs": 2}, "cpu", True,
     "compiled 2x inside the timed window"),
    ({"graphs": 3, "graph_breaks": 2, "unsupported": 1, "cudagraph_skips": 0}, {"graphs": 0}, "cpu", True,
     "3 graph breaks"),
    ({"graphs": 1, "graph_breaks": 0, "unsupported": 0, "cudagraph_skips": 1}, {"graphs": 0}, "NVIDIA H100", True,
     "CUDA graphs skipped"),
    ({"graphs": 1, "graph_breaks": 0, "unsupported": 0, "cudagraph_skips": 1}, {"graphs": 0}, "cpu", True, ""),
    ({"graphs": 0, "graph_breaks": 4, "unsupported": 0, "cudagraph_skips": 0}, {"graphs": 0}, "cpu", False, ""),
    ({"xla_compiles": 5}, {"xla_compiles": 1}, "cpu", True, "compiled 1x inside the timed window"),
])
def test_what_a_compiled_cell_really_did_flags_its_number(config, before, in_window, device, jit, flag):
    """The framework's own counters around the window (evidence.compiles): a compile inside the timed window, graph
    breaks in a compiled cell, CUDA graphs skipped on a GPU each flag the number (a dagger and the flags column);
    an eager cell's breaks and a CPU's absent CUDA graphs do not."""
    found = result(config, "bert", "fit", 32, "keras3-jax", 10.0, device=device)
    found.evidence = {"jit_compile": jit, "compiles": {"before_window": before, "in_window": in_window}}
    row = summary([found]).iloc[0]
    assert row.cell_flags == flag
    assert row.text.endswith(tables.FLAGGED) == bool(flag)
    readable = tables.ms_per_step_table(summary([found]), ["keras3-jax"], readable=True)
    assert readable.iloc[0][tables.FLAGS] == (f"keras3-jax: {flag}" if flag else "")


def test_the_memory_table_names_what_each_framework_counts(config):
    """Each column's allocator peak means something else (JAX's whole-process peak, build included, against torch's
    since its reset): the memory table says which, from the cell's record."""
    found = result(config, "bert", "fit", 32, "keras3-jax", 10.0)
    found.provenance["memory_view"] = "jax peak_bytes_in_use: the whole process's peak, model build included"
    row = tables.memory_table(summary([found])).iloc[0]
    assert row["what the framework counts"] == found.provenance["memory_view"]


def test_the_tables_welch_verdicts_carry_benjamini_hochberg_q_over_every_test_of_the_table(config):
    """q is each Welch p-value adjusted with all the table's others (scipy's false_discovery_control, BH): a p that
    alone is under 0.05 can read 'not shown to differ' once the table's other tests are counted."""
    from scipy import stats as scipy_stats
    def repeats(framework, means, task="fit", batch=32):
        return [result(config, "bert", task, batch, framework, ms, repeat=i + 1) for i, ms in enumerate(means)]
    cells = (repeats("keras3-jax", [10, 11, 12]) + repeats("keras3-tensorflow", [10.5, 11.5, 12.5])
             + repeats("keras3-torch", [12.5, 13.5, 14.5]))
    table = tables.speedup_table(summary(cells), FRAMEWORKS, FRAMEWORKS).loc[("bert", "fit", 32, "float32")]
    p = [scipy_stats.ttest_ind([10, 11, 12], other, equal_var=False).pvalue
         for other in ([10.5, 11.5, 12.5], [12.5, 13.5, 14.5])]
    q = scipy_stats.false_discovery_control(p, method="bh")
    assert p[1] < 0.05 < q[1]                    # alone the torch column would read slower; with the table's test not
    assert table["vs keras3-torch Welch"] == f"not shown to differ (q={q[1]:.3f})"
    assert table["vs keras3-tensorflow Welch"] == f"not shown to differ (q={q[0]:.3f})"


def test_a_column_that_computes_another_function_flags_its_rows_numbers(config, results):
    """The equivalence check's verdicts (float32, as built) become the row's flag in ms_per_step and speedup: a
    column that differs from the reference, differs by design or loaded the reference incompletely is named there;
    an equivalent column, the reference, an aligned variant and another precision's accuracy cost are not."""
    def row(framework, verdict, model="bert", task="fit", precision="float32", variant="as built"):
        return {"model": model, "task": task, "precision": precision, "variant": variant, "framework": framework,
                "verdict": verdict}
    long = pd.DataFrame([
        row("keras3-jax", "reference"), row("keras3-tensorflow", "equivalent"),
        row("keras3-torch", "differs: rel 3.1e-03 > 7.4e-06"),
        row("keras3-torch", "differs: rel 2.0e-02 > 7.4e-06", variant="aligned"),
        row("keras3-tensorflow", "accuracy cost: rel 5.0e-03", precision="mixed_bfloat16"),
        row("keras3-torch", "differs by design (rel 4.0e-01 > 1.0e-05): ResNet v1.5 vs v1", "sam", "predict"),
        row("keras3-tensorflow", "mapping incomplete: not loaded from the reference: 1: x", "sam", "predict"),
        row("keras3-tensorflow", "equivalent; training steps drift: loss rel 2.4e-03 after 3 steps", "sam", "fit")])
    flags = equivalence_tables.equivalence_flags(long)
    assert flags.get(("bert", "fit")) == "keras3-torch: differs: rel 3.1e-03 > 7.4e-06", flags
    assert flags.get(("sam", "predict")) == ("keras3-torch: differs by design (rel 4.0e-01 > 1.0e-05): ResNet v1.5 vs v1; "
                                         "keras3-tensorflow: mapping incomplete: not loaded from the reference: 1: x")
    assert ("sam", "fit") not in flags
    for table in (tables.ms_per_step_table(summary(results), FRAMEWORKS, readable=True, equivalence=flags),
                  tables.speedup_table(summary(results), FRAMEWORKS, FRAMEWORKS, equivalence=flags)):
        assert table.loc[("bert", "fit", 32, "float32"), tables.EQUIVALENCE] == flags[("bert", "fit")]
        assert table.loc[("sam", "predict", 4, "float32"), tables.EQUIVALENCE] == flags[("sam", "predict")]


def test_the_log_scale_first_step_chart_draws_a_status_beside_sub_millisecond_bars(tmp_path):
    """A row where one column is n/a and the others' first steps are a fraction of a millisecond (the synthetic
    stack's cells): the n/a label must not sit at y=0, which a log axis puts at -inf (the render then fails)."""
    from kbench.results import plots
    rows = [dict(model="synthetic", task=task, batch_size=4, precision="float32", framework=framework,
                 status=status, estimate_ms=0.03, ci_low_ms=0.02, ci_high_ms=0.04, first_step_ms=first,
                 params_total=10, params_trainable=10, flops_per_step=None, text="")
            for task, firsts in (("fit", (0.17946803062839767, 0.18219607591065348)),
                                 ("predict", (0.1266059758315468, 0.1016443596443488)))
            for framework, status, first in (("first", "ok", firsts[0]), ("second", "ok", firsts[1]),
                                             ("keras3-jax", "unsupported", None))]
    figure = plots.dots_per_row(pd.DataFrame(rows), ["first", "second", "keras3-jax"], "first_step_ms", "ms")
    figure.savefig(tmp_path / "first_step.png")
    assert (tmp_path / "first_step.png").read_bytes()[:4] == b"\x89PNG"


def test_the_first_step_chart_draws_dots_with_their_values_not_bars_on_its_log_axis():
    """A bar on a log axis is as long as wherever the axis starts makes it (native's 170 ms a sliver beside 420 ms):
    the chart shows a dot per column and writes its value; n/a is named, not drawn."""
    import matplotlib.patches
    from kbench.results import plots
    rows = [dict(model="bert", task="predict", batch_size=256, precision="float32", framework=f, status=status,
                 first_step_ms=first, text="") for f, status, first in (("native-torch-eager", "ok", 170.0),
                                                                        ("keras3-jax", "ok", 420.0),
                                                                        ("keras2", "unsupported", None))]
    figure = plots.dots_per_row(pd.DataFrame(rows), ["native-torch-eager", "keras3-jax", "keras2"],
                                "first_step_ms", "ms")
    ax = figure.axes[0]
    assert ax.get_yscale() == "log"
    assert not [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert [tuple(line.get_ydata()) for line in ax.lines] == [(170.0,), (420.0,)]
    assert {t.get_text() for t in ax.texts} == {"170 ms", "420 ms", "n/a"}
    assert plots.duration_text(37012.5) == "37 s" and plots.duration_text(0.1266) == "0.127 ms"


def test_the_first_step_chart_ticks_in_seconds_and_writes_its_ratios():
    """A log axis shows ratios as distances a reader cannot measure: 3.1x and 1.8x looked alike. The ticks read
    "5 s", "10 s" (not 4x10^0), each column says how many times the row's fastest it took, and each warm dot how many
    times faster than its cold one."""
    from kbench.results import plots
    rows = [dict(model="bert", task="fit", batch_size=8, precision="float32", framework=f, state=state, status="ok",
                 value=value, text="") for f, state, value in (("native-torch-eager", "cold", 4.0),
                                                             ("keras3-jax", "cold", 12.4),
                                                             ("keras3-jax", "warm", 6.9))]
    figure = plots.dots_per_row(pd.DataFrame(rows), ["native-torch-eager", "keras3-jax"], "value", "s",
                                series=("state", {"cold": "o", "warm": "D"}), scale=1e3)
    ax = figure.axes[0]
    figure.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and all(t.endswith(" s") and "times" not in t and "^" not in t for t in ticks), ticks
    assert [t.get_text() for t in ax.get_xticklabels()] == ["native-torch-eager\nthe fastest",
                                                            "keras3-jax\n3.1x the fastest"]
    assert "cold 1.8x\nwarm" in {t.get_text() for t in ax.texts}


def test_a_cell_on_a_mig_instance_is_named_mig_and_gets_no_mfu(config):
    """NVML names a MIG-enabled GPU leased whole by its full name, and a MIG instance may be named as the chip: a cell
    the runner found on a MIG instance (provenance.device_identity.mig) is named MIG and gets no peak, so no MFU,
    rather than the whole H100's."""
    cells = []
    for framework, mig in (("keras3-jax", False), ("keras3-torch", True)):
        out = result(config, "gemma", "fit", 8, framework, 50.0, device="NVIDIA H100 80GB HBM3", compute="bfloat16")
        out.provenance["device_facts"] = {"nvml": {"name": "NVIDIA H100 80GB HBM3"}}
        out.provenance["device_identity"] = {"checked": True, "mig": mig}
        cells.append(out)
    rows = summary(cells).set_index("framework")
    assert rows.loc["keras3-jax", "mfu"] > 0 and pd.isna(rows.loc["keras3-torch", "mfu"])
    assert pd.isna(rows.loc["keras3-torch", "peak_tflops"])
    long = flat.long_table(cells).set_index("framework")
    assert long.loc["keras3-torch", "gpu_name"] == "NVIDIA H100 80GB HBM3 (MIG)" and long.loc["keras3-torch", "mig"]
    assert long.loc["keras3-jax", "gpu_name"] == "NVIDIA H100 80GB HBM3"


GELU = "departure bert-gelu (BERT's feed-forward GELU, native column, kept by the anchor profile)"
TF32 = "departure tf32 (TF32 in float32 matmuls and convolutions, kept by the anchor profile)"


@pytest.mark.parametrize("profile, accelerator, expected", [
    ("anchor", "cpu", f"differs by a departure (rel 1.2e-04 > 7.4e-06): {GELU}"),
    ("anchor", "gpu", f"differs by a departure (rel 1.2e-04 > 7.4e-06): {TF32}; {GELU}"),
    ("anchor", "gpu-cuda12", f"differs by a departure (rel 1.2e-04 > 7.4e-06): {TF32}; {GELU}"),   # any GPU lock set
    ("strict", "gpu", "differs: rel 1.2e-04 > 7.4e-06"),
])
def test_a_column_that_differs_by_a_departure_its_profile_keeps_names_it(config, profile, accelerator, expected):
    """Native BERT in the anchor profile runs the exact GELU (departure bert-gelu, kept by anchor only): its
    difference names the departure, and on a GPU TF32 too (on a CPU there is none); the same difference in strict,
    which keeps neither, names none. Departures that change how, not what (warm-up, XLA), are never named."""
    job = cell.new_result({"cell_id": f"tiny/{profile}/equivalence/bert/native-torch-eager", "job": "equivalence",
                           "model": "bert",
                           "framework": "native-torch-eager", "profile": profile, "accelerator": accelerator},
                          {}, "ok")
    job.equivalence = {"reference": False, "results": [{"task": "predict", "precision": "float32", "tolerance": 7.4e-6,
                                                        "variants": {"as built": {"rel": 1.2e-4}}}]}
    long = equivalence_tables.equivalence_long([job], config["equivalence"]["differences"], config["departures"])
    assert list(long.verdict) == [expected]
    assert equivalence_tables.equivalence_flags(long)[("bert", "predict")] == f"native-torch-eager: {expected}"
