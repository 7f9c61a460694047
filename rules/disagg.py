"""A disaggregated deployment: a prefill pool and a decode pool, each of identical workers, and the
rules that judge one (DESIGN.md "Cost model", disaggregated serving; issue 15).

A **pool** is ``workers`` copies of one worker ``Layout`` (a replica: its stages, tp, sp, attention groups
and expert-tp; ``dp`` is 1 and ``batch`` is the sequences one worker holds as the cost model priced it).
The prefill pool runs every prompt and hands its KV cache to a worker of the decode pool, which
generates the remaining tokens. The pools occupy disjoint runs of GPU ids, prefill first; each starts
where a worker of its shape may start: on a multiple of its alignment unit (a stage's GPUs, or the
scale-up domain when a stage fills whole domains), so every worker sees the same links as a worker at
GPU 0, which is where the per-pool rules and the cost model look. The whole deployment holds
``concurrency`` requests in flight (closed loop).

Rules here (``DISAGG_RULES``) judge what belongs to the pair: the GPU budget and the placement of the
pools. Everything a single layout must keep (the catalog's TP-, EP-, MEM- ... rules) is checked per pool
by ``check_disagg`` on each pool's own plan; the SLA rules judge the deployment's metrics. No CP-SAT
and no pricing here: the solver's ``solver/cost/disagg.py`` prices a ``DisaggLayout``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from shardplan.hardware import ClusterSpec
from shardplan.models.errors import SpecError
from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.layout import Layout

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, Role] = ("prefill", "decode")


class Pool(BaseModel):
    """``workers`` identical workers of one role, from GPU ``first_gpu`` on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    workers: PositiveInt = Field(description="identical workers in the pool")
    layout: Layout = Field(description="one worker's layout (dp = 1); batch: sequences one worker holds")
    first_gpu: NonNegativeInt = Field(default=0, description="global id of the pool's first GPU")
    max_batch: PositiveInt | None = Field(
        default=None, description="most sequences one worker holds at once (the engine's batch limit); "
        "None: what the concurrency gives it, up to the profile's limit",
    )

    @model_validator(mode="after")
    def _one_replica(self) -> Pool:
        if self.layout.dp != 1:
            raise SpecError(f"{self.role} dp", f"a worker is one replica (dp = 1); give workers={self.layout.dp}")
        return self

    @property
    def gpus_per_worker(self) -> int:
        return self.layout.gpus_per_replica

    @property
    def num_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def gpus(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.num_gpus)

    def worker_gpus(self, worker: int) -> range:
        first = self.first_gpu + worker * self.gpus_per_worker
        return range(first, first + self.gpus_per_worker)

    def pool_layout(self) -> Layout:
        """The pool as one layout of ``workers`` replicas (what the per-pool rules judge)."""
        return self.layout.model_copy(update={"dp": self.workers})


def alignment_gpus(layout: Layout, cluster: ClusterSpec) -> int:
    """Where a worker of ``layout`` may start: a multiple of its stage's GPUs when a stage fits in a
    scale-up domain, else of the domain (ALN-001 makes one divide the other)."""
    return min(layout.gpus_per_stage, cluster.scaleup_domain_gpus)


