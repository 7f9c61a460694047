"""Rules about the outer structure: how many GPUs, pipeline stages, replicas, alignment."""

from __future__ import annotations

from typing import Any

from shardplan.rules.base import Diagnostic, Kind, Rule, ShapeRule, StageDegrees, stage_gpus
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem


class GpuCount(Rule):
    id = "GPU-001"
    name = "gpu-count-exceeds-cluster"
    statement = "GPUs used = replicas x stages x GPUs per stage, at most the cluster's; EP and TP are not multiplied in"
    source = "003 §1"
    example_bad = "dp=2 pp=1 tp=8 on 8xH100 (16 GPUs)"
    example_good = "dp=1 pp=1 tp=8 on 8xH100"

    def post(self, enc: Any, enforce: Any) -> None:
        enc.cp.add(enc.gpus_used <= enc.num_gpus).only_enforce_if(enforce)

    def check(self, plan: Plan) -> list[Diagnostic]:
        used, have = plan.layout.num_gpus, plan.problem.cluster.num_gpus
        return [self.error(f"uses {used} GPUs; the cluster has {have}")] if used > have else []

    def conflict_message(self, problem: Problem) -> str:
        return f"the cluster has {problem.cluster.num_gpus} GPUs"


class StagesContiguous(Rule):
    id = "PP-001"
    name = "stages-not-contiguous"
    statement = (
        "pipeline stages are an ordered chain of contiguous, non-empty layer ranges covering the model: "
        "embedding on the first stage, LM head on the last"
    )
    source = "003 §5, 000 §4.3, 001 §3.2"
    example_bad = "--stages 0:40,41:80 (layer 40 on no stage)"
    example_good = "--stages 0:40,40:80"

    def post(self, enc: Any, enforce: Any) -> None:
        for s in range(enc.max_stages):
            exists = enc.pp_at_least(s + 1)
            enc.cp.add(enc.layers[s] >= 1).only_enforce_if([enforce, exists])
            enc.cp.add(enc.layers[s] == 0).only_enforce_if([enforce, ~exists])

    def check(self, plan: Plan) -> list[Diagnostic]:
        stages, n = plan.layout.stages, plan.problem.model.num_layers
        expected = 0
        for i, (start, end) in enumerate(stages):
            if start != expected or end <= start:
                return [self.error(f"stage {i} is [{start}, {end}); expected to start at {expected} and hold a layer")]
            expected = end
        if expected != n:
            return [self.error(f"stages end at layer {expected}; the model has {n}")]
        return []

    def conflict_message(self, problem: Problem) -> str:
        return f"{problem.model.num_layers} layers must split into contiguous non-empty stages"


class StageAlignment(ShapeRule):
    id = "ALN-001"
    name = "stage-straddles-domain"
    statement = (
        "a stage's GPUs sit inside one scale-up domain or fill whole domains, so every stage sees the same links"
    )
    source = "DESIGN.md topology; 003 §6 (hardware decides structure)"
    example_bad = "3 GPUs per stage on 8-GPU nodes"
    example_good = "4 or 16 GPUs per stage on 8-GPU nodes"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        domain, gpus = problem.cluster.scaleup_domain_gpus, stage_gpus(o)
        return domain % gpus != 0 and gpus % domain != 0

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"{stage_gpus(o)} GPUs per stage straddle {problem.cluster.scaleup_domain_gpus}-GPU domains"


class DataParallelOutside(ShapeRule):
    id = "DP-001"
    name = "dp-inside-stage"
    statement = (
        "data parallelism is whole-model replicas at the root; inside a stage, only a MoE model splits its "
        "batch over attention groups (the groups then serve its experts as one EP group)"
    )
    source = "001 §3.1, 003 §2.1, 003 §3"
    example_bad = "attention groups=2 for Llama-3.1-70B"
    example_good = "dp=2 for Llama-3.1-70B; attention groups=8 for DeepSeek-V3"

    def applies(self, problem: Problem) -> bool:
        return not problem.model.is_moe

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        return o.attn_dp > 1

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"{o.attn_dp} attention groups in a dense model; use replicas"


class DataParallelLatency(Rule):
    id = "DP-002"
    name = "dp-for-latency"
    statement = "replicas raise throughput only; they never shorten one request's latency"
    source = "003 §2.1, 003 §7, 004 §4.1"
    kind = Kind.ADVISORY
    example_bad = "dp=4 chosen to cut latency"
    example_good = "dp=4 for throughput"

    def check(self, plan: Plan) -> list[Diagnostic]:
        if plan.problem.objective.value == "latency" and plan.layout.dp > 1:
            return [self.error(f"dp={plan.layout.dp} does not lower latency; it serves more requests at once")]
        return []
