"""Launch commands for a disaggregated plan: each pool's workers in its engine's own disaggregated form,
and what joins them (issue 15).

Each pool is launched by the engine's colocated emitter on the pool's own plan (``workers`` replicas of
its worker layout, at the batch the pool was priced at), placed on the pool's GPUs, and then given the
engine's role options and its own ports:

- vLLM 0.33.0: every instance gets ``--kv-transfer-config`` with the NIXL connector (``NixlConnector``,
  role ``kv_both``: the decode instance pulls the cache the prefill instance holds; vLLM's
  docs/features/nixl_connector_usage.md). ``vllm serve`` has no router of its own: a NOTE names what must
  stand in front (a proxy that sends each request to a prefill instance for one token, then to a decode
  instance).
- SGLang 0.5.23: ``--disaggregation-mode prefill|decode`` with ``--disaggregation-transfer-backend``, each
  prefill server its ``--disaggregation-bootstrap-port``, and the router
  ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL``.
- TensorRT-LLM 1.2: context and generation ``trtllm-serve`` servers whose extra options files add
  ``cache_transceiver_config`` (and ``disable_overlap_scheduler`` on the context side), and
  ``trtllm-serve disaggregated --config_file`` over a file naming the servers (``context_servers``,
  ``generation_servers``: ``num_instances``, ``urls``; examples/disaggregated/README.md of TensorRT-LLM).

Every value reaching a shell line goes through the same quoting as the colocated commands (``Launch.shell``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from shardplan.hardware import ClusterSpec
from shardplan.models.errors import SpecError
from shardplan.models.files import json_text
from shardplan.rules.disagg import Pool
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.plan import Plan
from shardplan.solver.outputs.launch import emit
from shardplan.solver.outputs.launch.common import ENGINE_VERSIONS, Emitted, Launch, head_address
from shardplan.solver.outputs.launch.sglang import emit_sglang
from shardplan.solver.outputs.launch.trtllm import emit_trtllm
from shardplan.solver.outputs.launch.vllm import emit_vllm

# First port of each role's servers, per engine (the router or proxy listens on the engine's usual port).
PORTS = {"vllm": (8100, 8200), "sglang": (30000, 31000), "trtllm": (8001, 8101)}
ROUTER_PORT = {"vllm": 8000, "sglang": 8000, "trtllm": 8000}
SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's default bootstrap port; one per prefill server from there
_UNIT = re.compile(r"^(?:replica|deployment) (\d+)")
# SGLang and trtllm-serve listen on localhost by default; the router may run on another node.
LISTEN_ALL = ["--host", "0.0.0.0"]
VLLM_KV_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def _unit(label: str) -> int:
    match = _UNIT.match(label)
    return int(match[1]) if match else 0


def with_port(launch: Launch, port: int, extra: list[str], role: str) -> Launch:
    """The launch with its ``--port`` set (added if absent), ``extra`` options and the pool in its label."""
    argv = list(launch.argv)
    if "--port" in argv:
        argv[argv.index("--port") + 1] = str(port)
    else:
        argv += ["--port", str(port)]
    return Launch(f"{role} {launch.label}", tuple(argv + extra), launch.env)


def endpoints(pool: Pool, cluster: ClusterSpec, port0: int) -> list[tuple[str, int]]:
    """(host, port) of each worker's server: ``localhost`` on a one-node cluster, else the placeholder of
    the address of the worker's first node (``$NODEk_IP``)."""
    hosts = [head_address(cluster.node_of(pool.worker_gpus(u).start)) if cluster.num_nodes > 1 else "localhost"
             for u in range(pool.workers)]
    return [(host, port0 + u) for u, host in enumerate(hosts)]


def _pool_launches(em: Emitted, role: str, port0: int, extra: Callable[[int], list[str]]) -> list[Launch]:
    return [with_port(one, port0 + _unit(one.label), extra(_unit(one.label)), role) for one in em.launches]


