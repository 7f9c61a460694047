"""``shardplan calibrate --runs``: an engine profile fitted to a user's serving runs (TTFT and TPOT per layout and
concurrency), written to a file ``--profile`` then prices with.

The runs are made two ways, neither through ``runs.py``'s own builders: priced with a stored engine profile from
Problems and Layouts built here (the fit must give that profile's fields back), and converted from the accuracy
benchmark's vLLM H100 runs (the fit must land where the benchmark's refit did)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

from benchmarks.accuracy import serving
from shardplan.hardware.cluster import parse_cluster
from shardplan.hardware.profile import Profile, get_profile, load_profile_file
from shardplan.models import DType, get_model
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload
from shardplan.solver.cli import main
from shardplan.solver.cost.calibration.fit import _sig
from shardplan.solver.cost.calibration.runs import MIN_RUNS, engine_base, read_runs
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.placement.plan import place_and_price

COLUMNS = ["id", "model", "gpu", "engine", "weights_dtype", "kv_cache_dtype", "tp", "pp", "ep", "attn_dp", "isl",
           "osl", "concurrency", "ttft_ms", "tpot_ms", "notes"]
TRUTH = "h100-sxm-vllm"  # the engine profile the synthetic runs are priced with


def csv_text(rows: list[dict[str, object]], columns: list[str] = COLUMNS) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def synthetic_rows() -> list[dict[str, object]]:
    """24 runs on H100 priced as ``shardplan evaluate --engine vllm`` prices them (h100-sxm-vllm): Llama-3.1-8B
    (bf16, formats left blank) and -70B (fp8) at three TP degrees, two workloads and several concurrencies."""
    rows: list[dict[str, object]] = []
    for preset, weights, tps in (("llama-3.1-8b", "", (1, 2, 4)), ("llama-3.1-70b", "fp8", (2, 4, 8))):
        model = get_model(preset).with_dtypes(DType.FP8 if weights else DType.BF16, DType.BF16)
        for tp in tps:
            for isl, osl, concurrency in ((1024, 1024, 1), (1024, 1024, 16), (2048, 256, 4), (2048, 256, 64)):
                problem = Problem(model=model, cluster=parse_cluster(f"{tp}xH100"),
                                  workload=Workload(isl=isl, osl=osl, batch=concurrency),
                                  objective=Objective.THROUGHPUT, engine="vllm")
                layout = Layout(tp=tp, stages=((0, model.num_layers),), batch=concurrency)
                metrics = place_and_price(problem, layout)[1].metrics
                rows.append(dict(id=f"r{len(rows) + 1}", model=preset, gpu="H100", engine="vllm", weights_dtype=weights,
                                 kv_cache_dtype="", tp=tp, pp=1, ep="", attn_dp="", isl=isl, osl=osl,
                                 concurrency=concurrency, ttft_ms=f"{metrics.ttft_ms:.6g}",
                                 tpot_ms=f"{metrics.tpot_ms:.6g}", notes="synthetic"))
    return rows


SYNTHETIC = synthetic_rows()


def calibrate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, out: Path,
                   *options: str) -> list[dict[str, object]]:
    runs_csv = tmp_path / "runs.csv"
    runs_csv.write_text(text)
    capsys.readouterr()
    main(["calibrate", str(runs_csv), "--runs", "--out", str(out), "--json", *options])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def synthetic_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], Profile, Path]:
    """The synthetic runs calibrated once: the JSON row printed, the profile as its file reads, the file."""
    tmp = tmp_path_factory.mktemp("synthetic")
    (tmp / "runs.csv").write_text(csv_text(SYNTHETIC))
    out = tmp / "mine.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["calibrate", str(tmp / "runs.csv"), "--runs", "--engine", "vllm", "--out", str(out), "--json"])
    [row] = json.loads(printed.getvalue())
    return row, load_profile_file(out), out


def test_the_fit_gives_back_the_profile_that_priced_the_runs(synthetic_fit) -> None:
    row, profile, _ = synthetic_fit
    truth = get_profile(TRUTH)
    assert row["rows"] == len(SYNTHETIC) and row["profile"] == profile.name == "h100-sxm-vllm-calibrated"
    assert profile.engine == "vllm" and profile.gpu == "H100-SXM" and profile.fit_rows == len(SYNTHETIC)
    assert abs(profile.hbm_efficiency - truth.hbm_efficiency) < 0.005
    assert abs(profile.layer_overhead_us - truth.layer_overhead_us) < 0.5
    assert abs(profile.ttft_wait_steps - truth.ttft_wait_steps) <= 0.1
    assert abs(profile.request_overhead_ms - truth.request_overhead_ms) <= 1.0
    # Every other field (hardware, operator terms, vLLM's limits) is the truth's: the base is the same.
    fitted = {"layer_overhead_us", "hbm_efficiency", "ttft_wait_steps", "request_overhead_ms"}
    metadata = {"name", "source", "software", "fit_rows", "fit_median_abs_error"}
    assert {f for f in Profile.model_fields if getattr(profile, f) != getattr(truth, f)} <= fitted | metadata
    assert row["median_abs_error"] < 0.005 and row["median_abs_ttft_error"] < 0.005
    assert row["at_bound"] == [] and set(row["fitted"]) == fitted


def test_the_written_profile_prices_exactly_what_the_fit_reported(synthetic_fit, tmp_path) -> None:
    row, profile, _ = synthetic_fit
    runs = read_runs(_write(tmp_path, csv_text(SYNTHETIC)))
    for run, reported in zip(runs, row["runs"], strict=True):
        metrics = evaluate(run.run.problem, run.run.layout, profile).metrics
        assert round(metrics.tpot_ms, 3) == reported["predicted_tpot_ms"]
        assert round(metrics.ttft_ms, 3) == reported["predicted_ttft_ms"]


def test_solve_with_the_written_profile_names_it(synthetic_fit, tmp_path, capsys) -> None:
    _, _, path = synthetic_fit
    main(["solve", "--profile", str(path), "--engine", "vllm", "--model", "llama-3.1-8b", "--cluster", "1xH100",
          "--no-runner-up", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["status"] in ("optimal", "feasible") and data["profile"] == "h100-sxm-vllm-calibrated"
    assert data["engine"] == "vllm" and data["measured_error"] is None  # not the stored profile's figures


# --- the repository's runs ------------------------------------------------------------------------------------

def repository_rows(engine: str, gpu: str) -> list[dict[str, object]]:
    """The accuracy benchmark's runs of ``engine`` on ``gpu`` (serving_points.csv) as rows of a runs CSV."""
    runs, _ = serving.load_runs()
    rows: list[dict[str, object]] = []
    for r in runs:
        if r.engine != engine or r.problem.cluster.gpu.name != gpu:
            continue
        m, layout = r.problem.model, r.layout
        rows.append(dict(id=str(len(rows) + 1), model=m.name, gpu=gpu, engine=f"{engine} {r.engine_version}",
                         weights_dtype=m.weights_dtype.value, kv_cache_dtype=m.kv_dtype.value, tp=layout.tp,
                         pp=layout.pp, ep=layout.ep if m.is_moe else "",
                         attn_dp=layout.attn_dp if m.is_moe else layout.dp, isl=r.problem.workload.isl,
                         osl=r.problem.workload.osl, concurrency=r.concurrency, ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms))
    return rows


