"""Rules about resources and service limits: memory per GPU, the engine's batch limit, TTFT and TPOT limits."""

from __future__ import annotations

from typing import Any

from shardplan.hardware.profile import Profile
from shardplan.models.derived import kv_bytes_per_sequence, layer_bytes, weight_bytes_total
from shardplan.rules.base import Diagnostic, Rule, ShapeRule, StageDegrees
from shardplan.rules.plan import Plan
from shardplan.rules.prediction import Metrics
from shardplan.rules.problem import Problem, held_for_given, memory_limit_gib, resolve_profile

GIB = 2**30


class MemoryFits(Rule):
    id = "MEM-001"
    name = "memory-exceeds-capacity"
    statement = (
        "weights + KV cache + activations + buffers + runtime on every GPU fit its capacity x usable fraction, "
        "or the user's cap"
    )
    source = "004 §7, 004 §2.3"
    example_bad = "Llama-3.1-70B bf16 with tp=1 on an 80 GB GPU"
    example_good = "Llama-3.1-70B bf16 with tp=4 on 80 GB GPUs"

    def post(self, enc: Any, enforce: Any) -> None:
        limit = enc.tables.limit_bytes
        for s in range(enc.max_stages):
            exists = enc.pp_at_least(s + 1)
            for o, lit in enc.shape.items():
                enc.cp.add(enc.stage_memory(s, o) <= limit).only_enforce_if([enforce, lit, exists])
        # Implied by the above, stated over all stages at once so the LP relaxation sees it:
        # the whole replica's memory fits in S x the limit.
        for o, lit in enc.shape.items():
            enc.cp.add(enc.replica_memory_lower_bound(o) <= limit * enc.stages).only_enforce_if([enforce, lit])

    def check(self, plan: Plan) -> list[Diagnostic]:
        out = []
        for m in plan.prediction.memory:
            if m.total_gib > m.limit_gib + 1e-9:
                out.append(self.error(f"stage {m.stage} needs {m.total_gib:.1f} GiB per GPU, has {m.limit_gib:.1f}"))
        return out

    def fits_nowhere(self, problem: Problem) -> bool:
        """Whether even the lower bound of ``conflict_message`` (the weights spread over every GPU) passes the
        limit: then no layout of any shape fits, whatever else is asked."""
        need, limit, _, _, _ = self._lower_bound(problem)
        return need > limit

    def _lower_bound(self, problem: Problem) -> tuple[float, float, str, float, str]:
        """(GiB needed at least, the limit, the weights' text, runtime and buffers, the KV cache's text) per GPU."""
        profile = resolve_profile(problem)
        limit = memory_limit_gib(problem, profile)
        n = problem.cluster.num_gpus
        weights = weight_bytes_total(problem.model) / n / GIB
        redundant, redundant_text = redundant_slots_gib(problem, n)
        fixed = profile.runtime_overhead_gib + (profile.comm_buffer_gib if n > 1 else 0.0)
        kv, kv_text = least_kv_cache_gib(problem, n)
        weights_text = f"weights {weights:.1f}{redundant_text} spread over all {n} GPUs"
        return weights + redundant + fixed + kv, limit, weights_text, fixed, kv_text

    def conflict_message(self, problem: Problem) -> str:
        need, limit, weights_text, fixed, kv_text = self._lower_bound(problem)
        short = f", {need - limit:.1f} GiB short" if need > limit else ""
        return (
            f"needs at least {need:.1f} GiB per GPU ({weights_text} + "
            f"{fixed:.1f} runtime and buffers{kv_text}), has {limit:.1f}{short}"
        )


def redundant_slots_gib(problem: Problem, gpus: int) -> tuple[float, str]:
    """The weights --redundant-slots adds, spread over all ``gpus`` GPUs, and how the message says it.

    A lower bound on every layout: each of a stage's ep ranks holds r expert slots beyond ceil(E / ep) in each
    MoE layer of the stage (with expert TP, each of its ep x expert_tp GPUs 1 / expert_tp of them), so a replica
    holds at least ep x r >= r experts more than the E of every MoE layer, and its fullest GPU at least that
    spread over all GPUs."""
    model, r = problem.model, problem.redundant_slots
    if not r or model.moe is None:
        return 0.0, ""
    extra = r * sum(layer_bytes(model, i).expert for i in range(model.num_layers) if model.is_moe_layer(i)) / gpus / GIB
    return extra, f" + {extra:.1f} for {r} redundant expert slot{'' if r == 1 else 's'} per MoE layer"


def least_kv_cache_gib(problem: Problem, gpus: int) -> tuple[float, str]:
    """The KV cache every layout holds at least, spread over all ``gpus`` GPUs, and how the message says it.

    A lower bound on every layout: a replica holds its whole batch's cache at full context on its own GPUs
    (replicating KV heads only adds to it), so its fullest GPU holds at least that over all GPUs. The batch is
    --batch, else 1: a searched batch is never below one sequence, and a prompt of millions of tokens is refused
    for its one sequence's cache, not blamed on weights that fit. One sequence's cache below 0.05 GiB per GPU is
    left out, as the message's one decimal would print it as 0.0: the bound stays "before any KV cache"."""
    context = problem.workload.context
    batch = problem.workload.batch
    kv = (batch or 1) * kv_bytes_per_sequence(problem.model, context) / gpus / GIB
    if batch is None:
        if kv < 0.05:
            return 0.0, ", before any KV cache"
        return kv, f" + KV cache {kv:.1f} for one sequence of {context} tokens"
    return kv, f" + KV cache {kv:.1f} for batch {batch} x {context} tokens"


