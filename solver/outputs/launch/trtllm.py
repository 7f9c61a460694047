"""``trtllm-serve`` commands and their extra options YAML for a plan (TensorRT-LLM 1.2 names).

One deployment per replica: --tp_size G --pp_size S --ep_size G / expert_tp, and in the extra options
file enable_attention_dp (attention groups of one GPU: attn_dp = G), pp_partition,
moe_tensor_parallel_size and a planned expert placement as the load balancer's initial assignments.
"""

from __future__ import annotations

from shardplan.rules.plan import Plan
from shardplan.solver.outputs.launch.common import ENGINE_VERSIONS, Emitted, Launch, PlanShape, per_rank, span
from shardplan.solver.placement import trtllm_initial_assignments


def emit_trtllm(plan: Plan, options_file: str = "extra_llm_api_options.yaml", first_gpu: int = 0) -> Emitted:
    """``trtllm-serve`` commands and their extra options YAML (TensorRT-LLM 1.2 names)."""
    s = PlanShape.of(plan, first_gpu)
    adp = s.attn_dp > 1
    if adp and s.attn_dp != s.G:
        s.notes.append(
            f"TensorRT-LLM's attention is tensor-parallel over all {s.G} GPUs of a stage or data-parallel with one GPU "
            f"per group; the plan's {s.attn_dp} groups of {s.tp * s.sp} are emitted as {s.G} groups of one"
        )
    batch_per_rank = per_rank(s.batch, s.G) if adp else s.batch
    args = ["--tp_size", str(s.G), "--pp_size", str(s.pp)]
    if s.moe:
        args += ["--ep_size", str(s.ep)]
    if s.sp > 1:
        args += ["--cp_size", str(s.sp)]
        s.notes.append(
            f"sp={s.sp}: --cp_size {s.sp} needs a cp_config (cp_type) that supports this model in both phases"
        )
    args += ["--gpus_per_node", str(s.per_node), "--max_batch_size", str(batch_per_rank)]
    args += ["--max_num_tokens", str(s.token_budget), "--max_seq_len", str(s.max_len)]
    if adp:
        s.notes.append(f"--max_batch_size is per attention-DP rank: the plan's batch of {s.batch} over {s.G} ranks")
    args += ["--extra_llm_api_options", options_file]
    s.weights_note("trtllm", None)

    yaml: list[str] = [f"enable_attention_dp: {'true' if adp else 'false'}"]
    if s.moe:
        yaml += [f"moe_expert_parallel_size: {s.ep}", f"moe_tensor_parallel_size: {s.expert_tp}"]
    if s.pp > 1:
        yaml.append(f"pp_partition: [{', '.join(map(str, s.layers))}]")
    # TensorRT-LLM sizes its KV cache as a share of the memory left after weights, activations and its reserve:
    # the share the plan gave it, so the engine holds the KV cache the plan was priced with
    yaml += ["kv_cache_config:", f"  free_gpu_memory_fraction: {s.kv_free_fraction():g}"]
    if s.kv_fp8:
        yaml.append("  dtype: fp8")
    placement = s.placement()
    if placement is not None:
        balancer = trtllm_initial_assignments(placement)
        yaml += ["moe_config:", "  load_balancer:", f"    num_slots: {balancer['num_slots']}"]
        yaml.append("    initial_global_assignments:")
        assignments = balancer["initial_global_assignments"].items()
        yaml += [f"      {layer}: [{', '.join(map(str, row))}]" for layer, row in assignments]
    if s.dp > 1:
        s.notes.append(
            f"{s.dp} replicas: {s.dp} separate trtllm-serve servers; put a load balancer in front of their ports"
        )

    def base(u: int) -> list[str]:
        return ["trtllm-serve", s.model] + args + (["--port", str(8000 + u)] if s.dp > 1 else [])

    launches: list[Launch] = []
    for u, gpus in enumerate(s.units(1)):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        if len(nodes) == 1:
            node, local = nodes[0]
            launches.append(Launch(f"replica {u}: node {node}, GPUs {span(local)}", tuple(base(u)), s.visible(local)))
        else:
            names = ", ".join(str(n) for n, _ in nodes)
            launches.append(Launch(
                f"replica {u}: nodes {names}, one MPI rank per GPU ({len(gpus)} ranks), e.g. "
                f"srun -N {len(nodes)} --ntasks-per-node={len(nodes[0][1])} --mpi=pmix "
                "trtllm-llmapi-launch <this command>",
                tuple(base(u)),
            ))
    notes = tuple(s.notes)
    return Emitted("trtllm", ENGINE_VERSIONS["trtllm"], s.summary("trtllm"), tuple(launches),
                   ((options_file, "\n".join(yaml)),), notes)
