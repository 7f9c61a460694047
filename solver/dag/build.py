"""Build the execution DAG of a plan, in the order 001 §6 prescribes.

request -> replica fan-out -> prefill and decode branches -> stage chain -> layers -> operators
(attention shards and their collectives, dense FFN or MoE: router -> dispatch -> experts -> combine),
with the KV cache read and update, the embedding on the first stage, the LM head on the last and a
SendRecv between stages. Every ``est_us`` comes from the cost model's operator table
(``CostContext.layer_ops_s``, ``embedding_ops_s``, ``lm_head_ops_s``, ``send_recv_s``) for the step ``evaluate`` prices,
so a branch's longest path is the plan's TTFT (prefill) or TPOT (decode). No CP-SAT here and no
rule checking: ``rules/dag/check.py`` does that.

Modelling choices, each matching what the cost model sums (see docs/dag.md):
- each operator runs after the previous one on the same GPUs (the cost model adds their times);
  the shared expert is ordered before the router by a sync edge for that reason;
- with one attention group per stage (attn_dp = 1) every GPU holds every token, so the router's
  selection feeds the local experts directly and the combine is an all-reduce; with several groups
  the dispatch and the combine are all-to-all exchanges;
- the per-layer overhead (norms, launches) is the ``Layer`` node's time; the step's sampling and
  scheduling overhead is the ``Sample`` node's;
- a decode branch is one token step of one microbatch. When the pipeline keeps mu > 1 microbatches
  in flight the next token also waits for the busiest stage to serve all of them: the ``Round`` node
  (previous token -> round -> token, sync edges) carries mu x that stage's step and send, so the
  branch's longest path is max(chain, mu x slowest stage), the cost model's round (TPOT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx

from shardplan.models.errors import SpecError
from shardplan.rules.dag.catalog import SCHEMA, NodeKind
from shardplan.rules.operators import ATTENTION_OPS, Op, Phase, StrEnum
from shardplan.rules.plan import Plan
from shardplan.solver.cost.evaluate import (
    NS_PER_S,
    LoadedLayers,
    decode_context,
    kind_counts,
    layer_load_factors,
    microbatching,
    phase_table,
    prefill_chunk,
    resolve_profile,
)
from shardplan.solver.cost.operators import CostContext, LayerKind, Step, layer_kind
from shardplan.solver.cost.stage import stage_shape

# A node of an operator split over GPUs: (node id, its GPUs, its split attributes: group, tp_rank, ...).
Shard = tuple[str, tuple[int, ...], dict[str, int]]

NODE_BUDGET = 100_000  # replicas are folded into one when the full graph would exceed this
# The most nodes one DAG may have. A replica is never folded, and its size grows with layers x GPUs per stage
# (an Expert node per GPU per MoE layer, at both details; a shard per GPU when expanded): a valid plan of a
# 1,024-layer, 4,096-expert model on 2 stages of 2,048 GPUs ran out of 5 GB of memory building its logical
# DAG. About 8 KB of memory a node (the 177,648-node expanded DAG of benchmarks/dag, the largest there:
# 1.3 GB peak for the whole `solve --dag`), so this keeps a DAG under about 1.6 GB.
MAX_DAG_NODES = 200_000
US_PER_S = 1e6


@dataclass(frozen=True)
class PhaseCosts:
    """Microseconds of each operator of one step of a phase, as the cost model prices it."""

    phase: Phase
    step: Step
    layers_us: dict[str, dict[Op, float]]  # layers[layer kind label][operator key]: us on one GPU, uniform routing
    loaded_us: dict[int, dict[Op, float]]  # loaded[layer]: the same for a MoE layer priced at its own load factor
    first_us: dict[Op, float]  # embedding
    last_us: dict[Op, float]  # lm_head, lm_head.gather, step.overhead
    send_us: tuple[float, ...]  # send_us[s]: us from stage s to s+1 (0 for the last)
    stage_ns: tuple[int, ...]  # stage_ns[s]: integer ns of stage s, exactly evaluate()'s
    send_ns: tuple[int, ...]

    def layer_us(self, layer: int, kind: LayerKind) -> dict[Op, float]:
        return self.loaded_us.get(layer) or self.layers_us[kind.label]


def plan_costs(plan: Plan) -> dict[Phase, PhaseCosts]:
    """The per-operator times of the prefill chunk and the decode microbatch ``evaluate`` prices
    (each MoE layer at its own load factor, as ``evaluate`` does)."""
    problem, layout = plan.problem, plan.layout
    model, wl = problem.model, problem.workload
    profile = resolve_profile(problem)
    ctx = CostContext(model, problem.cluster, profile, stage_shape(model, layout), problem.redundant_slots)
    S = layout.pp
    _, micro = microbatching(S, layout.batch)
    chunk = prefill_chunk(problem, profile, micro)
    factors = layer_load_factors(model, layout)
    counts = [kind_counts(model, layout.stage_layers(s)) for s in range(S)]
    kinds = sorted({k for c in counts for k in c}, key=lambda k: (k.moe, k.windowed))
    steps = {
        Phase.PREFILL: Step(Phase.PREFILL, chunk, wl.isl, wl.isl),
        Phase.DECODE: Step(Phase.DECODE, micro, 1, decode_context(problem)),
    }
    out = {}
    for phase, step in steps.items():
        base = phase_table(ctx, step, kinds)
        table = LoadedLayers(ctx, step, base, factors)
        send_us: list[float] = []
        send_ns: list[int] = []
        stage_ns: list[int] = []
        for s in range(S):
            stage_ns.append(table.stage_ns(layout.stage_layers(s), counts[s], s == 0, s == S - 1))
            if s == S - 1:
                send_us.append(0.0)
                send_ns.append(0)
            else:
                seconds = ctx.send_recv_s(step, layout.stage_gpus(0, s).start, layout.stage_gpus(0, s + 1).start)
                send_us.append(seconds * US_PER_S)
                send_ns.append(round(seconds * NS_PER_S))
        out[phase] = PhaseCosts(
            phase=phase,
            step=step,
            layers_us={k.label: {op: t * US_PER_S for op, t in base.layer_ops_s[k].items()} for k in kinds},
            loaded_us={layer: {op: t * US_PER_S for op, t in table.layer_ops_s(layer).items()} for layer in factors},
            first_us={op: t * US_PER_S for op, t in base.first_ops_s.items()},
            last_us={op: t * US_PER_S for op, t in base.last_ops_s.items()},
            send_us=tuple(send_us),
            stage_ns=tuple(stage_ns),
            send_ns=tuple(send_ns),
        )
    return out


def expert_hosting(plan: Plan, layer: int) -> tuple[tuple[int, ...], ...]:
    """Experts each EP rank hosts in MoE ``layer``, rank by rank.

    The placement hook: when the plan carries a placement (``plan.experts``, whose
    ``layer(i).gpu_experts`` lists (expert, share) pairs per EP rank), its lists are used. Otherwise
    shardplan assumes contiguous blocks: rank k hosts experts [k E / ep, (k+1) E / ep), at most
    ceil(E / ep) each; with more ranks than experts rank k hosts expert k mod E (a redundant copy).
    """
    model, ep = plan.problem.model, plan.layout.ep
    placement = plan.experts
    if placement is not None:
        try:
            placed = placement.layer(layer)
        except (SpecError, KeyError, IndexError):
            placed = None
        if placed is not None:
            lists = tuple(tuple(e for e, _ in gpu) for gpu in placed.gpu_experts)
            if len(lists) != ep:
                raise SpecError("experts", f"layer {layer} is placed on {len(lists)} EP ranks; the plan has ep={ep}")
            return lists
    if model.moe is None:
        raise SpecError("experts", f"{model.name} has no experts to host")
    return contiguous_hosting(model.moe.num_experts, ep)


def expert_loads(plan: Plan, layer: int) -> tuple[float, ...] | None:
    """Tokens each EP rank serves in MoE ``layer`` when the plan's placement carries its routing
    profile (``PlanPlacement``: ``stage_of(layer).profile``); None otherwise (uniform routing)."""
    placement = plan.experts
    if placement is None:
        return None
    try:
        profile = placement.stage_of(layer).profile
        return tuple(placement.layer(layer).gpu_loads(profile.layer_loads(layer)))
    except (AttributeError, SpecError, KeyError, IndexError, TypeError, ValueError):
        return None


def contiguous_hosting(num_experts: int, ep: int) -> tuple[tuple[int, ...], ...]:
    if ep > num_experts:
        return tuple((k % num_experts,) for k in range(ep))
    return tuple(tuple(range(k * num_experts // ep, (k + 1) * num_experts // ep)) for k in range(ep))


def placement_source(plan: Plan) -> str:
    return "plan" if plan.experts is not None else "contiguous (assumed)"


class _Builder:
    """Adds the nodes of one plan to a DiGraph, replica by replica."""

    def __init__(self, plan: Plan, detail: str):
        if detail not in ("logical", "expanded"):
            raise SpecError("detail", f"{detail!r}; one of logical, expanded")
        self.plan, self.detail, self.expanded = plan, detail, detail == "expanded"
        self.lay, self.model = plan.layout, plan.problem.model
        self.costs = plan_costs(plan)
        self.g = nx.DiGraph()
        self._stage: dict[tuple[int, int], tuple[int, ...]] = {}
        self._hosting: dict[int, tuple[tuple[int, ...], ...]] = {}
        self._kinds = {layer: layer_kind(self.model, layer) for layer in range(self.model.num_layers)}

    # --- small helpers -----------------------------------------------------------------------
    def node(self, nid: str, kind: NodeKind, ranks: tuple[int, ...], est_us: float = 0.0, **attrs: Any) -> str:
        if len(self.g) >= MAX_DAG_NODES and nid not in self.g:
            raise SpecError("dag", self._too_large())
        # The graph holds plain strings, as a file read back does: names are stored by value.
        self.g.add_node(nid, kind=kind.value, ranks=ranks, est_us=est_us, **{k: _plain(v) for k, v in attrs.items()})
        return nid

    def _too_large(self) -> str:
        lay = self.lay
        fewer = "; --detail logical has fewer" if self.expanded else ""
        return (f"the plan's {self.detail} DAG passes {MAX_DAG_NODES:,} nodes ({self.model.num_layers} layers, "
                f"{lay.gpus_per_stage} GPUs per stage); none is written{fewer}")

    def edge(self, u: str, v: str, kind: str = "data") -> None:
        self.g.add_edge(u, v, kind=kind)

    def stage_ranks(self, r: int, s: int) -> tuple[int, ...]:
        key = (r, s)
        found = self._stage.get(key)
        if found is None:
            found = self._stage[key] = tuple(self.lay.stage_gpus(r, s))
        return found

    def replica_ranks(self, r: int) -> tuple[int, ...]:
        n = self.lay.gpus_per_replica
        return tuple(range(r * n, (r + 1) * n))

    def groups(self, r: int, s: int) -> list[tuple[int | None, tuple[int, ...]]]:
        """(group, GPUs): the whole stage once at logical detail, each attention group when expanded."""
        if not self.expanded:
            return [(None, self.stage_ranks(r, s))]
        return [(g, tuple(self.lay.attention_group_gpus(r, s, g))) for g in range(self.lay.attn_dp)]

    def hosting(self, layer: int) -> tuple[tuple[int, ...], ...]:
        found = self._hosting.get(layer)
        if found is None:
            found = self._hosting[layer] = expert_hosting(self.plan, layer)
        return found

    # --- the structure -----------------------------------------------------------------------
    def build(self, replicas: range, multiplicity: int = 1) -> nx.DiGraph:
        lay = self.lay
        if "request" not in self.g:
            self.node("request", NodeKind.REQUEST, tuple(range(lay.num_gpus)))
        for r in replicas:
            rid = f"r{r}"
            extra = {"multiplicity": multiplicity, "rank_stride": lay.gpus_per_replica} if multiplicity > 1 else {}
            self.node(rid, NodeKind.REPLICA, self.replica_ranks(r), replica=r, **extra)
            self.edge("request", rid)
            for phase in (Phase.PREFILL, Phase.DECODE):
                self.branch(r, phase)
        return self.g

    def branch(self, r: int, phase: Phase) -> None:
        lay, costs = self.lay, self.costs[phase]
        P = f"r{r}.{phase}"
        rep = self.replica_ranks(r)
        step = costs.step
        self.node(
            P,
            NodeKind.PHASE,
            rep,
            replica=r,
            phase=phase,
            sequences=step.sequences,
            new_tokens=step.new_tokens,
            context=step.context,
        )
        self.edge(f"r{r}", P)
        token = self.node(f"{P}.token", NodeKind.TOKEN, self.stage_ranks(r, lay.pp - 1), replica=r, phase=phase)
        head = P
        prev = None
        if phase == Phase.DECODE:
            prev = self.node(f"{P}.prev", NodeKind.PREV_TOKEN, rep, replica=r, phase=phase)
            self.edge(P, prev, "sync")
            head = prev
            mu = self.plan.prediction.microbatches
            if mu > 1:
                b = max(range(lay.pp), key=lambda s: (costs.stage_ns[s] + costs.send_ns[s], -s))
                est = mu * (costs.stage_ns[b] + costs.send_ns[b]) / 1e3
                rnd = self.node(f"{P}.round", NodeKind.ROUND, self.stage_ranks(r, b), est, replica=r, phase=phase,
                                bottleneck_stage=b, microbatches=mu)
                self.edge(prev, rnd, "sync")
                self.edge(rnd, token, "sync")
        ctx = _Branch(P, r, phase, costs, token, prev)
        send = ""  # the previous stage's SendRecv
        for s in range(lay.pp):
            sid = self.node(f"{P}.s{s}", NodeKind.STAGE, self.stage_ranks(r, s), replica=r, phase=phase, stage=s,
                            layers=tuple(lay.stages[s]))
            if s == 0:
                self.edge(head, sid)
                emb = self.node(
                    f"{P}.emb",
                    NodeKind.EMBEDDING,
                    self.stage_ranks(r, 0),
                    costs.first_us[Op.EMBEDDING],
                    replica=r,
                    phase=phase,
                    stage=0,
                    op=Op.EMBEDDING,
                )
                self.edge(sid, emb)
                frontier = {g: [emb] for g, _ in self.groups(r, s)}
            else:
                self.edge(send, sid, "pipeline")
                frontier = {g: [sid] for g, _ in self.groups(r, s)}
            for layer in lay.stage_layers(s):
                frontier = self.layer(ctx, s, layer, frontier)
            if s < lay.pp - 1:
                ranks = self.stage_ranks(r, s) + self.stage_ranks(r, s + 1)
                send = self.node(
                    f"{P}.s{s}.send",
                    NodeKind.SEND_RECV,
                    ranks,
                    costs.send_us[s],
                    replica=r,
                    phase=phase,
                    stage=s,
                    to_stage=s + 1,
                    op=Op.SEND_RECV,
                )
                for nodes in frontier.values():
                    for u in nodes:
                        self.edge(u, send, "pipeline")
            else:
                self.lm_head(ctx, s, frontier)

    def lm_head(self, ctx: _Branch, s: int, frontier: dict[Any, Any]) -> None:
        last = ctx.costs.last_us
        for g, granks in self.groups(ctx.r, s):
            base = dict(replica=ctx.r, phase=ctx.phase, stage=s)
            gsuf = "" if g is None else f".g{g}"
            gather = None
            if self.lay.attention_group > 1:
                gather = self.node(f"{ctx.P}.head.gather{gsuf}", NodeKind.ALL_GATHER, granks, last[Op.LM_HEAD_GATHER],
                                   op=Op.LM_HEAD_GATHER, **base)
            shards = self.group_shards(f"{ctx.P}.head", g, granks)
            for nid, ranks, attrs in shards:
                self.node(nid, NodeKind.LM_HEAD, ranks, last[Op.LM_HEAD], op=Op.LM_HEAD, **base, **attrs,
                          **({"rejoin": gather, "rejoin_op": Op.LM_HEAD_GATHER} if gather else {}))
                for u in frontier[g]:
                    self.edge(u, nid)
            sample = self.node(
                f"{ctx.P}.sample{gsuf}", NodeKind.SAMPLE, granks, last[Op.STEP_OVERHEAD], op=Op.STEP_OVERHEAD, **base
            )
            for nid, _, _ in shards:
                self.edge(nid, gather or sample)
            if gather:
                self.edge(gather, sample)
            self.edge(sample, ctx.token)

    def group_shards(self, base: str, g: int | None, granks: tuple[int, ...]) -> list[Shard]:
        """Shards of an operator tensor-parallel over an attention group (FFN, shared expert, LM head)."""
        n = len(granks)
        if g is None:
            width = self.lay.attention_group
            return [(base, granks, {"tp": width} if width > 1 else {})]
        if n == 1:
            return [(f"{base}.g{g}", granks, {"group": g})]
        return [(f"{base}.g{g}.t{i}", (gpu,), {"group": g, "tp_rank": i}) for i, gpu in enumerate(granks)]

    def attention_shards(self, base: str, r: int, s: int, g: int | None,
                         granks: tuple[int, ...]) -> list[Shard]:
        lay = self.lay
        if g is None:
            degrees = {k: v for k, v in (("tp", lay.tp), ("sp", lay.sp)) if v > 1}
            return [(base, granks, degrees)]
        out: list[Shard] = []
        for i in range(lay.sp):
            tpg = lay.tp_group(r, s, g, i)
            for t in range(lay.tp):
                attrs: dict[str, int] = {"group": g}
                suffix = f".g{g}"
                if lay.sp > 1:
                    attrs["sp_rank"] = i
                    suffix += f".s{i}"
                if lay.tp > 1:
                    attrs["tp_rank"] = t
                    suffix += f".t{t}"
                out.append((base + suffix, (tpg[t],), attrs))
        return out

    def layer(self, ctx: _Branch, s: int, layer: int, frontier: dict[Any, Any]) -> dict[Any, Any]:
        kind: LayerKind = self._kinds[layer]
        ops = ctx.costs.layer_us(layer, kind)
        base = dict(replica=ctx.r, phase=ctx.phase, stage=s, layer=layer, layer_kind=kind.label)
        attn_out = {
            g: self.attention(ctx, s, layer, g, granks, frontier[g], base, ops) for g, granks in self.groups(ctx.r, s)
        }
        if kind.moe:
            return self.moe(ctx, s, layer, base, ops, attn_out)
        return {g: self.dense_ffn(ctx, layer, g, granks, attn_out[g], base, ops) for g, granks in self.groups(ctx.r, s)}

    def attention(self, ctx: _Branch, s: int, layer: int, g: int | None, granks: tuple[int, ...], inputs: list[Any],
                  base: dict[Any, Any], ops: dict[Any, Any]) -> list[str]:
        """The layer's entry, attention's tp x sp shards with their KV cache read and update, the
        sequence exchange and the all-reduce that rejoins them; returns the nodes that end it."""
        lay, r = self.lay, ctx.r
        L = f"{ctx.P}.L{layer}"
        gsuf = "" if g is None else f".g{g}"
        gattr = {"group": g} if g is not None else {}
        entry = self.node(
            f"{L}{gsuf}", NodeKind.LAYER, granks, ops[Op.LAYER_OVERHEAD], op=Op.LAYER_OVERHEAD, **base, **gattr
        )
        for u in inputs:
            self.edge(u, entry)
        sp_nodes: dict[int, str] = {}  # sp_nodes[tp rank]: the exchange of that rank's sequence shards
        if lay.sp > 1:
            sp_kind = NodeKind.ALL_REDUCE if ctx.phase == Phase.DECODE else NodeKind.ALL_GATHER
            if g is None:
                sp_nodes[0] = self.node(
                    f"{L}.attn.sp", sp_kind, granks, ops[Op.ATTN_SP], op=Op.ATTN_SP, group_size=lay.sp, **base
                )
            else:
                for t in range(lay.tp):
                    ranks = tuple(lay.tp_group(r, s, g, i)[t] for i in range(lay.sp))
                    sp_nodes[t] = self.node(f"{L}.attn.sp{gsuf}" + (f".t{t}" if lay.tp > 1 else ""), sp_kind, ranks,
                                            ops[Op.ATTN_SP], op=Op.ATTN_SP, group_size=lay.sp, **base, **gattr)
        ar = None
        if lay.attention_group > 1:
            ar = self.node(
                f"{L}.attn.ar{gsuf}",
                NodeKind.ALL_REDUCE,
                granks,
                ops[Op.ATTN_ALLREDUCE],
                op=Op.ATTN_ALLREDUCE,
                group_size=lay.attention_group,
                **base,
                **gattr,
            )
        shards = self.attention_shards(f"{L}.attn", r, s, g, granks)
        for nid, ranks, attrs in shards:
            rejoin = sp_nodes.get(0 if g is None else attrs.get("tp_rank", 0)) or ar
            self.node(
                nid,
                NodeKind.ATTENTION,
                ranks,
                ops[Op.ATTN_PROJ] + ops[Op.ATTN_CORE],
                op=ATTENTION_OPS,
                **base,
                **attrs,
                **(
                    {"rejoin": rejoin, "rejoin_op": Op.ATTN_SP if rejoin in sp_nodes.values() else Op.ATTN_ALLREDUCE}
                    if rejoin
                    else {}
                ),
            )
            self.edge(entry, nid)
            suffix = nid[len(f"{L}.attn"):]
            if ctx.prev is not None:  # decode: attention reads the cache the previous token left
                kv = self.node(f"{L}.kv{suffix}", NodeKind.KV_CACHE, ranks, **base, **attrs)
                self.edge(ctx.prev, kv, "sync")
                self.edge(kv, nid)
            kvu = self.node(f"{L}.kvu{suffix}", NodeKind.KV_CACHE_UPDATE, ranks, **base, **attrs)
            self.edge(nid, kvu)
            self.edge(kvu, ctx.token, "sync")
            if rejoin:
                self.edge(nid, rejoin)
        if ar:
            for sp_node in sp_nodes.values():
                self.g.nodes[sp_node].update(rejoin=ar, rejoin_op=Op.ATTN_ALLREDUCE.value)
                self.edge(sp_node, ar)
            return [ar]
        return list(sp_nodes.values()) or [nid for nid, _, _ in shards]

    def dense_ffn(self, ctx: _Branch, layer: int, g: int | None, granks: tuple[int, ...], inputs: list[Any],
                  base: dict[Any, Any], ops: dict[Any, Any]) -> list[str]:
        """A dense FFN: tensor-parallel over the attention group, then an all-reduce."""
        L = f"{ctx.P}.L{layer}"
        gsuf = "" if g is None else f".g{g}"
        ar = None
        if self.lay.attention_group > 1:
            ar = self.node(f"{L}.ffn.ar{gsuf}", NodeKind.ALL_REDUCE, granks, ops[Op.FFN_ALLREDUCE], op=Op.FFN_ALLREDUCE,
                           group_size=self.lay.attention_group, **base, **({"group": g} if g is not None else {}))
        shards = self.group_shards(f"{L}.ffn", g, granks)
        for nid, ranks, attrs in shards:
            self.node(
                nid,
                NodeKind.FFN,
                ranks,
                ops[Op.FFN],
                op=Op.FFN,
                **base,
                **attrs,
                **({"rejoin": ar, "rejoin_op": Op.FFN_ALLREDUCE} if ar else {}),
            )
            for u in inputs:
                self.edge(u, nid)
            if ar:
                self.edge(nid, ar)
        return [ar] if ar else [nid for nid, _, _ in shards]

    def moe(
        self, ctx: _Branch, s: int, layer: int, base: dict[Any, Any], ops: dict[Any, Any], attn_out: dict[Any, Any]
    ) -> dict[Any, Any]:
        lay, r = self.lay, ctx.r
        L = f"{ctx.P}.L{layer}"
        stage = self.stage_ranks(r, s)
        G = len(stage)
        combine = None
        if G > 1:
            kind = NodeKind.ALL_REDUCE if lay.attn_dp == 1 else NodeKind.ALL_TO_ALL
            combine = self.node(
                f"{L}.combine", kind, stage, ops[Op.MOE_COMBINE], op=Op.MOE_COMBINE, group_size=G, **base
            )
        dispatch = None
        if Op.MOE_DISPATCH in ops and G > 1:
            dispatch = self.node(
                f"{L}.dispatch",
                NodeKind.ALL_TO_ALL,
                stage,
                ops[Op.MOE_DISPATCH],
                op=Op.MOE_DISPATCH,
                group_size=G,
                **base,
            )
        router_on: dict[int, str] = {}  # router_on[gpu]: the router node that runs on that GPU
        shared_nodes: list[str] = []
        for g, granks in self.groups(r, s):
            gsuf = "" if g is None else f".g{g}"
            shared_on: dict[int, str] = {}
            if Op.MOE_SHARED in ops:
                for nid, ranks, attrs in self.group_shards(f"{L}.shared", g, granks):
                    self.node(
                        nid,
                        NodeKind.SHARED_EXPERT,
                        ranks,
                        ops[Op.MOE_SHARED],
                        op=Op.MOE_SHARED,
                        **base,
                        **attrs,
                        **(
                            {"rejoin": combine, "rejoin_op": Op.MOE_COMBINE}
                            if combine and (attrs.get("tp", 1) > 1 or "tp_rank" in attrs)
                            else {}
                        ),
                    )
                    for u in attn_out[g]:
                        self.edge(u, nid)
                    shared_nodes.append(nid)
                    for gpu in ranks:
                        shared_on[gpu] = nid
            routers: list[Shard] = (
                [(f"{L}.router", granks, {})]
                if g is None
                else [
                    (f"{L}.router{gsuf}" + (f".p{i}" if len(granks) > 1 else ""), (gpu,), {"group": g})
                    for i, gpu in enumerate(granks)
                ]
            )
            for nid, ranks, attrs in routers:
                self.node(nid, NodeKind.ROUTER, ranks, ops[Op.MOE_ROUTER], op=Op.MOE_ROUTER, **base, **attrs)
                for u in attn_out[g]:
                    self.edge(u, nid)
                if shared_on:
                    self.edge(shared_on[ranks[0]], nid, "sync")
                for gpu in ranks:
                    router_on[gpu] = nid
                if dispatch:
                    self.edge(nid, dispatch)
        # Experts: one node per EP rank (per GPU of it when expanded with tensor-parallel experts).
        etp = lay.expert_tp
        ear_logical = None
        if Op.MOE_EXPERT_ALLREDUCE in ops and not self.expanded:
            ear_logical = self.node(
                f"{L}.expert.ar",
                NodeKind.ALL_REDUCE,
                stage,
                ops[Op.MOE_EXPERT_ALLREDUCE],
                op=Op.MOE_EXPERT_ALLREDUCE,
                group_size=etp,
                rejoin=combine,
                rejoin_op=Op.MOE_COMBINE,
                **base,
            )
            assert combine is not None  # experts' all-reduce implies attn_dp > 1 and a stage of G > 1 GPUs
            self.edge(ear_logical, combine)
        hosting = self.hosting(layer)
        # The most-loaded EP rank takes the cost model's expert time; the others their share of it:
        # by the tokens the placement routes to them, else by the experts they host.
        weights = expert_loads(self.plan, layer)
        if not weights or len(weights) != lay.ep or max(weights) <= 0:
            weights = tuple(len(h) for h in hosting)
        most = max(weights)
        experts_out: list[str] = []
        for k in range(lay.ep):
            ranks_k = stage[k * etp:(k + 1) * etp]
            est = ops[Op.MOE_EXPERTS] * weights[k] / most
            ear = ear_logical
            if Op.MOE_EXPERT_ALLREDUCE in ops and self.expanded:
                ear = self.node(f"{L}.expert.ar.e{k}", NodeKind.ALL_REDUCE, ranks_k, ops[Op.MOE_EXPERT_ALLREDUCE],
                                op=Op.MOE_EXPERT_ALLREDUCE, group_size=etp, ep_rank=k, rejoin=combine,
                                rejoin_op=Op.MOE_COMBINE, **base)
                assert combine is not None  # as above
                self.edge(ear, combine)
            nodes: list[Shard]
            if self.expanded:
                nodes = [(f"{L}.expert.e{k}" + (f".t{t}" if etp > 1 else ""), (gpu,), {"tp_rank": t} if etp > 1 else {})
                         for t, gpu in enumerate(ranks_k)]
            else:
                nodes = [(f"{L}.expert.e{k}", ranks_k, {"tp": etp} if etp > 1 else {})]
            for nid, ranks, attrs in nodes:
                joins = ear or combine
                self.node(
                    nid,
                    NodeKind.EXPERT,
                    ranks,
                    est,
                    op=Op.MOE_EXPERTS,
                    ep_rank=k,
                    experts=hosting[k],
                    **base,
                    **attrs,
                    **(
                        {"rejoin": joins, "rejoin_op": Op.MOE_EXPERT_ALLREDUCE if ear else Op.MOE_COMBINE}
                        if joins
                        else {}
                    ),
                )
                if dispatch:
                    self.edge(dispatch, nid)
                else:
                    for src in dict.fromkeys(router_on[gpu] for gpu in ranks):
                        self.edge(src, nid)
                if joins:
                    self.edge(nid, joins)
                else:
                    experts_out.append(nid)
        for nid in shared_nodes:
            if combine:
                self.edge(nid, combine)
            else:
                experts_out.append(nid)
        if combine:
            return {g: [combine] for g, _ in self.groups(r, s)}
        return {g: experts_out for g, _ in self.groups(r, s)}


def _by_name(ops: dict[Op, float]) -> dict[str, float]:
    """An operator table keyed by plain strings, as the graph's ``op_us`` attribute stores it."""
    return {op.value: us for op, us in ops.items()}


