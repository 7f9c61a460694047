"""The CP-SAT encoding of a planning problem: decision variables and the cost model's linkage.

What is decided:
- ``shape[o]``: one stage shape (tp, sp, attn_dp, expert_tp) — one boolean per option;
- ``pp[S]``: the number of stages — one boolean per value (CPSAT-NOTES: one-hot beats element);
- ``pair[(o, j)]``: the shape together with a batch option j (its microbatch), so that costs that
  depend on both are linear in one boolean (CPSAT-NOTES: pair booleans channelled to both);
- ``bound[s]``: the first layer of stage slot s; slots at or past S are empty;
- ``dp``: replicas.

Costs enter as the integer tables of ``tables.py``. The sum over stages of any per-layer cost
does not depend on where the boundaries fall, so TTFT and the decode sum are linear; per-stage
times (needed for pipelined rounds) multiply a layer count by a shape-dependent per-layer time,
one ``add_multiplication_equality`` per slot and layer kind. No rule lives here: rules post their
constraints through the helpers at the bottom of ``Encoding``. ``build_model`` posts every rule in
force under its own enforcement literal, and ``new_solver`` is the one solver configuration every
search on an encoding uses; the searches themselves are ``optimise.py`` and ``explain.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model
from ortools.sat.python.cp_model import IntVar, LinearExpr, LiteralT

from shardplan.rules.base import Rule
from shardplan.rules.catalog import rules_for
from shardplan.rules.problem import Problem
from shardplan.solver.cost.evaluate import PER_MILLE, WAIT_DIV, ServingStack, resolve_profile
from shardplan.solver.cost.operators import LayerKind
from shardplan.solver.interruptible import InterruptibleSolver
from shardplan.solver.search_base import MOST_SOLUTIONS, check_switches
from shardplan.solver.space import BatchOption, SearchSpace, Shape
from shardplan.solver.tables import Tables, TimeEntry, build_tables

SEED = 20261122  # one worker and a fixed seed keep every search reproducible

# CP-SAT refuses a variable whose domain passes kint64max / 2 and a linear row whose terms could sum past
# kint64max (cp_model_checker: the model is invalid and solving it fails). Every integer the encoding
# carries stays at or below VALUE_CAP, so a row of a few such terms with small coefficients fits. A
# natural bound above it (32,768 GPUs x a batch limit x a stage time) is clamped there: a plan that
# needs a larger time or work (2^59 ns, 18 years) is outside the model. A bound that fits is never
# clamped, so a problem whose bounds fitted is encoded exactly as before (``Encoding.clamped`` names
# the clamped quantities; tests hold it empty on ordinary problems).
VALUE_CAP = 1 << 59

PairKey = tuple[Shape, BatchOption]
# A linear expression over the encoding's variables, or a constant (an empty sum is 0). Narrower than
# ortools' Expr, whose numpy integers the stubs cannot add to an expression.
Expr = LinearExpr | int


class Encoding:
    def __init__(self, tables: Tables):
        self.tables = tables
        self.space = space = tables.space
        self.problem = problem = tables.problem
        self.cp = cp = cp_model.CpModel()
        self.num_layers = problem.model.num_layers
        self.num_gpus = N = space.num_gpus
        self.max_stages = Smax = space.max_stages
        self.kinds = tables.kinds
        # Helper variables created on first use, keyed by what they stand for.
        self._pp_at_least: dict[int, IntVar] = {}
        self._held_vars: dict[tuple[int, LayerKind], IntVar] = {}
        self._chunk_activation: IntVar | None = None
        self.clamped: list[str] = []  # quantities whose natural bound passed VALUE_CAP
        # Stage times live in [0, hi], rounds and sums in [0, round_hi]: sized from the tables,
        # so products and objectives stay in 64 bits.
        self.hi = self.capped("stage time", tables.time_bound_ns())
        self.round_hi = self.capped("round", self.hi * (Smax + 1))

        # shape[o]: stage shape o is chosen.
        self.shapes = space.shapes
        self.shape: dict[Shape, IntVar] = {
            o: cp.new_bool_var(f"shape[{o.tp},{o.sp},{o.attn_dp},{o.expert_tp}]") for o in self.shapes
        }
        cp.add_exactly_one(self.shape.values())
        # pp[S]: the replica has S stages.
        self.pp: dict[int, IntVar] = {S: cp.new_bool_var(f"pp[{S}]") for S in space.stage_values}
        cp.add_exactly_one(self.pp.values())
        self.stages = cp.new_int_var(1, Smax, "stages")
        cp.add(self.stages == sum(S * lit for S, lit in self.pp.items()))
        self.gpus_per_stage = cp.new_int_var(1, N, "G")
        cp.add(self.gpus_per_stage == sum(o.gpus * lit for o, lit in self.shape.items()))
        self.dp = cp.new_int_var(1, N, "dp")
        # ep: tied to the shape by EP-001 alone, so a pinned ep the shapes cannot give is named.
        self.ep = cp.new_int_var(1, max(N, problem.pins.ep or 1), "ep")
        self.gpus_per_replica = cp.new_int_var(1, N * Smax, "S*G")
        cp.add_multiplication_equality(self.gpus_per_replica, [self.stages, self.gpus_per_stage])
        self.gpus_used = cp.new_int_var(1, N * N * Smax, "GPUs")
        cp.add_multiplication_equality(self.gpus_used, [self.dp, self.gpus_per_replica])

        self._post_batch_options()
        self._post_boundaries()
        self._post_costs()

    def capped(self, name: str, natural: int, most: int = VALUE_CAP, implied: int | None = None) -> int:
        """``natural``, an upper bound, while it is at most ``most``; past that the bound the constraints
        imply (``implied``, which cuts nothing) or else ``most`` itself, recorded in ``clamped``."""
        if natural <= most:
            return natural
        if implied is not None and implied <= most:
            return implied
        self.clamped.append(name)
        return most

    # --- batch -------------------------------------------------------------------------------
    def _post_batch_options(self) -> None:
        cp, space = self.cp, self.space
        # pair[(o, j)]: shape o with batch option j.
        self.pair: dict[PairKey, IntVar] = {}
        self.batch: int | IntVar  # a variable when the search decides the batch
        self.seqs_per_gpu: IntVar | None  # likewise; a fixed batch gives a constant per shape
        for o in self.shapes:
            lits: list[IntVar] = []
            for option in space.batch_options(o):
                name = f"pair[{o.tp},{o.sp},{o.attn_dp},{o.expert_tp};{option.micro},{option.q}-{option.q_hi}]"
                lit = cp.new_bool_var(name)
                self.pair[(o, option)] = lit
                lits.append(lit)
            cp.add(sum(lits) == self.shape[o])
        if space.decides_batch:
            # bucket[(q, q_hi)]: the range of q (sequences per attention group per microbatch)
            # every shape's chosen option covers; q_value is the q itself, any integer in it.
            buckets = sorted({(opt.q, opt.q_hi) for _, opt in self.pair})
            self.bucket: dict[tuple[int, int], IntVar] = {b: cp.new_bool_var(f"q in {b}") for b in buckets}
            cp.add_exactly_one(self.bucket.values())
            for b, lit in self.bucket.items():
                cp.add(sum(p for (_, opt), p in self.pair.items() if (opt.q, opt.q_hi) == b) == lit)
            qmax = space.batch_limit
            self.q_value = cp.new_int_var(1, qmax, "q")
            cp.add(self.q_value >= sum(lo * lit for (lo, _), lit in self.bucket.items()))
            cp.add(self.q_value <= sum(hi * lit for (_, hi), lit in self.bucket.items()))
            # Sequences a GPU holds (S microbatches of q per group), at most what the engine
            # schedules at once; the replica's batch is S x attn_dp x q.
            self.seqs_per_gpu = cp.new_int_var(1, qmax, "S*q")
            cp.add_multiplication_equality(self.seqs_per_gpu, [self.stages, self.q_value])
            attn_dp = cp.new_int_var(1, self.num_gpus, "attn_dp")
            cp.add(attn_dp == sum(o.attn_dp * lit for o, lit in self.shape.items()))
            self.micro = cp.new_int_var(1, self.num_gpus * qmax, "micro")
            cp.add_multiplication_equality(self.micro, [attn_dp, self.q_value])
            self.batch = cp.new_int_var(1, self.num_gpus * qmax, "batch")
            cp.add_multiplication_equality(self.batch, [self.stages, self.micro])
        else:
            # The microbatch follows from the number of stages: ceil(b / min(S, b)).
            for (_shape, opt), p in self.pair.items():
                fitting = [lit for S, lit in self.pp.items() if space.micro_for_stages(S) == opt.micro]
                cp.add_bool_or(fitting).only_enforce_if(p) if fitting else cp.add(p == 0)
            self.batch = space.fixed_batch
            # ceil(b / attn_dp) sequences per GPU: a constant per shape.
            self.seqs_per_gpu = None

    # --- stage boundaries --------------------------------------------------------------------
    def _post_boundaries(self) -> None:
        cp, L, Smax = self.cp, self.num_layers, self.max_stages
        # bound[s]: first layer of slot s; bound[Smax] = L. Slots at or past S hold no layer.
        self.bound = [cp.new_int_var(0, L, f"bound[{s}]") for s in range(Smax + 1)]
        cp.add(self.bound[0] == 0)
        cp.add(self.bound[Smax] == L)
        # active[s]: slot s is a real stage (s < S).
        self.active: list[Expr] = [sum(lit for S, lit in self.pp.items() if S > s) for s in range(Smax)]
        self.is_last: list[IntVar | None] = [self.pp.get(s + 1) for s in range(Smax)]  # slot s is the last stage
        self.layers = [cp.new_int_var(0, L, f"layers[{s}]") for s in range(Smax)]
        for s in range(Smax):
            cp.add(self.layers[s] == self.bound[s + 1] - self.bound[s])
        # count[s][k]: layers of kind k in slot s, read from prefix tables.
        self.prefix_at: list[dict[LayerKind, IntVar]] = []
        for s in range(Smax + 1):
            row: dict[LayerKind, IntVar] = {}
            for k in self.kinds:
                var = cp.new_int_var(0, L, f"prefix[{s},{k.label}]")
                cp.add_element(self.bound[s], self.tables.prefix[k], var)
                row[k] = var
            self.prefix_at.append(row)
        self.count: list[dict[LayerKind, Expr]] = [
            {k: self.prefix_at[s + 1][k] - self.prefix_at[s][k] for k in self.kinds} for s in range(Smax)
        ]

    # --- costs -------------------------------------------------------------------------------
    def _pair_sum(self, coefficient: dict[PairKey, int]) -> Expr:
        """sum over (shape, option) pairs of pair * coefficient[pair]: the chosen pair's number."""
        return sum(coefficient[key] * lit for key, lit in self.pair.items())

    def _table_sum(self, value: Callable[[TimeEntry], int]) -> Expr:
        """The chosen pair's ``value(time entry)``."""
        return self._pair_sum({key: value(entry) for key, entry in self.tables.time.items()})

    def _post_costs(self) -> None:
        cp, t, Smax = self.cp, self.tables, self.max_stages
        big = self.hi
        # Per-layer times of each kind, for the chosen shape and microbatch.
        self.tau_decode = {
            k: self._at_least(f"tau_decode[{k.label}]", self._pair_sum({key: e.decode[k] for key, e in t.time.items()}))
            for k in self.kinds
        }
        self._post_batch_range_slopes()
        self.tau_prefill = {
            k: self._new(f"tau_prefill[{k.label}]", self._pair_sum({key: e.prefill[k] for key, e in t.time.items()}))
            for k in self.kinds
        }
        first_d = self._table_sum(lambda e: e.first_decode)
        first_p = self._table_sum(lambda e: e.first_prefill)
        last_d = self._new("last_decode", self._table_sum(lambda e: e.last_decode))
        last_p = self._new("last_prefill", self._table_sum(lambda e: e.last_prefill))
        # send[s]: activations from slot s to s+1, paid only if slot s+1 is a stage.
        self.send_decode: list[IntVar] = []
        self.send_prefill: list[IntVar] = []
        for s in range(Smax - 1):
            sends = {
                "send_decode": (self.send_decode, {key: e.send_decode[s] for key, e in t.time.items()}),
                "send_prefill": (self.send_prefill, {key: e.send_prefill[s] for key, e in t.time.items()}),
            }
            for name, (out, send_ns) in sends.items():
                var = cp.new_int_var(0, big, f"{name}[{s}]")
                cp.add(var == self._pair_sum(send_ns)).only_enforce_if(self.pp_at_least(s + 2))
                cp.add(var == 0).only_enforce_if(~self.pp_at_least(s + 2))
                out.append(var)
        self.send_decode.append(cp.new_constant(0))
        self.send_prefill.append(cp.new_constant(0))
        L_k = {k: t.layers_of(k) for k in self.kinds}
        # Sums over all stages: independent of the boundaries.
        # prefill: the prompt's chunk through every stage (TTFT at concurrency 1).
        self.prefill = self._new(
            "prefill", sum(L_k[k] * self.tau_prefill[k] for k in self.kinds) + first_p + last_p + sum(self.send_prefill)
        )
        self.decode_sum = self._new(
            "decode_sum",
            sum(L_k[k] * self.tau_decode[k] for k in self.kinds) + first_d + last_d + sum(self.send_decode),
        )
        self.round = cp.new_int_var(0, self.round_hi, "round")
        cp.add(self.round >= self.decode_sum)
        if not self._needs_stage_times():
            cp.add(self.round == self.decode_sum)
            self._post_user_latency()
            return
        # Per-stage times: layer counts times per-layer times, plus the ends.
        self.stage_decode: list[IntVar] = []
        self.stage_prefill: list[IntVar] = []
        slowest_decode = cp.new_int_var(0, big, "slowest_decode")
        self.slowest_prefill = cp.new_int_var(0, big, "slowest_prefill")
        for s in range(Smax):
            d = self._stage_time(s, self.tau_decode, first_d, last_d, "decode")
            p = self._stage_time(s, self.tau_prefill, first_p, last_p, "prefill")
            cp.add(slowest_decode >= d + self.send_decode[s])
            cp.add(self.slowest_prefill >= p + self.send_prefill[s])
            self.stage_decode.append(d)
            self.stage_prefill.append(p)
        # round >= microbatches x slowest stage, microbatches = min(S, batch).
        b = self.space.fixed_batch
        micro_count = self.stages if self.space.decides_batch else sum(min(S, b) * lit for S, lit in self.pp.items())
        mu = self._new("microbatches", micro_count, hi=Smax)
        busiest = cp.new_int_var(0, self.round_hi, "mu*slowest")
        cp.add_multiplication_equality(busiest, [mu, slowest_decode])
        # round = max(decode_sum, busiest): both are lower bounds, and no objective rewards a
        # longer round, so the optimum sits at the maximum.
        cp.add(self.round >= busiest)
        self._post_user_latency()

    def _post_user_latency(self) -> None:
        """TTFT, TPOT and e2e as users measure them at concurrency C = the batch: exactly
        ``evaluate``'s ``under_load`` (solver/cost/evaluate.py) on the same integer times.

        tpot = round + ceil((C - 1) x slowest prefill stage / (OSL x chunk)); ttft = ceil(prefill /
        chunk) + [C > 1] ceil((10 steps + w) x round / 10) + ceil(share‰ x (C - 1) x slowest prefill
        stage / (1000 x chunk)) + the fixed cost per request, w the profile's wait steps in tenths; e2e =
        ttft + (OSL - 1) x tpot. Where the profile's prefill does not mix with decode, the prompt pays its
        batch, ceil(min(1000 x chunk, 1000 + share‰ x (C - 1)) x prefill / (1000 x chunk)), and waits
        ceil(w x round / 10). Every term grows
        with the round and the slowest prefill stage, which the encoding bounds from below only: no
        objective or limit gains from a longer one, so at an optimum they sit at their true values.
        """
        cp, osl, t = self.cp, self.problem.workload.osl, self.tables
        stack = ServingStack.of(t.profile or resolve_profile(self.problem))
        decided = isinstance(self.batch, IntVar)
        # A decided batch is S x attn_dp x q with S x q within the batch limit: at most the widest
        # shape's attention groups times that limit (exact; the cluster's GPUs times it was looser).
        batch_hi = max(o.attn_dp for o in self.shapes) * self.space.batch_limit if decided else self.space.fixed_batch
        chunks = sorted({e.chunk for e in t.time.values()})
        work_hi = self.capped("others x slowest prefill", (batch_hi - 1) * self.hi)
        self.share_hi = self.capped("prefill share", work_hi // (osl * chunks[0]) + 1)
        steps_hi = max(stack.wait_tenths(e.steps) for e in t.time.values())
        # The wait enters its rows as WAIT_DIV x wait: bounded by VALUE_CAP / WAIT_DIV, as each round copy
        # is by VALUE_CAP / k (``_round_within``), so the row stays in 64 bits (at VALUE_CAP, CP-SAT called
        # the model invalid: a 9M-token prompt on 512 GPUs, whose explanation then ended as exit 2).
        wait_hi = self.capped("ttft wait", steps_hi * self.round_hi // WAIT_DIV + 1, VALUE_CAP // WAIT_DIV)
        queue_hi = stack.queue_per_mille * work_hi // (PER_MILLE * chunks[0]) + 1  # at most work_hi
        # e2e = ttft + (OSL - 1) x tpot is one row: tpot within VALUE_CAP / (OSL - 1) keeps it in 64 bits
        # (a tpot past that is an e2e past VALUE_CAP).
        self.tpot_hi = self.capped("tpot", self.round_hi + self.share_hi, VALUE_CAP // max(1, osl - 1))
        self.ttft_hi = self.capped("ttft", self.hi + wait_hi + queue_hi + stack.overhead_ns)
        self.e2e_hi = self.capped("e2e", self.ttft_hi + (osl - 1) * self.tpot_hi)
        self.share = cp.new_int_var(0, self.share_hi, "prefill_share")
        self.wait = cp.new_int_var(0, wait_hi, "ttft_wait")
        self.queue = cp.new_int_var(0, queue_hi, "ttft_queue")
        # own = ceil(prefill / chunk): the prompt's share of its chunk through every stage, exactly.
        chunk_var = cp.new_int_var(chunks[0], chunks[-1], "chunk")
        cp.add(chunk_var == self._table_sum(lambda e: e.chunk))
        own = cp.new_int_var(0, self.hi, "own_prefill")
        own_paid = cp.new_int_var(0, self.capped("chunk x own prefill", chunks[-1] * self.hi), "chunk*own_prefill")
        cp.add_multiplication_equality(own_paid, [chunk_var, own])
        if stack.mixes or batch_hi <= 1:
            cp.add(own_paid >= self.prefill)
            cp.add(own_paid - chunk_var < self.prefill)
        if batch_hi <= 1:  # one request: nothing else's prefill, nothing to wait for
            cp.add(self.share == 0)
            cp.add(self.wait == 0)
            cp.add(self.queue == 0)
        else:
            # share = ceil(others x slowest prefill / (OSL x chunk)), others = C - 1, exactly.
            others = cp.new_int_var(0, batch_hi - 1, "other_requests")
            cp.add(others == self.batch - 1)
            chunk_osl = cp.new_int_var(osl * chunks[0], osl * chunks[-1], "osl*chunk")
            cp.add(chunk_osl == self._table_sum(lambda e: osl * e.chunk))
            work = cp.new_int_var(0, work_hi, "others*slowest_prefill")
            cp.add_multiplication_equality(work, [others, self.slowest_prefill])
            # paid - chunk_osl < work bounds it by work's bound plus one chunk_osl where chunk_osl x share's
            # bound passes 64 bits (it did on 32,768 GPUs).
            paid_hi = self.capped("osl x chunk x share", osl * chunks[-1] * self.share_hi,
                                  implied=work_hi + osl * chunks[-1])
            paid = cp.new_int_var(0, paid_hi, "osl*chunk*share")
            cp.add_multiplication_equality(paid, [chunk_osl, self.share])
            cp.add(paid >= work)
            cp.add(paid - chunk_osl < work)
            # queue = ceil(share‰ x others x slowest prefill / (1000 x chunk)), exactly (0 when share‰ is 0).
            queued_hi = self.capped("chunk x queue", chunks[-1] * queue_hi, implied=work_hi + chunks[-1])
            queued = cp.new_int_var(0, queued_hi, "chunk*queue")
            cp.add_multiplication_equality(queued, [chunk_var, self.queue])
            self._post_thousandths(queued, chunk_var, stack.queue_per_mille, work, (queued_hi, chunks[-1], work_hi))
            if not stack.mixes:
                self._post_own_batch(stack, own_paid, chunk_var, others, chunks[-1])
            # wait = ceil(k x round / 10), k = the pair's wait in tenths under load (10 steps + w, or w
            # where prefill does not mix) and 0 for a single request: one
            # linear row per value of k (a handful), enforced by the pairs that have it. Every
            # objective and limit prefers a shorter wait, so at an optimum it is exactly the ceiling.
            loaded_pairs: dict[int, list[IntVar]] = {}
            for key, lit in self.pair.items():
                loaded_pairs.setdefault(stack.wait_tenths(t.time[key].steps), []).append(lit)
            under_load = cp.new_bool_var("under_load")
            if decided:
                cp.add(self.batch >= 2).only_enforce_if(under_load)
                cp.add(self.batch == 1).only_enforce_if(~under_load)
            else:
                cp.add(under_load == 1)
            for k, lits in loaded_pairs.items():
                chosen = cp.new_bool_var(f"wait_k[{k}]")
                cp.add(sum(lits) == chosen)
                cp.add(WAIT_DIV * self.wait >= k * self._round_within(k, [chosen, under_load])).only_enforce_if(
                    [chosen, under_load]
                )
        self.tpot = self._new("tpot", self.round + self.share, hi=self.tpot_hi)
        self.ttft = self._new("ttft", own + self.wait + self.queue + stack.overhead_ns, hi=self.ttft_hi)
        self.e2e = self._new("e2e", self.ttft + (osl - 1) * self.tpot, hi=self.e2e_hi)

    def _round_within(self, k: int, enforce: list[IntVar]) -> IntVar:
        """The round, for a row with coefficient k: itself while k x its bound fits VALUE_CAP, else a copy
        bounded by VALUE_CAP / k, equal to it where ``enforce`` holds (a larger round there is a wait past
        VALUE_CAP / WAIT_DIV)."""
        if k * self.round_hi <= VALUE_CAP:
            return self.round
        self.clamped.append(f"round x {k}")
        copy = self.cp.new_int_var(0, VALUE_CAP // k, f"round<{k}>")
        self.cp.add(copy == self.round).only_enforce_if(enforce)
        return copy

    def _post_thousandths(
        self, paid: IntVar, chunk_var: IntVar, per_mille: int, work: IntVar, bounds: tuple[int, int, int]
    ) -> None:
        """``paid`` = chunk x ceil(per_mille x work / (1000 x chunk)), in integers: paid >= per_mille x work
        / 1000 and paid - chunk below it. ``bounds``: (paid, chunk, work) upper bounds. per_mille x work may
        pass 64 bits where work fits (the queue's share on 32,768 GPUs): then, with work = 1000 w1 + w0
        (w0 < 1000), the thousandth rounded up is per_mille x w1 + ceil(per_mille x w0 / 1000) (nested
        ceilings compose), each term within work's range. Both forms give the same integers; the first,
        where it fits, is the encoding as it always was."""
        cp = self.cp
        paid_hi, chunk_hi, work_hi = bounds
        if per_mille * work_hi + PER_MILLE * (paid_hi + chunk_hi) <= 2 * VALUE_CAP:
            cp.add(PER_MILLE * paid >= per_mille * work)
            cp.add(PER_MILLE * (paid - chunk_var) < per_mille * work)
            return
        self.clamped.append(f"{per_mille}/1000 x {work.name} split")  # exact: nothing is cut
        w1 = cp.new_int_var(0, work_hi // PER_MILLE, f"{work.name}/1000")
        w0 = cp.new_int_var(0, PER_MILLE - 1, f"{work.name}%1000")
        cp.add(work == PER_MILLE * w1 + w0)
        rest = cp.new_int_var(0, per_mille, f"ceil({per_mille}*{work.name}%1000/1000)")
        cp.add(PER_MILLE * rest >= per_mille * w0)
        cp.add(PER_MILLE * (rest - 1) < per_mille * w0)
        cp.add(paid >= per_mille * w1 + rest)
        cp.add(paid - chunk_var < per_mille * w1 + rest)

    def _post_own_batch(
        self, stack: ServingStack, own_paid: IntVar, chunk_var: IntVar, others: IntVar, chunk_hi: int
    ) -> None:
        """own = ceil(batch‰ x prefill / (1000 x chunk)), batch‰ = min(1000 x chunk, 1000 + share‰ x
        others), exactly (``ServingStack.batch_per_mille``): a prompt of an engine whose prefill does not
        mix with decode pays its whole prefill batch. ``own_paid`` = chunk x own.

        batch‰ x prefill may pass 64 bits where chunk x prefill fits: then batch‰ = 1000 b1 + b0 (b0 <
        1000) and the thousandth rounded up is b1 x prefill + ceil(b0 x prefill / 1000), the same integer."""
        cp = self.cp
        batch = cp.new_int_var(PER_MILLE, PER_MILLE * chunk_hi, "prefill_batch_per_mille")
        cp.add_min_equality(batch, [PER_MILLE * chunk_var, PER_MILLE + stack.queue_per_mille * others])
        if PER_MILLE * chunk_hi * self.hi <= VALUE_CAP:
            batch_prefill = cp.new_int_var(0, PER_MILLE * chunk_hi * self.hi, "batch*prefill")
            cp.add_multiplication_equality(batch_prefill, [batch, self.prefill])
            cp.add(PER_MILLE * own_paid >= batch_prefill)
            cp.add(PER_MILLE * (own_paid - chunk_var) < batch_prefill)
            return
        self.clamped.append("prefill batch x prefill split")  # exact: nothing is cut
        whole = cp.new_int_var(1, chunk_hi, "prefill_batch/1000")
        part = cp.new_int_var(0, PER_MILLE - 1, "prefill_batch%1000")
        cp.add(batch == PER_MILLE * whole + part)
        whole_prefill = cp.new_int_var(0, self.capped("prefill batch x prefill", chunk_hi * self.hi), "whole*prefill")
        cp.add_multiplication_equality(whole_prefill, [whole, self.prefill])
        part_prefill = cp.new_int_var(0, (PER_MILLE - 1) * self.hi, "part*prefill")
        cp.add_multiplication_equality(part_prefill, [part, self.prefill])
        rest = cp.new_int_var(0, self.hi, "ceil(part*prefill/1000)")
        cp.add(PER_MILLE * rest >= part_prefill)
        cp.add(PER_MILLE * (rest - 1) < part_prefill)
        cp.add(own_paid >= whole_prefill + rest)
        cp.add(own_paid - chunk_var < whole_prefill + rest)

    def _stage_time(
        self, s: int, tau: dict[LayerKind, IntVar], first: Expr, last_expr: Expr, label: str
    ) -> IntVar:
        cp, big = self.cp, self.hi
        parts: list[IntVar] = []
        for k in self.kinds:
            z = cp.new_int_var(0, big, f"{label}[{s},{k.label}]")
            cp.add_multiplication_equality(z, [self.prefix_at[s + 1][k] - self.prefix_at[s][k], tau[k]])
            parts.append(z)
        end = cp.new_int_var(0, big, f"{label}_last[{s}]")
        last_lit = self.is_last[s]
        if last_lit is not None:
            cp.add(end == last_expr).only_enforce_if(last_lit)
            cp.add(end == 0).only_enforce_if(~last_lit)
        else:
            cp.add(end == 0)
        return self._new(f"{label}_stage[{s}]", sum(parts) + (first if s == 0 else 0) + end)

    def _needs_stage_times(self) -> bool:
        """Per-stage times matter when microbatches pipeline (more than one sequence in flight)
        or when the throughput objective prices the slowest prefill stage."""
        return self.space.decides_batch or self.space.fixed_batch > 1 or self.problem.objective.value == "throughput"

    def _at_least(self, name: str, expr: Expr) -> IntVar:
        """A time bounded from below by ``expr`` alone: equal to it wherever the batch is exact
        (every objective and limit prefers the shorter), above it only along a range's KV slope."""
        if not self.space.decides_batch:
            return self._new(name, expr)
        var = self.cp.new_int_var(0, self.hi, name)
        self.cp.add(var >= expr)
        return var

    def _post_batch_range_slopes(self) -> None:
        """A decided batch's range [q, q_hi] is priced at q; each q' above it adds at least the KV
        stream of q' - q more sequences per layer (tables.py ``kv_slope``; the -1 absorbs the
        rounding of both ends to whole ns). Exact times at q, a tight lower bound above it."""
        if not self.space.decides_batch:
            return
        for (o, option), lit in self.pair.items():
            if option.exact:
                continue
            entry = self.tables.time[(o, option)]
            for k in self.kinds:
                slope = entry.kv_slope.get(k, 0)
                if slope > 0:
                    grown = entry.decode[k] - 1 + slope * (self.q_value - option.q)
                    self.cp.add(self.tau_decode[k] >= grown).only_enforce_if(lit)

    def _new(self, name: str, expr: Expr, hi: int | None = None) -> IntVar:
        var = self.cp.new_int_var(0, self.hi if hi is None else hi, name)
        self.cp.add(var == expr)
        return var

    # --- helpers the rules and objectives use -----------------------------------------------
    def pp_at_least(self, n: int) -> IntVar:
        """A literal: the replica has at least n stages."""
        if n not in self._pp_at_least:
            lit = self.cp.new_bool_var(f"pp>={n}")
            self.cp.add(sum(at for S, at in self.pp.items() if S >= n) == lit)
            self._pp_at_least[n] = lit
        return self._pp_at_least[n]

    def shapes_where(self, predicate: Callable[[Shape], bool]) -> list[IntVar]:
        """Literals of the shapes for which ``predicate(shape)`` holds."""
        return [lit for o, lit in self.shape.items() if predicate(o)]

    def forbid_shapes(self, predicate: Callable[[Shape], bool], enforce: LiteralT) -> None:
        """No shape satisfying ``predicate`` may be chosen while ``enforce`` holds."""
        for lit in self.shapes_where(predicate):
            self.cp.add_implication(enforce, ~lit)

    def stage_memory(self, s: int, o: Shape) -> Expr:
        """Bytes on one GPU of slot s if the shape is o (a linear expression)."""
        m = self.tables.memory[o]
        expr: Expr = sum(self.count[s][k] * m.weights[k] for k in self.kinds)
        if self.seqs_per_gpu is not None:  # the search decides the batch
            expr += sum(self._held(s, k) * m.kv_per_seq[k] for k in self.kinds)
            expr += self.seqs_per_gpu * m.logits_per_seq
        else:
            seqs = self.space.fixed_seqs_per_gpu(o)
            expr += sum(self.count[s][k] * (m.kv_per_seq[k] * seqs) for k in self.kinds)
            expr += seqs * m.logits_per_seq
        expr += self.chunk_activation + m.fixed
        if s == 0:
            expr += m.first
        last = self.is_last[s]
        if last is not None:
            # The LM head: on its own stage, or sharing the only stage with the embedding.
            expr += (m.last_with_first if s == 0 else m.last) * last
        return expr

    def replica_memory_lower_bound(self, o: Shape) -> Expr:
        """A linear lower bound on the memory of all stages of a replica together (one GPU per
        stage): every layer's weights and KV cache, both ends, each stage's fixed overhead."""
        t, m = self.tables, self.tables.memory[o]
        expr: Expr = sum(t.layers_of(k) * m.weights[k] for k in self.kinds) + m.first + m.last_with_first
        expr += m.fixed * self.stages
        if self.seqs_per_gpu is not None:  # the search decides the batch
            expr += sum(t.layers_of(k) * m.kv_per_seq[k] for k in self.kinds) * self.seqs_per_gpu
        else:
            seqs = self.space.fixed_seqs_per_gpu(o)
            expr += sum(t.layers_of(k) * m.kv_per_seq[k] for k in self.kinds) * seqs
        return expr

    @property
    def chunk_activation(self) -> IntVar:
        """Activation bytes of the chosen prefill chunk: one variable shared by every memory row."""
        if self._chunk_activation is None:
            t = self.tables
            self._chunk_activation = self._new("chunk_activation", self._pair_sum(t.chunk_activation), hi=10**15)
        return self._chunk_activation

    def _held(self, s: int, k: LayerKind) -> IntVar:
        """Layers of kind k in slot s times the sequences each GPU holds (a product variable);
        only a decided batch asks for it."""
        key = (s, k)
        if key not in self._held_vars:
            assert self.seqs_per_gpu is not None, "a fixed batch holds a constant number of sequences"
            var = self.cp.new_int_var(0, self.num_layers * self.space.batch_limit, f"held[{s},{k.label}]")
            self.cp.add_multiplication_equality(var, [self.count[s][k], self.seqs_per_gpu])
            self._held_vars[key] = var
        return self._held_vars[key]


@dataclass
class Model:
    """An encoding with every rule in force posted under its own enforcement literal."""

    enc: Encoding
    rules: list[Rule]
    literals: list[IntVar]  # literals[i] enforces rules[i]


def build_model(problem: Problem, only_pins: bool = False, tables: Tables | None = None) -> Model:
    """A fresh encoding with every rule posted; ``tables`` (pure data) may be reused from another.
    ``only_pins`` narrows the search space to the pinned values (enumeration pins each candidate)."""
    check_switches(problem)
    if tables is None:
        tables = build_tables(problem, SearchSpace(problem, resolve_profile(problem), only_pins=only_pins))
    enc = Encoding(tables)
    rules = rules_for(problem)
    literals = []
    for rule in rules:
        lit = enc.cp.new_bool_var(f"rule[{rule.id}]")
        rule.post(enc, lit)
        literals.append(lit)
    return Model(enc, rules, literals)


def new_solver(
    time_limit_s: float | None, presolve: bool = True, work_limit_s: float | None = None
) -> InterruptibleSolver:
    """The solver every search on an encoding runs: one worker and a fixed seed (reproducible; on
    two cores more workers were slower, CPSAT-NOTES), presolve off for explanations; at most
    ``MOST_SOLUTIONS`` solutions, which its deterministic time does not bound (search_base)."""
    # Ctrl-C stops it and reaches the caller (solver/interruptible.py)
    solver = InterruptibleSolver(most_solutions=MOST_SOLUTIONS)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.cp_model_presolve = presolve
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    if work_limit_s is not None:  # deterministic: the same work on every machine and run
        solver.parameters.max_deterministic_time = work_limit_s
    return solver
