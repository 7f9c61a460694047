"""Every CP-SAT model the encoding builds is valid: no domain past kint64max / 2, no row whose terms could
sum past kint64max (robust16). On 4096x8xH200 a decided batch's bound times the stage-time bound passed
64 bits in ``_post_user_latency`` and the explanation crashed (TypeError from ``Domain``); huge ISL, OSL
and batches reach the same rows. Bounds that fit are never clamped, and the split forms that replace
products past 64 bits give the same integers as the products (checked here by brute force)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

import shardplan.models as models_dir
from shardplan.solver.encode import VALUE_CAP, Encoding, build_model
from shardplan.solver.space import SearchSpace
from tests.factory import problem

EXTREMES = {
    # the reproducer: 32,768 GPUs x 1,024 sequences x a stage-time bound
    "reproducer": dict(model="qwen3-30b-a3b", cluster="4096x8xH200", objective="throughput", tpot_ms=5, isl=128,
                       osl=2, mem_cap_gib=20),
    "moe-context-isl": dict(model="qwen3-30b-a3b", cluster="4096x8xH200", objective="throughput", isl=40959, osl=1),
    "moe-trtllm-no-mixing": dict(model="qwen3-30b-a3b", cluster="4096x8xH200", objective="throughput", isl=40000,
                                 osl=959, engine="trtllm"),
    "dense-max-batch-long-prompt": dict(model="llama-3.1-405b", cluster="4096x8xH200", batch=1 << 20, isl=131000,
                                        osl=72),
    "one-gpu-max-batch-long-output": dict(model="llama-3.1-405b", cluster="1xH100", batch=1 << 20, isl=1,
                                          osl=131000, engine="trtllm"),
    "dense-batch-ttft": dict(model="llama-3.1-8b", cluster="4096x8xH200", objective="throughput", batch=1 << 20,
                             isl=131000, osl=72, engine="trtllm", ttft_ms=1e15),
}


@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_extreme_problems_build_valid_models(name: str) -> None:
    model = build_model(problem(**EXTREMES[name]))
    assert model.enc.cp.validate() == ""


def test_a_ten_million_token_request_builds_a_valid_model(tmp_path) -> None:
    """A 9M-token prompt and 1M output tokens (a 16M-token context) on 512 GPUs: the TTFT wait's bound was
    clamped at VALUE_CAP and its row, WAIT_DIV x wait, passed 64 bits, so CP-SAT called the model invalid
    and `solve --objective throughput` ended as 'could not decide which rules conflict (MODEL_INVALID)',
    exit 2 for a valid request. The wait is now bounded by VALUE_CAP / WAIT_DIV."""
    config = json.loads((Path(models_dir.__file__).parent / "configs" / "llama-3.1-8b.json").read_text())
    config["max_position_embeddings"] = 1 << 24
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    enc = build_model(problem(str(path), "64x8xH100", objective="throughput", isl=9_000_000, osl=1_000_000)).enc
    assert "ttft wait" in enc.clamped
    assert enc.cp.validate() == ""


ORDINARY = [
    dict(),
    dict(objective="throughput"),
    dict(objective="throughput", batch=64, tpot_ms=50),
    dict(model="llama-3.1-70b", cluster="8xH100", objective="throughput", mem_cap_gib=60, ttft_ms=500),
    dict(model="qwen3-30b-a3b", cluster="2x8xH100", objective="throughput", engine="trtllm"),
    dict(model="qwen3-30b-a3b", cluster="2x8xH100", batch=16, engine="sglang", isl=4000, osl=500),
]


@pytest.mark.parametrize("kw", ORDINARY, ids=range(len(ORDINARY)))
def test_bounds_that_fit_are_never_clamped(kw: dict) -> None:
    """Ordinary problems are encoded as before the cap: no bound reached it, no product was split."""
    enc = build_model(problem(**kw)).enc
    assert enc.clamped == []
    assert enc.cp.validate() == ""


class _Rows:
    """Just what ``Encoding._post_thousandths`` touches: a model and the clamp record."""

    def __init__(self) -> None:
        self.cp = cp_model.CpModel()
        self.clamped: list[str] = []


def _thousandths(per_mille: int, work: int, chunk: int, work_hi: int) -> tuple[int, list[str]]:
    rows = _Rows()
    cp = rows.cp
    work_var = cp.new_int_var(work, work, "work")
    chunk_var = cp.new_int_var(chunk, chunk, "chunk")
    paid = cp.new_int_var(0, work_hi + chunk, "paid")
    queue = cp.new_int_var(0, work_hi, "queue")
    cp.add_multiplication_equality(paid, [chunk_var, queue])  # as the encoding's chunk x queue
    Encoding._post_thousandths(rows, paid, chunk_var, per_mille, work_var, (work_hi + chunk, chunk, work_hi))  # type: ignore[arg-type]
    cp.minimize(paid)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(cp) == cp_model.OPTIMAL
    return solver.value(paid), rows.clamped


@pytest.mark.parametrize("per_mille,work,chunk", list(itertools.product(
    [0, 1, 50, 999, 1000], [0, 1, 999, 1000, 12345], [1, 3, 64])))
def test_the_split_thousandth_is_the_direct_one(per_mille: int, work: int, chunk: int) -> None:
    """paid = chunk x ceil(per_mille x work / (1000 x chunk)) in both forms: the direct rows (small bounds)
    and the split one (a work bound whose per-mille multiple passes 64 bits)."""
    expected = chunk * math.ceil(per_mille * work / (1000 * chunk))
    direct, direct_clamped = _thousandths(per_mille, work, chunk, work_hi=10**6)
    split, split_clamped = _thousandths(per_mille, work, chunk, work_hi=VALUE_CAP)
    assert (direct, split) == (expected, expected)
    assert (direct_clamped, split_clamped) == ([], [f"{per_mille}/1000 x work split"])


def test_a_decided_batch_is_bounded_by_the_widest_attention_groups() -> None:
    """The latency rows size the batch by max attn_dp x the batch limit (S x q within the limit), which is
    what the batch variable can reach: solving for the largest batch finds exactly that bound."""
    p = problem("qwen3-30b-a3b", "2x8xH100", objective="throughput", max_batch=3)
    enc = build_model(p).enc
    space = SearchSpace(p, enc.tables.profile)  # type: ignore[arg-type]
    enc.cp.maximize(enc.batch)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 60
    assert solver.solve(enc.cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert solver.value(enc.batch) == max(o.attn_dp for o in space.shapes) * space.batch_limit