def _plain(value: Any) -> Any:
    """An enum name (``Op``, ``Phase``) as its string value; anything else unchanged."""
    return value.value if isinstance(value, StrEnum) else value


@dataclass(frozen=True)
class _Branch:
    P: str  # node id prefix of the branch
    r: int
    phase: Phase
    costs: PhaseCosts
    token: str
    prev: str | None


def graph_attributes(plan: Plan, detail: str, folded: bool, costs: dict[Phase, PhaseCosts]) -> dict[Any, Any]:
    """What a file needs to be validated on its own: the layout, the model's MoE layers, the policy."""
    problem, lay, model = plan.problem, plan.layout, plan.problem.model
    pred = plan.prediction
    return {
        "schema": SCHEMA,
        "detail": detail,
        "model": model.name,
        "cluster": problem.cluster.describe(),
        "cluster_gpus": problem.cluster.num_gpus,
        "num_gpus": lay.num_gpus,
        "layout": {
            "dp": lay.dp, "tp": lay.tp, "sp": lay.sp, "attn_dp": lay.attn_dp, "expert_tp": lay.expert_tp,
            "stages": [list(s) for s in lay.stages], "batch": lay.batch,
        },
        "degrees": {**lay.degrees(), **({} if model.is_moe else {"ep": 1})},
        "num_layers": model.num_layers,
        "moe_layers": list(model.moe.layers) if model.moe else [],
        "num_experts": model.moe.num_experts if model.moe else 0,
        "expert_placement": placement_source(plan) if model.moe else "none",
        "allow": sorted(problem.allow),
        "folded": folded,
        "microbatches": pred.microbatches,
        "prefill_chunk": pred.prefill_chunk,
        "profile": pred.profile,
        # What one pass of each branch takes: the prompt's prefill (TTFT at concurrency 1) and one decode
        # step (TPOT less the prefill that shares its steps under load).
        "prefill_us": pred.prefill_ms * 1e3,
        "decode_step_us": pred.metrics.decode_step_ms * 1e3,
        "op_us": {
            phase.value: {
                "layers": {label: _by_name(ops) for label, ops in c.layers_us.items()},
                "loaded": {str(layer): _by_name(ops) for layer, ops in c.loaded_us.items()},
                "first": _by_name(c.first_us),
                "last": _by_name(c.last_us),
                "send": list(c.send_us),
            }
            for phase, c in costs.items()
        },
    }


def build(plan: Plan, detail: str = "logical", fold: bool | None = None) -> nx.DiGraph:
    """The execution DAG of ``plan`` at ``detail``; ``fold``: represent identical replicas once
    (None: only when the explicit graph would exceed ``NODE_BUDGET`` nodes)."""
    builder = _Builder(plan, detail)
    dp = plan.layout.dp
    if fold is None:
        builder.build(range(1))
        per_replica = builder.g.number_of_nodes() - 1
        fold = dp > 1 and 1 + dp * per_replica > NODE_BUDGET
        if fold:
            builder = _Builder(plan, detail)
            builder.build(range(1), multiplicity=dp)
        elif dp > 1:
            builder.build(range(1, dp))
    elif fold:
        builder.build(range(1), multiplicity=dp)
    else:
        builder.build(range(dp))
    folded = bool(fold) and dp > 1
    builder.g.graph.update(graph_attributes(plan, detail, folded, builder.costs))
    return builder.g
