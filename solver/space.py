"""The search space: which values each degree may take, before any rule says which are valid.

Candidate values are a modelling choice, not a rule: powers of two (what serving engines deploy)
plus the divisors of the attention heads and of the cluster, plus whatever the user pinned. The
rules then decide which combinations are valid, so a pinned ``--tp 3`` is representable and
rejected by the rule it breaks, by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from shardplan.hardware.profile import Profile
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cost.evaluate import microbatching

MAX_STAGES = 16  # deeper pipelines are not used for inference; pin --pp to go beyond


@dataclass(frozen=True, order=True)
class Shape:
    """The inside of a stage: tensor, sequence and attention-data parallelism, tensor parallelism
    inside experts. Ordered lexicographically for deterministic tie-breaking."""

    tp: int
    sp: int
    attn_dp: int
    expert_tp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.sp * self.attn_dp

    @property
    def ep(self) -> int:
        return self.gpus // self.expert_tp


@dataclass(frozen=True)
class BatchOption:
    """One way the batch can look: ``micro`` sequences per stage step; for a decided batch, ``q``
    sequences per attention group per microbatch (batch = stages x micro)."""

    micro: int
    q: int = 0  # 0: the batch is fixed by the workload


def _powers_of_two(limit: int) -> list[int]:
    values, v = [], 1
    while v <= limit:
        values.append(v)
        v *= 2
    return values


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


class SearchSpace:
    """Candidate values of every degree. With ``only_pins``, a pinned degree takes its pinned
    value alone (enumeration solves one small model per candidate this way); otherwise a pin is
    added to the candidates and the pin's rule selects it, so a bad pin is explained, not hidden."""

    def __init__(self, problem: Problem, profile: Profile, only_pins: bool = False):
        self.problem = problem
        self.only_pins = only_pins
        self.profile = profile
        model, cluster, pins = problem.model, problem.cluster, problem.pins
        n, domain = cluster.num_gpus, cluster.scaleup_domain_gpus
        self.num_gpus = n
        self.tp_values = self._with_pin(
            set(_powers_of_two(min(domain, n))) | set(_divisors(model.attention.num_heads, min(domain, n))), pins.tp
        )
        self.sp_values = self._with_pin(set(_powers_of_two(min(8, n))), pins.sp)
        if model.is_moe:
            self.attn_dp_values = self._with_pin(set(_powers_of_two(n)) | set(_divisors(n, n)), pins.attn_dp)
            expert_tp = {1, 2, 4, 8} if problem.allows("expert-tp") else {1}
            self.expert_tp_values = self._with_pin({v for v in expert_tp if v <= n}, pins.expert_tp)
        else:
            self.attn_dp_values = self._with_pin({1}, pins.attn_dp)
            self.expert_tp_values = self._with_pin({1}, pins.expert_tp)
        top = pins.pp or min(model.num_layers, n, MAX_STAGES)
        self.stage_values = sorted(set(range(1, top + 1)) | ({pins.pp} if pins.pp else set()))
        if pins.pp and only_pins:
            self.stage_values = [pins.pp]
        if pins.stages is not None:
            self.stage_values = sorted(set(self.stage_values) | {len(pins.stages)})

    def _with_pin(self, values: set[int], pin: int | None) -> list[int]:
        if pin and self.only_pins:
            return [pin]
        return sorted(values | ({pin} if pin else set()))

    @cached_property
    def shapes(self) -> list[Shape]:
        """Every combination whose GPUs fit the cluster and whose expert-tp divides them."""
        out = []
        for tp in self.tp_values:
            for sp in self.sp_values:
                for adp in self.attn_dp_values:
                    for etp in self.expert_tp_values:
                        shape = Shape(tp, sp, adp, etp)
                        if shape.gpus <= self.num_gpus and shape.gpus % etp == 0:
                            out.append(shape)
        return sorted(out)

    @property
    def max_stages(self) -> int:
        return self.stage_values[-1]

    @property
    def decides_batch(self) -> bool:
        return self.problem.objective is Objective.THROUGHPUT and self.problem.workload.batch is None

    @property
    def fixed_batch(self) -> int:
        return self.problem.workload.batch or 1

    def batch_options(self, shape: Shape) -> list[BatchOption]:
        """Microbatch sizes a stage of ``shape`` may run.

        Fixed batch b: ceil(b / min(S, b)) for each stage count S. Decided batch: q sequences per
        attention group per microbatch, q a power of two up to the engine's batch limit, so a
        stage step carries attn_dp x q sequences and the replica S x attn_dp x q.
        """
        if self.decides_batch:
            return [BatchOption(micro=shape.attn_dp * q, q=q) for q in self.q_values]
        micros = sorted({self.micro_for_stages(S) for S in self.stage_values})
        return [BatchOption(micro=m) for m in micros]

    @cached_property
    def q_values(self) -> list[int]:
        return _powers_of_two(self.profile.max_batch)

    def micro_for_stages(self, stages: int) -> int:
        """Fixed batch: sequences per microbatch with ``stages`` stages."""
        return microbatching(stages, self.fixed_batch)[1]

    def fixed_seqs_per_gpu(self, shape: Shape) -> int:
        """Fixed batch: sequences whose KV cache one GPU holds (its attention group's share)."""
        return -(-self.fixed_batch // shape.attn_dp)
