"""The calibration path: CSV rows to points, skips with reasons, and shardplan calibrate round-tripping."""

from __future__ import annotations

import csv
import json

import pytest

from shardplan.hardware.profile import Profile, get_profile
from shardplan.solver.cli import main
from shardplan.solver.cost.calibration import fit
from shardplan.solver.cost.calibration.measures import predict
from shardplan.solver.cost.calibration.points import points_from_rows

COLUMNS = [
    "id",
    "source_id",
    "source",
    "model",
    "weights_dtype",
    "kv_cache_dtype",
    "engine",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "dp",
    "isl",
    "osl",
    "batch_size",
    "concurrency",
    "request_rate_qps",
    "metric",
    "value",
    "config_group",
    "notes",
]


def row(id, model, gpu, tp, isl, osl, value, *, source="TRTLLM-PERF-v0.17", metric="output_tokens_per_s_total",
        weights="FP8", kv="FP8", batch="", rate="", group="", notes="", pp=1):
    return dict(
        id=str(id), source_id=source, source="test", model=model, weights_dtype=weights, kv_cache_dtype=kv, engine="x",
        gpu=gpu, num_gpus=str(tp * pp), tp=str(tp), pp=str(pp), ep="", dp="1", isl=str(isl), osl=str(osl),
        batch_size=batch, concurrency="", request_rate_qps=rate, metric=metric, value=str(value), config_group=group,
        notes=notes,
    )


# Four published TensorRT-LLM v0.17 rows of Llama-3.1-8B FP8 on one H100 (perf_points.csv ids 2-32).
TINY = [
    row(2, "Llama-3.1-8B", "H100-SXM-80GB", 1, 128, 128, 28836.77),
    row(12, "Llama-3.1-8B", "H100-SXM-80GB", 1, 128, 4096, 13593.65),
    row(22, "Llama-3.1-8B", "H100-SXM-80GB", 1, 1000, 1000, 15244.78),
    row(32, "Llama-3.1-8B", "H100-SXM-80GB", 1, 2048, 2048, 9488.42),
]


def write_csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def test_rows_map_to_points_with_the_documented_conventions():
    rows = TINY[:1] + [
        row(3, "Mixtral-8x7B", "H100-SXM-80GB", 4, 128, 128, 1.0, source="TRTLLM-PERF-v0.14"),
        row(4, "Qwen3-235B-A22B", "H100-SXM-80GB", 8, 128, 128, 1.0, source="TRTLLM-PERF-v1.0", kv="not stated"),
        row(5, "Llama-2-70B", "A100-SXM4-80GB", 2, 8192, 128, 1.0, source="SPLITWISE-PROFILE", metric="prefill_time_ms",
            weights="not stated", kv="not stated", batch="1"),
        row(6, "GPT-J-6B", "H100-SXM-80GB", 1, 128, 128, 1.0),
        row(7, "Llama-2-70B", "A100-SXM4-80GB", 2, 512, 128, 1.0, source="SPLITWISE-PROFILE", metric="prefill_time_ms",
            weights="not stated", kv="not stated", batch="64", notes="Batch-64 rows look anomalous"),
    ]
    points, skipped = points_from_rows(rows)
    by_id = {p.row_id: p for p in points}
    assert by_id["2"].problem.model.weights_dtype.value == "fp8" and by_id["2"].problem.profile == "h100-sxm"
    mixtral = by_id["3"]  # engine flow: experts tensor-parallel over the TP group
    assert (mixtral.layout.tp, mixtral.layout.expert_tp, mixtral.layout.ep) == (4, 4, 1)
    assert mixtral.problem.profile == "h100-sxm-trtllm-0.14"
    qwen = by_id["4"]  # v1.0: --ep, experts spread over the 8 GPUs, FP8 KV from the ModelOpt checkpoint
    assert (qwen.layout.tp, qwen.layout.expert_tp, qwen.layout.ep) == (8, 1, 8)
    assert qwen.problem.model.kv_dtype.value == "fp8"
    splitwise = by_id["5"]  # fp16, context limit lifted past Llama-2's 4,096 tokens
    assert splitwise.problem.model.weights_dtype.value == "fp16"
    assert splitwise.problem.model.max_position_embeddings >= 8320
    assert {s.row_id: s.reason for s in skipped} == {"6": "no-preset", "7": "flagged-anomalous"}


