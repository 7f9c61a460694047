"""The vocabulary of a disaggregated deployment: pools, their placement, and the pair's rules."""

from __future__ import annotations

import pytest

from shardplan.hardware import parse_cluster
from shardplan.rules.catalog import get_rule
from shardplan.rules.disagg import DisaggLayout, Pool, alignment_gpus, pool_diagnostics
from shardplan.rules.layout import Layout


def worker(tp: int = 1, pp: int = 1, attn_dp: int = 1, layers: int = 80) -> Layout:
    return Layout.even(layers, pp, tp=tp, attn_dp=attn_dp)


def test_the_decode_pool_starts_on_the_first_aligned_gpu_after_the_prefill_pool() -> None:
    cluster = parse_cluster("3x8xH100")
    # 3 prefill workers of 4 GPUs end at GPU 11; a tp=8 worker may start at 0, 8, 16: it starts at 16.
    layout = DisaggLayout.place(worker(tp=4), 3, worker(tp=8), 1, 64, cluster)
    assert layout.prefill.gpus == range(0, 12)
    assert layout.decode.gpus == range(16, 24)
    assert layout.num_gpus == 20
    assert pool_diagnostics(layout, cluster) == []
    # tp=4 decode workers may start at GPU 12.
    layout = DisaggLayout.place(worker(tp=4), 3, worker(tp=4), 2, 64, cluster)
    assert layout.decode.gpus == range(12, 20)


def test_too_many_gpus_is_dis_001_with_both_counts() -> None:
    cluster = parse_cluster("2x8xH100")
    layout = DisaggLayout.place(worker(tp=4), 3, worker(tp=8), 1, 8, cluster)
    found = pool_diagnostics(layout, cluster)
    assert [d.rule for d in found][:1] == ["DIS-001"]
    assert "3 x 4 prefill + 1 x 8 decode = 20 GPUs; the cluster has 16" in found[0].message


def test_overlapping_or_misaligned_pools_are_dis_002() -> None:
    cluster = parse_cluster("2x8xH100")
    p = Pool(role="prefill", workers=1, layout=worker(tp=4))
    overlapping = DisaggLayout(prefill=p, decode=Pool(role="decode", workers=1, layout=worker(tp=4), first_gpu=0),
                               concurrency=4)
    assert {d.rule for d in pool_diagnostics(overlapping, cluster)} == {"DIS-002"}
    misaligned = DisaggLayout(prefill=p, decode=Pool(role="decode", workers=1, layout=worker(tp=8), first_gpu=4),
                              concurrency=4)
    messages = [d.message for d in pool_diagnostics(misaligned, cluster)]
    assert any("starts at GPU 4, not on a multiple of 8" in m for m in messages)
    beyond = DisaggLayout(prefill=p, decode=Pool(role="decode", workers=2, layout=worker(tp=4), first_gpu=12),
                          concurrency=4)
    assert any("ends at GPU 19" in d.message for d in pool_diagnostics(beyond, cluster))


def test_alignment_is_the_stage_or_the_domain() -> None:
    cluster = parse_cluster("4x8xH100")
    assert alignment_gpus(worker(tp=2), cluster) == 2
    assert alignment_gpus(worker(tp=8, attn_dp=2), cluster) == 8  # a 16-GPU stage fills two domains


def test_a_worker_is_one_replica_and_the_pools_hold_the_same_model() -> None:
    with pytest.raises(ValueError, match="prefill dp"):
        Pool(role="prefill", workers=1, layout=Layout.even(80, 1, dp=2))
    with pytest.raises(ValueError, match="layers"):
        DisaggLayout(prefill=Pool(role="prefill", workers=1, layout=worker()),
                     decode=Pool(role="decode", workers=1, layout=worker(layers=40)), concurrency=1)
    with pytest.raises(ValueError, match="roles"):
        DisaggLayout(prefill=Pool(role="decode", workers=1, layout=worker()),
                     decode=Pool(role="decode", workers=1, layout=worker()), concurrency=1)


def test_the_pair_rules_are_in_the_registry() -> None:
    assert get_rule("pools-exceed-cluster").id == "DIS-001"
    assert get_rule("DIS-002").name == "pools-overlap"
