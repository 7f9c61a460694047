"""ClusterSpec: the text form, id layout, node and domain membership, invariants."""

from __future__ import annotations

import pytest

from shardplan.hardware import ClusterSpec, get_gpu, parse_cluster
from shardplan.models.errors import SpecError


@pytest.mark.parametrize(
    "text,nodes,per_node,domain",
    [
        ("8xH100", 1, 8, 8),
        ("4xH100", 1, 4, 4),  # a partial node is its own (smaller) domain
        ("16xH100", 2, 8, 8),
        ("2x8xH100", 2, 8, 8),
        ("4x8xH200", 4, 8, 8),
        ("2x4xH100", 2, 4, 4),
        ("72xGB200", 18, 4, 72),  # one NVL72 rack: 18 trays of 4, one NVLink domain
        ("144xGB200", 36, 4, 72),
        ("2x72xGB200", 36, 4, 72),  # A racks when B is the rack size
        ("18x4xGB200", 18, 4, 72),
        ("8xGB200", 2, 4, 8),  # two trays of one rack share its NVLink
        ("8xMI300X", 1, 8, 8),
        ("8xL40S", 1, 8, 8),  # PCIe server: the node is the domain, priced at PCIe
        ("8xGH200", 8, 1, 1),  # one superchip per node, no NVLink between nodes
    ],
)
def test_valid_forms(text, nodes, per_node, domain):
    cluster = parse_cluster(text)
    assert (cluster.num_nodes, cluster.gpus_per_node, cluster.scaleup_domain_gpus) == (nodes, per_node, domain)
    assert cluster.num_gpus == nodes * per_node


@pytest.mark.parametrize("text", ["  2 X 8 x h100  ", "2x8xH100-SXM-80GB", "2×8×h100", "2x8xnvidia_h100_sxm"])
def test_whitespace_case_and_aliases(text):
    assert parse_cluster(text) == parse_cluster("2x8xH100")


def test_defaults_come_from_the_gpu():
    cluster = parse_cluster("2x8xH100")
    assert cluster.gpu is get_gpu("h100")
    assert (cluster.scaleup_gb_per_s, cluster.scaleout_gb_per_s) == (450, 50)
    assert (cluster.scaleup_latency_us, cluster.scaleout_latency_us) == (1.0, 5.0)
    assert cluster.scaleup_bytes_per_s == 450e9 and cluster.scaleout_latency_s == pytest.approx(5e-6)


@pytest.mark.parametrize(
    "text,words",
    [
        ("0xH100", ["positive", "0"]),
        ("-1xH100", ["positive", "-1"]),
        ("8x0xH100", ["positive", "0"]),
        ("banana", ["cannot read", "banana"]),
        ("", ["cannot read"]),
        ("H100", ["cannot read"]),
        ("x8xH100", ["cannot read"]),
        ("3x8", ["names no GPU"]),
        ("12xH100", ["12", "8-GPU nodes"]),
        ("1x16xH100", ["at most 8 GPUs", "16"]),
        ("2x8xGB200", ["at most 4 GPUs", "72-GPU rack"]),
        ("76xGB200", ["76", "72-GPU", "whole"]),
        ("19x4xGB200", ["76", "72-GPU"]),
    ],
)
def test_bad_strings_raise_cluster_error(text, words):
    with pytest.raises(SpecError) as info:
        parse_cluster(text)
    assert info.value.field == "cluster"
    for word in words:
        assert word in str(info.value)


def test_unknown_gpu_in_a_cluster_string_names_the_cluster():
    # the GPU is part of --cluster's text: "gpu" is calibrate --gpu's name, not one a cluster's user typed
    with pytest.raises(SpecError) as info:
        parse_cluster("8xH999")
    assert info.value.field == "cluster"
    assert info.value.reason.startswith("unknown GPU 'H999'; presets: ")


