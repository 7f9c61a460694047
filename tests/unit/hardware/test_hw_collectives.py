"""Cost primitives against hand-computed numbers.

Defaults used below: H100-SXM NVLink 450 GB/s per direction, 1 us per scale-up step; NIC 50 GB/s,
5 us per scale-out step.
"""

from __future__ import annotations

import pytest

from shardplan.hardware import (
    Collective,
    Tier,
    collective_steps,
    collective_time_s,
    compute_time_s,
    get_gpu,
    memory_time_s,
    parse_cluster,
    tier_of,
)
from shardplan.models.errors import SpecError

GIB = 2**30
MIB = 2**20


@pytest.fixture(scope="module")
def one_node():
    return parse_cluster("8xH100")


@pytest.fixture(scope="module")
def two_nodes():
    return parse_cluster("2x8xH100")


def test_compute_time_hand_computed():
    h100 = get_gpu("h100")
    # 1 PFLOP at 989.4 TFLOPS x 0.5 = 1e15 / 494.7e12 = 2.021427 s
    assert compute_time_s(1e15, h100, "bf16", efficiency=0.5) == pytest.approx(2.021427, rel=1e-6)
    # FP8 doubles the rate; FP4 falls back to it on Hopper
    assert compute_time_s(1e15, h100, "fp8") == pytest.approx(1e15 / 1978.9e12)
    assert compute_time_s(1e15, h100, "fp4") == compute_time_s(1e15, h100, "fp8")
    assert compute_time_s(0.0, h100, "bf16") == 0.0


def test_memory_time_hand_computed():
    # 80 GiB = 85,899,345,920 B at 3.35 TB/s = 25.641596 ms; at 80 % efficiency 32.051995 ms
    h100 = get_gpu("h100")
    assert memory_time_s(80 * GIB, h100) == pytest.approx(25.641596e-3, rel=1e-6)
    assert memory_time_s(80 * GIB, h100, efficiency=0.8) == pytest.approx(32.051995e-3, rel=1e-6)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_negative_or_nan_work_is_rejected(bad):
    h100 = get_gpu("h100")
    with pytest.raises(SpecError) as info:
        compute_time_s(bad, h100, "bf16")
    assert info.value.field == "flops"
    with pytest.raises(SpecError):
        memory_time_s(bad, h100)
    with pytest.raises(SpecError) as info:
        memory_time_s(1.0, h100, efficiency=0.0)
    assert info.value.field == "efficiency"


@pytest.mark.parametrize(
    "op,n,expected",
    [
        (Collective.ALL_REDUCE, 8, (14, 1 / 8)),
        (Collective.ALL_GATHER, 8, (7, 1 / 8)),
        (Collective.REDUCE_SCATTER, 4, (3, 1 / 4)),
        (Collective.ALL_TO_ALL, 16, (15, 1 / 16)),
        (Collective.SEND_RECV, 2, (1, 1.0)),
        (Collective.ALL_REDUCE, 1, (0, 0.0)),
    ],
)
def test_collective_steps(op, n, expected):
    assert collective_steps(op, n) == expected


def test_ring_all_reduce_1gib_over_8_gpus_in_one_node(one_node):
    # 2(n-1) = 14 steps, each 1 µs + (1 GiB / 8 = 134,217,728 B) / 450e9 B/s = 1 µs + 298.2616 µs
    # total = 14 x 299.2616 µs = 4.189663 ms
    t = collective_time_s(Collective.ALL_REDUCE, GIB, range(8), one_node)
    assert t == pytest.approx(4.189663e-3, rel=1e-6)


def test_a_group_of_one_costs_nothing(one_node):
    for op in Collective:
        assert collective_time_s(op, GIB, [3], one_node) == 0.0


