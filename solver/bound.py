"""A proven bound on the objective from the integer tables alone: what a time-limited plan's gap is
measured against when CP-SAT had too little time (or none) to prove its own.

For every (shape, stage count, batch option) the oracle would visit, a relaxation of the plan's cost:
- memory: a stage's bytes summed over the stages do not depend on where the boundaries fall, so a
  combination whose total passes stages x the per-GPU limit has no split that fits (a necessary
  condition only);
- time: a decode round is at least the decode sum over the stages (``round = max(sum, micro-
  batches x slowest stage)``) and the slowest prefill stage at least the prefill sum over the stage
  count; ``under_load`` grows with both, so it gives a lower bound on TTFT, TPOT and e2e.
A combination whose lower bounds already break a TTFT or TPOT limit is dropped too. The bound is the
best objective over what is left: the least e2e for latency, the most output tokens/s for throughput
(every replica the cluster holds). No CP-SAT here; ``optimise.py`` also merges in CP-SAT's own bound
when a search step ran out of time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from shardplan.rules.problem import Objective
from shardplan.solver.cost.evaluate import NS_PER_S, under_load
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import BatchOption, Shape


@dataclass(frozen=True)
class TableBound:
    """``objective``: the best objective any plan can reach, in the units of ``Optimum.objective_value``
    (e2e ns for latency, output tokens/s for throughput); ``e2e_floor_ns``: no plan's e2e is lower.
    ``objective`` is None when no combination passes the relaxation (then no plan exists)."""

    objective: float | None
    e2e_floor_ns: int | None


def relative_gap(value: float, bound: float, objective: Objective) -> float:
    """How far the proven bound lies from the plan's objective, relative to the plan's objective:
    (value - bound) / value for latency's lower bound on e2e, (bound - value) / value for throughput's
    upper bound on tokens/s. ``value`` unrounded: a bound may equal it, and then the gap is 0."""
    if value <= 0:
        return 0.0
    gap = (value - bound) / value if objective is Objective.LATENCY else (bound - value) / value
    return max(0.0, gap)  # floating-point noise of a bound that equals the value


def table_bound(oracle: Oracle) -> TableBound:
    """The relaxation's best objective over every combination the oracle would visit (see the module)."""
    bounds = pair_bounds(oracle).values()
    values = [b.objective for b in bounds if b.objective is not None]
    floors = [b.e2e_floor_ns for b in bounds if b.e2e_floor_ns is not None]
    throughput = oracle.problem.objective is Objective.THROUGHPUT
    best = (max(values) if throughput else min(values)) if values else None
    return TableBound(best, min(floors) if floors else None)


def pair_bounds(oracle: Oracle, check: Callable[[], None] | None = None) -> dict[tuple[Shape, int], TableBound]:
    """``table_bound`` of each (shape, stage count) the oracle visits, in one pass: what an oracle that
    excludes every other pair would bound (``--rate``'s colocated search asks it of every pair; one
    oracle per pair, each excluding the other thousand, took minutes on 512 GPUs). ``check`` is called
    before each pair (a deadline's, which raises when it has passed): a decided batch prices every
    integer batch of every pair."""
    throughput = oracle.problem.objective is Objective.THROUGHPUT
    out: dict[tuple[Shape, int], TableBound] = {}
    for o in oracle.shapes():
        weights_bytes, kv_bytes_per_seq = _whole_model_bytes(oracle, o)
        sums: dict[int, _Sums] = {}  # per microbatch: options of the same micro share their step
        for S in oracle.stage_counts(o):
            if check is not None:
                check()
            replicas = oracle.replicas(o, S)
            if not replicas:
                continue
            best: float | None = None
            floor: int | None = None
            # A decided batch: every integer batch exactly (the CP-SAT search, the only caller, runs
            # this for a fixed batch; a decided one is the branch and bound's, which bounds itself).
            for opt in oracle.options(o, S):
                if not _may_fit(oracle, o, opt, S, weights_bytes, kv_bytes_per_seq):
                    if oracle.space.decides_batch:
                        # The options come in increasing batch, and the bytes never fall as it grows (more
                        # sequences per GPU, a prefill chunk no smaller): no larger batch fits either, and
                        # pricing each of them (every integer up to the engine's limit) was most of the time.
                        break
                    continue
                if opt.micro not in sums:
                    sums[opt.micro] = _Sums.of(oracle, o, opt)
                batch = oracle.batch_of(o, opt, S)
                e2e_ns = sums[opt.micro].e2e_floor_ns(oracle, S, batch)
                if e2e_ns is None:
                    continue
                floor = e2e_ns if floor is None else min(floor, e2e_ns)
                if throughput:
                    value = replicas[-1] * batch * oracle.osl * NS_PER_S / e2e_ns
                    best = value if best is None else max(best, value)
                else:
                    best = e2e_ns if best is None else min(best, e2e_ns)
            if best is not None or floor is not None:
                out[(o, S)] = TableBound(best, floor)
    return out


def _whole_model_bytes(oracle: Oracle, o: Shape) -> tuple[int, int]:
    """(weight bytes, KV bytes per sequence held) of every layer on one GPU of a stage of shape ``o``."""
    t, m = oracle.t, oracle.t.memory[o]
    return (sum(t.layers_of(k) * m.weights[k] for k in t.kinds),
            sum(t.layers_of(k) * m.kv_per_seq[k] for k in t.kinds))


def _may_fit(oracle: Oracle, o: Shape, opt: BatchOption, S: int, weights_bytes: int, kv_bytes_per_seq: int) -> bool:
    """Whether the bytes of every stage together fit S GPUs' limits (the oracle's ``stage_cost``
    memory, summed over the stages: the same for every split)."""
    oracle.t.price(o, opt)  # an option the search's own space may not have priced
    t, m = oracle.t, oracle.t.memory[o]
    seqs = oracle.seqs_per_gpu(o, opt, S)
    total = weights_bytes + kv_bytes_per_seq * seqs + m.replica_end_bytes(S)
    total += S * (seqs * m.logits_per_seq + t.chunk_activation[(o, opt)] + m.fixed)
    return total <= S * t.limit_bytes


@dataclass(frozen=True)
class _Sums:
    """One (shape, batch option)'s step through every layer and both ends, and the sends after the
    first s stages (``sends_*[s]``), in ns."""

    prefill: int
    decode: int
    sends_prefill: list[int]
    sends_decode: list[int]
    chunk: int
    steps: int

    @classmethod
    def of(cls, oracle: Oracle, o: Shape, opt: BatchOption) -> _Sums:
        t, e = oracle.t, oracle.t.price(o, opt)
        return cls(
            prefill=sum(t.layers_of(k) * e.prefill[k] for k in t.kinds) + e.first_prefill + e.last_prefill,
            decode=sum(t.layers_of(k) * e.decode[k] for k in t.kinds) + e.first_decode + e.last_decode,
            sends_prefill=[0, *accumulate(e.send_prefill)],
            sends_decode=[0, *accumulate(e.send_decode)],
            chunk=e.chunk,
            steps=e.steps,
        )

    def e2e_floor_ns(self, oracle: Oracle, S: int, batch: int) -> int | None:
        """A lower bound on e2e of any split into S stages, or None when even it breaks a TTFT or TPOT limit."""
        prefill = self.prefill + self.sends_prefill[S - 1]
        decode = self.decode + self.sends_decode[S - 1]
        load = under_load(prefill, decode, -(-prefill // S), batch, oracle.osl, self.chunk, self.steps, oracle.stack)
        return load.e2e_ns if oracle.within_limits(load) else None