def test_overloaded_serving_latency_is_skipped():
    serving = dict(source="TRTLLM-SERVING-v0.14", weights="BF16", kv="not stated")
    rows = [
        row(
            10,
            "Llama-3.1-8B",
            "H100-SXM-80GB",
            1,
            467,
            256,
            16.0,
            metric="request_throughput_req_per_s",
            rate="inf",
            **serving,
        ),
        row(11, "Llama-3.1-8B", "H100-SXM-80GB", 1, 467, 256, 3000.0, metric="ttft_mean_ms", rate="inf", **serving),
        row(12, "Llama-3.1-8B", "H100-SXM-80GB", 1, 467, 256, 900.0, metric="ttft_mean_ms", rate="16", **serving),
        row(13, "Llama-3.1-8B", "H100-SXM-80GB", 1, 467, 256, 20.0, metric="ttft_mean_ms", rate="4", **serving),
    ]
    points, skipped = points_from_rows(rows)
    assert sorted(p.row_id for p in points) == ["10", "13"]
    assert {s.row_id for s in skipped} == {"11", "12"}
    assert all(s.reason == "overload-latency" for s in skipped)


def test_calibrate_command_round_trips(tmp_path):
    pytest.importorskip("scipy")
    points_csv, out = tmp_path / "points.csv", tmp_path / "h100.json"
    write_csv(points_csv, TINY)
    main(["calibrate", str(points_csv), "--out", str(out), "--gpu", "H100"])
    first = out.read_text()
    profile = Profile.model_validate(json.loads(first))
    assert profile.name == "h100-sxm" and profile.gpu == "H100-SXM" and profile.default
    assert "rows 2, 12, 22, 32" in profile.source
    # Fitted on these rows, the profile predicts them: within 25 % each (4 rows, 6 free fields,
    # weak priors), and a refit writes the same bytes.
    points, _ = points_from_rows(TINY)
    for p in points:
        assert abs(predict(p, profile).value / p.value - 1) < 0.25
    main(["calibrate", str(points_csv), "--out", str(out), "--gpu", "H100"])
    assert out.read_text() == first


def test_a_calibrated_profile_file_prices_a_plan(tmp_path, capsys):
    """``shardplan calibrate POINTS.csv --out p.json && shardplan solve --profile p.json``."""
    pytest.importorskip("scipy")
    points_csv, out = tmp_path / "points.csv", tmp_path / "p.json"
    write_csv(points_csv, TINY)
    main(["calibrate", str(points_csv), "--out", str(out), "--gpu", "H100"])
    capsys.readouterr()
    main(["solve", "--model", "llama-3.1-8b", "--cluster", "1xH100", "--profile", str(out), "--json"])
    data = json.loads(capsys.readouterr().out)
    written = Profile.model_validate(json.loads(out.read_text()))
    assert data["status"] in ("optimal", "feasible") and data["profile"] == written.name
    # Priced with the file's numbers: its step overhead is in the decode step the plan reports.
    step_us = sum(stage["decode_ops_us"].get("step.overhead", 0.0) for stage in data["breakdown"])
    assert step_us == pytest.approx(written.step_overhead_us, rel=1e-3)


def test_stored_default_profiles_are_the_fitted_ones():
    for name in ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "l40s", "b200-sxm"):
        p = get_profile(name)
        assert p.default and p.source.startswith("fitted by shardplan calibrate")
    assert not get_profile("h100-sxm-splitwise").default


def test_rows_of_several_profiles_into_one_file_are_refused_before_fitting(tmp_path, capsys, monkeypatch):
    """A file takes one profile: rows of two generations (here v0.17 and v0.14 of H100) exit 2 naming ``out``
    and both profiles, before the fit runs (it would take half a minute on the real tables), and write nothing."""
    pytest.importorskip("scipy")

    def no_fit(*args, **kwargs):
        raise AssertionError("fitted before refusing")

    monkeypatch.setattr(fit, "fit_profile", no_fit)
    points_csv, out = tmp_path / "points.csv", tmp_path / "p.json"
    write_csv(points_csv, [*TINY, row(3, "Llama-3.1-8B", "H100-SXM-80GB", 1, 128, 128, 26000.0,
                                      source="TRTLLM-PERF-v0.14")])
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(points_csv), "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "out" in err and "h100-sxm," in err and "h100-sxm-trtllm-0.14" in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_fit_past_its_time_limit_ends_in_one_line_and_writes_nothing(tmp_path, capsys, jobs):
    """``calibrate --time-limit``: the fit's work grows with the rows (a CSV within the size limit holds about a
    hundred times the repository's), so it stops at the limit, in every worker, with one line naming the option,
    exit 2 and no profile written; TINY's two generations (v0.17 and v0.14 rows) make two profiles."""
    pytest.importorskip("scipy")
    points_csv, out = tmp_path / "points.csv", tmp_path / "profiles"
    out.mkdir()
    write_csv(points_csv, TINY + [row(40, "Llama-3.1-8B", "H100-SXM-80GB", 1, 128, 128, 20000.0,
                                      source="TRTLLM-PERF-v0.14")])
    with pytest.raises(SystemExit) as ended:
        main(["calibrate", str(points_csv), "--out", str(out), "--time-limit", "1e-9", "--jobs", jobs])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "shardplan: error: time-limit: the fit of 5 rows into 2 profile(s) had not finished within 1e-09 s")
    assert list(out.iterdir()) == []
