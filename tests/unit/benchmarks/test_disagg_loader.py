"""The disaggregated benchmark's loader and evidence: each measurement once, the recorded decode worker
able to hold what its own figures say it held, the one-token-per-round bound computed by hand, and the
GB200 engine profiles equal to the B200 engine fields on GB200's hardware fields."""

import csv
import math
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.accuracy.disagg import (
    DisaggRun,
    decode_worker_holds,
    decoding_per_worker,
    load_runs,
    one_token_bound_ms,
    recorded_configuration,
    run_layout,
    same_die_profile,
)
from benchmarks.accuracy.serving import SERVING_CSV, SOURCE
from benchmarks.accuracy.ttft_shape import repeat_spread
from shardplan.hardware.cluster import parse_cluster
from shardplan.hardware.profile import get_profile, profile_for_gpu
from shardplan.models.derived import kv_bytes_per_token, layer_bytes, lm_head_resident_bytes
from shardplan.rules.layout import Layout
from shardplan.solver.cost.calibration.engine_fit import ENGINE_FIELDS
from shardplan.solver.cost.calibration.ttft_fit import TTFT_FIELDS
from shardplan.solver.cost.disagg import transfer_tier

# A TensorRT-LLM run of DeepSeek-R1 FP8 on 8 + 8 B200, decode recorded as tp 8 without attention DP, at
# 4,096 in flight (TTFT 4.2 s, TPOT 74 ms: ~3,900 sequences decoding), and one at 32 in flight.
BIG = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_disagg_1024x1024_c4096_tp8_0_ep8_0_407"
SMALL = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_disagg_1024x1024_c32_tp8_0_ep8_0_402"


def _rows(run_id: str) -> list[dict[str, str]]:
    """The run's two rows (TTFT, TPOT)."""
    with open(SERVING_CSV, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["source_id"] == SOURCE and r["source"].endswith(f"row id={run_id}")]
    if len(rows) != 2:
        pytest.skip(f"run {run_id} is not in {SERVING_CSV}")
    return rows


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def small() -> list[dict[str, str]]:
    if not SERVING_CSV.is_file():
        pytest.skip(f"{SERVING_CSV} is absent")
    return _rows(SMALL)


def _copy(rows: list[dict[str, str]], key: str, **update: str) -> list[dict[str, str]]:
    return [{**r, "source": r["source"] + key, **update} for r in rows]


def test_one_measurement_is_one_run(small: list[dict[str, str]], tmp_path: Path) -> None:
    # the same run under another id (a duplicate), and under another id with a decode worker of 16 GPUs
    # (a layout conflict: the copy on fewer GPUs is kept)
    notes = small[0]["notes"].replace("1 decode worker(s) x 8 GPUs", "2 decode worker(s) x 8 GPUs")
    rows = small + _copy(small, "-again") + _copy(small, "-wider", num_gpus="24", notes=notes)
    runs, skipped = load_runs(_write(tmp_path / "p.csv", rows))
    assert len(runs) == 1 and runs[0].layout.num_gpus == 16
    assert skipped == Counter({"duplicate": 2, "layout-conflict": 2})
    # the engine column past the engine's name: the runtime image's tag, which print_versions groups by
    assert runs[0].engine_version == small[0]["engine"].removeprefix("trtllm").strip()
    assert runs[0].engine_version.startswith("0.8.1")


def test_a_repeat_of_the_same_recorded_setup_bounds_any_model(small: list[dict[str, str]], tmp_path: Path) -> None:
    """The same recorded setup measured again at half the TPOT (as with speculative decoding on, which no row
    records) is a second measurement of one configuration; a different decode pool is another configuration.
    The floor by hand: the best single TPOT for t and t / 2 is their geometric mean t / sqrt(2), 29.3 % off
    both (sqrt(2) - 1 and 1 - 1 / sqrt(2) are 0.414 and 0.293; median of the two: 35.4 %)."""
    tpot_row = next(r for r in small if r["metric"].startswith("tpot"))
    halved = [{**r, "value": str(float(r["value"]) / 2)} if r is tpot_row else r for r in small]
    notes = small[0]["notes"].replace("1 decode worker(s) x 8 GPUs", "2 decode worker(s) x 8 GPUs")
    wider = [{**r, "value": str(float(r["value"]) * 0.9)} for r in small]  # its own measurement, too
    rows = small + _copy(halved, "-mtp") + _copy(wider, "-wider", num_gpus="24", notes=notes)
    runs, _ = load_runs(_write(tmp_path / "p.csv", rows))
    assert len(runs) == 3  # three measurements: the two TPOTs differ, the third is of another setup
    configurations = Counter(recorded_configuration(r) for r in runs)
    assert sorted(configurations.values()) == [1, 2]
    count, spread, floor = repeat_spread((recorded_configuration(r), r.tpot_ms) for r in runs)
    assert count == 1 and spread == pytest.approx(1.0)
    assert floor == pytest.approx(((2 ** 0.5 - 1) + (1 - 2 ** -0.5)) / 2)


