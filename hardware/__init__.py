"""GPU and cluster specs, their presets, and the device-level cost primitives.

Depends on nothing of ours except ``shardplan.models.errors.SpecError``.
"""

from shardplan.hardware.cluster import ClusterSpec, parse_cluster
from shardplan.hardware.collectives import (
    Collective,
    Tier,
    collective_steps,
    collective_time_on_tier_s,
    collective_time_s,
    compute_time_s,
    memory_time_s,
    oneshot_allreduce_s,
    tier_of,
)
from shardplan.hardware.gpu import GPUSpec, get_gpu, list_gpus

__all__ = [
    "ClusterSpec",
    "Collective",
    "GPUSpec",
    "Tier",
    "collective_steps",
    "collective_time_on_tier_s",
    "collective_time_s",
    "compute_time_s",
    "get_gpu",
    "list_gpus",
    "memory_time_s",
    "oneshot_allreduce_s",
    "parse_cluster",
    "tier_of",
]
