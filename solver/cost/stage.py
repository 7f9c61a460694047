"""What one pipeline stage looks like to the cost model: its groups, their GPUs and link tiers.

Every stage of a layout has the same shape (same G, tp, sp, groups); which GPUs it occupies only
changes the link tier, and a rule keeps stages aligned to nodes so that the tier is the same for
every stage. The shape is therefore computed once, from replica 0's first stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardplan.models import ModelSpec
from shardplan.models.spec import AttentionKind
from shardplan.rules.layout import Layout


@dataclass(frozen=True)
class StageShape:
    """The parallel groups inside a stage and the tier each group's collectives use."""

    gpus: int  # G
    tp: int
    sp: int
    attn_dp: int
    expert_tp: int
    # GPU ids as ranges, not tuples: a stage of a million GPUs is then a few bytes, not tens of MB per
    # shape (a million-GPU cluster's search space holds hundreds of shapes; issue 14).
    tp_group: range  # GPU ids of one tensor-parallel group
    sp_group: range  # GPU ids of one sequence-parallel group
    attention_group: range  # tp x sp GPU ids that rejoin after attention
    stage_group: range  # all G GPUs: the expert-parallel group
    kv_split: int  # ways the KV cache is split across a group's tp ranks

    @property
    def group_size(self) -> int:
        return self.tp * self.sp

    @property
    def ep(self) -> int:
        return self.gpus // self.expert_tp


def kv_split(model: ModelSpec, tp: int) -> int:
    """KV heads are split across tensor-parallel ranks up to their count and replicated beyond;
    MLA's latent cache has no heads to split and is replicated on every rank (DESIGN.md)."""
    if model.attention.kind is AttentionKind.MLA:
        return 1
    return min(tp, model.attention.num_kv_heads)


@lru_cache(maxsize=4096)
def _shape(model: ModelSpec, gpus: int, tp: int, sp: int, attn_dp: int, expert_tp: int) -> StageShape:
    stage = range(gpus)
    return StageShape(
        gpus=gpus,
        tp=tp,
        sp=sp,
        attn_dp=attn_dp,
        expert_tp=expert_tp,
        tp_group=stage[:tp],
        sp_group=stage[: tp * sp : tp],
        attention_group=stage[: tp * sp],
        stage_group=stage,
        kv_split=kv_split(model, tp),
    )


def stage_shape(model: ModelSpec, layout: Layout) -> StageShape:
    """The shape of a stage of ``layout``; ids are those of replica 0, stage 0."""
    return _shape(model, layout.gpus_per_stage, layout.tp, layout.sp, layout.attn_dp, layout.expert_tp)


def shape_of(model: ModelSpec, gpus: int, tp: int, sp: int, attn_dp: int, expert_tp: int) -> StageShape:
    return _shape(model, gpus, tp, sp, attn_dp, expert_tp)