def test_the_repositorys_vllm_h100_runs_fit_as_the_benchmarks_refit_did(tmp_path, capsys) -> None:
    """The 30 vLLM H100 runs the benchmark fits h100-sxm-vllm on: the same TPOT fields and in-sample median
    |TPOT error| (1.9 %, the stored profile's fit_median_abs_error 1.95 %); the TTFT fields are this GPU's alone
    (the benchmark fits one set per engine over every GPU's named-version runs), so only their error is checked."""
    rows = repository_rows("vllm", "H100-SXM")
    [row] = calibrate_json(tmp_path, capsys, csv_text(rows), tmp_path / "h100.json")
    stored = get_profile("h100-sxm-vllm")
    assert row["rows"] == len(rows) == stored.fit_rows == 30
    assert row["fitted"]["hbm_efficiency"] == pytest.approx(stored.hbm_efficiency, rel=1e-3)
    assert row["fitted"]["layer_overhead_us"] == pytest.approx(stored.layer_overhead_us, rel=1e-3)
    assert abs(row["median_abs_error"] - stored.fit_median_abs_error) < 0.002
    assert row["median_abs_ttft_error"] < 0.06
    assert row["at_bound"] == ["request_overhead_ms"]  # these runs' TTFT wants no fixed cost: named


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200-SXM", "B200-SXM", "GB200-NVL72"])
def test_the_base_is_the_benchmarks_base_profile_as_stored(gpu) -> None:
    """``engine_base`` reads the operator terms off the stored engine profiles; the benchmark computes them from
    op_points.csv. They agree to the digits a profile file keeps."""
    ours, theirs = engine_base(gpu, "vllm"), serving.base_profile(gpu, serving._op_terms())[0]
    for field in Profile.model_fields:
        mine, reference = getattr(ours, field), getattr(theirs, field)
        assert mine == (_sig(reference) if isinstance(reference, float) else reference), field


# --- the CLI's shapes ---------------------------------------------------------------------------------------