def test_a_list_of_clusters_is_refused_as_one():
    with pytest.raises(SpecError) as info:
        parse_cluster("2x8xH100,1x8xH200")
    assert info.value.field == "cluster" and "is a list; a cluster is one GPU type" in info.value.reason


def test_ids_are_node_major():
    cluster = parse_cluster("2x8xH100")
    assert cluster.gpu_ids == tuple(range(16))
    assert [cluster.node_of(g) for g in (0, 7, 8, 15)] == [0, 0, 1, 1]
    assert cluster.gpus_of_node(1) == tuple(range(8, 16))
    assert cluster.nodes_of([9, 3, 8, 2]) == (0, 1)


def test_membership_two_hgx_nodes_vs_one_nvl72_rack():
    hgx = parse_cluster("2x8xH100")
    assert [hgx.domain_of(g) for g in (0, 7, 8)] == [0, 0, 1]
    assert not hgx.spans_scaleout(range(8))
    assert hgx.spans_scaleout([7, 8])  # neighbours by id, but on different nodes

    rack = parse_cluster("72xGB200")
    assert rack.num_nodes == 18 and rack.num_domains == 1
    assert rack.node_of(4) == 1 and rack.node_of(71) == 17
    assert rack.domain_of(0) == rack.domain_of(71) == 0
    assert rack.nodes_of([0, 4, 71]) == (0, 1, 17)
    assert not rack.spans_scaleout(range(72))  # crosses 18 trays, still one NVLink domain

    two_racks = parse_cluster("2x72xGB200")
    assert two_racks.domain_of(71) == 0 and two_racks.domain_of(72) == 1
    assert two_racks.spans_scaleout([71, 72])
    assert two_racks.gpus_of_domain(1) == tuple(range(72, 144))


class _NumpyLikeInt:
    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_out_of_range_ids_are_spec_errors():
    cluster = parse_cluster("8xH100")
    assert cluster.node_of(_NumpyLikeInt(3)) == 0  # anything with __index__ is an id
    for bad in (8, -1, True, 2.0, "1"):
        with pytest.raises(SpecError) as info:
            cluster.node_of(bad)
        assert info.value.field == "gpus"
    with pytest.raises(SpecError):
        cluster.gpus_of_node(1)


def test_describe_is_one_line():
    text = parse_cluster("72xGB200").describe()
    assert "\n" not in text
    assert text.startswith("18 nodes x 4 GB200-NVL72 = 72 GPUs; scale-up one 72-GPU domain at 900 GB/s")
    assert parse_cluster("1xH100").describe().startswith("1 node x 1 H100-SXM = 1 GPU;")


def test_from_gpu_overrides_and_invariants():
    h100 = get_gpu("h100")
    slow = ClusterSpec.from_gpu(h100, 2, scaleout_gb_per_s=25.0, scaleout_latency_us=8.0)
    assert (slow.scaleout_gb_per_s, slow.scaleout_latency_us, slow.scaleup_gb_per_s) == (25.0, 8.0, 450)
    quad = ClusterSpec.from_gpu(get_gpu("gh200"), 1, 4)  # a quad-GH200 node: the node is the domain
    assert quad.scaleup_domain_gpus == 4 and not quad.spans_scaleout(range(4))

    with pytest.raises(SpecError) as info:
        ClusterSpec.from_gpu(h100, 2, 8, scaleup_domain_gpus=12)  # neither holds nor splits a node
    assert info.value.field == "scaleup_domain_gpus"
    with pytest.raises(SpecError) as info:
        ClusterSpec.from_gpu(h100, 3, 8, scaleup_domain_gpus=16)  # 24 GPUs are not whole 16-GPU domains
    assert info.value.field == "scaleup_domain_gpus"
    with pytest.raises(SpecError) as info:
        ClusterSpec.from_gpu(h100, 0)
    assert info.value.field.startswith("cluster.num_nodes")
    with pytest.raises(SpecError):
        ClusterSpec.from_gpu(h100, 1, scaleup_gb_per_s=-1.0)
