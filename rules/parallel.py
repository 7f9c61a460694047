"""Rules about the groups inside a stage: tensor, sequence and expert parallelism."""

from __future__ import annotations

from typing import Any

from shardplan.models.spec import AttentionKind
from shardplan.rules.base import Diagnostic, Kind, Rule, ShapeRule, StageDegrees, stage_gpus
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem


class TpDividesHeads(ShapeRule):
    id = "TP-001"
    name = "tp-not-dividing-heads"
    statement = "tensor parallelism splits attention by heads, so tp divides the attention heads"
    source = "003 §2.2, 000 §3.2"
    example_bad = "tp=3 for 64 heads"
    example_good = "tp=4 for 64 heads"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        return problem.model.attention.num_heads % o.tp != 0

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"tp({o.tp}) does not divide heads({problem.model.attention.num_heads})"


class TpKvHeads(ShapeRule):
    id = "TP-002"
    name = "tp-splits-kv-heads-unevenly"
    statement = (
        "tp divides the KV heads (each rank holds whole KV heads) or is a multiple of them "
        "(each KV head replicated tp/kv times)"
    )
    source = "DESIGN.md (KV cache under TP); 004 §4.2"
    example_bad = "tp=16 with 12 KV heads"
    example_good = "tp=8 with 8 KV heads; tp=8 with 4 KV heads (replicated twice)"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        a = problem.model.attention
        if a.kind is AttentionKind.MLA:
            return False
        return a.num_kv_heads % o.tp != 0 and o.tp % a.num_kv_heads != 0

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"tp({o.tp}) neither divides nor is a multiple of kv_heads({problem.model.attention.num_kv_heads})"


class TpInsideDomain(ShapeRule):
    id = "TP-003"
    name = "tp-crosses-domain"
    statement = "a tensor-parallel group stays inside one scale-up (NVLink/xGMI) domain"
    source = "DESIGN.md topology; 004 §4.2 (per-token all-reduce)"
    kind = Kind.DEFAULT
    switch = "tp-across-domains"
    example_bad = "tp=16 on 2x8xH100"
    example_good = "tp=8 on 2x8xH100"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        domain = problem.cluster.scaleup_domain_gpus
        return o.tp > domain or domain % o.tp != 0

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"tp({o.tp}) does not fit the {problem.cluster.scaleup_domain_gpus}-GPU scale-up domain"


class FfnDivisible(ShapeRule):
    id = "TP-004"
    name = "ffn-width-not-divisible"
    statement = (
        "a dense FFN is tensor-parallel over the attention group (tp x sp), which must divide its width; "
        "expert-tp divides the expert width"
    )
    source = "003 §2.2 (TP on the FFN hidden dimension)"
    example_bad = "tp x sp = 3 for an FFN of width 28672"
    example_good = "tp x sp = 8 for an FFN of width 28672"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        m = problem.model
        if m.num_dense_layers and m.intermediate_size % (o.tp * o.sp):
            return True
        return bool(m.moe and m.moe.expert_intermediate_size % o.expert_tp)

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        m = problem.model
        if m.num_dense_layers and m.intermediate_size % (o.tp * o.sp):
            return f"tp x sp = {o.tp * o.sp} does not divide the FFN width {m.intermediate_size}"
        width = m.moe.expert_intermediate_size if m.moe else 0  # forbids() holds: a dense FFN, or a MoE
        return f"expert-tp {o.expert_tp} does not divide the expert width {width}"


class SpShardsHoldTokens(ShapeRule):
    id = "SP-001"
    name = "sp-exceeds-prompt"
    statement = "sequence parallelism splits a prompt inside attention; every shard holds at least one token"
    source = "001 §3.5, 003 §2.5"
    example_bad = "sp=8 for a 4-token prompt"
    example_good = "sp=2 for a 32k-token prompt"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        return o.sp > problem.workload.isl

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"sp({o.sp}) exceeds the {problem.workload.isl}-token prompt"


