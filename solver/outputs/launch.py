"""Launch commands for serving engines: a plan's degrees in each engine's own option names.

One pure function per engine (``emit_vllm``, ``emit_sglang``, ``emit_trtllm``) turns a ``Plan`` into an
``Emitted``: the processes to start (one per deployment and node), files they read, and notes on what
the engine cannot express. Nothing is dropped silently: a degree or a placement an engine has no option
for becomes a note, printed as a comment above the commands. No solving and no file writing here.

How our structure maps (DESIGN.md "The parallel structure": a replica is S stages of G = tp x sp x
attn_dp GPUs; attention runs in attn_dp groups of tp x sp GPUs, MoE layers in expert parallelism over
the stage's G GPUs, ep = G / expert_tp; dp replicas):

- vLLM: one data-parallel rank is one attention group through every stage (-tp tp -pp S); attention
  groups are data-parallel ranks (-dp attn_dp) and ``--enable-expert-parallel`` shards MoE layers over
  TP x DP = the stage's GPUs. A dense model's replicas are more data-parallel ranks of one deployment;
  a MoE model's replicas are separate deployments (vLLM would otherwise spread its experts over them).
- SGLang: one deployment per replica; --tp-size G is the stage's world, --attn-dp-size attn_dp splits
  attention into groups of G / attn_dp GPUs, --ep-size G / expert_tp, --pp-size S.
- TensorRT-LLM: one deployment per replica; --tp_size G --pp_size S --ep_size G / expert_tp, and in the
  extra options file enable_attention_dp (attention groups of one GPU: attn_dp = G), pp_partition and
  moe_tensor_parallel_size.

Engine versions the option names were checked against (the test fixture
``tests/unit/solver/outputs/engine_options.py`` lists every option of each, with the same versions):

- vLLM 0.33.0: the ``vllm serve`` parser itself (vllm/entrypoints/common/cli_args.py ``make_arg_parser``,
  vllm/engine/arg_utils.py ParallelConfig/CacheConfig/SchedulerConfig groups), ``VLLM_PP_LAYER_PARTITION``
  in vllm/envs.py, ``--headless`` for the worker nodes of a multi-node deployment (vllm/entrypoints/cli/serve.py).
- SGLang 0.5.23: ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py), ``SGLANG_PP_LAYER_PARTITION``
  in sglang/srt/distributed/utils.py. 0.5.23 deprecates ``--dp-size N --enable-dp-attention`` in favour
  of ``--attn-dp-size N`` (sglang/srt/arg_groups/parallel_hook.py) and rejects --dp-size together with
  --attn-dp-size, so replicas are separate servers.
- TensorRT-LLM 1.2: ``trtllm-serve`` click options (tensorrt_llm/commands/serve.py) and the LLM API
  fields of the extra options YAML (tensorrt_llm/llmapi/llm_args.py: enable_attention_dp,
  moe_expert_parallel_size, moe_tensor_parallel_size, pp_partition, kv_cache_config.dtype,
  moe_config.load_balancer {num_slots, initial_global_assignments}); its wheel is too large to
  install here, so these were read from the source.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardplan.models import DType
from shardplan.models.errors import SpecError
from shardplan.rules.plan import Plan

ENGINE_VERSIONS = {"vllm": "vLLM 0.33.0", "sglang": "SGLang 0.5.23", "trtllm": "TensorRT-LLM 1.2"}
_VAR = re.compile(r"^\$[A-Z0-9_]+(:\d+)?$")


@dataclass(frozen=True)
class Launch:
    """One process to start: where, with which environment, which command."""

    label: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def options(self) -> list[str]:
        """Every ``--option`` (and ``-x``) token of the command, in order."""
        _, rest = _split_head(self.argv)
        return [tok.split("=", 1)[0] for tok in rest if tok.startswith("-") and not _is_number(tok)]

    def shell(self) -> str:
        """The command as one shell line per option, environment first."""
        env = " ".join(f"{k}={_quote(v)}" for k, v in self.env)
        head, rest = _split_head(self.argv)
        lines = [(env + " " if env else "") + " ".join(_quote(t) for t in head)]
        i = 0
        while i < len(rest):
            tok = rest[i]
            if tok.startswith("-") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                lines.append(f"{_quote(tok)} {_quote(rest[i + 1])}")
                i += 2
            else:
                lines.append(_quote(tok))
                i += 1
        return " \\\n    ".join(lines)


@dataclass(frozen=True)
class Emitted:
    """Everything needed to serve a plan with one engine."""

    engine: str
    version: str
    summary: str
    launches: tuple[Launch, ...]
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()  # $NODEk_IP placeholders the commands use

    def script(self) -> str:
        """A shell script: the notes as comments, each file as a here-document, each process's command."""
        out = [f"# {self.summary}", f"# option names as in {self.version}"]
        out += [f"# NOTE: {note}" for note in self.notes]
        if self.heads:
            out.append("# multi-node: run each node's command on that node; NODEk_IP is the address of node k")
            for var in self.heads:
                name = var.lstrip("$")
                out.append(f': "${{{name}:?export {name}=<address of node {name[4:-3]}> on every node first}}"')
        for name, text in self.files:
            out.append(f"cat > {shlex.quote(name)} <<'EOF'\n{text.rstrip()}\nEOF")
        for launch in self.launches:
            out.append(f"# {launch.label}")
            out.append(launch.shell())
        return "\n".join(out) + "\n"


