"""``python -m sglang.launch_server`` commands for a plan (SGLang 0.5.23 option names).

One deployment per replica: --tp-size G is the stage's world, --attn-dp-size attn_dp splits attention
into groups of G / attn_dp GPUs, --ep-size G / expert_tp, --pp-size S. A planned expert placement is
written as the file ``--init-expert-location`` reads.
"""

from __future__ import annotations

from collections.abc import Callable

from shardplan.models.files import json_text
from shardplan.rules.plan import Plan
from shardplan.solver.outputs.launch.common import (
    ENGINE_VERSIONS,
    Emitted,
    Launch,
    PlanShape,
    head_address,
    node_label,
    span,
)
from shardplan.solver.placement import sglang_expert_location


def emit_sglang(plan: Plan, expert_location: str = "expert_location.json", first_gpu: int = 0) -> Emitted:
    """``python -m sglang.launch_server`` commands (SGLang 0.5.23 option names)."""
    s = PlanShape.of(plan, first_gpu)
    args = ["--tp-size", str(s.G), "--pp-size", str(s.pp)]
    if s.attn_dp > 1:
        args += ["--attn-dp-size", str(s.attn_dp)]
        s.notes.append(
            f"attention data parallelism: --attn-dp-size {s.attn_dp} (SGLang before 0.5.23: --dp-size {s.attn_dp} "
            "--enable-dp-attention)"
        )
        group = s.tp * s.sp
        if s.moe and group == 1:
            args += ["--moe-dense-tp-size", "1"]
        elif s.moe and group != s.G and s.plan.problem.model.num_dense_layers:
            s.notes.append(
                f"dense FFN layers: SGLang runs them tensor-parallel over 1 or all {s.G} GPUs of a stage, "
                f"not over the plan's attention group of {group}"
            )
    if s.sp > 1:
        args += ["--attn-cp-size", str(s.sp), "--enable-prefill-cp"]
        s.notes.append(
            f"sp={s.sp}: SGLang's attention context parallelism (--attn-cp-size) is implemented for few models; "
            "check that this model supports it, in prefill and decode"
        )
    if s.moe:
        args += ["--ep-size", str(s.ep)]
    args += ["--max-running-requests", str(s.batch), "--chunked-prefill-size", str(s.token_budget)]
    if s.prefill_mixes:  # SGLang's engine profiles say false (its default); a profile that mixes needs the flag
        args.append("--enable-mixed-chunk")
        s.notes.append("the plan's profile mixes prefill chunks into decode steps: --enable-mixed-chunk (off by "
                       "default)")
    args += ["--context-length", str(s.max_len)]
    if s.kv_fp8:
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    # weights and KV pool: the plan's limit less the engine reserve, buffers and activations it priced
    args += ["--mem-fraction-static", f"{s.static_fraction():g}"]
    args += s.weights_note("sglang", "--quantization")
    files: list[tuple[str, str]] = []
    placement = s.placement()
    if placement is not None:
        doc = sglang_expert_location(placement, s.plan.problem.model.num_layers, s.num_experts)
        files.append((expert_location, json_text(doc, separators=(",", ":"))))
        redundant = placement.num_gpus * placement.slots_per_gpu - s.num_experts
        args += ["--init-expert-location", expert_location]
        if redundant > 0:
            args += ["--ep-num-redundant-experts", str(redundant)]
        s.notes.append("SGLang picks among an expert's copies by itself: the placement's traffic shares are not used")
    env = [("SGLANG_PP_LAYER_PARTITION", s.partition)] if s.pp > 1 else []
    if s.dp > 1:
        s.notes.append(
            f"{s.dp} replicas: {s.dp} separate SGLang servers; put a router (sglang-router) in front of their ports"
        )
    launches, heads = _per_replica(
        s,
        lambda u: ["python", "-m", "sglang.launch_server", "--model-path", s.model] + args
        + (["--port", str(30000 + u)] if s.dp > 1 else []),
        lambda u, k, n, head: ["--nnodes", str(n), "--node-rank", str(k), "--dist-init-addr", f"{head}:{20000 + u}"],
        env,
    )
    return Emitted(
        "sglang", ENGINE_VERSIONS["sglang"], s.summary("sglang"), launches, tuple(files), tuple(s.notes), heads
    )


def _per_replica(
    s: PlanShape,
    base: Callable[[int], list[str]],
    multinode_args: Callable[[int, int, int, str], list[str]],
    env: list[tuple[str, str]],
) -> tuple[tuple[Launch, ...], tuple[str, ...]]:
    """One deployment per replica, one process per node it spans: ``base(replica)`` plus, on several
    nodes, ``multinode_args(replica, node rank, node count, head address)``."""
    launches: list[Launch] = []
    heads: list[str] = []
    for u, gpus in enumerate(s.units(1)):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        head = head_address(nodes[0][0])
        if len(nodes) > 1:
            heads.append(head)
        for k, (node, local) in enumerate(nodes):
            argv = base(u) + (multinode_args(u, k, len(nodes), head) if len(nodes) > 1 else [])
            label = (
                f"replica {u}: node {node}, GPUs {span(local)}" if len(nodes) == 1
                else node_label(u, node, k, nodes, "replica")
            )
            launches.append(Launch(label, tuple(argv), tuple(env) + s.visible(local)))
    return tuple(launches), tuple(heads)
