"""The search space: which values each degree may take, before any rule says which are valid.

Candidate values are a modelling choice, not a rule: powers of two (what serving engines deploy)
plus the divisors of the attention heads and of the cluster, plus whatever the user pinned. The
rules then decide which combinations are valid, so a pinned ``--tp 3`` is representable and
rejected by the rule it breaks, by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from shardplan.hardware.profile import Profile
from shardplan.rules.capacity import engine_batch_limit
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


@dataclass(frozen=True, order=True)
class BatchOption:
    """One way the batch can look: ``micro`` sequences per stage step, the step the times are priced at.

    For a decided batch, ``q`` .. ``q_hi`` sequences per attention group per microbatch (the replica
    runs stages x attn_dp x q): one integer when ``exact``, else a range priced at its smallest q,
    ``micro = attn_dp x q``. A step's time only grows with its sequences, so a range's times bound
    every q in it from below; its memory and tokens are those of the q the search picks, exactly."""

    micro: int
    q: int = 0  # 0: the batch is fixed by the workload
    q_hi: int = 0  # the range's largest q; equal to q (or 0 for a fixed batch) when exact
    # A decided batch priced for one batch exactly (``for_batch``): its sequences per replica, any
    # integer, not only S x attn_dp x q; 0 for the encoding's options, whose batch the model decides.
    batch: int = 0

    @property
    def exact(self) -> bool:
        return self.q_hi in (0, self.q)

    @staticmethod
    def at(attn_dp: int, q: int) -> BatchOption:
        """The exactly priced option of q sequences per attention group per microbatch."""
        return BatchOption(micro=attn_dp * q, q=q, q_hi=q)

    @staticmethod
    def for_batch(stages: int, attn_dp: int, batch: int) -> BatchOption:
        """The option of exactly ``batch`` sequences per replica, as ``evaluate`` runs them: microbatches
        of ceil(batch / min(stages, batch)) sequences (the largest one prices every step), each attention
        group holding at most ceil(micro / attn_dp) of them."""
        micro = microbatching(stages, batch)[1]
        q = -(-micro // attn_dp)
        return BatchOption(micro=micro, q=q, q_hi=q, batch=batch)


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

    def __init__(
        self,
        problem: Problem,
        profile: Profile,
        only_pins: bool = False,
        refined: Mapping[Shape, frozenset[int]] | None = None,
        ranges: bool = True,
    ):
        self.problem = problem
        self.only_pins = only_pins
        self.profile = profile
        # refined[shape]: values of q the driver asked to price exactly for that shape (optimise.py).
        self.refined: Mapping[Shape, frozenset[int]] = refined or {}
        # ranges=False: a decided batch takes only the priced points (the quick grid search).
        self.ranges = ranges
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
        attention group per microbatch, any integer with S x q within the engine's batch limit, so a
        stage step carries attn_dp x q sequences and the replica S x attn_dp x q. The q are grouped
        into ranges between priced points: the powers of two, every q whose prefill chunk still
        grows with it (a range's chunk must be one value), and the points the driver refined.
        """
        if not self.decides_batch:
            micros = sorted({self.micro_for_stages(S) for S in self.stage_values})
            return [BatchOption(micro=m) for m in micros]
        top = self.batch_limit
        chunk_grows = self.profile.max_num_tokens // self.problem.workload.isl // shape.attn_dp
        # q past chunk_grows all prefill the budget's prompts at once: one chunk per range above it.
        points = set(_powers_of_two(top)) | set(range(1, min(chunk_grows + 1, top) + 1))
        points |= {q for q in self.refined.get(shape, frozenset()) if 1 <= q <= top}
        ordered = sorted(points)
        if not self.ranges:
            return [BatchOption.at(shape.attn_dp, q) for q in ordered]
        ends = [nxt - 1 for nxt in ordered[1:]] + [top]
        return [BatchOption(micro=shape.attn_dp * q, q=q, q_hi=end) for q, end in zip(ordered, ends, strict=True)]

    @property
    def batch_limit(self) -> int:
        """Sequences one attention group may hold at once (over its microbatches): the engine's limit,
        --max-batch or the profile's."""
        return engine_batch_limit(self.problem, self.profile)

    def replica_batch_limit(self, attn_dp: int) -> int:
        """Sequences one replica may hold at once: the limit in each of its ``attn_dp`` attention groups
        (a batch B puts ceil(B / attn_dp) in the fullest group)."""
        return attn_dp * self.batch_limit

    def micro_for_stages(self, stages: int) -> int:
        """Fixed batch: sequences per microbatch with ``stages`` stages."""
        return microbatching(stages, self.fixed_batch)[1]

    def fixed_seqs_per_gpu(self, shape: Shape) -> int:
        """Fixed batch: sequences whose KV cache one GPU holds (its attention group's share)."""
        return -(-self.fixed_batch // shape.attn_dp)
