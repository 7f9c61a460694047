"""What the user asks for: model, cluster, workload, objective, policy and pins.

This is the vocabulary the rules judge plans against. It lives in ``rules`` (not ``solver``)
because rules may not import the solver; the solver takes a ready ``Problem`` and never parses
files or converts units.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from shardplan.hardware import ClusterSpec
from shardplan.hardware.compose import ANY_GPU
from shardplan.hardware.measured_error import EngineError, Serving, measured_errors
from shardplan.hardware.profile import DEFAULT_ENGINE, Engine, Profile, get_profile, list_profiles, profile_for_gpu
from shardplan.models import ModelSpec
from shardplan.models.errors import SpecError
from shardplan.models.frozen import HashOnce
from shardplan.models.load_profile import ExpertLoadProfile

_STRICT = ConfigDict(extra="forbid", frozen=True)


class Objective(str, Enum):
    LATENCY = "latency"  # TTFT + OSL x TPOT of one request at the given batch
    THROUGHPUT = "throughput"  # output tokens/s of the whole cluster under the memory cap


class Workload(BaseModel):
    """Request shape and service-level limits."""

    model_config = _STRICT

    isl: PositiveInt = Field(default=1024, description="input (prompt) tokens per request")
    osl: PositiveInt = Field(default=256, description="output tokens per request")
    batch: PositiveInt | None = Field(
        default=None,
        description="concurrent sequences per replica; None: 1 for latency, a decision for throughput",
    )
    ttft_ms: PositiveFloat | None = Field(default=None, description="limit on time to first token")
    tpot_ms: PositiveFloat | None = Field(default=None, description="limit on time per output token")

    @property
    def context(self) -> int:
        """Tokens a sequence holds at the end of generation."""
        return self.isl + self.osl


class GivenLimits(BaseModel):
    """The workload's TTFT and TPOT limits as the user gave them, where the planner held tighter ones so that the
    plan meets these were its predictions off as its engine's median measured run at its load (``solve
    --limits-at median-error``, ``solver/limits_at.py``). The problem's workload then carries the limits held."""

    model_config = _STRICT

    ttft_ms: PositiveFloat | None = Field(description="limit on time to first token, as given")
    tpot_ms: PositiveFloat | None = Field(description="limit on time per output token, as given")
    rounds: NonNegativeInt = Field(default=0, description="times the limits held were tightened")
    stopped: str | None = Field(default=None, description="why the rounds ended before the plan met the limits "
                                                          "given (the time or work limit); None: they did not")
    batch_cap: PositiveInt | None = Field(
        default=None, description="the engine's batch per attention group capped at the upper end of a band of the "
                                  "measured runs, whose error held the limits; None: the rounds' plan")


class Pins(BaseModel):
    """Degrees or stage boundaries the user fixed; None leaves them to the solver."""

    model_config = _STRICT

    dp: PositiveInt | None = None
    pp: PositiveInt | None = None
    tp: PositiveInt | None = None
    sp: PositiveInt | None = None
    ep: PositiveInt | None = None
    attn_dp: PositiveInt | None = Field(default=None, description="attention groups per stage")
    expert_tp: PositiveInt | None = None
    stages: tuple[tuple[int, int], ...] | None = Field(
        default=None, description="[start, end) layer range of each stage"
    )

    @model_validator(mode="after")
    def _stages_match_pp(self) -> Pins:
        if self.stages is not None and self.pp is not None and len(self.stages) != self.pp:
            raise SpecError("stages", f"{len(self.stages)} ranges given for pp={self.pp}")
        return self


# --max-batch at most: beyond any engine's scheduler limit, and the exact batch search scans every value.
MAX_BATCH = 16384