def emit(plan: Plan, engine: str) -> Emitted:
    """The launch commands of ``plan`` for ``engine`` (vllm, sglang or trtllm)."""
    try:
        return EMITTERS[engine](plan)
    except KeyError:
        raise SpecError("emit", f"unknown engine {engine!r}; one of {', '.join(EMITTERS)}") from None


# --- the plan, read once ---------------------------------------------------------------------------


@dataclass
class _Shape:
    """The plan's numbers every emitter reads."""

    plan: Plan
    model: str
    dp: int
    pp: int
    tp: int
    sp: int
    attn_dp: int
    expert_tp: int
    G: int
    ep: int
    moe: bool
    layers: list[int]  # layers per stage
    even_default: bool  # the stages are an even split
    batch: int
    max_len: int
    per_node: int
    kv_fp8: bool
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, plan: Plan) -> _Shape:
        lay, problem = plan.layout, plan.problem
        counts = [end - start for start, end in lay.stages]
        return cls(
            plan=plan,
            model=problem.model.name,
            dp=lay.dp, pp=lay.pp, tp=lay.tp, sp=lay.sp, attn_dp=lay.attn_dp, expert_tp=lay.expert_tp,
            G=lay.gpus_per_stage, ep=lay.ep, moe=problem.model.is_moe,
            layers=counts, even_default=max(counts) - min(counts) <= 1,
            batch=lay.batch, max_len=problem.workload.context,
            per_node=problem.cluster.gpus_per_node,
            kv_fp8=problem.model.kv_dtype is DType.FP8,
        )

    @property
    def partition(self) -> str:
        return ",".join(str(n) for n in self.layers)

    def units(self, replicas_per_unit: int) -> list[range]:
        """GPU ranges of the deployments: ``replicas_per_unit`` replicas each (GPU ids are replica-major)."""
        size = self.pp * self.G * replicas_per_unit
        return [range(u * size, (u + 1) * size) for u in range(self.dp // replicas_per_unit)]

    def nodes_of(self, gpus: range) -> list[tuple[int, list[int]]]:
        """(node, local GPU ids) for each node a GPU range touches."""
        by_node: dict[int, list[int]] = {}
        for g in gpus:
            by_node.setdefault(g // self.per_node, []).append(g % self.per_node)
        return sorted(by_node.items())

    def visible(self, local: list[int]) -> tuple[tuple[str, str], ...]:
        """CUDA_VISIBLE_DEVICES when a process does not own the whole node."""
        if local == list(range(self.per_node)):
            return ()
        return (("CUDA_VISIBLE_DEVICES", ",".join(map(str, local))),)

    def check_even_nodes(self, unit: int, nodes: list[tuple[int, list[int]]]) -> None:
        sizes = {len(local) for _, local in nodes}
        if len(sizes) > 1:
            spread = " + ".join(str(len(local)) for _, local in nodes)
            self.notes.append(
                f"deployment {unit} straddles nodes unevenly ({spread} GPUs); the engine expects the same "
                "number of GPUs on every node it spans"
            )

    def placement(self) -> Any | None:
        """The plan's expert placement as one ``ExpertPlacement`` over every MoE layer (slots of the EP
        ranks of each layer's stage), when an engine needs it: routing that is not uniform, or
        redundant copies. Under uniform routing every balanced placement is equivalent and the
        engines' default one is used (a note says so)."""
        experts = self.plan.experts
        if experts is None or not getattr(experts, "stages", None):
            return None
        from shardplan.solver.placement import ExpertPlacement

        if experts.routing == "uniform" and experts.redundant_slots == 0:
            self.notes.append(
                "expert placement: uniform routing and no redundant experts, so the engine's default placement "
                "balances the load as planned and none is passed"
            )
            return None
        layers = sorted((p for st in experts.stages for p in st.placement.layers), key=lambda p: p.layer)
        bounds = {p.layer: b for st in experts.stages for p, b in zip(st.placement.layers, st.placement.lower_bounds)}
        return ExpertPlacement(
            num_gpus=experts.stages[0].placement.num_gpus, slots_per_gpu=experts.slots_per_gpu, layers=tuple(layers),
            lower_bounds=tuple(bounds[p.layer] for p in layers), status=experts.status, solve_time_s=experts.solve_time_s,
        )

    def summary(self, engine: str) -> str:
        p = self.plan
        degrees = f"dp={self.dp} pp={self.pp} tp={self.tp} sp={self.sp} attention groups={self.attn_dp}"
        if self.moe:
            degrees += f" ep={self.ep}" + (f" expert-tp={self.expert_tp}" if self.expert_tp > 1 else "")
        return (
            f"{ENGINE_VERSIONS[engine]} launch for {self.model} on {p.problem.cluster.num_nodes} x "
            f"{self.per_node} {p.problem.cluster.gpu.name}: {degrees}, stages {self.partition} layers, batch {self.batch}"
        )

    def weights_note(self, engine: str, quant_flag: str | None) -> list[str]:
        """A flag or a note when the plan prices weights in another format than the checkpoint's."""
        planned = self.plan.problem.model.weights_dtype
        try:
            from shardplan.models import get_model

            stored = get_model(self.model).weights_dtype
        except Exception:  # a user config that no longer loads: nothing to compare with
            return []
        if planned == stored:
            return []
        if planned is DType.FP8 and quant_flag:
            self.notes.append(f"weights planned in fp8, checkpoint in {stored.value}: {quant_flag} fp8 quantizes on load")
            return [quant_flag, "fp8"]
        self.notes.append(
            f"weights planned in {planned.value}, checkpoint in {stored.value}: serve a {planned.value} checkpoint "
            f"with {ENGINE_VERSIONS[engine]}"
        )
        return []

    def mem_fraction(self) -> float | None:
        cap = self.plan.problem.mem_cap_gib
        if cap is None:
            return None
        return round(min(cap / self.plan.problem.cluster.gpu.hbm_gib, 0.99), 3)


def _per_rank(batch: int, ranks: int) -> int:
    return max(1, math.ceil(batch / ranks))


# --- vLLM -----------------------------------------------------------------------------------------


def emit_vllm(plan: Plan) -> Emitted:
    """``vllm serve`` commands (vLLM 0.33.0 option names)."""
    s = _Shape.of(plan)
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
            s.notes.append("expert-tp equals the stage's GPUs: MoE layers stay tensor-parallel (no --enable-expert-parallel)")
        else:
            args.append("--enable-expert-parallel")
            s.notes.append(
                f"expert-tp={s.expert_tp}: vLLM shards experts either over all {s.G} GPUs of a stage or tensor-parallel, "
                f"not {s.ep} groups of {s.expert_tp}; emitted expert parallelism over all {s.G}"
            )
        if s.attn_dp > 1 and s.pp > 1:
            s.notes.append(
                "vLLM places each data-parallel rank's pipeline stages on consecutive GPUs; the plan puts stage s of every "
                "attention group side by side, so a stage's expert-parallel group may span more nodes than planned"
            )
    args += ["--max-num-seqs", str(s.batch if not s.moe else _per_rank(s.batch, s.attn_dp))]
    args += ["--max-model-len", str(s.max_len)]
    if s.kv_fp8:
        args += ["--kv-cache-dtype", "fp8"]
    fraction = s.mem_fraction()
    if fraction is not None:
        args += ["--gpu-memory-utilization", f"{fraction:g}"]
    args += s.weights_note("vllm", "--quantization")
    placement = s.placement()
    if placement is not None:
        redundant = placement.num_gpus * placement.slots_per_gpu - s.plan.problem.model.moe.num_experts
        args += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": max(0, redundant)})]
        s.notes.append(
            "vLLM cannot load an exact expert placement: the planned placement is not passed; "
            f"--enable-eplb with {max(0, redundant)} redundant experts rebalances at run time instead"
        )
    env = [("VLLM_PP_LAYER_PARTITION", s.partition)] if s.pp > 1 else []
    if s.moe and s.dp > 1:
        s.notes.append(f"{s.dp} replicas: {s.dp} separate vLLM deployments; put a load balancer in front of their ports")

    launches: list[Launch] = []
    units = s.units(per_unit)
    heads: list[str] = []
    for u, gpus in enumerate(units):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        base = ["vllm", "serve", s.model] + args + (["--port", str(8000 + u)] if len(units) > 1 else [])
        if len(nodes) == 1:
            node, local = nodes[0]
            launches.append(Launch(f"deployment {u}: node {node}, GPUs {_span(local)}", tuple(base), tuple(env) + s.visible(local)))
            continue
        head = _head(nodes[0][0])
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
                launches.append(Launch(_node_label(u, node, k, nodes), tuple(base + extra), tuple(env) + s.visible(local)))
        elif dp_ranks == 1:
            # One rank spans nodes: torch.distributed over the nodes (vLLM's --nnodes, workers headless).
            for k, (node, local) in enumerate(nodes):
                extra = ["--nnodes", str(len(nodes)), "--node-rank", str(k), "--master-addr", head,
                         "--master-port", str(29501 + u)]
                if k > 0:
                    extra = ["--headless"] + extra
                launches.append(Launch(_node_label(u, node, k, nodes), tuple(base + extra), tuple(env) + s.visible(local)))
        else:
            s.notes.append(
                f"deployment {u}: each of its {dp_ranks} data-parallel ranks spans nodes ({rank_gpus} GPUs); vLLM places "
                f"such ranks through Ray: start a Ray cluster on nodes {', '.join(str(n) for n, _ in nodes)} first"
            )
            launches.append(Launch(f"deployment {u}: on node {nodes[0][0]}, the Ray head",
                                   tuple(base + ["--data-parallel-backend", "ray"]), tuple(env)))
    return Emitted("vllm", ENGINE_VERSIONS["vllm"], s.summary("vllm"), tuple(launches), (), tuple(s.notes), tuple(heads))


# --- SGLang ---------------------------------------------------------------------------------------


def emit_sglang(plan: Plan, expert_location: str = "expert_location.json") -> Emitted:
    """``python -m sglang.launch_server`` commands (SGLang 0.5.23 option names)."""
    s = _Shape.of(plan)
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
    args += ["--max-running-requests", str(s.batch), "--context-length", str(s.max_len)]
    if s.kv_fp8:
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    fraction = s.mem_fraction()
    if fraction is not None:
        args += ["--mem-fraction-static", f"{fraction:g}"]
        s.notes.append("--mem-fraction-static is the share of memory for weights and KV cache: the plan's cap, as a fraction")
    args += s.weights_note("sglang", "--quantization")
    files: list[tuple[str, str]] = []
    placement = s.placement()
    if placement is not None:
        from shardplan.solver.placement import sglang_expert_location

        model = s.plan.problem.model
        doc = sglang_expert_location(placement, model.num_layers, model.moe.num_experts)
        files.append((expert_location, json.dumps(doc, separators=(",", ":"))))
        redundant = placement.num_gpus * placement.slots_per_gpu - model.moe.num_experts
        args += ["--init-expert-location", expert_location]
        if redundant > 0:
            args += ["--ep-num-redundant-experts", str(redundant)]
        s.notes.append("SGLang picks among an expert's copies by itself: the placement's traffic shares are not used")
    env = [("SGLANG_PP_LAYER_PARTITION", s.partition)] if s.pp > 1 else []
    if s.dp > 1:
        s.notes.append(f"{s.dp} replicas: {s.dp} separate SGLang servers; put a router (sglang-router) in front of their ports")
    launches, heads = _per_replica(
        s, "sglang",
        lambda u: ["python", "-m", "sglang.launch_server", "--model-path", s.model] + args
        + (["--port", str(30000 + u)] if s.dp > 1 else []),
        lambda u, k, n, head: ["--nnodes", str(n), "--node-rank", str(k), "--dist-init-addr", f"{head}:{20000 + u}"],
        env,
    )
    return Emitted("sglang", ENGINE_VERSIONS["sglang"], s.summary("sglang"), launches, tuple(files), tuple(s.notes), heads)


# --- TensorRT-LLM ---------------------------------------------------------------------------------


def emit_trtllm(plan: Plan, options_file: str = "extra_llm_api_options.yaml") -> Emitted:
    """``trtllm-serve`` commands and their extra options YAML (TensorRT-LLM 1.2 names)."""
    s = _Shape.of(plan)
    adp = s.attn_dp > 1
    if adp and s.attn_dp != s.G:
        s.notes.append(
            f"TensorRT-LLM's attention is tensor-parallel over all {s.G} GPUs of a stage or data-parallel with one GPU "
            f"per group; the plan's {s.attn_dp} groups of {s.tp * s.sp} are emitted as {s.G} groups of one"
        )
    per_rank = _per_rank(s.batch, s.G) if adp else s.batch
    args = ["--tp_size", str(s.G), "--pp_size", str(s.pp)]
    if s.moe:
        args += ["--ep_size", str(s.ep)]
    if s.sp > 1:
        args += ["--cp_size", str(s.sp)]
        s.notes.append(f"sp={s.sp}: --cp_size {s.sp} needs a cp_config (cp_type) that supports this model in both phases")
    args += ["--gpus_per_node", str(s.per_node), "--max_batch_size", str(per_rank), "--max_seq_len", str(s.max_len)]
    if adp:
        s.notes.append(f"--max_batch_size is per attention-DP rank: the plan's batch of {s.batch} over {s.G} ranks")
    args += ["--extra_llm_api_options", options_file]
    if s.mem_fraction() is not None:
        s.notes.append(
            f"the plan's memory cap of {s.plan.problem.mem_cap_gib:g} GiB per GPU is not passed: TensorRT-LLM sizes its KV "
            "cache from --kv_cache_free_gpu_memory_fraction of the memory left after weights"
        )
    s.weights_note("trtllm", None)

    yaml: list[str] = [f"enable_attention_dp: {'true' if adp else 'false'}"]
    if s.moe:
        yaml += [f"moe_expert_parallel_size: {s.ep}", f"moe_tensor_parallel_size: {s.expert_tp}"]
    if s.pp > 1:
        yaml.append(f"pp_partition: [{', '.join(map(str, s.layers))}]")
    if s.kv_fp8:
        yaml += ["kv_cache_config:", "  dtype: fp8"]
    placement = s.placement()
    if placement is not None:
        from shardplan.solver.placement import trtllm_initial_assignments

        balancer = trtllm_initial_assignments(placement)
        yaml += ["moe_config:", "  load_balancer:", f"    num_slots: {balancer['num_slots']}", "    initial_global_assignments:"]
        yaml += [f"      {layer}: [{', '.join(map(str, row))}]" for layer, row in balancer["initial_global_assignments"].items()]
    if s.dp > 1:
        s.notes.append(f"{s.dp} replicas: {s.dp} separate trtllm-serve servers; put a load balancer in front of their ports")

    def base(u: int) -> list[str]:
        return ["trtllm-serve", s.model] + args + (["--port", str(8000 + u)] if s.dp > 1 else [])

    launches: list[Launch] = []
    for u, gpus in enumerate(s.units(1)):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        if len(nodes) == 1:
            node, local = nodes[0]
            launches.append(Launch(f"replica {u}: node {node}, GPUs {_span(local)}", tuple(base(u)), s.visible(local)))
        else:
            names = ", ".join(str(n) for n, _ in nodes)
            launches.append(Launch(
                f"replica {u}: nodes {names}, one MPI rank per GPU ({len(gpus)} ranks), e.g. "
                f"srun -N {len(nodes)} --ntasks-per-node={len(nodes[0][1])} --mpi=pmix trtllm-llmapi-launch <this command>",
                tuple(base(u)),
            ))
    notes = tuple(s.notes)
    return Emitted("trtllm", ENGINE_VERSIONS["trtllm"], s.summary("trtllm"), tuple(launches),
                   ((options_file, "\n".join(yaml)),), notes)


def _per_replica(
    s: _Shape,
    engine: str,
    base: Callable[[int], list[str]],
    multinode_args: Callable[[int, int, int, str], list[str]],
    env: list[tuple[str, str]],
) -> tuple[tuple[Launch, ...], tuple[str, ...]]:
    """One deployment per replica, one process per node it spans."""
    launches: list[Launch] = []
    heads: list[str] = []
    for u, gpus in enumerate(s.units(1)):
        nodes = s.nodes_of(gpus)
        s.check_even_nodes(u, nodes)
        head = _head(nodes[0][0])
        if len(nodes) > 1:
            heads.append(head)
        for k, (node, local) in enumerate(nodes):
            argv = base(u) + (multinode_args(u, k, len(nodes), head) if len(nodes) > 1 else [])
            label = f"replica {u}: node {node}, GPUs {_span(local)}" if len(nodes) == 1 else _node_label(u, node, k, nodes, "replica")
            launches.append(Launch(label, tuple(argv), tuple(env) + s.visible(local)))
    return tuple(launches), tuple(heads)


EMITTERS: dict[str, Callable[[Plan], Emitted]] = {"vllm": emit_vllm, "sglang": emit_sglang, "trtllm": emit_trtllm}


# --- shell text -----------------------------------------------------------------------------------


def _quote(token: str) -> str:
    """Shell-quote a token; a ``$VAR`` placeholder stays expandable."""
    if _VAR.match(token):
        return f'"{token}"'
    return shlex.quote(token)


def _split_head(argv: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The entry point (program, subcommand, model) and the options after it."""
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            return list(argv[:i]), list(argv[i:])
    return list(argv), []


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _head(node: int) -> str:
    """The placeholder for a node's address, expanded by the shell."""
    return f"$NODE{node}_IP"


def _node_label(unit: int, node: int, k: int, nodes: list, what: str = "deployment") -> str:
    return f"{what} {unit}: node {node} ({k + 1} of {len(nodes)}, GPUs {_span(nodes[k][1])})"


def _span(local: list[int]) -> str:
    return f"{local[0]}-{local[-1]}" if len(local) > 1 else str(local[0])