def test_a_decode_worker_that_cannot_hold_its_own_run_is_set_aside(tmp_path: Path) -> None:
    if not SERVING_CSV.is_file():
        pytest.skip(f"{SERVING_CSV} is absent")
    runs, skipped = load_runs(_write(tmp_path / "p.csv", _rows(BIG)))
    assert runs == [] and skipped == Counter({"layout-cannot-hold-run": 2})


def test_decoding_sequences_follow_littles_law(small: list[dict[str, str]], tmp_path: Path) -> None:
    run = load_runs(_write(tmp_path / "p.csv", small))[0][0]
    osl = run.problem.workload.osl
    # by hand: of 32 requests on one decode worker, the share of each one's life spent decoding
    decode_ms = (osl - 1) * run.tpot_ms
    assert decoding_per_worker(run) == pytest.approx(32 * decode_ms / (run.ttft_ms + decode_ms))
    assert 0 < decoding_per_worker(run) < 32 <= decode_worker_holds(run)
    held = DisaggRun(run.key, run.engine, run.source_model, run.label, run.problem,
                     run.layout.model_copy(update={"concurrency": 4096}), run.ttft_ms, run.tpot_ms)
    assert decode_worker_holds(held) == decode_worker_holds(run)  # memory alone, not the concurrency


def test_the_one_token_bound_by_hand(small: list[dict[str, str]], tmp_path: Path) -> None:
    run = load_runs(_write(tmp_path / "p.csv", small))[0][0]
    model, worker = run.problem.model, run.layout.decode.layout
    assert (worker.tp, worker.attn_dp, worker.expert_tp, worker.pp) == (8, 1, 1, 1)  # 32 experts per GPU
    # DeepSeek-V3: 3 dense layers, 58 MoE layers of 256 experts, top-8; FP8 weights, FP8 KV (TensorRT-LLM)
    dense = sum(layer_bytes(model, i).attention / 8 + (layer_bytes(model, i).dense_ffn
                                                      + layer_bytes(model, i).shared_experts) / 8
                for i in range(61))
    expert = layer_bytes(model, 10).expert
    kv_token = kv_bytes_per_token(model)  # MLA's latent, replicated on each of the 8 GPUs
    assert kv_token == 61 * 576
    batch = 30
    context = 1024 + 512
    # any routing: top-8 spread one per GPU; uniform: each of a GPU's 32 experts touched with 1 - (1 - 8/256)^30
    any_routing = dense + lm_head_resident_bytes(model) / 8 + 58 * expert + batch * context * kv_token
    uniform = any_routing + 58 * (32 * (1 - (1 - 8 / 256) ** batch) - 1) * expert
    hbm = 8.0e12
    assert one_token_bound_ms(run, batch) == pytest.approx(any_routing / hbm * 1e3)
    assert one_token_bound_ms(run, batch, uniform_routing=True) == pytest.approx(uniform / hbm * 1e3)
    assert math.isclose(run.problem.cluster.gpu.hbm_bytes_per_s, hbm)


@pytest.mark.parametrize("engine", ["trtllm", "sglang", "vllm"])
def test_gb200_engine_profiles_are_the_b200_engine_fields_on_gb200_hardware(engine: str) -> None:
    stored = profile_for_gpu("GB200-NVL72", engine)
    b200, hardware = get_profile(f"b200-sxm-{engine}"), get_profile("gb200-nvl72")
    # regenerate with `python -m benchmarks.accuracy.disagg --write-same-die-profiles` after a B200 refit
    assert stored == same_die_profile(b200, hardware)
    assert stored.name == f"gb200-nvl72-{engine}" and stored.engine_default and stored.gpu == "GB200-NVL72"
    for field in (*ENGINE_FIELDS, *TTFT_FIELDS, "max_batch", "max_num_tokens", "moe_routed_token_ns"):
        assert getattr(stored, field) == getattr(b200, field), field
    for field in ("gemm_efficiency", "scaleup_bw_efficiency", "runtime_overhead_gib", "step_overhead_us"):
        assert getattr(stored, field) == getattr(hardware, field), field


def test_pools_stay_on_the_gpus_the_row_used() -> None:
    # 1 prefill worker of 4 GPUs and 1 decode worker of 8 recorded on 12 GB200: aligned, the decode worker
    # would sit on GPUs 8-15, past the 12, and the cache would be priced over the NICs; right after the
    # prefill pool (GPUs 4-11) both stay in the rack's one NVLink domain.
    prefill, decode = Layout.even(61, 1, tp=4), Layout.even(61, 1, tp=8)
    gb200 = parse_cluster("12xGB200")
    layout = run_layout(prefill, 1, decode, 1, 8, gb200, (None, None))
    assert layout.decode.first_gpu == 4 and layout.decode.gpus == range(4, 12)
    assert transfer_tier(layout, gb200).value == "scale_up"
    # 8 + 8 B200 fill two nodes as placed: the aligned placement stands, and the NICs join the pools.
    b200 = parse_cluster("16xB200")
    placed = run_layout(Layout.even(61, 1, tp=8), 1, decode, 1, 8, b200, (None, 64))
    assert placed.decode.first_gpu == 8 and placed.decode.max_batch == 64
    assert transfer_tier(placed, b200).value == "scale_out"