class Problem(HashOnce):
    """One planning question. Units are already resolved: GiB, milliseconds, tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload = Workload()
    objective: Objective = Objective.LATENCY
    mem_cap_gib: PositiveFloat | None = Field(
        default=None, description="per-GPU memory cap; None: capacity x the profile's usable fraction"
    )
    allow: frozenset[str] = Field(default=frozenset(), description="policy switches that turn default rules off")
    pins: Pins = Pins()
    engine: Engine = Field(
        default=DEFAULT_ENGINE, description="serving engine the plan is priced for and launched with"
    )
    profile: str | Profile | None = Field(
        default=None,
        description="calibration profile: a name, or one read from a file; None: the default of the GPU and engine",
    )
    expert_load: ExpertLoadProfile | None = Field(
        default=None, description="tokens routed to each expert of each MoE layer; None: uniform routing"
    )
    redundant_slots: NonNegativeInt = Field(
        default=0, description="expert slots per GPU beyond ceil(experts / ep), for copies of hot experts"
    )
    max_batch: PositiveInt | None = Field(
        default=None,
        le=MAX_BATCH,
        description="the engine's limit on sequences one attention group runs at once (vLLM --max-num-seqs); "
        "None: the profile's",
    )
    limits_given: GivenLimits | None = Field(
        default=None,
        description="the user's limits where the workload holds tighter ones (--limits-at median-error); None: "
        "the workload's limits are the user's",
    )

    @model_validator(mode="after")
    def _engine_runs_on_the_gpu(self) -> Problem:
        # TensorRT-LLM is built on CUDA (its install guide lists NVIDIA GPUs only); vLLM and SGLang also run on ROCm.
        gpu = self.cluster.gpu
        if self.engine == "trtllm" and gpu.vendor != "nvidia":
            raise SpecError("engine", f"TensorRT-LLM runs on NVIDIA GPUs only; {gpu.name} is an AMD GPU "
                            "(vLLM and SGLang run on it)")
        return self

    @model_validator(mode="after")
    def _fits_model(self) -> Problem:
        if self.workload.context > self.model.max_position_embeddings:
            raise SpecError(
                "isl",
                f"isl + osl = {self.workload.context} exceeds the model's "
                f"{self.model.max_position_embeddings}-token context",
            )
        moe = self.model.moe
        if moe is None and (self.expert_load is not None or self.redundant_slots or (self.pins.expert_tp or 1) > 1):
            # expert-tp too: a dense plan printed "expert_tp": 2, a degree nothing in it has (exit 0)
            field = ("load-profile" if self.expert_load is not None else
                     "redundant-slots" if self.redundant_slots else "expert-tp")
            raise SpecError(field, f"{self.model.name} has no MoE layers")
        if self.expert_load is not None and moe is not None:  # without moe, a profile was refused above
            load = self.expert_load
            if load.num_experts != moe.num_experts:
                raise SpecError(
                    "load-profile", f"{load.num_experts} experts per layer; the model has {moe.num_experts}"
                )
            if load.layers != moe.layers:
                missing = sorted(set(moe.layers) - set(load.layers))
                what = f"missing layer {missing[0]}" if missing else "layers that are not MoE layers of the model"
                ours = f"{moe.layers[0]}..{moe.layers[-1]}"
                raise SpecError("load-profile", f"{what} (the model's MoE layers are {ours})")
        return self

    def allows(self, switch: str) -> bool:
        return switch in self.allow


def resolve_profile(problem: Problem, profile: Profile | None = None) -> Profile:
    """The profile to price with: an explicit one (the fitter passes candidates), else the
    problem's own (named, or read from a file), else the default of the GPU and the engine."""
    if profile is not None:
        return profile
    if isinstance(problem.profile, Profile):
        return problem.profile
    if problem.profile:
        return get_profile(problem.profile)
    return engine_default_profile(problem)


def engine_default_profile(problem: Problem) -> Profile:
    """The profile the problem's engine prices its GPU with when no profile is named: the engine's own for the
    GPU (or the GPU whose profiles it borrows), composed where there is none."""
    gpu = problem.cluster.gpu
    return profile_for_gpu(gpu.profiles_from or gpu.name, problem.engine)


