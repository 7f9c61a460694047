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
one ``AddMultiplicationEquality`` per slot and layer kind. No rule lives here: rules post their
constraints through the helpers at the bottom.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from shardplan.solver.space import BatchOption, Shape
from shardplan.solver.tables import Tables


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
        self._cache: dict = {}  # helper variables created on first use, keyed by what they stand for
        # Stage times live in [0, hi], rounds and sums in [0, round_hi]: sized from the tables,
        # so products and objectives stay in 64 bits.
        self.hi = tables.time_bound_ns()
        self.round_hi = self.hi * (Smax + 1)

        # shape[o]: stage shape o is chosen.
        self.shapes = space.shapes
        self.shape = {o: cp.new_bool_var(f"shape[{o.tp},{o.sp},{o.attn_dp},{o.expert_tp}]") for o in self.shapes}
        cp.add_exactly_one(self.shape.values())
        # pp[S]: the replica has S stages.
        self.pp = {S: cp.new_bool_var(f"pp[{S}]") for S in space.stage_values}
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

    # --- batch -------------------------------------------------------------------------------
    def _post_batch_options(self) -> None:
        cp, space = self.cp, self.space
        # pair[(o, j)]: shape o with batch option j.
        self.pair: dict[tuple[Shape, BatchOption], cp_model.IntVar] = {}
        for o in self.shapes:
            lits = []
            for option in space.batch_options(o):
                lit = cp.new_bool_var(f"pair[{o.tp},{o.sp},{o.attn_dp},{o.expert_tp};{option.micro},{option.q}]")
                self.pair[(o, option)] = lit
                lits.append(lit)
            cp.add(sum(lits) == self.shape[o])
        if space.decides_batch:
            # q[v]: v sequences per attention group per microbatch, whatever the shape.
            self.q = {v: cp.new_bool_var(f"q[{v}]") for v in space.q_values}
            cp.add_exactly_one(self.q.values())
            for v, lit in self.q.items():
                cp.add(sum(p for (o, opt), p in self.pair.items() if opt.q == v) == lit)
            qmax = max(space.q_values)
            self.q_value = cp.new_int_var(1, qmax, "q")
            cp.add(self.q_value == sum(v * lit for v, lit in self.q.items()))
            # Sequences a GPU holds (S microbatches of q per group), at most what the engine
            # schedules at once; the replica's batch is S x attn_dp x q.
            self.seqs_per_gpu = cp.new_int_var(1, qmax, "S*q")
            cp.add_multiplication_equality(self.seqs_per_gpu, [self.stages, self.q_value])
            self.micro = cp.new_int_var(1, self.num_gpus * qmax, "micro")
            cp.add(self.micro == sum(opt.micro * p for (o, opt), p in self.pair.items()))
            self.batch = cp.new_int_var(1, self.num_gpus * qmax, "batch")
            cp.add_multiplication_equality(self.batch, [self.stages, self.micro])
        else:
            # The microbatch follows from the number of stages: ceil(b / min(S, b)).
            for (o, opt), p in self.pair.items():
                fitting = [lit for S, lit in self.pp.items() if space.micro_for_stages(S) == opt.micro]
                cp.add_bool_or(fitting).only_enforce_if(p) if fitting else cp.add(p == 0)
            b = space.fixed_batch
            self.batch = b
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
        self.active = [sum(lit for S, lit in self.pp.items() if S > s) for s in range(Smax)]
        self.is_last = [self.pp.get(s + 1) for s in range(Smax)]  # slot s is the last stage
        self.layers = [cp.new_int_var(0, L, f"layers[{s}]") for s in range(Smax)]
        for s in range(Smax):
            cp.add(self.layers[s] == self.bound[s + 1] - self.bound[s])
        # count[s][k]: layers of kind k in slot s, read from prefix tables.
        self.prefix_at = []
        for s in range(Smax + 1):
            row = {}
            for k in self.kinds:
                var = cp.new_int_var(0, L, f"prefix[{s},{k.label}]")
                cp.add_element(self.bound[s], self.tables.prefix[k], var)
                row[k] = var
            self.prefix_at.append(row)
        self.count = [{k: self.prefix_at[s + 1][k] - self.prefix_at[s][k] for k in self.kinds} for s in range(Smax)]

    # --- costs -------------------------------------------------------------------------------
    def _table_sum(self, value) -> cp_model.LinearExpr:
        """sum over (shape, option) pairs of pair * value(entry, shape, option)."""
        return sum(value(self.tables.time[key], key[0], key[1]) * lit for key, lit in self.pair.items())

    def _post_costs(self) -> None:
        cp, t, Smax = self.cp, self.tables, self.max_stages
        big = self.hi
        # Per-layer times of each kind, for the chosen shape and microbatch.
        self.tau_decode = {k: self._new(f"tau_decode[{k.label}]", self._table_sum(lambda e, o, j, k=k: e.decode[k])) for k in self.kinds}
        self.tau_prefill = {k: self._new(f"tau_prefill[{k.label}]", self._table_sum(lambda e, o, j, k=k: e.prefill[k])) for k in self.kinds}
        first_d = self._table_sum(lambda e, o, j: e.first_decode)
        first_p = self._table_sum(lambda e, o, j: e.first_prefill)
        last_d = self._new("last_decode", self._table_sum(lambda e, o, j: e.last_decode))
        last_p = self._new("last_prefill", self._table_sum(lambda e, o, j: e.last_prefill))
        # send[s]: activations from slot s to s+1, paid only if slot s+1 is a stage.
        self.send_decode, self.send_prefill = [], []
        for s in range(Smax - 1):
            for name, attr, out in (("send_decode", "send_decode", self.send_decode), ("send_prefill", "send_prefill", self.send_prefill)):
                var = cp.new_int_var(0, big, f"{name}[{s}]")
                cp.add(var == self._table_sum(lambda e, o, j, s=s, attr=attr: getattr(e, attr)[s])).only_enforce_if(self.pp_at_least(s + 2))
                cp.add(var == 0).only_enforce_if(~self.pp_at_least(s + 2))
                out.append(var)
        self.send_decode.append(cp.new_constant(0))
        self.send_prefill.append(cp.new_constant(0))
        L_k = {k: t.layers_of(k) for k in self.kinds}
        # Sums over all stages: independent of the boundaries.
        self.ttft = self._new(
            "ttft", sum(L_k[k] * self.tau_prefill[k] for k in self.kinds) + first_p + last_p + sum(self.send_prefill)
        )
        self.decode_sum = self._new(
            "decode_sum", sum(L_k[k] * self.tau_decode[k] for k in self.kinds) + first_d + last_d + sum(self.send_decode)
        )
        self.round = cp.new_int_var(0, self.round_hi, "round")
        cp.add(self.round >= self.decode_sum)
        if not self._needs_stage_times():
            cp.add(self.round == self.decode_sum)
            return
        # Per-stage times: layer counts times per-layer times, plus the ends.
        self.stage_decode, self.stage_prefill = [], []
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
        b = self.batch
        micro_count = self.stages if self.space.decides_batch else sum(min(S, b) * lit for S, lit in self.pp.items())
        mu = self._new("microbatches", micro_count, hi=Smax)
        busiest = cp.new_int_var(0, self.round_hi, "mu*slowest")
        cp.add_multiplication_equality(busiest, [mu, slowest_decode])
        # round = max(decode_sum, busiest): both are lower bounds, and no objective rewards a
        # longer round, so the optimum sits at the maximum.
        cp.add(self.round >= busiest)

    def _stage_time(self, s: int, tau, first, last_expr, label: str):
        cp, big = self.cp, self.hi
        parts = []
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

    def _new(self, name: str, expr, hi: int | None = None):
        var = self.cp.new_int_var(0, self.hi if hi is None else hi, name)
        self.cp.add(var == expr)
        return var

    # --- helpers the rules and objectives use -----------------------------------------------
    def pp_at_least(self, n: int):
        """A literal: the replica has at least n stages."""
        key = ("pp_at_least", n)
        if key not in self._cache:
            lit = self.cp.new_bool_var(f"pp>={n}")
            self.cp.add(sum(l for S, l in self.pp.items() if S >= n) == lit)
            self._cache[key] = lit
        return self._cache[key]

    def shapes_where(self, predicate) -> list:
        """Literals of the shapes for which ``predicate(shape)`` holds."""
        return [lit for o, lit in self.shape.items() if predicate(o)]

    def forbid_shapes(self, predicate, enforce) -> None:
        """No shape satisfying ``predicate`` may be chosen while ``enforce`` holds."""
        for lit in self.shapes_where(predicate):
            self.cp.add_implication(enforce, ~lit)

    def stage_memory(self, s: int, o: Shape):
        """Bytes on one GPU of slot s if the shape is o (a linear expression)."""
        m = self.tables.memory[o]
        expr = sum(self.count[s][k] * m.weights[k] for k in self.kinds)
        if self.space.decides_batch:
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

    def replica_memory_lower_bound(self, o: Shape):
        """A linear lower bound on the memory of all stages of a replica together (one GPU per
        stage): every layer's weights and KV cache, both ends, each stage's fixed overhead."""
        t, m = self.tables, self.tables.memory[o]
        expr = sum(t.layers_of(k) * m.weights[k] for k in self.kinds) + m.first + m.last_with_first
        expr += m.fixed * self.stages
        if self.space.decides_batch:
            expr += sum(t.layers_of(k) * m.kv_per_seq[k] for k in self.kinds) * self.seqs_per_gpu
        else:
            seqs = self.space.fixed_seqs_per_gpu(o)
            expr += sum(t.layers_of(k) * m.kv_per_seq[k] for k in self.kinds) * seqs
        return expr

    @property
    def chunk_activation(self):
        """Activation bytes of the chosen prefill chunk: one variable shared by every memory row."""
        if "chunk_activation" not in self._cache:
            t = self.tables
            self._cache["chunk_activation"] = self._new(
                "chunk_activation", sum(t.chunk_activation[key] * lit for key, lit in self.pair.items()), hi=10**15
            )
        return self._cache["chunk_activation"]

    def _held(self, s: int, k):
        """Layers of kind k in slot s times the sequences each GPU holds (a product variable)."""
        key = ("held", s, k)
        if key not in self._cache:
            var = self.cp.new_int_var(0, self.num_layers * max(self.space.q_values), f"held[{s},{k.label}]")
            self.cp.add_multiplication_equality(var, [self.count[s][k], self.seqs_per_gpu])
            self._cache[key] = var
        return self._cache[key]