def engine_batch_limit(problem: Problem, profile: Profile | None = None) -> int:
    """Sequences one attention group may run at once: --max-batch, else the profile's (``profile`` if given,
    as ``resolve_profile`` reads it)."""
    return problem.max_batch or resolve_profile(problem, profile).max_batch


class EngineBatchLimit(ShapeRule):
    id = "BAT-001"
    name = "batch-over-engine-limit"
    statement = (
        "the sequences one attention group runs at once, ceil(batch / attn_dp), stay within the engine's "
        "limit (--max-batch; default the calibration profile's)"
    )
    source = "vLLM --max-num-seqs, SGLang --max-running-requests, TensorRT-LLM max_batch_size (per scheduler)"
    example_bad = "--batch 100 --max-batch 64 with attn_dp=1"
    example_good = "--batch 100 --max-batch 64 with attn_dp=2 (50 per attention group)"

    def forbids(self, problem: Problem, shape: StageDegrees) -> bool:
        """A fixed batch (latency's default is 1) fills ceil(b / attn_dp) sequences per attention group,
        so a shape with too few groups cannot run it; a decided batch never passes the limit (the
        search's batches stop at attn_dp x the limit)."""
        return -(-(problem.workload.batch or 1) // shape.attn_dp) > engine_batch_limit(problem)

    def check(self, plan: Plan) -> list[Diagnostic]:
        """The plan's own batch (evaluate's --batch, or the batch the search decided)."""
        limit = engine_batch_limit(plan.problem)
        layout = plan.layout
        group = -(-layout.batch // layout.attn_dp)
        if group > limit:
            return [self.error(
                f"batch {layout.batch} puts {group} sequences in an attention group (attn_dp {layout.attn_dp}); "
                f"the engine runs at most {limit}"
            )]
        return []

    def conflict_message(self, problem: Problem) -> str:
        limit = engine_batch_limit(problem)
        batch = problem.workload.batch or 1
        return (f"the engine runs at most {limit} sequences per attention group: batch {batch} needs "
                f"attn_dp >= {-(-batch // limit)}")


class TtftLimit(Rule):
    id = "SLA-001"
    name = "ttft-over-limit"
    statement = (
        "time to first token, as users measure it at the plan's concurrency (prefill plus, under load, the "
        "decode rounds its chunk steps carry and half a step of waiting), stays within the user's --ttft-ms"
    )
    source = "004 §2.1 (prefill latency), 004 §6"
    example_bad = "--ttft-ms 1 for a 70B model"
    example_good = "--ttft-ms 2000"

    def applies(self, problem: Problem) -> bool:
        return problem.workload.ttft_ms is not None

    def post(self, enc: Any, enforce: Any) -> None:
        # Clamped to the variable's own bound, which it cannot pass: ms x 1e6 may not fit in 64 bits.
        enc.cp.add(enc.ttft <= min(round(enc.problem.workload.ttft_ms * 1e6), enc.ttft_hi)).only_enforce_if(enforce)

    def check(self, plan: Plan) -> list[Diagnostic]:
        return self.check_metrics(plan.problem, plan.prediction.metrics)

    def check_metrics(self, problem: Problem, metrics: Metrics) -> list[Diagnostic]:
        """The limit against any metrics: a plan's, or a disaggregated deployment's."""
        limit = problem.workload.ttft_ms
        got = metrics.ttft_ms
        if limit is not None and got > limit + 1e-9:
            return [self.error(f"TTFT {got:.2f} ms over the {limit:g} ms limit")]
        return []

    def conflict_message(self, problem: Problem) -> str:
        return f"TTFT must stay within {problem.workload.ttft_ms:g} ms{held_for_given(problem, 'ttft_ms')}"


class TpotLimit(Rule):
    id = "SLA-002"
    name = "tpot-over-limit"
    statement = (
        "time per output token, as users measure it at the plan's concurrency (a decode round plus the other "
        "requests' prefill that shares its steps), stays within the user's --tpot-ms"
    )
    source = "004 §2.1 (decode latency), 004 §6"
    example_bad = "--tpot-ms 0.1"
    example_good = "--tpot-ms 50"

    def applies(self, problem: Problem) -> bool:
        return problem.workload.tpot_ms is not None

    def post(self, enc: Any, enforce: Any) -> None:
        limit_ns = min(round(enc.problem.workload.tpot_ms * 1e6), enc.tpot_hi)  # within 64 bits, as TTFT's
        enc.cp.add(enc.tpot <= limit_ns).only_enforce_if(enforce)

    def check(self, plan: Plan) -> list[Diagnostic]:
        return self.check_metrics(plan.problem, plan.prediction.metrics)

    def check_metrics(self, problem: Problem, metrics: Metrics) -> list[Diagnostic]:
        limit = problem.workload.tpot_ms
        got = metrics.tpot_ms
        if limit is not None and got > limit + 1e-9:
            return [self.error(f"TPOT {got:.3f} ms over the {limit:g} ms limit")]
        return []

    def conflict_message(self, problem: Problem) -> str:
        return f"TPOT must stay within {problem.workload.tpot_ms:g} ms{held_for_given(problem, 'tpot_ms')}"
