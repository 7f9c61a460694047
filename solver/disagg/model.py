"""The CP-SAT model of a disaggregated deployment: which prefill candidate, which decode candidate
(layout and batch), how many workers of each, in one model (DESIGN.md "Solver").

Variables: one boolean per candidate of each role (exactly one each), the worker counts split per
candidate (``x_i`` is x when candidate i is chosen, else 0: so x times a candidate's GPUs or rate is a
linear sum), the rate ``R`` in rate units, and the decode pool's aligned start. Constraints:

- ``R <= sum_i rate_i x_i`` (prefill pool) and ``R <= sum_k rate_k y_k`` (decode pool);
- ``R <= min(x, y) x`` one worker pair's link rate, for the chosen pair, at the tier the placement
  gives: NVLink only if the decode pool ends inside the first scale-up domain (a literal that
  implies it). A pair whose link is at least as fast as the faster of its two workers is left out: then
  ``min(x, y) x link >= min(x rate_i, y rate_k)`` already;
- the decode pool starts on a multiple of its worker's alignment at or after the prefill pool's end, and
  ends inside the cluster (DIS-001 and DIS-002);
- forbidden choices: deployments the exact check refused (``forbid``), added by the search as it goes;
  capped choices: a deployment's rate at most what it carries within every rule (``cap_choice``,
  ``deploy.Pools.served``);
- TTFT cuts of a pair of candidates (``ttft_cut.py``: a rate per prefill worker no deployment keeping
  the TTFT limit passes, given the chunk and batch its pools must run at), added by the search for a
  pair once the exact check has refused one of its deployments (``cut_ttft``);
- a pair's cap on rate per GPU (``cap_pair``): the walk in brute force's order (``walk.py``) refused
  every deployment of the pair above it; and each prefill candidate's cap on what one worker feeds within
  the TTFT limit (``cap_feed``), on which the walk's order rests.

``order`` ranks choices as brute force lists them (prefill candidate, decode candidate, x, y): the search's
last question asks for the first among the equally good (``search.py``).
``new_capacity`` adds a second rate variable bounded by the pools and the link but not by the TTFT
cuts: maximised, the chosen deployment's full rate, by which the ``--rate`` search orders equally few
GPUs (the cuts may hold ``rate`` to the target, below the full rate).

The TTFT and TPOT limits and the per-pool catalog are judged exactly on each deployment the model
proposes (``deploy.Pools.feasible_plan``); a refused one is forbidden and the model solved again. The
objective is set by the search (``search.py``).
"""

from __future__ import annotations

import math
from fractions import Fraction

from ortools.sat.python import cp_model

from shardplan.hardware import Tier
from shardplan.rules.disagg import alignment_gpus
from shardplan.solver.disagg.deploy import Choice, Pools
from shardplan.solver.disagg.ttft_cut import ChoiceFloor, pair_cuts


def bounded_ratio(ratio: Fraction, most_denominator: int) -> Fraction:
    """``ratio`` where its denominator is at most ``most_denominator``, else the least fraction of that
    denominator above it (a looser cap, so still sound: what it no longer forbids is judged when proposed).

    Why: a walk cut short leaves its frontier at a pair bound, ``1 / (1 / a + 1 / b)`` of two rates per GPU,
    whose terms run to 10^14 and 10^8. Posted as is on 10,081 pairs (Llama-3.1-405B, 8x8xB200, SGLang, TTFT
    500 ms), CP-SAT 9.15's presolve called the model infeasible, and so the seed optimal, while a deployment
    of 1.33 times its rate per GPU met every constraint (with the presolve off, or that deployment fixed,
    CP-SAT found it). Rounded up to a denominator of the cluster's GPUs, the rows stay small."""
    if ratio.denominator <= most_denominator:
        return ratio
    return Fraction(math.ceil(ratio * most_denominator), most_denominator)


