"""``vllm serve`` commands for a plan (vLLM 0.33.0 option names).

One data-parallel rank is one attention group through every stage (-tp tp -pp S); attention groups are
data-parallel ranks (-dp attn_dp) and ``--enable-expert-parallel`` shards MoE layers over TP x DP = the
stage's GPUs. A dense model's replicas are more data-parallel ranks of one deployment; a MoE model's
replicas are separate deployments (vLLM would otherwise spread its experts over them).
"""

from __future__ import annotations

from shardplan.models.files import json_text
from shardplan.rules.plan import Plan
from shardplan.solver.outputs.launch.common import (
    ENGINE_VERSIONS,
    Emitted,
    Launch,
    PlanShape,
    head_address,
    node_label,
    per_rank,
    span,
)


def emit_vllm(plan: Plan, first_gpu: int = 0) -> Emitted:
    """``vllm serve`` commands (vLLM 0.33.0 option names)."""
    s = PlanShape.of(plan, first_gpu)
    # A MoE model's replicas must be separate deployments: vLLM shards MoE layers over all its
    # data-parallel ranks. A dense model's replicas are data-parallel ranks of one deployment.
    per_unit = 1 if s.moe else s.dp
    dp_ranks = s.attn_dp if s.moe else s.dp
    rank_gpus = s.tp * s.sp * s.pp  # one data-parallel rank: a group through every stage
    args = ["--tensor-parallel-size", str(s.tp), "--pipeline-parallel-size", str(s.pp)]
    if dp_ranks > 1:
        args += ["--data-parallel-size", str(dp_ranks)]
    if s.sp > 1:
        args += ["--prefill-context-parallel-size", str(s.sp)]
        s.notes.append(
            f"sp={s.sp}: vLLM's prefill context parallelism splits prompts over {s.sp} GPUs, but decode does not "
            "split attention over them (the plan's decode sequence parallelism is not expressible)"
        )
    if s.moe:
        if s.expert_tp == 1:
            args.append("--enable-expert-parallel")
        elif s.expert_tp == s.G:
            s.notes.append(
                "expert-tp equals the stage's GPUs: MoE layers stay tensor-parallel (no --enable-expert-parallel)"
            )
        else:
            args.append("--enable-expert-parallel")
            s.notes.append(
                f"expert-tp={s.expert_tp}: vLLM shards experts either over all {s.G} GPUs of a stage or "
                f"tensor-parallel, not {s.ep} groups of {s.expert_tp}; emitted expert parallelism over all {s.G}"
            )
        if s.attn_dp > 1 and s.pp > 1:
            s.notes.append(
                "vLLM places each data-parallel rank's pipeline stages on consecutive GPUs; the plan puts stage s "
                "of every attention group side by side, so a stage's expert-parallel group may span more nodes "
                "than planned"
            )
    args += ["--max-num-seqs", str(s.batch if not s.moe else per_rank(s.batch, s.attn_dp))]
    args += ["--max-num-batched-tokens", str(s.token_budget), "--max-model-len", str(s.max_len)]
    if s.kv_fp8:
        args += ["--kv-cache-dtype", "fp8"]
    # the share of HBM the plan's memory limit allows: what the plan was priced with, not vLLM's own default
    args += ["--gpu-memory-utilization", f"{s.mem_fraction():g}"]
    args += s.weights_note("vllm", "--quantization")
    placement = s.placement()
    if placement is not None:
        redundant = placement.num_gpus * placement.slots_per_gpu - s.num_experts
        args += ["--enable-eplb", "--eplb-config", json_text({"num_redundant_experts": max(0, redundant)})]
        s.notes.append(
            "vLLM cannot load an exact expert placement: the planned placement is not passed; "
            f"--enable-eplb with {max(0, redundant)} redundant experts rebalances at run time instead"
        )
    env = [("VLLM_PP_LAYER_PARTITION", s.partition)] if s.pp > 1 else []
    if s.moe and s.dp > 1:
        s.notes.append(
            f"{s.dp} replicas: {s.dp} separate vLLM deployments; put a load balancer in front of their ports"
        )

    launches: list[Launch] = []
    units = s.units(per_unit)
    heads: list[str] = []
    for u, gpus in enumerate(units):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        base = ["vllm", "serve", s.model] + args + (["--port", str(8000 + u)] if len(units) > 1 else [])
        if len(nodes) == 1:
            node, local = nodes[0]
            label = f"deployment {u}: node {node}, GPUs {span(local)}"
            launches.append(Launch(label, tuple(base), tuple(env) + s.visible(local)))
            continue
        head = head_address(nodes[0][0])
        heads.append(head)
        per_node = len(nodes[0][1])
        if rank_gpus <= per_node and per_node % rank_gpus == 0:
            # Whole data-parallel ranks on each node: vLLM's multi-node data-parallel mode.
            local_ranks = per_node // rank_gpus
            for k, (node, local) in enumerate(nodes):
                extra = ["--data-parallel-size-local", str(local_ranks), "--data-parallel-address", head,
                         "--data-parallel-rpc-port", str(13345 + u)]
                if k > 0:
                    extra = ["--headless", "--data-parallel-start-rank", str(k * local_ranks)] + extra
                label = node_label(u, node, k, nodes)
                launches.append(Launch(label, tuple(base + extra), tuple(env) + s.visible(local)))
        elif dp_ranks == 1:
            # One rank spans nodes: torch.distributed over the nodes (vLLM's --nnodes, workers headless).
            for k, (node, local) in enumerate(nodes):
                extra = ["--nnodes", str(len(nodes)), "--node-rank", str(k), "--master-addr", head,
                         "--master-port", str(29501 + u)]
                if k > 0:
                    extra = ["--headless"] + extra
                label = node_label(u, node, k, nodes)
                launches.append(Launch(label, tuple(base + extra), tuple(env) + s.visible(local)))
        else:
            s.notes.append(
                f"deployment {u}: each of its {dp_ranks} data-parallel ranks spans nodes ({rank_gpus} GPUs); "
                f"vLLM places such ranks through Ray: start a Ray cluster on nodes "
                f"{', '.join(str(n) for n, _ in nodes)} first"
            )
            launches.append(Launch(f"deployment {u}: on node {nodes[0][0]}, the Ray head",
                                   tuple(base + ["--data-parallel-backend", "ray"]), tuple(env)))
    return Emitted(
        "vllm", ENGINE_VERSIONS["vllm"], s.summary("vllm"), tuple(launches), (), tuple(s.notes), tuple(heads)
    )