def _summary(engine: str, plan: DisaggPlan) -> str:
    lay = plan.layout
    return (f"{ENGINE_VERSIONS[engine]} disaggregated launch for {plan.problem.model.name}: "
            f"{lay.prefill.workers} prefill worker(s) on GPUs {lay.prefill.gpus.start}-{lay.prefill.gpus.stop - 1}, "
            f"{lay.decode.workers} decode worker(s) on GPUs {lay.decode.gpus.start}-{lay.decode.gpus.stop - 1}, "
            f"{lay.concurrency} requests in flight")


def _common_notes(plan: DisaggPlan) -> list[str]:
    kv = plan.prediction.kv
    notes = [f"the plan priced each prompt's KV cache ({kv.bytes_per_prompt / 1e6:.0f} MB) over {kv.tier}; "
             "the engine's transfer library picks the transport (NVLink, RDMA) itself"]
    wl = plan.problem.workload
    if plan.prediction.bottleneck == "concurrency" and (wl.ttft_ms is not None or wl.tpot_ms is not None):
        # A deployment held below its pools' full rate keeps its limits only at the requests in flight priced
        # (``solver.disagg.deploy.Pools.served``): more would queue at the prefill pool and batch larger.
        notes.append(f"the limits hold at up to {plan.layout.concurrency} requests in flight "
                     f"({plan.prediction.throughput_rps:.2f} requests/s), below the pools' full rate: cap the "
                     "requests admitted at the gateway or client")
    return notes


def _merge(engine: str, plan: DisaggPlan, parts: list[Emitted], launches: list[Launch], notes: list[str],
           files: list[tuple[str, str]]) -> Emitted:
    heads = sorted({h for em in parts for h in em.heads} | {tok.strip('"').split("//")[-1].split(":")[0]
                   for one in launches for tok in one.argv if "$NODE" in tok})
    # A pool's "put a load balancer in front of its replicas" is what the router or proxy below does.
    all_notes = [f"{pool.role}: {n}" for pool, em in zip(plan.layout.pools, parts, strict=True) for n in em.notes
                 if not n.startswith(f"{pool.workers} replicas:")]
    all_files = [f for em in parts for f in em.files] + files
    return Emitted(engine, ENGINE_VERSIONS[engine], _summary(engine, plan), tuple(launches),
                   tuple(all_files), tuple(_common_notes(plan) + notes + all_notes), tuple(heads))


def emit_vllm_disagg(plan: DisaggPlan) -> Emitted:
    kv_config = ["--kv-transfer-config", json_text(VLLM_KV_CONFIG, separators=(",", ":"))]
    parts, launches = [], []
    for pool, pool_plan, port0 in zip(plan.layout.pools, _plans(plan), PORTS["vllm"], strict=True):
        em = emit_vllm(pool_plan, pool.first_gpu)
        parts.append(em)
        launches += _pool_launches(em, pool.role, port0, lambda u: kv_config)
    notes = [
        "vllm serve has no prefill/decode router: put a disaggregation proxy on port "
        f"{ROUTER_PORT['vllm']} that sends each request to a prefill instance (ports {PORTS['vllm'][0]}+) "
        f"for its first token, then to a decode instance (ports {PORTS['vllm'][1]}+), e.g. the proxy of vLLM's "
        "examples/disaggregated or llm-d's",
    ]
    return _merge("vllm", plan, parts, launches, notes, [])


def emit_sglang_disagg(plan: DisaggPlan, backend: str = "mooncake") -> Emitted:
    parts, launches = [], []
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for pool, pool_plan, port0 in zip(plan.layout.pools, _plans(plan), PORTS["sglang"], strict=True):
        em = emit_sglang(pool_plan, first_gpu=pool.first_gpu)
        parts.append(em)
        role_args = ["--disaggregation-mode", pool.role, "--disaggregation-transfer-backend", backend]

        def extra(u: int, role: str = pool.role, base: list[str] = role_args) -> list[str]:
            bootstrap = ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT + u)] if role == "prefill" else []
            return LISTEN_ALL + base + bootstrap

        launches += _pool_launches(em, pool.role, port0, extra)
        for u, (head, port) in enumerate(endpoints(pool, plan.problem.cluster, port0)):
            router += [f"--{pool.role}", f"http://{head}:{port}"]
            if pool.role == "prefill":
                router.append(str(SGLANG_BOOTSTRAP_PORT + u))
    router += ["--host", "0.0.0.0", "--port", str(ROUTER_PORT["sglang"])]
    launches.append(Launch("router: on any node that reaches every server", tuple(router)))
    notes = [f"KV transfer backend: {backend} (--disaggregation-transfer-backend; nixl also works)"]
    return _merge("sglang", plan, parts, launches, notes, [])


