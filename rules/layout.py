"""A parallel layout: replicas, pipeline stages, the groups inside a stage, and the batch.

The structure follows DESIGN.md "The parallel structure": ``dp`` replicas, each a chain of ``pp``
stages; every stage runs on the same number of GPUs, G = tp x sp x attn_dp. Attention runs in
``attn_dp`` groups of tp x sp GPUs; dense FFNs use tensor parallelism over a group's tp x sp GPUs;
MoE layers use expert parallelism over all G GPUs (ep = G / expert_tp). GPUs are numbered
replica-major, then stage, then attention group, then sp, then tp (tp innermost, so a tensor-parallel
group is a run of consecutive ids and stays inside a node whenever tp divides the node size).
Only degrees that act in the same operator phase multiply (003 §1).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, PositiveInt, model_validator

from shardplan.models.errors import SpecError
from shardplan.models.frozen import HashOnce


class Layout(HashOnce):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: PositiveInt = Field(default=1, description="replicas (request-level data parallelism)")
    tp: PositiveInt = Field(default=1, description="tensor-parallel degree inside an attention group")
    sp: PositiveInt = Field(default=1, description="sequence-parallel degree inside attention")
    attn_dp: PositiveInt = Field(default=1, description="attention groups per stage (attention data parallelism)")
    expert_tp: PositiveInt = Field(default=1, description="tensor parallelism inside each expert (policy)")
    stages: tuple[tuple[int, int], ...] = Field(description="[start, end) layer range of each pipeline stage")
    batch: PositiveInt = Field(default=1, description="concurrent sequences per replica")
    moe_load_factor: tuple[float, ...] | None = Field(
        default=None, description="per MoE layer, most-loaded GPU over the mean; None: uniform routing"
    )

    @model_validator(mode="after")
    def _contiguous(self) -> Layout:
        if not self.stages:
            raise SpecError("stages", "at least one stage")
        expected = 0
        for i, (start, end) in enumerate(self.stages):
            if start != expected or end <= start:
                raise SpecError(
                    "stages", f"stage {i} is [{start}, {end}); stages must be contiguous and non-empty from layer 0"
                )
            expected = end
        if (self.tp * self.sp * self.attn_dp) % self.expert_tp:
            raise SpecError("expert_tp", f"{self.expert_tp} does not divide the stage's {self.gpus_per_stage} GPUs")
        return self

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def num_layers(self) -> int:
        return self.stages[-1][1]

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.sp * self.attn_dp

    @property
    def attention_group(self) -> int:
        """GPUs of one attention group; dense FFNs are tensor-parallel over them."""
        return self.tp * self.sp

    @property
    def ep(self) -> int:
        """Expert-parallel width of a MoE layer: the stage's GPUs over expert_tp."""
        return self.gpus_per_stage // self.expert_tp

    @property
    def gpus_per_replica(self) -> int:
        return self.pp * self.gpus_per_stage

    @property
    def num_gpus(self) -> int:
        return self.dp * self.gpus_per_replica

    def stage_gpus(self, replica: int, stage: int) -> range:
        """Global GPU ids of one stage of one replica."""
        first = (replica * self.pp + stage) * self.gpus_per_stage
        return range(first, first + self.gpus_per_stage)

    def tp_group(self, replica: int, stage: int, group: int = 0, sp_rank: int = 0) -> range:
        """GPU ids of one tensor-parallel group (consecutive: tp is innermost)."""
        first = self.stage_gpus(replica, stage).start + (group * self.sp + sp_rank) * self.tp
        return range(first, first + self.tp)

    def attention_group_gpus(self, replica: int, stage: int, group: int = 0) -> range:
        first = self.stage_gpus(replica, stage).start + group * self.attention_group
        return range(first, first + self.attention_group)

    def stage_layers(self, stage: int) -> range:
        return range(*self.stages[stage])

    def degrees(self) -> dict[str, int]:
        """The contract's degrees, plus the two inner ones."""
        return dict(
            dp=self.dp, pp=self.pp, tp=self.tp, sp=self.sp, ep=self.ep,
            attn_dp=self.attn_dp, expert_tp=self.expert_tp,
        )

    @classmethod
    def even(cls, num_layers: int, pp: int = 1, **degrees: Any) -> Layout:
        """A layout whose stages split the layers as evenly as possible (earlier stages get the extra).

        ``degrees``: any other field of the layout (the degrees, ``batch``, ``moe_load_factor``),
        validated by the constructor."""
        if pp < 1 or pp > num_layers:
            raise SpecError("pp", f"{pp} stages for {num_layers} layers")
        base, extra = divmod(num_layers, pp)
        bounds, start = [], 0
        for s in range(pp):
            end = start + base + (1 if s < extra else 0)
            bounds.append((start, end))
            start = end
        return cls(stages=tuple(bounds), **degrees)
