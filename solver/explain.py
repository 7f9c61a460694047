"""Why a problem has no plan: the smallest set of rules that cannot all hold.

Every rule's enforcement literal is an assumption. CP-SAT returns a core through
``sufficient_assumptions_for_infeasibility``; with presolve on it is often not minimal, so it is
shrunk by deletion: drop one rule, re-solve with the rest assumed, keep it out if still
infeasible (CPSAT-NOTES: a few re-solves with presolve off are cheap here).

A deadline (the command's --time-limit) bounds it: the solves stop ``EXPLAIN_GRACE_S`` past it.
Without one each solve has ``SOLVE_WORK`` of CP-SAT's deterministic time (not seconds, so
the same set comes out at any load). Every set it returns conflicts: cut short while
shrinking, the set shrunk so far; before the first core, every rule in force, said to be unnarrowed.
(A solve left undecided without a deadline was an error, exit 2 "bad input" for a valid request after
40 s: Llama-4-Scout on 7x72xGB200 with --ttft-ms 100 --tpot-ms 20, fuzz --no-limit run G. The search
had already proved there is no plan; the explanation only narrows it.)
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from shardplan.models.errors import ShardplanError
from shardplan.rules.base import ShapeRule
from shardplan.rules.catalog import rules_for
from shardplan.rules.pins import Pin
from shardplan.rules.problem import Problem
from shardplan.solver.encode import Model, build_model, new_solver
from shardplan.solver.search_base import Deadline
from shardplan.solver.tables import Tables

EXPLAIN_GRACE_S = 1.0  # how far past the deadline the explanation's solves may run (a first core, at least)
# One solve without a deadline, in CP-SAT's deterministic time (search_base.Deadline), not seconds: an
# explanation cut short must say so on every machine or on none.
SOLVE_WORK = 20.0
UNNARROWED = "(these are every rule in force: not narrowed to the conflicting ones within --time-limit)"
UNNARROWED_PER_SOLVE = (f"(these are every rule in force: not narrowed to the conflicting ones within "
                        f"{SOLVE_WORK:g} units of CP-SAT's deterministic time per solve)")


class _OutOfTime(Exception):
    """A solve of the explanation ended at the deadline, undecided."""


def pin_conflicts(model: Model) -> list[tuple[str, str]]:
    """Pins that a shape rule rejects on their own: every candidate shape with the pinned value
    breaks the rule (``--tp 3`` and TP-001). These are reported with the rule's numbers."""
    problem, shapes = model.enc.problem, model.enc.shapes
    families = {"tp": "TP-", "sp": "SP-", "attn_dp": "DP-", "expert_tp": "EP-"}  # the rules of each shape pin
    out: list[tuple[str, str]] = []
    for pin in (r for r in model.rules if isinstance(r, Pin) and r.field in families):
        pinned = [o for o in shapes if getattr(o, pin.field) == pin.value]
        if not pinned:  # no stage with that value fits the cluster at all
            out.append((pin.id, pin.statement))
            out.append((
                "GPU-001",
                f"a stage with {pin.field}={pin.value} needs more than the cluster's {problem.cluster.num_gpus} GPUs",
            ))
            continue
        family = families[pin.field]
        broken = [
            rule for rule in model.rules
            if isinstance(rule, ShapeRule) and pinned and all(rule.forbids(problem, o) for o in pinned)
        ]
        broken.sort(key=lambda r: (not r.id.startswith(family), r.id))
        if broken:
            out.append((pin.id, pin.statement))
            out.extend((rule.id, rule.violation(problem, pinned[0])) for rule in broken)
    return out


def _unnarrowed(conflicts: list[tuple[str, str]], note: str = UNNARROWED) -> list[tuple[str, str]]:
    """Every rule in force (they conflict together: the search found no plan), said to be unnarrowed."""
    return [*conflicts[:-1], (conflicts[-1][0], f"{conflicts[-1][1]} {note}")]


