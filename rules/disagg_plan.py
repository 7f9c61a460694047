"""A disaggregated plan: the layout of both pools, what the cost model predicts of it, and its check.

``DisaggPrediction`` is plain data (the solver's ``solver/cost/disagg.py`` fills it), so rules read it
without importing the solver. Each pool also carries its own ``Plan`` (the pool as ``workers`` replicas
of its worker layout, priced for its role, memory included), and ``check_disagg`` runs the whole
catalog on each of those, the pair's rules (``DIS-``) on the layout and the SLA rules on the
deployment's metrics: the same rules as a colocated plan, per pool.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shardplan.rules.base import Diagnostic
from shardplan.rules.capacity import TpotLimit, TtftLimit
from shardplan.rules.catalog import check_plan
from shardplan.rules.disagg import DisaggLayout, for_pool, pool_diagnostics
from shardplan.rules.plan import Plan
from shardplan.rules.prediction import Metrics
from shardplan.rules.problem import Problem

_DATA = ConfigDict(extra="forbid", frozen=True)


class PrefillRole(BaseModel):
    """One prefill worker's step and the pool's rate."""

    model_config = _DATA

    chunk: int = Field(description="prompts prefilled together in one step of a worker")
    prefill_ms: float = Field(description="one chunk through every stage and send: the prompt's prefill")
    slowest_stage_ms: float = Field(description="a new chunk enters a worker's pipeline this often")
    capacity_rps: float = Field(description="prompts per second the pool sustains: workers x chunk / slowest stage")


class DecodeRole(BaseModel):
    """One decode worker's step at its batch and the pool's rate."""

    model_config = _DATA

    batch: int = Field(description="sequences one decode worker holds")
    step_ms: float = Field(description="one decode round of a worker at that batch: the TPOT")
    capacity_rps: float = Field(description="requests per second the pool finishes: workers x batch / "
                                            "((osl - 1) x step), osl - 1 tokens being decoded per request")


class KvTransfer(BaseModel):
    """The KV cache of one prompt, from a prefill worker to a decode worker."""

    model_config = _DATA

    bytes_per_prompt: float = Field(description="ISL x KV bytes per token (all layers, every cached token)")
    send_bytes_per_gpu: float = Field(description="the largest share one prefill GPU holds and sends")
    recv_bytes_per_gpu: float = Field(description="the largest share one decode GPU receives")
    tier: str = Field(description="scale_up (NVLink inside a domain) or scale_out (the NICs)")
    transfer_ms: float = Field(description="the largest per-GPU share over the link, plus the link's latency")
    relayout_ms: float = Field(description="re-arranging the received cache when the pools split it differently")
    capacity_rps: float = Field(description="prompts per second the links move: min(workers) / (transfer + relayout)")


class DisaggPrediction(BaseModel):
    model_config = _DATA

    metrics: Metrics = Field(description="the deployment at its concurrency (batch = requests in flight)")
    prefill: PrefillRole
    decode: DecodeRole
    kv: KvTransfer
    waiting_ms: float = Field(description="time a prompt waits before its prefill starts")
    request_overhead_ms: float = Field(default=0.0, description="the serving stack's fixed cost per request (the "
                                       "engine profile's request_overhead_ms): the part of TTFT that is neither "
                                       "waiting, prefill, KV transfer nor admission")
    admission_ms: float = Field(default=0.0, description="the decode worker's scheduler iterations between the "
                                "request's arrival (its cache moved) and its first token: the engine's "
                                "ttft_wait_steps decode rounds at the worker's batch; 0 at one request in flight")
    throughput_rps: float = Field(description="requests per second: the slowest of the pools, the links and "
                                              "what the concurrency allows")
    bottleneck: str = Field(description="prefill | decode | kv_transfer | concurrency: what sets the rate")
    profile: str


class DisaggPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    problem: Problem
    layout: DisaggLayout
    prediction: DisaggPrediction
    prefill_plan: Plan = Field(description="the prefill pool as a plan of its own (priced for its role)")
    decode_plan: Plan = Field(description="the decode pool as a plan of its own (priced for its role)")
    status: str = "evaluated"


def check_disagg(plan: DisaggPlan) -> list[Diagnostic]:
    """Every diagnostic: the catalog per pool, the pair's rules, the SLA limits on the deployment."""
    out = for_pool("prefill", check_plan(plan.prefill_plan))
    out += for_pool("decode", check_plan(plan.decode_plan))
    out += pool_diagnostics(plan.layout, plan.problem.cluster)
    for rule in (TtftLimit(), TpotLimit()):
        if rule.applies(plan.problem):
            out += rule.check_metrics(plan.problem, plan.prediction.metrics)
    return out


__all__ = ["DecodeRole", "DisaggPlan", "DisaggPrediction", "KvTransfer", "PrefillRole", "check_disagg"]