def test_a_directory_takes_one_profile_per_gpu_and_the_human_view_names_each_field(tmp_path, capsys) -> None:
    h200 = [{**r, "gpu": "H200", "id": f"h{r['id']}"} for r in SYNTHETIC]
    runs_csv = _write(tmp_path, csv_text(SYNTHETIC + h200))
    out = tmp_path / "profiles"
    out.mkdir()
    main(["calibrate", str(runs_csv), "--runs", "--out", str(out)])
    text = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["h100-sxm-vllm-calibrated.json", "h200-sxm-vllm-calibrated.json"]
    assert "hbm_efficiency" in text and "[0.3, 0.95]" in text and "median |TPOT error|" in text
    assert "median |TTFT error|" in text and "r24" in text


def test_the_engine_may_come_from_the_option_alone(tmp_path, capsys) -> None:
    columns = [c for c in COLUMNS if c != "engine"]
    [row] = calibrate_json(tmp_path, capsys, csv_text(SYNTHETIC, columns), tmp_path / "p.json", "--engine", "vllm")
    assert row["engine"] == "vllm" and row["rows"] == len(SYNTHETIC)


# --- bad input: one line, exit 2, nothing written -----------------------------------------------------------

def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, *options: str) -> str:
    runs_csv, out = tmp_path / "runs.csv", tmp_path / "p.json"
    runs_csv.write_bytes(data)
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(runs_csv), "--out", str(out), *(options or ("--runs",))])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert not out.exists(), "a refused CSV must write nothing"
    return err


def with_cell(column: str, text: str, row: int = 1) -> bytes:
    rows = [dict(r) for r in SYNTHETIC]
    rows[row][column] = text  # the second data row, on line 3
    return csv_text(rows).encode()


@pytest.mark.parametrize(("column", "text", "message"), [
    ("tpot_ms", "fast", "runs row 3: tpot_ms: 'fast' is not a number"),
    ("ttft_ms", "-5", "runs row 3: ttft_ms: must be a number"),
    ("ttft_ms", "nan", "runs row 3: ttft_ms: must be a number"),
    ("concurrency", "1.5", "runs row 3: concurrency: '1.5' is not a whole number"),
    ("tp", "0", "runs row 3: tp: must be at least 1"),
    ("model", "llama-9", "runs row 3: model: 'llama-9' is not a model preset"),
    ("gpu", "H900", "runs row 3: gpu"),
    ("engine", "tgi", "runs row 3: engine: unknown engine 'tgi'"),
    ("weights_dtype", "fp7", "runs row 3: weights_dtype: unknown dtype 'fp7'"),
    ("tp", "3", "runs row 3: TP-001: tp(3) does not divide heads(32)"),
    ("ep", "2", "runs row 3: ep: 2 for a dense model"),
    ("pp", "40", "runs row 3: pp: 40 stages for 32 layers"),
])
def test_a_bad_cell_is_named_by_its_row_and_column(tmp_path, capsys, column, text, message) -> None:
    assert message in refused(tmp_path, capsys, with_cell(column, text))


def test_a_missing_column_is_named(tmp_path, capsys) -> None:
    err = refused(tmp_path, capsys, csv_text(SYNTHETIC, [c for c in COLUMNS if c != "tpot_ms"]).encode())
    assert "missing column tpot_ms" in err


def test_a_short_row_is_named_by_its_line(tmp_path, capsys) -> None:
    lines = csv_text(SYNTHETIC).splitlines()
    lines[3] = ",".join(lines[3].split(",")[:-3])
    err = refused(tmp_path, capsys, ("\n".join(lines) + "\n").encode())
    assert "runs row 4" in err and f"the header has {len(COLUMNS)} columns" in err


def test_bytes_that_are_not_utf8_are_named(tmp_path, capsys) -> None:
    text = csv_text(SYNTHETIC).encode()
    at = text.index(b"llama")
    err = refused(tmp_path, capsys, text[:at] + b"\xe9" + text[at + 1:])
    assert "not UTF-8" in err and f"byte {at}" in err


def test_a_utf8_byte_order_mark_is_read_past(tmp_path) -> None:
    plain = csv_text(SYNTHETIC).encode()
    with_bom = _write(tmp_path, b"\xef\xbb\xbf" + plain, "bom.csv")
    assert [m.label for m in read_runs(with_bom)] == [m.label for m in read_runs(_write(tmp_path, plain))]


def test_an_engine_neither_in_the_row_nor_given_is_asked_for(tmp_path, capsys) -> None:
    assert "runs row 3: engine: blank: state the engine in the column or give --engine" in refused(
        tmp_path, capsys, with_cell("engine", ""))


def test_fewer_runs_than_the_fit_needs_are_refused(tmp_path, capsys) -> None:
    err = refused(tmp_path, capsys, csv_text(SYNTHETIC[:MIN_RUNS - 1]).encode())
    assert f"vLLM on H100-SXM: {MIN_RUNS - 1} runs, an engine profile needs at least {MIN_RUNS}" in err