def explain(
    problem: Problem, tables: Tables | None = None, deadline: Deadline | None = None
) -> list[tuple[str, str]]:
    """(rule id, message with the numbers) for a minimal conflicting set of the problem's rules;
    pins that a rule rejects outright are named with every rule they break. ``tables`` may be the
    ones a failed search built (pure data, reused). Past ``deadline`` (plus ``EXPLAIN_GRACE_S``) the
    set is not narrowed further (module docstring)."""
    deadline = deadline or Deadline(None)
    if deadline.passed():  # the search spent the limit proving there is no plan: no model to build (~3 s
        return _unnarrowed([(r.id, r.conflict_message(problem)) for r in rules_for(problem)])  # on 32,768 GPUs)
    model = build_model(problem, tables=tables)  # the optimiser's copy has every literal fixed
    direct = pin_conflicts(model)
    if direct:
        return direct
    enc, rules, literals = model.enc, model.rules, model.literals
    index = {lit.index: i for i, lit in enumerate(literals)}
    switched_off = {(~lit).index for lit in literals}

    def infeasible(subset: list[int]) -> list[int] | None:
        """Indices of the rules in an infeasibility core of ``subset`` assumed, or None if feasible."""
        enc.cp.clear_assumptions()
        enc.cp.add_assumptions([literals[i] for i in subset])
        # The rules left out are assumed off, not left free: a rule only ever constrains under its literal, so
        # off relaxes no less than free (a plan with a rule's literal on keeps every constraint with it off),
        # and the search need not branch on them. Finding the plan that shows a smaller set feasible took
        # 3.0 units of work with them free, DeepSeek-V3 on 64x8xH200 below any TPOT (about 10 s).
        inside = set(subset)
        enc.cp.add_assumptions([~literals[i] for i in range(len(literals)) if i not in inside])
        left = deadline.remaining()
        # Work bounds each solve (the same explanation on every machine and at every load); the
        # deadline, when there is one, bounds it too.
        limit_s = None if left is None else left + EXPLAIN_GRACE_S
        solver = new_solver(limit_s, presolve=False, work_limit_s=SOLVE_WORK)
        # No probing: before its first branch CP-SAT probed the literals for 1.0 unit of work, which it counted
        # as 1 and which took 8 s of wall clock (its work undercounts on million-value domains, DeepSeek-V3 on
        # 64x8xH200 below any TPOT); with the rules assumed on or off, propagation decides these models.
        solver.parameters.cp_model_probing_level = 0
        status = solver.solve(enc.cp)
        if status == cp_model.INFEASIBLE:
            # A rule assumed off is never a cause (off relaxes; see above): only the rules assumed on are the core.
            core = [c for c in solver.sufficient_assumptions_for_infeasibility() if c not in switched_off]
            unknown = [c for c in core if c not in index]
            if unknown:  # OR-Tools #5141: a literal that is not an assumption means a bug here
                raise ShardplanError(f"infeasibility core holds non-assumption literals {unknown}")
            return [index[c] for c in core]
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        if status == cp_model.UNKNOWN:  # at the deadline, or at SOLVE_WORK without one
            raise _OutOfTime
        raise ShardplanError(f"could not decide which rules conflict ({solver.status_name(status)})")

    def named(members: list[int]) -> list[tuple[str, str]]:
        return [(rules[i].id, rules[i].conflict_message(enc.problem)) for i in members]

    try:
        core = infeasible(list(range(len(rules))))
    except _OutOfTime:  # every rule in force together conflicts: the search found no plan
        note = UNNARROWED if deadline.limit_s is not None else UNNARROWED_PER_SOLVE
        return _unnarrowed(named(list(range(len(rules)))), note)
    if core is None:
        raise ShardplanError("the problem is feasible once its rules are assumed; nothing to explain")
    members = sorted(set(core))
    for i in list(members):
        trial = [j for j in members if j != i]
        try:
            smaller = infeasible(trial)
        except _OutOfTime:  # what is left conflicts still; it may not be minimal
            break
        if smaller is not None:
            members = sorted(set(smaller) & set(trial)) or trial
    return named(members)
