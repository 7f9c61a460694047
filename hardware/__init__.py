"""GPU and cluster specs, their presets, and the device-level cost primitives.

Depends on nothing of ours except ``shardplan.models.errors.SpecError``.
"""

from shardplan.hardware.cluster import ClusterSpec, parse_cluster
from shardplan.hardware.gpu import GPUSpec, get_gpu, list_gpus

__all__ = ["ClusterSpec", "GPUSpec", "get_gpu", "list_gpus", "parse_cluster"]