def test_the_same_group_spanning_two_nodes_costs_more(two_nodes):
    inside = collective_time_s(Collective.ALL_REDUCE, 64 * MIB, [0, 1, 2, 3], two_nodes)
    across = collective_time_s(Collective.ALL_REDUCE, 64 * MIB, [0, 1, 8, 9], two_nodes)
    assert tier_of([0, 1, 2, 3], two_nodes) is Tier.SCALE_UP
    assert tier_of([0, 1, 8, 9], two_nodes) is Tier.SCALE_OUT
    # 6 steps of 16 MiB: 6 x (1 µs + 37.2827 µs) = 229.696 µs inside; 6 x (5 µs + 335.544 µs) = 2043.26 µs across
    assert inside == pytest.approx(229.696e-6, rel=1e-5)
    assert across == pytest.approx(2043.26e-6, rel=1e-5)
    assert across > 8 * inside


def test_all_to_all_over_16_gpus_on_two_nodes_uses_the_nic(two_nodes):
    # 15 steps, each 5 µs + (16 MiB / 16 = 1,048,576 B) / 50e9 B/s = 5 µs + 20.97152 µs
    t = collective_time_s(Collective.ALL_TO_ALL, 16 * MIB, range(16), two_nodes)
    assert t == pytest.approx(15 * 25.97152e-6, rel=1e-6)
    nvlink_price = 15 * (1e-6 + MIB / 450e9)
    assert t > 5 * nvlink_price


def test_a_whole_nvl72_rack_stays_on_nvlink():
    rack = parse_cluster("72xGB200")
    # 142 steps of 1 GiB / 72 over 900 GB/s at 1 µs each: 142 µs + 142 x 16.570 µs = 2.495 ms
    t = collective_time_s(Collective.ALL_REDUCE, GIB, range(72), rack)
    assert tier_of(range(72), rack) is Tier.SCALE_UP
    assert t == pytest.approx(142e-6 + 142 * GIB / 72 / 900e9, rel=1e-9)
    assert t == pytest.approx(2.4950e-3, rel=1e-4)


def test_efficiency_and_latency_scale(one_node):
    base = collective_time_s(Collective.ALL_GATHER, 8 * MIB, range(8), one_node)
    # 7 steps of 1 MiB: alpha part 7 µs, beta part 7 x 2.330169 µs = 16.311182 µs
    assert base == pytest.approx(7e-6 + 16.311182e-6, rel=1e-6)
    slower = collective_time_s(
        Collective.ALL_GATHER, 8 * MIB, range(8), one_node, bw_efficiency=0.5, latency_scale=2.0
    )
    assert slower == pytest.approx(2 * base, rel=1e-9)
    no_latency = collective_time_s(Collective.ALL_GATHER, 8 * MIB, range(8), one_node, latency_scale=0.0)
    assert no_latency == pytest.approx(16.311182e-6, rel=1e-6)


def test_send_recv_is_one_step_of_the_whole_message(two_nodes):
    # pipeline hand-off between nodes: 5 µs + 100 MB / 50 GB/s = 2.005 ms
    assert collective_time_s(Collective.SEND_RECV, 100e6, [7, 8], two_nodes) == pytest.approx(2.005e-3)


@pytest.mark.parametrize(
    "gpus,field",
    [([], "gpus"), ([0, 0], "gpus"), ([0, 16], "gpus"), ([99], "gpus")],
)
def test_bad_groups(two_nodes, gpus, field):
    with pytest.raises(SpecError) as info:
        collective_time_s(Collective.ALL_REDUCE, MIB, gpus, two_nodes)
    assert info.value.field == field


def test_bad_sizes_and_factors(one_node):
    with pytest.raises(SpecError) as info:
        collective_time_s(Collective.ALL_REDUCE, -1, range(8), one_node)
    assert info.value.field == "nbytes"
    with pytest.raises(SpecError) as info:
        collective_time_s(Collective.ALL_REDUCE, MIB, range(8), one_node, bw_efficiency=0.0)
    assert info.value.field == "bw_efficiency"
    with pytest.raises(SpecError) as info:
        collective_time_s(Collective.ALL_REDUCE, MIB, range(8), one_node, latency_scale=-1.0)
    assert info.value.field == "latency_scale"


def test_ops_accept_their_string_values(one_node):
    assert collective_time_s("all_reduce", GIB, range(8), one_node) == collective_time_s(
        Collective.ALL_REDUCE, GIB, range(8), one_node
    )
