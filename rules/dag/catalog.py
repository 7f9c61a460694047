"""Rules on the shape of an execution DAG (DESIGN.md "Execution DAG"; 001 §3, §5; 000 §4.3, §5.4, §7).

An execution DAG is a networkx ``DiGraph`` built from a plan (``solver/dag/__init__.py``) or read from a file.
Its graph attributes carry the plan's layout, so a file is validated on its own, with no plan at hand.
Each rule here is a small object like the plan rules (an ID, a kebab-case name that names the
violation, a statement, its source, a kind) whose ``check_dag(dag)`` returns diagnostics naming the
rule and the offending node ids. The rules read the schema below; they never import the solver and
never touch CP-SAT. ``DAG_RULES`` lists them all; IDs are never reused.

Schema (one line per attribute; "absent" means "does not apply"):
- node ``kind``: one of ``KINDS``; ``ranks``: global GPU ids; ``est_us``: the cost model's time of the
  node on one of its GPUs; below the Request: ``replica``; below a Replica: ``phase``; inside a stage:
  ``stage``; inside a layer: ``layer`` (and ``layer_kind``); sharded operators: ``tp``/``sp`` degrees
  (logical) or ``group``/``sp_rank``/``tp_rank`` (expanded) and ``rejoin``, the id of the collective
  that joins the shards; Expert nodes: ``ep_rank`` and ``experts`` (expert ids hosted).
- edge ``kind``: ``data`` (activations), ``pipeline`` (into or out of a stage-to-stage SendRecv) or
  ``sync`` (ordering without data: the previous token, KV cache writes, the pipeline round).
- graph: ``schema``, ``detail``, ``layout`` {dp, tp, sp, attn_dp, expert_tp, stages, batch},
  ``num_gpus``, ``num_layers``, ``moe_layers``, ``num_experts``, ``allow``, ``folded``.
"""


from __future__ import annotations

from shardplan.rules.dag.parallel import (
    CollectiveSpan,
    EpInsideMoe,
    EpNotInsideTp,
    EpPartitions,
    ExpertsRejoinAfterCompute,
    MoeDecomposed,
    NoTpInsideExpertNodes,
    SpInsideAttention,
    TpRejoins,
    TpWithinLayer,
)
from shardplan.rules.dag.step import (
    CriticalPath,
    KvRead,
    KvUpdate,
    NoHiddenCommunication,
    RanksInPlan,
    Schema,
    SingleTokenStep,
    TokenOrder,
)
from shardplan.rules.dag.structure import (
    Acyclic,
    CrossStage,
    DataParallelAtRoot,
    EndsPlaced,
    LayerOrder,
    ParallelStages,
    PhasesSeparate,
    PipelineEdges,
    ReplicasIndependent,
    SingleRoot,
    SplitAtRoot,
)
from shardplan.rules.dag.view import (  # re-exported: the schema's vocabulary
    COLLECTIVE,
    CONTROL,
    KINDS,
    SCHEMA,
    STATE,
    DagRule,
    DagView,
    NodeKind,
    graph_schema_problems,
    is_sharded,
    longest_path_us,
)

DAG_RULES: tuple[DagRule, ...] = (
    Acyclic(),
    SingleRoot(),
    SplitAtRoot(),
    DataParallelAtRoot(),
    ReplicasIndependent(),
    PhasesSeparate(),
    ParallelStages(),
    CrossStage(),
    LayerOrder(),
    TpRejoins(),
    TpWithinLayer(),
    EpInsideMoe(),
    EpNotInsideTp(),
    EpPartitions(),
    SpInsideAttention(),
    NoHiddenCommunication(),
    KvRead(),
    KvUpdate(),
    TokenOrder(),
    SingleTokenStep(),
    RanksInPlan(),
    Schema(),
    NoTpInsideExpertNodes(),
    EndsPlaced(),
    CollectiveSpan(),
    ExpertsRejoinAfterCompute(),
    MoeDecomposed(),
    PipelineEdges(),
    CriticalPath(),
)



__all__ = [
    "COLLECTIVE", "CONTROL", "DAG_RULES", "KINDS", "SCHEMA", "STATE", "DagRule", "DagView",
    "NodeKind", "graph_schema_problems", "is_sharded", "longest_path_us",
]