class SpShortContext(Rule):
    id = "SP-002"
    name = "sp-short-context"
    statement = "sequence parallelism pays off only for long contexts"
    source = "004 §4.5, 000 §3.2"
    kind = Kind.ADVISORY
    example_bad = "sp=4 at 1k tokens"
    example_good = "sp=4 at 64k tokens"

    def check(self, plan: Plan) -> list[Diagnostic]:
        if plan.layout.sp > 1 and plan.problem.workload.isl < 4096:
            isl = plan.problem.workload.isl
            return [self.error(f"sp={plan.layout.sp} at {isl} tokens rarely pays for its exchanges")]
        return []


class ExpertParallelWidth(Rule):
    id = "EP-001"
    name = "ep-not-stage-wide"
    statement = (
        "a MoE layer is expert-parallel over all of its stage's GPUs: ep = GPUs per stage / expert-tp, "
        "never multiplied with tp; a dense model has ep = 1"
    )
    source = "003 §3, 003 §4, 001 §3.4"
    example_bad = "--ep 16 with 8 GPUs per stage"
    example_good = "--ep 8 with 8 GPUs per stage"

    @staticmethod
    def ep_of(problem: Problem, o: StageDegrees) -> int:
        return stage_gpus(o) // o.expert_tp if problem.model.is_moe else 1

    def post(self, enc: Any, enforce: Any) -> None:
        for o, lit in enc.shape.items():
            enc.cp.add(enc.ep == self.ep_of(enc.problem, o)).only_enforce_if([enforce, lit])

    def check(self, plan: Plan) -> list[Diagnostic]:
        lay, problem = plan.layout, plan.problem
        expected, pinned = self.ep_of(problem, lay), problem.pins.ep
        if pinned is not None and pinned != expected:
            return [self.error(
                f"ep pinned to {pinned}, but {lay.gpus_per_stage} GPUs per stage with expert-tp {lay.expert_tp} "
                f"give ep={expected}"
            )]
        return []

    def conflict_message(self, problem: Problem) -> str:
        if problem.pins.ep is not None:
            return f"ep({problem.pins.ep}) must equal the GPUs of a stage / expert-tp, and a dense model has ep=1"
        return "ep must equal the GPUs of a stage divided by expert-tp"


class NoTpInsideExperts(ShapeRule):
    id = "EP-002"
    name = "tp-inside-experts"
    statement = "experts are not tensor-parallel (one expert's weights stay on one GPU) unless the policy allows it"
    source = "003 §2.4, 001 §3.4 (000 §6.2.3 lists TP x EP as valid: hence a switch)"
    kind = Kind.DEFAULT
    switch = "expert-tp"
    example_bad = "expert-tp=2 without --allow expert-tp"
    example_good = "expert-tp=1"

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        return o.expert_tp > 1

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        return f"expert-tp={o.expert_tp} without --allow expert-tp"


class ExpertsPerRank(ShapeRule):
    id = "EP-003"
    name = "ep-exceeds-experts"
    statement = (
        "every expert-parallel rank hosts at least one distinct expert: ep <= routed experts, "
        "unless hot experts may be replicated"
    )
    source = "003 §2.4 (one GPU hosts one expert), 001 §3.4"
    kind = Kind.DEFAULT
    switch = "expert-replication"
    example_bad = "ep=16 for Mixtral-8x7B's 8 experts"
    example_good = "ep=8 for Mixtral-8x7B"

    def applies(self, problem: Problem) -> bool:
        return problem.model.is_moe and super().applies(problem)

    def forbids(self, problem: Problem, o: StageDegrees) -> bool:
        moe = problem.model.moe  # a dense model has ep = 1 (EP-001), nothing to exceed
        return moe is not None and stage_gpus(o) // o.expert_tp > moe.num_experts

    def violation(self, problem: Problem, o: StageDegrees) -> str:
        moe = problem.model.moe
        experts = moe.num_experts if moe else 0
        return f"ep({stage_gpus(o) // o.expert_tp}) exceeds the {experts} routed experts"