def test_runs_making_two_profiles_into_one_file_are_refused(tmp_path, capsys) -> None:
    h200 = [{**r, "gpu": "H200"} for r in SYNTHETIC]
    err = refused(tmp_path, capsys, csv_text(SYNTHETIC + h200).encode())
    assert "2 profiles (vllm on H100-SXM, vllm on H200-SXM): choose one with --engine/--gpu" in err


@pytest.mark.parametrize(("options", "message"), [
    (("--engine", "vllm"), "engine: picks the engine of a runs CSV: add --runs"),
    (("--runs", "--software", "trtllm"), "software: fits table profiles"),
    (("--runs", "--engine", "sglang"), "engine: no sglang runs in"),
    (("--runs", "--gpu", "B200"), "gpu: no runs on B200-SXM in"),
    (("--runs", "--time-limit", "1e-9"), "time-limit: the fit of 24 runs into 1 profile(s) had not finished"),
])
def test_options_that_do_not_fit_the_runs_are_refused(tmp_path, capsys, options, message) -> None:
    assert message in refused(tmp_path, capsys, csv_text(SYNTHETIC).encode(), *options)


def test_a_concurrency_above_the_engines_batch_limit_is_a_run_not_bad_input(tmp_path, capsys) -> None:
    # Clients past vLLM's --max-num-seqs (1,024) queue at the server: a benchmark setting, priced as evaluate
    # prices it, not a layout no engine runs (BAT-001 is not asked of measured runs).
    over = {**SYNTHETIC[0], "id": "over", "concurrency": 2048}
    [row] = calibrate_json(tmp_path, capsys, csv_text([*SYNTHETIC, over]), tmp_path / "p.json", "--engine", "vllm")
    assert row["rows"] == len(SYNTHETIC) + 1 and any(r["id"] == "over" for r in row["runs"])


def a100_rows(truth: Profile) -> list[dict[str, object]]:
    """24 runs of Llama-3.1-8B (bf16) on A100, which has no stored engine profile, priced with ``truth``."""
    model = get_model("llama-3.1-8b").with_dtypes(DType.BF16, DType.BF16)
    rows: list[dict[str, object]] = []
    for tp in (1, 2, 4, 8):
        for isl, osl, concurrency in ((1024, 1024, 1), (1024, 1024, 16), (2048, 256, 4), (2048, 256, 64),
                                      (4096, 512, 8), (512, 128, 32)):
            problem = Problem(model=model, cluster=parse_cluster(f"{tp}xA100"),
                              workload=Workload(isl=isl, osl=osl, batch=concurrency),
                              objective=Objective.THROUGHPUT, engine="vllm")
            layout = Layout(tp=tp, stages=((0, model.num_layers),), batch=concurrency)
            metrics = evaluate(problem, layout, truth).metrics
            rows.append(dict(id=f"a{len(rows) + 1}", model="llama-3.1-8b", gpu="A100", engine="vllm",
                             weights_dtype="", kv_cache_dtype="", tp=tp, pp=1, ep="", attn_dp="", isl=isl, osl=osl,
                             concurrency=concurrency, ttft_ms=f"{metrics.ttft_ms:.6g}",
                             tpot_ms=f"{metrics.tpot_ms:.6g}", notes="synthetic"))
    return rows


def test_a_gpu_without_a_stored_engine_profile_fits_on_its_composed_profile(tmp_path, capsys) -> None:
    # Plans for vLLM on A100 are priced with the composed a100-sxm-80gb+vllm; runs priced with it, its stream and
    # per-layer cost moved to values of its range's interior, must give those back, the rest as composed.
    composed = get_profile("a100-sxm-80gb+vllm")
    truth = composed.model_copy(update={"hbm_efficiency": 0.7, "layer_overhead_us": 40.0})
    [row] = calibrate_json(tmp_path, capsys, csv_text(a100_rows(truth)), tmp_path / "a100.json", "--engine", "vllm")
    profile = load_profile_file(tmp_path / "a100.json")
    assert row["profile"] == profile.name == "a100-sxm-80gb-vllm-calibrated" and profile.gpu == "A100-SXM-80GB"
    assert abs(profile.hbm_efficiency - 0.7) < 0.005 and abs(profile.layer_overhead_us - 40.0) < 0.5
    assert row["median_abs_error"] < 0.005 and row["median_abs_ttft_error"] < 0.005
    # The TTFT fields come back as composed (the runs carry them), every other field as composed too; the file is an
    # engine profile of its own (engine_default) with its fit's provenance.
    metadata = {"name", "source", "software", "fit_rows", "fit_median_abs_error", "engine_default"}
    assert {f for f in Profile.model_fields if getattr(profile, f) != getattr(truth, f)} <= {
        "layer_overhead_us", "hbm_efficiency"} | metadata


# --- helpers ----------------------------------------------------------------------------------------------

def _write(tmp_path: Path, data: str | bytes, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path
