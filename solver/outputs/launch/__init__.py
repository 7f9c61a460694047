"""Launch commands for serving engines: a plan's degrees in each engine's own option names.

One module and one pure function per engine (``vllm.emit_vllm``, ``sglang.emit_sglang``,
``trtllm.emit_trtllm``; what they share is in ``common.py``) turns a ``Plan`` into an ``Emitted``: the
processes to start (one per deployment and node), files they read, and notes on what the engine cannot
express. Nothing is dropped silently: a degree or a placement an engine has no option
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

from collections.abc import Callable

from shardplan.models.errors import SpecError
from shardplan.rules.plan import Plan
from shardplan.solver.outputs.launch.common import ENGINE_VERSIONS, Emitted, Launch
from shardplan.solver.outputs.launch.sglang import emit_sglang
from shardplan.solver.outputs.launch.trtllm import emit_trtllm
from shardplan.solver.outputs.launch.vllm import emit_vllm

EMITTERS: dict[str, Callable[[Plan], Emitted]] = {"vllm": emit_vllm, "sglang": emit_sglang, "trtllm": emit_trtllm}

__all__ = ["EMITTERS", "ENGINE_VERSIONS", "Emitted", "Launch", "emit", "emit_sglang", "emit_trtllm", "emit_vllm"]


def emit(plan: Plan, engine: str) -> Emitted:
    """The launch commands of ``plan`` for ``engine`` (vllm, sglang or trtllm)."""
    try:
        return EMITTERS[engine](plan)
    except KeyError:
        raise SpecError("emit", f"unknown engine {engine!r}; one of {', '.join(EMITTERS)}") from None