class PoolModel:
    def __init__(self, pools: Pools):
        self.pools = pools
        self._cut_pairs: set[tuple[int, int]] = set()
        self._above_lits: dict[tuple[str, int, int], cp_model.IntVar] = {}  # 'R > workers x floor' literals
        cluster = pools.problem.cluster
        n = cluster.num_gpus
        cp = self.cp = cp_model.CpModel()
        P, D = pools.prefill, pools.decode
        self.p = [cp.new_bool_var(f"p{i}") for i in range(len(P))]
        self.d = [cp.new_bool_var(f"d{k}") for k in range(len(D))]
        cp.add_exactly_one(self.p)
        cp.add_exactly_one(self.d)
        self.xs = [self._count(f"x{i}", n // w.gpus, lit) for i, (w, lit) in enumerate(zip(P, self.p, strict=True))]
        self.ys = [self._count(f"y{k}", n // w.gpus, lit) for k, (w, lit) in enumerate(zip(D, self.d, strict=True))]
        self.x, self.y = cp.new_int_var(1, n, "x"), cp.new_int_var(1, n, "y")
        cp.add(self.x == sum(self.xs))
        cp.add(self.y == sum(self.ys))
        prefill_gpus = cp_model.LinearExpr.weighted_sum(self.xs, [w.gpus for w in P])
        self.gpus = cp.new_int_var(1, n, "gpus")
        cp.add(self.gpus == prefill_gpus + sum(w.gpus * v for w, v in zip(D, self.ys, strict=True)))
        # The most rate units any choice carries: each pool's fastest worker filling the cluster (exact: the
        # rate is within both pools' capacities). Was max units x n, ~10^15 on 524,288 GPUs; the per-GPU
        # questions multiply it by a GPU count (search.py ``per_gpu_terms``).
        self.top_rate = min(max(w.capacity_units * (n // w.gpus) for w in P),
                             max(w.capacity_units * (n // w.gpus) for w in D))
        # each pool's full rate (workers times one worker's), as linear sums
        self.prefill_capacity = cp_model.LinearExpr.weighted_sum(self.xs, [w.capacity_units for w in P])
        self.decode_capacity = cp_model.LinearExpr.weighted_sum(self.ys, [w.capacity_units for w in D])
        self.rate = cp.new_int_var(0, self.top_rate, "rate")
        self._within_pools(self.rate)
        self._inside = self._placement(prefill_gpus)
        self._fewer = cp.new_int_var(1, n, "min_workers")
        cp.add_min_equality(self._fewer, [self.x, self.y])
        self._layouts = self._layout_literals()
        self._links(self.rate)
        # order: a choice's place in brute force's order (prefill index, decode index, x, y), so that
        # among equally good deployments the search returns the one brute force does, whatever
        # candidates the lists hold (pruned lists keep the order).
        # The candidates' indices as variables: the order's row then has four small terms, where one term
        # per candidate, i x len(D) x (n + 1)^2 each, summed past 64 bits on 524,288 GPUs.
        self.order_span = len(P) * len(D) * (n + 1) ** 2
        prefill_index = cp.new_int_var(0, len(P) - 1, "prefill_index")
        cp.add(prefill_index == sum(i * lit for i, lit in enumerate(self.p)))
        decode_index = cp.new_int_var(0, len(D) - 1, "decode_index")
        cp.add(decode_index == sum(k * lit for k, lit in enumerate(self.d)))
        self.order = (prefill_index * (len(D) * (n + 1) ** 2) + decode_index * (n + 1) ** 2
                      + self.x * (n + 1) + self.y)

    def _count(self, name: str, top: int, chosen: cp_model.IntVar) -> cp_model.IntVar:
        v = self.cp.new_int_var(0, top, name)
        self.cp.add(v == 0).only_enforce_if(~chosen)
        return v

    def _layout_literals(self) -> dict[int, cp_model.IntVar]:
        """One literal per distinct decode layout: some batch of it is chosen."""
        out: dict[int, cp_model.IntVar] = {}
        for j in self.pools.decode_layouts:
            out.setdefault(j, self.cp.new_bool_var(f"dl{j}"))
        for j, lit in out.items():
            self.cp.add(lit == sum(self.d[k] for k, jj in enumerate(self.pools.decode_layouts) if jj == j))
        return out

    def _placement(self, prefill_gpus: cp_model.LinearExpr) -> cp_model.IntVar:
        """The decode pool's aligned start and end; returns the literal 'both pools in the first
        scale-up domain'."""
        cp, pools = self.cp, self.pools
        cluster = pools.problem.cluster
        n = cluster.num_gpus
        start = cp.new_int_var(0, n, "decode_start")
        cp.add(start >= prefill_gpus)
        units = cp.new_int_var(0, n, "decode_start_units")
        for k, w in enumerate(pools.decode):
            cp.add(start == alignment_gpus(w.layout, cluster) * units).only_enforce_if(self.d[k])
        end = start + sum(w.gpus * v for w, v in zip(pools.decode, self.ys, strict=True))
        cp.add(end <= n)
        inside = cp.new_bool_var("inside_domain")
        cp.add(end <= cluster.scaleup_domain_gpus).only_enforce_if(inside)
        return inside

    def new_capacity(self) -> cp_model.IntVar:
        """A variable at most what the chosen pools and link carry, as ``rate`` is, but free of the TTFT
        cuts (they bound ``rate`` only): maximised, it is the choice's full rate (``Pools.rate``). The
        ``--rate`` search orders equally few GPUs by it (``search.fewest_gpus``)."""
        capacity = self.cp.new_int_var(0, self.top_rate, "capacity")
        self._within_pools(capacity)
        self._links(capacity)
        return capacity

    def _within_pools(self, rate: cp_model.IntVar) -> None:
        self.cp.add(rate <= self.prefill_capacity)
        self.cp.add(rate <= self.decode_capacity)

    def _links(self, rate: cp_model.IntVar) -> None:
        cp, pools = self.cp, self.pools
        inside, fewer, layouts = self._inside, self._fewer, self._layouts
        fastest: dict[int, int] = {}
        for k, j in enumerate(pools.decode_layouts):
            fastest[j] = max(fastest.get(j, 0), pools.decode[k].capacity_units)
        first_of = {j: pools.decode_layouts.index(j) for j in layouts}
        for i, pw in enumerate(pools.prefill):
            for j, lit in layouts.items():
                for tier, when in ((Tier.SCALE_UP, inside), (Tier.SCALE_OUT, None)):
                    link = pools.kv_units(i, first_of[j], tier)
                    if link >= max(pw.capacity_units, fastest[j]):
                        continue
                    enforce = [self.p[i], lit] + ([when] if when is not None else [~inside])
                    cp.add(rate <= link * fewer).only_enforce_if(enforce)

    def forbid(self, c: Choice) -> None:
        """No deployment with exactly this choice."""
        self.cp.add_bool_or([~lit for lit in self._choice_literals(c)])

    def cap_choice(self, c: Choice, units: int) -> None:
        """This choice's rate at most ``units`` (what it carries within every rule, or less than the rate the
        question needed: ``deploy.Pools.served``)."""
        self.cp.add(self.rate <= units).only_enforce_if(self._choice_literals(c))

    def _choice_literals(self, c: Choice) -> list[cp_model.IntVar]:
        """Literals all true exactly when this choice is made."""
        cp = self.cp
        lits = [self.p[c.prefill], self.d[c.decode]]
        for name, var, value in (("x", self.x, c.x), ("y", self.y, c.y)):
            eq = cp.new_bool_var(f"{name}_is_{value}")
            cp.add(var == value).only_enforce_if(eq)
            cp.add(var != value).only_enforce_if(~eq)
            lits.append(eq)
        return lits

    def cut_ttft(self, prefill: int, decode: int) -> None:
        """Post the TTFT cuts of this pair of candidates (once): ``R <= x cap`` when ``R`` passes the
        prefill floor (x workers) and the decode floor (y workers) of the cut's chunk and batch."""
        if (prefill, decode) in self._cut_pairs:
            return
        self._cut_pairs.add((prefill, decode))
        pools = self.pools
        cuts = pair_cuts(pools.problem, pools.profile, pools.prefill[prefill], pools.decode[decode])
        if cuts is None:
            return
        pair = [self.p[prefill], self.d[decode]]
        for h, chunk_floor in enumerate(cuts.chunk_floor):
            for j, batch_floor in enumerate(cuts.batch_floor):
                cap = cuts.caps[h][j]
                if cap is None:
                    continue
                when = pair + [self._above("x", prefill, chunk_floor), self._above("y", decode, batch_floor)]
                self.cp.add(self.rate <= self.x * cap).only_enforce_if([lit for lit in when if lit is not None])

    def cap_feed(self, floor: ChoiceFloor) -> None:
        """Each prefill candidate's workers feed at most ``floor.worker_cap_units`` rate units each within the TTFT
        limit: ``R <= x cap`` whenever the candidate is chosen (one row each). The walk's pair bounds rest on it
        (``walk.held_pair_bound``), so the model then knows what made the walk skip a pair."""
        for i, chosen in enumerate(self.p):
            cap = floor.worker_cap_units(i)
            if cap is not None and cap < self.pools.prefill[i].capacity_units:
                self.cp.add(self.rate <= self.x * max(cap, 0)).only_enforce_if(chosen)

    def cap_pair(self, prefill: int, decode: int, per_gpu: Fraction) -> None:
        """No deployment of this pair of candidates above ``per_gpu`` rate units per GPU (none the walk
        judged above it carries more, ``walk.py``), posted at a ratio no lower whose denominator is at most
        the cluster's GPUs (``bounded_ratio``)."""
        cap = bounded_ratio(per_gpu, self.pools.problem.cluster.num_gpus)
        self.cp.add(self.rate * cap.denominator - cap.numerator * self.gpus <= 0).only_enforce_if(
            [self.p[prefill], self.d[decode]])

    def cut_ttft_all(self) -> None:
        for i in range(len(self.p)):
            for k in range(len(self.d)):
                self.cut_ttft(i, k)

    def _above(self, role: str, index: int, floor: int) -> cp_model.IntVar | None:
        """A literal true whenever the rate passes ``floor`` per worker of the role (x or y workers;
        ``index``'s candidate chosen); None for a floor of 0 (every deployment with a rate passes)."""
        if floor == 0:
            return None
        key = (role, index, floor)
        if key not in self._above_lits:
            lit = self._above_lits[key] = self.cp.new_bool_var(f"{role}{index}_above_{floor}")
            workers = self.x if role == "x" else self.y
            self.cp.add(self.rate <= workers * floor).only_enforce_if(~lit)
        return self._above_lits[key]

    def order_of(self, c: Choice) -> int:
        n = self.pools.problem.cluster.num_gpus
        return ((c.prefill * len(self.d) + c.decode) * (n + 1) + c.x) * (n + 1) + c.y

    def read(self, solver: cp_model.CpSolver) -> Choice:
        i = next(i for i, lit in enumerate(self.p) if solver.boolean_value(lit))
        k = next(k for k, lit in enumerate(self.d) if solver.boolean_value(lit))
        return Choice(i, k, solver.value(self.x), solver.value(self.y))


__all__ = ["PoolModel"]