def engine_errors(problem: Problem, serving: Serving) -> EngineError | None:
    """The measured error of the problem's engine in ``serving`` mode (``hardware/measured_error.py``); None where
    those figures do not describe its plans: it is priced with a profile other than the engine's default (one
    named, or read from a file), or the engine has no measured run in this mode."""
    # a profile named (or read) may be the engine's default itself, whose figures these are
    if problem.profile is not None and resolve_profile(problem).name != engine_default_profile(problem).name:
        return None
    return measured_errors().of(problem.engine, serving)


def given_limits(problem: Problem) -> dict[str, float | None]:
    """The TTFT and TPOT limits the user gave (``ttft_ms``, ``tpot_ms``): the workload's, unless it holds tighter
    ones for them (``Problem.limits_given``)."""
    given = problem.limits_given or problem.workload
    return {"ttft_ms": given.ttft_ms, "tpot_ms": given.tpot_ms}


def held_for_given(problem: Problem, key: str) -> str:
    """What an SLA rule's message adds where the workload's limit ``key`` (``ttft_ms``, ``tpot_ms``) was held below
    the one the user gave (``--limits-at median-error``), so that a conflict names the limit the user knows."""
    given = given_limits(problem)[key]
    held = getattr(problem.workload, key)
    if given is None or held == given:
        return ""
    return f" (held below the {given:g} ms given, at the engine's median measured error)"


def measured_error(problem: Problem, serving: Serving, in_flight: int, ttft_ms: float,
                   tpot_ms: float) -> dict[str, Any] | None:
    """How far the engine's predictions fell from its measured runs under load in ``serving`` mode
    (``hardware/measured_error.py``), as a plan's JSON carries it (``measured_error``): the runs, their GPUs,
    whether this cluster's GPU is among them (``gpu_measured``), the median |error| and median error of TTFT
    and TPOT, and the same over the runs at the plan's load (``band``: the band of ``in_flight`` requests, over
    one replica colocated or the whole deployment disaggregated, as the runs count them; None where no run was
    measured at such a load). ``at_median_error``: the plan's predicted ``ttft_ms`` and ``tpot_ms`` were they off
    as the median run (the band's, else the whole's): predicted / (1 + median error); ``over_limit``: the
    limits the user gave (``given_limits``) they would break. None where the figures do not describe the plan
    (``engine_errors``)."""
    found = engine_errors(problem, serving)
    if found is None:
        return None
    gpu, band = problem.cluster.gpu, found.band_of(in_flight)
    basis = found if band is None else band
    at_median = {"ttft_ms": round(ttft_ms / (1 + basis.ttft.median), 3),
                 "tpot_ms": round(tpot_ms / (1 + basis.tpot.median), 3)}
    limits = given_limits(problem)
    return {"serving": serving, "engine": problem.engine, "runs": found.runs, "gpus": list(found.gpus),
            "gpu_measured": gpu.name in found.gpus,  # an H800 priced with H100's profiles was not measured
            "ttft": found.ttft.model_dump(), "tpot": found.tpot.model_dump(), "in_flight": in_flight,
            "band": None if band is None else band.model_dump(), "at_median_error": at_median,
            "over_limit": [k for k, limit in limits.items() if limit is not None and at_median[k] > limit]}


# An engine profile whose weight stream is below this share of its GPU's table-fitted one was set by runs that do
# not price a dense model's weight stream: h200-sxm-vllm's 0.475 of HBM peak against h200-sxm's 0.773, fitted on
# vLLM's MoE runs on H200 (Kimi-K2, Qwen3-235B) and on Llama-3.1-8B runs that come out twice too slow at any stream
# (benchmarks/accuracy/README.md, "One weight stream per GPU"). Every other engine profile is at 1.1-1.5x its GPU's.
STREAM_SHARE_NOTED = 0.75


