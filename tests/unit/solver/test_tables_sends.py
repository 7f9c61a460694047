"""The tables price a stage-to-stage send once per link tier (fuzz --no-limit run G: pricing every boundary on
its own was a fifth of ``solve --rate``'s bounds on 256 GPUs). Held to the per-boundary pricing it replaced:
every boundary of every shape, at several microbatches, on clusters whose boundaries cross one tier or both."""

from __future__ import annotations

import pytest

from shardplan.solver.cost.evaluate import NS_PER_S, decode_context, prefill_chunk, resolve_profile
from shardplan.solver.cost.operators import Phase, Step
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem


@pytest.mark.parametrize(("model", "cluster", "batch"), [
    ("llama-3.1-8b", "4x8xH100", 32),  # boundaries inside a node and between nodes
    ("qwen3-30b-a3b", "2x8xA100", 8),  # MoE
    ("mixtral-8x7b", "2x72xGB200", 64),  # NVL72 domains
    ("llama-3.1-8b", "8xGH200", 1),  # one GPU per node: every boundary crosses nodes
    ("llama-3.1-8b", "8xH100", 16),  # one node: no boundary crosses
])
def test_sends_equal_the_per_boundary_pricing(model: str, cluster: str, batch: int) -> None:
    p = problem(model, cluster, batch=batch, isl=2000, osl=200)
    profile = resolve_profile(p)
    space = SearchSpace(p, profile)
    tables = build_tables(p, space)
    checked = 0
    for shape in space.shapes:
        for micro in sorted({1, batch, 3}):
            entry = tables._price_step(shape, micro)[0]
            ctx = tables._contexts[shape]
            dec = Step(Phase.DECODE, micro, 1, decode_context(p))
            pre = Step(Phase.PREFILL, prefill_chunk(p, profile, micro), p.workload.isl, p.workload.isl)
            assert len(entry.send_decode) == len(entry.send_prefill) == space.max_stages - 1
            for s in range(space.max_stages - 1):
                src, dst = s * shape.gpus, (s + 1) * shape.gpus
                if dst >= p.cluster.num_gpus:
                    want = (0, 0)
                else:
                    want = (round(ctx.send_recv_s(dec, src, dst) * NS_PER_S),
                            round(ctx.send_recv_s(pre, src, dst) * NS_PER_S))
                assert (entry.send_decode[s], entry.send_prefill[s]) == want, (shape, micro, s)
                checked += 1
    assert checked > 0
