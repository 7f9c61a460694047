"""The names of a forward step's operators and phases: one vocabulary for the cost model, the DAG and its rules.

The cost model (``solver/cost/operators.py``) keys each operator's time by an ``Op``; the DAG builder
(``solver/dag/build.py``) writes it as a node's ``op``, a shard's ``rejoin_op`` and the keys of the
graph's ``op_us`` table; the DAG rules and the fixer (``rules/dag/``) read it back. Every name is a
``str`` enum member whose ``str()`` and ``format()`` are its value, so what reaches a file (plan JSON,
DAG JSON, GraphML, DOT, Mermaid) is the plain string below, and a string read back from a file
compares and hashes equal to its member. No solver imports here, and no CP-SAT.
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A ``str`` enum that prints as its value, as Python 3.11's ``enum.StrEnum`` (3.10 has none).

    Without this a ``(str, Enum)`` member formats as ``Op.FFN`` on 3.11 and later, which would change
    every message and label that quotes it.
    """

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


class Phase(StrEnum):
    """The two phases of serving a request (000 §1): a DAG's two branches per replica."""

    PREFILL = "prefill"
    DECODE = "decode"


class Op(StrEnum):
    """An operator of one layer or of the model's ends, as the cost model prices it (004 §3-§5)."""

    # attention, per layer
    ATTN_PROJ = "attn.proj"  # QKV and output projections
    ATTN_CORE = "attn.core"  # scores against the KV cache
    ATTN_SP = "attn.sp"  # sequence-parallel exchange: K/V gather (prefill), partial-output reduce (decode)
    ATTN_ALLREDUCE = "attn.allreduce"  # rejoins the tp x sp shards
    # dense FFN, per layer
    FFN = "ffn"
    FFN_ALLREDUCE = "ffn.allreduce"
    # MoE, per layer
    MOE_ROUTER = "moe.router"
    MOE_SHARED = "moe.shared"  # the shared expert(s)
    MOE_EXPERTS = "moe.experts"  # routed experts on the most-loaded GPU
    MOE_DISPATCH = "moe.dispatch"
    MOE_COMBINE = "moe.combine"
    MOE_EXPERT_ALLREDUCE = "moe.expert_allreduce"  # sums tensor-parallel expert shards
    LAYER_OVERHEAD = "overhead"  # a layer's norms and kernel launches
    # the model's ends and the step
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    LM_HEAD_GATHER = "lm_head.gather"
    STEP_OVERHEAD = "step.overhead"  # the step's sampling and scheduling
    SEND_RECV = "send_recv"  # activations from one pipeline stage to the next


# An Attention node runs the projections and the core as one node: its ``op`` names both.
ATTENTION_OPS = f"{Op.ATTN_PROJ}+{Op.ATTN_CORE}"

__all__ = ["ATTENTION_OPS", "Op", "Phase", "StrEnum"]