def profile_notes(problem: Problem) -> list[str]:
    """What a plan's reader is told of the profile that priced it (the JSON's ``notes``, a note on stderr): that
    it was fitted on another GPU than the cluster's, or that its weight stream is one a dense model's decode is
    likely priced slow at (``STREAM_SHARE_NOTED``). Accepted, not refused: users calibrate on one GPU and price
    a lookalike with it (an H800 or H20 with an H100's profile), and the cost model applies the profile's
    efficiencies and overheads to the cluster GPU's own peaks, bandwidths and memory. Only --profile names such
    a profile, or a preset priced with the profiles of a GPU of the same die (``GPUSpec.profiles_from``: H800-SXM
    with H100-SXM's); otherwise the default is the GPU's own, or the generic one (fitted for any GPU,
    ``ANY_GPU``), bare or composed."""
    profile, gpu = resolve_profile(problem), problem.cluster.gpu.name
    notes = [] if problem.model.is_moe else _slow_stream_notes(profile)
    if profile.gpu in (ANY_GPU, gpu):
        return notes
    return [f"profile {profile.name} was fitted on {profile.gpu}, not on this cluster's {gpu}: its efficiencies "
            f"and overheads are applied to {gpu}'s peak rates, bandwidths and memory", *notes]


def problem_notes(problem: Problem) -> list[str]:
    """Every note a plan's reader gets of how it was priced: the memory cap's (``cap_notes``), then the profile's
    (``profile_notes``)."""
    return [*cap_notes(problem), *profile_notes(problem)]


def cap_notes(problem: Problem) -> list[str]:
    """The note for a cap above the GPU's memory, which ``memory_limit_gib`` lowers to the GPU's capacity. Accepted,
    not refused (README: a cap only lowers the limit): one cap is given to clusters of several GPU types (the
    promises sweep puts 100 GiB on H100, H200 and B200 alike). Said, because the plan is held to less than asked."""
    cap, gpu = problem.mem_cap_gib, problem.cluster.gpu
    if cap is None or cap <= gpu.hbm_gib:
        return []
    return [f"mem-cap-gib {cap:g} GiB is above the {gpu.hbm_gib:g} GiB of HBM of each {gpu.name}: the limit is the "
            f"GPU's {gpu.hbm_gib:g} GiB (a cap only lowers it)"]


def _slow_stream_notes(profile: Profile) -> list[str]:
    """The note for an engine profile whose weight stream is far below its GPU's table-fitted one, else none."""
    tables = [p for p in list_profiles() if p.default and p.gpu == profile.gpu]
    if profile.engine is None or profile.default or not tables:
        return []
    table = tables[0]
    if profile.hbm_efficiency >= STREAM_SHARE_NOTED * table.hbm_efficiency:
        return []
    return [f"profile {profile.name} streams weights at {profile.hbm_efficiency:.3g} of HBM peak, below the "
            f"{table.hbm_efficiency:.3g} of {table.name} (fitted on {profile.gpu}'s table rows), set by its engine's "
            f"runs on this GPU rather than by a dense weight stream: a dense model's decode is likely priced slow; "
            f"compare another engine (--engine) on the same layout"]


def memory_limit_gib(problem: Problem, profile: Profile) -> float:
    """Per-GPU memory a plan may use: the user's cap, else capacity x the usable fraction.

    The one definition: the cost model reports it (``MemoryReport.limit_gib``), the solver's tables
    bound stage memory by it, and MEM-001 quotes it. A cap only lowers the limit: one above the GPU's
    memory (``--mem-cap-gib 200`` on an 80 GB H100) leaves the GPU's capacity as the limit, since no
    engine setting makes more memory than the GPU has.
    """
    if problem.mem_cap_gib is not None:
        return min(problem.mem_cap_gib, problem.cluster.gpu.hbm_gib)
    return problem.cluster.gpu.hbm_gib * profile.usable_memory_fraction