def emit_trtllm_disagg(plan: DisaggPlan) -> Emitted:
    parts, launches, files = [], [], []
    isl = plan.problem.workload.isl
    servers: dict[str, list[str]] = {}
    for pool, pool_plan, port0 in zip(plan.layout.pools, _plans(plan), PORTS["trtllm"], strict=True):
        name = f"{pool.role}_extra_llm_api_options.yaml"
        em = emit_trtllm(pool_plan, options_file=name, first_gpu=pool.first_gpu)
        (_, yaml), = em.files
        extra_yaml = ["disable_overlap_scheduler: true"] if pool.role == "prefill" else []
        extra_yaml += ["cache_transceiver_config:", "  backend: DEFAULT", f"  max_tokens_in_buffer: {isl}"]
        em = Emitted(em.engine, em.version, em.summary, em.launches, ((name, yaml + "\n" + "\n".join(extra_yaml)),),
                     em.notes, em.heads)
        parts.append(em)
        launches += _pool_launches(em, pool.role, port0, lambda u: LISTEN_ALL)
        hosts = endpoints(pool, plan.problem.cluster, port0)
        servers[pool.role] = [f"{head.lstrip('$')}:{port}" for head, port in hosts]
    config = ["hostname: 0.0.0.0", f"port: {ROUTER_PORT['trtllm']}", "backend: pytorch"]
    for key, role in (("context_servers", "prefill"), ("generation_servers", "decode")):
        config += [f"{key}:", f"  num_instances: {len(servers[role])}", "  urls:"]
        config += [f'    - "{url}"' for url in servers[role]]
    files.append(("disagg_config.yaml", "\n".join(config)))
    launches.append(Launch("disaggregated server: on any node that reaches every server",
                           ("trtllm-serve", "disaggregated", "--config_file", "disagg_config.yaml")))
    notes = ["the plan's KV transfer buffer is one prompt (cache_transceiver_config.max_tokens_in_buffer = ISL)"]
    if plan.problem.cluster.num_nodes > 1:
        notes.append("disagg_config.yaml names servers as NODEk_IP:port: write each node's address there")
    return _merge("trtllm", plan, parts, launches, notes, files)


def _plans(plan: DisaggPlan) -> tuple[Plan, Plan]:
    return plan.prefill_plan, plan.decode_plan


DISAGG_EMITTERS: dict[str, Callable[[DisaggPlan], Emitted]] = {
    "vllm": emit_vllm_disagg, "sglang": emit_sglang_disagg, "trtllm": emit_trtllm_disagg,
}


def emit_disagg(plan: DisaggPlan, engine: str) -> Emitted:
    """The launch commands of a disaggregated ``plan`` for ``engine`` (vllm, sglang or trtllm)."""
    try:
        return DISAGG_EMITTERS[engine](plan)
    except KeyError:
        raise SpecError("emit", f"unknown engine {engine!r}; one of {', '.join(DISAGG_EMITTERS)}") from None


def emit_either(plan: Plan | DisaggPlan, engine: str) -> Emitted:
    """The launch commands of a plan of either serving mode: disaggregated, or one colocated layout."""
    return emit_disagg(plan, engine) if isinstance(plan, DisaggPlan) else emit(plan, engine)


__all__ = ["DISAGG_EMITTERS", "emit_disagg", "emit_either", "emit_sglang_disagg", "emit_trtllm_disagg",
           "emit_vllm_disagg"]