def decode_offset(prefill: Pool, decode_layout: Layout, cluster: ClusterSpec) -> int:
    """The decode pool's first GPU: the first aligned id after the prefill pool."""
    unit = alignment_gpus(decode_layout, cluster)
    end = prefill.first_gpu + prefill.num_gpus
    return -(-end // unit) * unit


class DisaggLayout(BaseModel):
    """A prefill pool, a decode pool and the requests in flight over both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: Pool
    decode: Pool
    concurrency: PositiveInt = Field(description="requests in flight over the whole deployment (closed loop)")

    @model_validator(mode="after")
    def _roles(self) -> DisaggLayout:
        if self.prefill.role != "prefill" or self.decode.role != "decode":
            raise SpecError("pools", f"roles are {self.prefill.role} and {self.decode.role}; expected prefill, decode")
        if self.prefill.layout.num_layers != self.decode.layout.num_layers:
            raise SpecError("stages", f"the prefill worker holds {self.prefill.layout.num_layers} layers, "
                                      f"the decode worker {self.decode.layout.num_layers}")
        return self

    @classmethod
    def place(cls, prefill: Layout, prefill_workers: int, decode: Layout, decode_workers: int,
              concurrency: int, cluster: ClusterSpec, max_batch: tuple[int | None, int | None] = (None, None),
              ) -> DisaggLayout:
        """The pools placed from GPU 0: prefill first, decode from the next aligned id; ``max_batch``:
        each role's batch limit per worker (None: none beyond the profile's)."""
        p = Pool(role="prefill", workers=prefill_workers, layout=prefill, max_batch=max_batch[0])
        d = Pool(role="decode", workers=decode_workers, layout=decode, first_gpu=decode_offset(p, decode, cluster),
                 max_batch=max_batch[1])
        return cls(prefill=p, decode=d, concurrency=concurrency)

    @property
    def pools(self) -> tuple[Pool, Pool]:
        return self.prefill, self.decode

    @property
    def num_gpus(self) -> int:
        """GPUs the workers use (the alignment gap between the pools, if any, is not counted)."""
        return self.prefill.num_gpus + self.decode.num_gpus


class DisaggRule(Rule):
    """A rule on the pair of pools. It is never posted on the colocated model (``applies`` is False
    there); ``check_layout`` judges a ``DisaggLayout`` on a cluster."""

    def applies(self, problem: Any) -> bool:
        return False

    def check_layout(self, layout: DisaggLayout, cluster: ClusterSpec) -> list[Diagnostic]:
        raise NotImplementedError


class PoolsFitCluster(DisaggRule):
    id = "DIS-001"
    name = "pools-exceed-cluster"
    statement = "prefill workers x their GPUs + decode workers x theirs is at most the cluster's GPUs"
    source = "003 §1 (GPUs used), DESIGN.md (disaggregated serving)"
    kind = Kind.STRUCTURAL
    example_bad = "3 prefill workers of tp=4 and 1 decode worker of tp=8 on 16 GPUs (20 GPUs)"
    example_good = "1 prefill worker of tp=4 and 1 decode worker of tp=8 on 16 GPUs"

    def check_layout(self, layout: DisaggLayout, cluster: ClusterSpec) -> list[Diagnostic]:
        p, d = layout.prefill, layout.decode
        if layout.num_gpus > cluster.num_gpus:
            return [self.error(f"{p.workers} x {p.gpus_per_worker} prefill + {d.workers} x {d.gpus_per_worker} "
                               f"decode = {layout.num_gpus} GPUs; the cluster has {cluster.num_gpus}")]
        return []


class PoolsPlaced(DisaggRule):
    id = "DIS-002"
    name = "pools-overlap"
    statement = (
        "the pools occupy disjoint GPUs inside the cluster, each starting where a worker of its shape may "
        "start (a multiple of its stage's GPUs, or of the scale-up domain when a stage fills whole domains)"
    )
    source = "DESIGN.md (disaggregated serving: each phase its own GPUs; topology), 003 §6"
    kind = Kind.STRUCTURAL
    example_bad = "a decode pool starting at GPU 12 with 8-GPU workers on 8-GPU nodes"
    example_good = "a decode pool starting at GPU 16 after 12 prefill GPUs"

    def check_layout(self, layout: DisaggLayout, cluster: ClusterSpec) -> list[Diagnostic]:
        out = []
        p, d = layout.prefill.gpus, layout.decode.gpus
        shared = range(max(p.start, d.start), min(p.stop, d.stop))
        if len(shared):
            out.append(self.error(f"GPUs {shared.start}..{shared.stop - 1} are in both pools"))
        for pool in layout.pools:
            unit = alignment_gpus(pool.layout, cluster)
            if pool.first_gpu % unit:
                out.append(self.error(f"the {pool.role} pool starts at GPU {pool.first_gpu}, not on a multiple "
                                      f"of {unit} (its workers would straddle scale-up domains)"))
            if pool.gpus.stop > cluster.num_gpus:
                out.append(self.error(f"the {pool.role} pool ends at GPU {pool.gpus.stop - 1}; the cluster's "
                                      f"last is {cluster.num_gpus - 1}"))
        return out


DISAGG_RULES: tuple[DisaggRule, ...] = (PoolsFitCluster(), PoolsPlaced())


def pool_diagnostics(layout: DisaggLayout, cluster: ClusterSpec) -> list[Diagnostic]:
    """What the rules on the pair say of ``layout``."""
    return [d for rule in DISAGG_RULES for d in rule.check_layout(layout, cluster)]


def for_pool(role: str, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """A pool's own diagnostics, each message saying which pool it is about."""
    return [Diagnostic(d.rule, d.severity, f"{role}: {d.message}", d.node, d.hint) for d in diagnostics]


__all__ = [
    "DISAGG_RULES", "ROLES", "DisaggLayout", "DisaggRule", "Pool", "PoolsFitCluster", "PoolsPlaced",
    "alignment_gpus", "decode_offset", "for_pool", "pool_diagnostics",
]
