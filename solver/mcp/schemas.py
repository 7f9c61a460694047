"""The tools' inputs as pydantic models: their JSON schemas are what ``tools/list`` shows an agent.

Fields mirror the CLI's options (``solver/cli/main.py``), with the CLI's names in snake_case and
its defaults. Values are only typed here; ranges (a negative ``isl``, an unknown GPU) are checked
by the same code the CLI runs (``build_problem``), so an agent gets the CLI's message for them.
Strict: ``"12"`` is not an integer and an unknown field is an error, never silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shardplan.solver.cli.inputs import DEFAULT_CLUSTER, DEFAULT_MODEL

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
PATH_NOTE = "a path inside the server's --root (relative paths are taken from it)"


class NoInput(BaseModel):
    """A tool without arguments."""

    model_config = _STRICT


class ProblemInput(BaseModel):
    """What plan, enumerate and evaluate share: the model, the cluster, the workload and the pins."""

    model_config = _STRICT

    model: str | None = Field(
        default=None,
        description=f"preset id or alias (see list_models), or a config.json as {PATH_NOTE}; "
                    f"default {DEFAULT_MODEL} unless config is given")
    config: dict[str, Any] | None = Field(
        default=None, description="a Hugging Face config.json object for a custom model, instead of model")
    cluster: str = Field(default=DEFAULT_CLUSTER, description="e.g. 8xH100, 4x8xH200, 72xGB200 (see list_hardware)")
    objective: Literal["latency", "throughput"] = "latency"
    isl: int = Field(default=1024, description="input tokens per request (>= 1)")
    osl: int = Field(default=256, description="output tokens per request (>= 1)")
    batch: int | None = Field(
        default=None, description="concurrent sequences per replica (default: 1 for latency, decided for throughput)")
    mem_cap_gib: float | None = Field(
        default=None, description="per-GPU memory cap in GiB (default: capacity x usable fraction)")
    ttft_ms: float | None = Field(default=None, description="limit on time to first token, ms")
    tpot_ms: float | None = Field(default=None, description="limit on time per output token, ms")
    weights_dtype: str | None = Field(
        default=None, description="bf16, fp16, fp8, fp4, mxfp4, int4 (default: the checkpoint's)")
    kv_dtype: str | None = Field(default=None, description="bf16, fp16 or fp8 (default: 16-bit)")
    profile: str | None = Field(default=None, description="calibration profile (see list_profiles; default: the GPU's)")
    allow: list[str] = Field(
        default_factory=list, description="default rules to turn off by switch, e.g. ['expert-tp'] (see explain_rule)")
    dp: int | None = Field(default=None, description="pin replicas")
    pp: int | None = Field(default=None, description="pin pipeline stages")
    tp: int | None = Field(default=None, description="pin tensor parallelism")
    sp: int | None = Field(default=None, description="pin sequence parallelism")
    ep: int | None = Field(default=None, description="pin expert parallelism (= GPUs per stage / expert_tp)")
    attn_dp: int | None = Field(default=None, description="pin attention groups per stage")
    expert_tp: int | None = Field(
        default=None, description="pin tensor parallelism inside experts (needs allow ['expert-tp'])")
    stages: str | None = Field(default=None, description="pin stage boundaries, e.g. '0:30,30:61'")
    load_profile: str | None = Field(
        default=None, description=f"tokens routed to each expert per MoE layer (.json or .csv), {PATH_NOTE}")
    zipf: float | None = Field(default=None, description="synthetic Zipf routing with this exponent (fixed seed)")
    redundant_slots: int = Field(
        default=0, description="expert slots per GPU beyond ceil(experts / ep), for copies of hot experts")


WORK_NOTE = ("units of search work (CP-SAT's deterministic time, branch-and-bound nodes, exact checks; about "
             "CPU seconds, but the same at any load), within the time limit too; default: none")


class PlanInput(ProblemInput):
    time_limit: float | None = Field(
        default=None, description="solver seconds (default and cap: the server's); the best plan found is "
                                  "returned with status 'feasible'")
    work_limit: float | None = Field(default=None, ge=0, allow_inf_nan=False, description=WORK_NOTE)
    dag_path: str | None = Field(
        default=None, description=f"write the execution DAG (.json, .graphml, .dot, .mmd), {PATH_NOTE}")
    detail: Literal["logical", "expanded"] = "logical"
    experts_out: str | None = Field(
        default=None, description=f"write the expert placement as JSON, {PATH_NOTE}")
    emit: Literal["vllm", "sglang", "trtllm"] | None = Field(
        default=None, description="add a ready-to-run launch command for this serving engine under 'launch'")
    include_dag: bool = Field(
        default=False, description="add the execution DAG (node-link JSON, as validate_dag takes it) under 'dag'")
    serving: Literal["colocated", "disagg", "auto"] = Field(
        default="colocated", description="one layout for both phases, a prefill pool and a decode pool chosen "
                                         "together, or both planned and the better returned (tokens/s per GPU); "
                                         "the DAG, launch and expert placement are the chosen plan's")
    rate: float | None = Field(
        default=None, description="requests/s to sustain: the plan on the fewest GPUs that serves it within the "
                                  "limits (any serving mode)")
    limits_at: Literal["prediction", "median-error"] = Field(
        default="prediction", description="hold ttft_ms/tpot_ms at the cost model's predictions, or tighter, so that "
                                          "the plan meets them off as its engine's median measured run at its load "
                                          "('limits_at' in the result says which were held)")


class EnumerateInput(ProblemInput):
    limit: int = Field(description="stop after this many layouts (1 to the server's cap)")
    time_limit: float = Field(description="seconds for the whole enumeration (at most the server's cap)")
    work_limit: float | None = Field(default=None, ge=0, allow_inf_nan=False, description=WORK_NOTE)
    serving: Literal["colocated", "disagg", "auto"] = Field(
        default="colocated", description="colocated layouts, or disaggregated deployments (the frontier of "
                                         "tokens/s per GPU against tokens/s per user), or auto: both on that "
                                         "frontier, colocated at the throughput objective, each plan with its "
                                         "'serving' mode")


class EvaluateInput(ProblemInput):
    experts_out: str | None = Field(
        default=None, description=f"write the expert placement as JSON, {PATH_NOTE}")
    serving: Literal["colocated", "disagg"] = Field(
        default="colocated", description="one layout (the pins), or a prefill pool and a decode pool (prefill, "
                                         "decode; batch = requests in flight over both)")
    prefill: str | None = Field(
        default=None, description="with serving 'disagg': the prefill pool, e.g. 'workers=3,tp=4' (keys: the pins' "
                                  "names, workers, batch)")
    decode: str | None = Field(
        default=None, description="with serving 'disagg': the decode pool, e.g. 'workers=1,attn_dp=8,ep=8'")


class DagInput(BaseModel):
    """A DAG given inline or as a file: exactly one of the two."""

    model_config = _STRICT

    dag: dict[str, Any] | None = Field(
        default=None, description="an execution DAG in node-link JSON (see the shardplan://dag-schema resource)")
    path: str | None = Field(default=None, description=f"a DAG .json file, {PATH_NOTE}")


class FixDagInput(DagInput):
    out: str | None = Field(
        default=None, description=f"write the repaired DAG (.json, .graphml, .dot, .mmd), {PATH_NOTE}; "
                                  "without it the repaired DAG comes back under 'dag'")


class RuleInput(BaseModel):
    model_config = _STRICT

    rule_id: str = Field(description="a rule ID or name, e.g. TP-001 or tp-crosses-domain")
