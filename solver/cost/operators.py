"""Time of each operator of one layer on one GPU of a stage, for one forward step.

A roofline per operator, refined by the calibration profile (004 §3, DESIGN.md "Cost model"):
``time = max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency))`` plus every
collective as an explicit alpha-beta term. A GEMM over M tokens reaches
``gemm_efficiency x M / (M + gemm_half_tokens)`` of peak, which makes its compute time affine in M.
No CP-SAT here, and nothing divides a latency by a product of degrees: each term is the work one
GPU really does (004 §5, §8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.hardware import (
    ClusterSpec,
    Collective,
    GPUSpec,
    Tier,
    collective_time_on_tier_s,
    oneshot_allreduce_s,
)
from shardplan.hardware.profile import Profile
from shardplan.models import AttentionKind, ModelSpec
from shardplan.models.derived import (
    LayerParams,
    attention_score_flops,
    cached_tokens,
    kv_bytes_per_token_layer,
    layer_params,
    lm_head_resident_bytes,
    prefill_attention_flops,
)
from shardplan.rules.operators import Op, Phase
from shardplan.solver.cost.stage import StageShape

ACT_BYTES = 2  # activations and collectives travel in 16 bits
# Hidden size of the MoE layers op_points.csv measured (DeepSeek-V3): moe_routed_token_ns is per assignment
# of a row this wide (op_terms.py reads it off those points).
MOE_REFERENCE_HIDDEN = 7168


@dataclass(frozen=True)
class Step:
    """The work of one forward step of a stage: ``sequences`` sequences, each adding
    ``new_tokens`` tokens (the prompt in prefill, 1 in decode) and attending to ``context`` keys."""

    phase: Phase
    sequences: int
    new_tokens: int
    context: int

    @property
    def tokens(self) -> int:
        return self.sequences * self.new_tokens


@dataclass(frozen=True)
class LayerKind:
    """Layers that cost the same: MoE or dense FFN, windowed or full attention."""

    moe: bool
    windowed: bool

    @property
    def label(self) -> str:
        return ("moe" if self.moe else "dense") + ("-window" if self.windowed else "")


def layer_kind(model: ModelSpec, layer: int) -> LayerKind:
    return LayerKind(moe=model.is_moe_layer(layer), windowed=model.is_window_layer(layer))


def representative_layer(model: ModelSpec, kind: LayerKind) -> int:
    for i in range(model.num_layers):
        if layer_kind(model, i) == kind:
            return i
    raise ValueError(f"no layer of kind {kind}")


# _TIERS[(cluster, first GPU, last GPU, size)]: the tier of a group's collectives (CostContext._tier).
_TIERS: dict[tuple[ClusterSpec, int, int, int], Tier] = {}
TIERS_KEPT = 65536  # tens of bytes each; a search over many clusters would grow it without bound


class CostContext:
    """Bundles what every operator needs: model, cluster, profile, the stage shape and the redundant
    expert slots per GPU (copies beyond ceil(E / ep), which a GPU reads like its own experts)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, profile: Profile, shape: StageShape,
                 extra_slots: int = 0):
        self.model, self.cluster, self.profile, self.shape = model, cluster, profile, shape
        self.extra_slots = extra_slots
        self.gpu: GPUSpec = cluster.gpu

    # --- primitives ------------------------------------------------------------------------
    def gemm_s(
        self, params: float, tokens: float, weight_bytes: float, compute_class: str, eff_scale: float = 1.0
    ) -> float:
        """A GEMM of ``params`` weights over ``tokens`` tokens on one GPU: compute or weight-read bound."""
        if params <= 0 or tokens <= 0:
            return 0.0
        p = self.profile
        eff = p.gemm_efficiency * eff_scale
        if compute_class == "fp4" and p.fp4_gemm_ratio is not None and self.gpu.supports(compute_class):
            eff *= p.fp4_gemm_ratio  # fitted on the GPU's own FP4 rows (Blackwell), apart from its FP8 share
        elif compute_class in ("fp8", "fp4") and self.gpu.supports(compute_class):
            eff *= p.low_precision_gemm_ratio  # native 8/4-bit GEMMs reach a lower share of their peak
        peak = self.gpu.flops_per_s(compute_class) * eff
        compute = 2.0 * params * (tokens + p.gemm_half_tokens) / peak
        memory = weight_bytes / (self.gpu.hbm_bytes_per_s * self._weight_stream_efficiency(params, weight_bytes))
        return max(compute, memory)

    def _weight_stream_efficiency(self, params: float, weight_bytes: float) -> float:
        """The share of HBM peak weights stream at: ``hbm_efficiency`` for 16-bit weights, times
        ``low_precision_stream_ratio`` for 8- and 4-bit ones (their GEMMs dequantise and scale as they read)."""
        p = self.profile
        if p.low_precision_stream_ratio is not None and weight_bytes < 2 * params:
            return p.hbm_efficiency * p.low_precision_stream_ratio
        return p.hbm_efficiency

    def stream_s(self, flops: float, nbytes: float, compute_class: str = "bf16", kv_eff: float | None = None) -> float:
        """A fused attention kernel: FLOPs at attention efficiency against the KV cache read from HBM at
        ``kv_eff`` of peak, by default the attention kernels' own stream efficiency (``kv_stream_efficiency``;
        measured generation-attention kernels stream well below a weight-reading GEMM)."""
        p = self.profile
        compute = flops / (self.gpu.flops_per_s(compute_class) * p.attention_efficiency)
        if kv_eff is None:
            kv_eff = p.kv_stream_efficiency if p.kv_stream_efficiency is not None else p.hbm_efficiency
        memory = nbytes / (self.gpu.hbm_bytes_per_s * kv_eff)
        return max(compute, memory)

    def _decode_kv_efficiency(self) -> float | None:
        """The share of HBM peak a decode step's attention reads the cache at: MLA's latent cache at
        ``mla_stream_efficiency`` where the profile sets it, else ``stream_s``'s default (None)."""
        if self.model.attention.kind is AttentionKind.MLA:
            return self.profile.mla_stream_efficiency
        return None

    def collective_s(self, op: Collective, nbytes: float, group: Sequence[int]) -> float:
        if len(group) <= 1 or nbytes <= 0:
            return 0.0
        p = self.profile
        tier = self._tier(group)
        eff = p.scaleup_bw_efficiency if tier is Tier.SCALE_UP else p.scaleout_bw_efficiency
        custom = op is Collective.ALL_REDUCE and tier is Tier.SCALE_UP
        latency_scale = p.collective_latency_scale
        if custom and p.allreduce_latency_scale is not None:
            latency_scale = p.allreduce_latency_scale  # the all-reduce kernels' own step latency, measured apart
        ring = collective_time_on_tier_s(
            op, nbytes, len(group), tier, self.cluster, bw_efficiency=eff, latency_scale=latency_scale
        )
        if not custom or p.allreduce_oneshot_us is None:
            return ring
        # Engines' custom all-reduce picks its kernel by message size: one-shot for the small messages of decode,
        # the ring for a prefill chunk's tens of MiB, which the one-shot's (n - 1)-fold reads would make slower.
        oneshot = oneshot_allreduce_s(
            nbytes, len(group), self.cluster, fixed_s=p.allreduce_oneshot_us * 1e-6, bw_efficiency=eff
        )
        return min(ring, oneshot)

    def link_tier(self, src: int, dst: int) -> Tier:
        """The tier of the link a send from GPU ``src`` to GPU ``dst`` crosses (``send_recv_s``'s)."""
        return self._tier((src, dst))

    def _tier(self, group: Sequence[int]) -> Tier:
        """The group's tier, cached for every context on the cluster (``evaluate`` makes one per call): groups
        here are runs or strides of ids, so first, last and size identify them, and a 4,096-GPU group is
        scanned once rather than per operator."""
        key = (self.cluster, group[0], group[-1], len(group))
        tier = _TIERS.get(key)
        if tier is None:
            if len(_TIERS) >= TIERS_KEPT:
                _TIERS.clear()
            # Ascending, and a scale-up domain is a block of consecutive ids: the group stays in one
            # domain exactly when its first and last GPU do. Scanning every id made a stage of a
            # million-GPU cluster cost seconds per shape (issue 14).
            ends = (group[0], group[-1])
            tier = _TIERS[key] = Tier.SCALE_OUT if self.cluster.spans_scaleout(ends) else Tier.SCALE_UP
        return tier

    # --- one layer -------------------------------------------------------------------------
    def layer_ops_s(self, kind: LayerKind, step: Step, load_factor: float = 1.0) -> dict[Op, float]:
        """Seconds per operator of one layer of ``kind``."""
        m, s = self.model, self.shape
        layer = representative_layer(m, kind)
        lp = layer_params(m, layer)
        w_bytes = m.weights_dtype.bytes
        w_class = m.weights_dtype.compute_class
        group = s.group_size
        # Sequences of one attention group; every GPU of the group sees them (tp) or a slice (sp).
        seqs = math.ceil(step.sequences / s.attn_dp)
        group_tokens = seqs * step.new_tokens
        ops: dict[Op, float] = {}

        # Attention projections: heads split by tp, tokens split by sp.
        attn_params = lp.attention / s.tp
        ops[Op.ATTN_PROJ] = self.gemm_s(attn_params, group_tokens / s.sp, attn_params * w_bytes, w_class)
        ops[Op.ATTN_CORE] = self._attention_core(layer, step, seqs)
        ops[Op.ATTN_SP] = self._sp_exchange(layer, step, seqs)
        # Rejoin the tp x sp shards before the FFN: one all-reduce over the attention group.
        ops[Op.ATTN_ALLREDUCE] = self.collective_s(
            Collective.ALL_REDUCE, group_tokens * m.hidden_size * ACT_BYTES, s.attention_group
        )

        if kind.moe:
            ops.update(self._moe(lp, step, group_tokens, load_factor))
        else:
            ffn = lp.dense_ffn / group
            ops[Op.FFN] = self.gemm_s(ffn, group_tokens, ffn * w_bytes, w_class)
            ops[Op.FFN_ALLREDUCE] = self.collective_s(
                Collective.ALL_REDUCE, group_tokens * m.hidden_size * ACT_BYTES, s.attention_group
            )
        ops[Op.LAYER_OVERHEAD] = self._fixed_s(step) + self._full_width_s(group_tokens / s.sp)
        return ops

    def _fixed_s(self, step: Step) -> float:
        """A layer's fixed time: ``layer_overhead_us``, and in decode the generation-attention kernel's own
        fixed time whatever it reads (``attention_fixed_us``). Kept out of ``attn.core`` so that the core
        stays in proportion to the sequences, as the solver's batch ranges assume (tables.py kv_slope)."""
        p = self.profile
        attention_us = p.attention_fixed_us if step.phase is Phase.DECODE else 0.0
        return (p.layer_overhead_us + attention_us) * 1e-6

    def _full_width_s(self, tokens: float) -> float:
        """Per-token work every rank of the attention group repeats on the whole hidden vector, whatever its
        shard (``full_width_passes``): the residual adds and RMSNorms around attention and the FFN read and
        write 16-bit hidden vectors, a stream of HBM that tensor parallelism does not split."""
        p = self.profile
        nbytes = p.full_width_passes * tokens * self.model.hidden_size * ACT_BYTES
        return nbytes / (self.gpu.hbm_bytes_per_s * p.hbm_efficiency)

    def _attention_core(self, layer: int, step: Step, seqs: int) -> float:
        m, s = self.model, self.shape
        kv_class = "fp8" if m.kv_dtype.value == "fp8" else "bf16"
        heads_share = 1.0 / (s.tp * s.sp)
        if step.phase is Phase.PREFILL:
            flops = seqs * prefill_attention_flops(m, layer, step.new_tokens) * heads_share
            kv = seqs * cached_tokens(m, layer, step.context) * kv_bytes_per_token_layer(m) / s.kv_split / s.sp
            return self.stream_s(flops, kv, kv_class)
        flops = seqs * attention_score_flops(m, layer, step.context, absorbed=True) * heads_share
        kv = seqs * cached_tokens(m, layer, step.context) * kv_bytes_per_token_layer(m) / s.kv_split / s.sp
        return self.stream_s(flops, kv, kv_class, self._decode_kv_efficiency())

    def _sp_exchange(self, layer: int, step: Step, seqs: int) -> float:
        """Sequence parallelism: prefill gathers every shard's K and V (ring attention moves the
        same bytes); decode merges the partial attention outputs of the shards."""
        m, s = self.model, self.shape
        if s.sp == 1:
            return 0.0
        if step.phase is Phase.PREFILL:
            kv = seqs * cached_tokens(m, layer, step.context) * kv_bytes_per_token_layer(m) / s.kv_split
            return self.collective_s(Collective.ALL_GATHER, kv, s.sp_group)
        partial = seqs * m.attention.num_heads / s.tp * (m.attention.v_head_dim + 1) * 4  # fp32 output + LSE
        return self.collective_s(Collective.ALL_REDUCE, partial, s.sp_group)

    def _moe(self, lp: LayerParams, step: Step, group_tokens: int, load_factor: float) -> dict[Op, float]:
        m, s = self.model, self.shape
        moe = m.moe
        if moe is None:
            raise ValueError(f"{m.name} has no experts: no MoE layer to price")
        e_bytes, e_class = m.expert_dtype.bytes, m.expert_dtype.compute_class
        ops: dict[Op, float] = {}
        ops[Op.MOE_ROUTER] = self.gemm_s(lp.router, group_tokens, lp.router * m.embedding_dtype.bytes, "bf16")
        if lp.shared_experts:
            shared = lp.shared_experts / s.group_size
            ops[Op.MOE_SHARED] = self.gemm_s(
                shared, group_tokens, shared * m.weights_dtype.bytes, m.weights_dtype.compute_class
            )
        # Routed experts over the stage's G GPUs: the most-loaded GPU sets the time (004 §4.4).
        stage_tokens = step.tokens
        ep = s.ep
        # Copies a GPU hosts (its share of the experts plus redundant slots, at most one per expert): a
        # balanced placement gives each of them tokens, so each is read like any expert.
        slots = min(moe.num_experts, math.ceil(moe.num_experts / ep) + self.extra_slots)
        assignments = stage_tokens * moe.experts_per_token / ep * load_factor
        # Experts a GPU must read: each of its experts is hit unless no token picks it.
        hit = 1.0 - (1.0 - moe.experts_per_token / moe.num_experts) ** stage_tokens
        active_experts = max(1.0, slots * hit) if stage_tokens else 0.0
        expert = lp.expert / s.expert_tp
        tokens_per_expert = assignments / active_experts if active_experts else 0.0
        ops[Op.MOE_EXPERTS] = active_experts * self.gemm_s(
            expert, tokens_per_expert, expert * e_bytes, e_class, eff_scale=self.profile.moe_efficiency
        ) + self._moe_overhead_s(assignments)
        payload = stage_tokens / s.gpus * moe.experts_per_token * m.hidden_size * ACT_BYTES
        if s.attn_dp == 1:
            # Every GPU already holds every token: compute the local experts, then sum the partial
            # outputs with an all-reduce over the stage.
            ops[Op.MOE_COMBINE] = self.collective_s(
                Collective.ALL_REDUCE, group_tokens * m.hidden_size * ACT_BYTES, s.stage_group
            )
        else:
            ops[Op.MOE_DISPATCH] = self.collective_s(Collective.ALL_TO_ALL, payload, s.stage_group)
            ops[Op.MOE_COMBINE] = self.collective_s(Collective.ALL_TO_ALL, payload, s.stage_group)
        if s.expert_tp > 1 and s.attn_dp > 1:
            # With one attention group the stage all-reduce above already sums the expert shards;
            # after an all-to-all dispatch the shards of each expert still need their own reduction.
            ops[Op.MOE_EXPERT_ALLREDUCE] = self.collective_s(
                Collective.ALL_REDUCE, assignments / moe.experts_per_token * m.hidden_size * ACT_BYTES,
                s.stage_group[: s.expert_tp],
            )
        return ops

    def _moe_overhead_s(self, assignments: float) -> float:
        """What a MoE block costs beyond its expert GEMMs (``moe_fixed_us``, ``moe_routed_token_ns``):
        routing, permuting tokens to their experts, quantising activations and the weighted combine, a
        fixed part and a part per token-to-expert assignment the GPU serves (op_points.csv MoE rows).
        The per-assignment part copies, quantises and sums hidden-wide rows, so it scales with the
        model's hidden size from the one it was measured at (``MOE_REFERENCE_HIDDEN``): 35.5 ns per
        7,168-wide assignment, one figure fitted on the H100 and H200 points together, is ~7 passes over a
        16-bit row at H100's weight stream. The points themselves say the figure falls with HBM bandwidth
        (H100 alone 61 ns, H200 alone 18); priced that way (op_terms.py ``MOE_ROUTED_AT_BANDWIDTH``) the
        user-facing rows came out slightly worse, so one figure stays (benchmarks/accuracy/README.md)."""
        if assignments <= 0:
            return 0.0
        p = self.profile
        width = self.model.hidden_size / MOE_REFERENCE_HIDDEN
        return p.moe_fixed_us * 1e-6 + p.moe_routed_token_ns * 1e-9 * assignments * width

    # --- the ends of the model ---------------------------------------------------------------
    def embedding_ops_s(self, step: Step) -> dict[Op, float]:
        """First stage: a row gather per token, then nothing to reduce (vocab-parallel lookups are
        summed into the first all-reduce)."""
        s = self.shape
        tokens = math.ceil(step.sequences / s.attn_dp) * step.new_tokens
        nbytes = tokens * self.model.hidden_size * self.model.embedding_dtype.bytes
        return {Op.EMBEDDING: nbytes / (self.gpu.hbm_bytes_per_s * self.profile.hbm_efficiency)}

    def lm_head_ops_s(self, step: Step) -> dict[Op, float]:
        """Last stage: logits of each sequence's last token, vocab split over the attention group,
        gathered for sampling; plus the step's fixed scheduling and sampling overhead."""
        m, s = self.model, self.shape
        seqs = math.ceil(step.sequences / s.attn_dp)
        head = m.vocab_size * m.hidden_size / s.group_size
        resident = lm_head_resident_bytes(m) / s.group_size
        return {
            Op.LM_HEAD: self.gemm_s(head, seqs, resident, "bf16"),
            Op.LM_HEAD_GATHER: self.collective_s(
                Collective.ALL_GATHER, seqs * m.vocab_size * ACT_BYTES, s.attention_group
            ),
            Op.STEP_OVERHEAD: self.profile.step_overhead_us * 1e-6,
        }

    def send_recv_s(self, step: Step, src: int, dst: int) -> float:
        """Activations from one stage to the next: each GPU sends its share, over the link that
        joins the two stages' first GPUs."""
        nbytes = step.tokens * self.model.hidden_size * ACT_BYTES / self.shape.gpus
        return self.collective_s(Collective.SEND_RECV, nbytes, (src, dst))


__all__ = ["CostContext", "LayerKind", "Phase", "Step", "layer_kind", "representative_layer"]
