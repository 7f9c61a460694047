"""Calibration profiles: the empirical factors of the cost model, per GPU type and software.

Every efficiency and overhead the cost model uses is a named field here, stored as data in
``profiles/*.json`` and fitted to measured points (``shardplan calibrate``). Nothing in this module
computes a time; it only holds and finds the numbers.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError

from shardplan.hardware.compose import ANY_GPU, SEPARATOR, compose
from shardplan.hardware.gpu import get_gpu, list_gpus
from shardplan.models.errors import SpecError, printable, quoted
from shardplan.models.files import parse_json, read_text
from shardplan.models.frozen import HashOnce

PROFILE_DIR = Path(__file__).parent / "profiles"

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[str, ...] = get_args(Engine)
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}  # as each project writes its name
# The engine a plan is priced for and launched with when the user names none: vLLM, the serving
# engine most deployments run (the most represented engine of the serving runs in
# shared/calibration/serving_points.csv too: about 3,000 of its 8,270 rows against ~2,800 SGLang and
# ~2,400 TensorRT-LLM).
DEFAULT_ENGINE: Engine = "vllm"
MAX_PROFILE_BYTES = 1 << 20  # a profile file is a few hundred bytes; anything near this is not one


class Profile(HashOnce):
    """Achieved fractions of peak and fixed overheads for one GPU type and serving software."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # a fitted factor is finite

    name: str = Field(description="profile id, e.g. 'h100-sxm'")
    gpu: str = Field(description="GPU preset name the profile was fitted for ('*': any)")
    software: str = Field(description="serving software generation the measurements came from")
    engine: Engine | None = Field(
        default=None,
        description="the serving engine the profile models (None: the source does not name one, e.g. Splitwise)",
    )
    default: bool = Field(
        default=True,
        description="the GPU's default (hardware) profile; False for profiles of older serving software, kept "
        "to replay the measurements they were fitted on (choose them by name)",
    )
    engine_default: bool = Field(
        default=False,
        description="the profile plans for its engine on its GPU are priced with (fitted to that engine's runs "
        "under load); where no profile is, one composed of the GPU's hardware fields and the engine's behaviour "
        "prices them (hardware/compose.py)",
    )
    # Compute: a GEMM over M tokens achieves gemm_efficiency * M / (M + gemm_half_tokens) of peak,
    # so its time is affine in M (empirical: fits the GEMM points of op_points.csv).
    gemm_efficiency: PositiveFloat = Field(le=1, description="fraction of dense peak at large M (empirical)")
    gemm_half_tokens: NonNegativeFloat = Field(description="tokens per GEMM at half that efficiency (empirical)")
    low_precision_gemm_ratio: PositiveFloat = Field(
        default=1.0,
        le=1,
        description="FP8/FP4 GEMMs on tensor cores of that class reach this share of gemm_efficiency "
        "(empirical: op_points.csv, H100 M=8192, 62.8 % of the FP8 peak against 79.1 % of the BF16 peak)",
    )
    fp4_gemm_ratio: PositiveFloat | None = Field(
        default=None,
        le=1,
        description="FP4 GEMMs on tensor cores with an FP4 class (Blackwell) reach this share of gemm_efficiency "
        "of the FP4 peak; fitted on a GPU's FP4 rows where they are all its rows identify (B200, GB200: every "
        "TRTLLM-PERF-v1.0 row is NVFP4, while its 16-bit and FP8 GEMM curve is the H100's and H200's measured "
        "one, an assumption); None: low_precision_gemm_ratio, Hopper's FP8 share reused",
    )
    attention_efficiency: PositiveFloat = Field(le=1, description="fraction of peak in fused attention (empirical)")
    moe_efficiency: PositiveFloat = Field(
        le=1, description="grouped-expert GEMM efficiency relative to dense GEMMs (empirical)"
    )
    # Memory streams.
    hbm_efficiency: PositiveFloat = Field(
        le=1, description="fraction of peak HBM bandwidth for weight reads (and KV reads without kv_stream_efficiency)"
    )
    kv_stream_efficiency: PositiveFloat | None = Field(
        default=None,
        le=1,
        description="fraction of peak HBM bandwidth attention kernels read the KV cache at (measured: the slope of "
        "op_points.csv's generation-attention latencies against bytes read, 0.75 on H100 and 0.60 on H200, past a "
        "fixed time per kernel, attention_fixed_us); None: hbm_efficiency, as profiles fitted before this term "
        "assumed",
    )
    mla_stream_efficiency: PositiveFloat | None = Field(
        default=None,
        le=1,
        description="fraction of peak HBM bandwidth an MLA decode kernel reads the compressed latent cache at: one "
        "wide latent head shared by every query head streams better than the per-head GQA kernels of "
        "kv_stream_efficiency (FlashMLA: 3,000 GB/s on H800 SXM5, 0.90 of its 3.35 TB/s, against 0.75 for "
        "op_points.csv's generation-attention kernels on H100, the same HBM3); None: kv_stream_efficiency",
    )
    attention_fixed_us: NonNegativeFloat = Field(
        default=0.0,
        description="fixed time of one generation-attention kernel whatever its KV size (measured: the intercept "
        "of op_points.csv's generation-attention latencies against bytes read, ~16 us on H100 and H200; the slope "
        "is kv_stream_efficiency); 0: carried by layer_overhead_us, as profiles fitted before this term assumed",
    )
    low_precision_stream_ratio: PositiveFloat | None = Field(
        default=None,
        le=1,
        description="8- and 4-bit weights stream at this share of hbm_efficiency's rate per byte (measured M = 1 "
        "GEMMs of op_points.csv: FP8 0.53-0.47 of HBM peak against 16-bit 0.82-0.79); None: at hbm_efficiency",
    )
    full_width_passes: NonNegativeFloat = Field(
        default=0.0,
        description="passes over a token's full hidden vector (16-bit) each tensor-parallel rank makes per layer "
        "whatever its shard: the two fused residual-add + RMSNorm kernels read the input and the residual and "
        "write both (4 each); 0: not priced, as profiles fitted before this term assumed",
    )
    moe_fixed_us: NonNegativeFloat = Field(
        default=0.0,
        description="fixed cost of a MoE layer's expert block on one GPU: routing, permutation and combine kernels "
        "(fitted to the MoE operator points of op_points.csv at one to 4,096 tokens)",
    )
    moe_routed_token_ns: NonNegativeFloat = Field(
        default=0.0,
        description="cost per token-to-expert assignment a GPU serves beyond its expert GEMMs: permutation, "
        "activation quantisation, weighted combine (fitted with moe_fixed_us)",
    )
    # Collectives: alpha-beta per tier.
    scaleup_bw_efficiency: PositiveFloat = Field(
        le=2,
        description="fraction of NVLink/xGMI/PCIe bandwidth a ring step achieves (empirical; above 1 when one-shot "
        "or in-switch reductions beat the ring bound the alpha-beta model assumes)",
    )
    scaleout_bw_efficiency: PositiveFloat = Field(le=1, description="fraction of NIC bandwidth achieved (empirical)")
    collective_latency_scale: PositiveFloat = Field(description="multiplier on the link latency per step (empirical)")
    allreduce_oneshot_us: NonNegativeFloat | None = Field(
        default=None,
        description="fixed time of the engine's one-shot all-reduce kernel inside a scale-up domain (each GPU reads "
        "every peer's buffer, (n - 1) x the bytes at scaleup_bw_efficiency), priced instead of the ring where it is "
        "faster: small messages; fitted with the ring's latency and bandwidth to the custom all-reduce points of "
        "op_points.csv (H100, H200: ~3 us); None: the ring alone, as profiles fitted before this term assumed",
    )
    allreduce_latency_scale: PositiveFloat | None = Field(
        default=None,
        description="multiplier on the scale-up link latency per ring step of an all-reduce (the engine's two-shot "
        "or NCCL kernel; fitted with allreduce_oneshot_us to the custom all-reduce points: ~1.4 on H100 and H200, "
        "where the ring alone fitted ~0.6 to serve small messages too); None: collective_latency_scale",
    )
    # Fixed costs of running a step.
    layer_overhead_us: NonNegativeFloat = Field(
        description="per layer per forward: launches, norms, elementwise (empirical)"
    )
    step_overhead_us: NonNegativeFloat = Field(description="per forward step: scheduling, sampling (empirical)")
    request_overhead_ms: NonNegativeFloat = Field(
        default=0.0,
        description="per served request outside the engine's iterations (HTTP front end, tokenisation, "
        "scheduling, detokenisation), added to every TTFT as users measure it (empirical, fitted per engine)",
    )
    ttft_queue_share: NonNegativeFloat = Field(
        default=0.0,
        le=0.5,
        description="share of the other in-flight prompts whose prefill a new prompt waits behind under load: "
        "0 when arrivals are evenly spread, 0.5 when every request arrives with all the others at once "
        "(empirical, fitted per engine on closed-loop runs; DESIGN.md 'Latency as users measure it')",
    )
    ttft_wait_steps: NonNegativeFloat = Field(
        default=0.5,
        le=16,
        description="scheduler iterations (decode rounds) between a prompt's arrival and its first token, beyond the "
        "chunk steps of its own prefill under load: half a step on arrival, plus any iterations the engine runs "
        "before the first token leaves it (an overlapped scheduler's step, the context request's first generation "
        "step). 0.5 (half a step) unless fitted per engine on closed-loop runs",
    )
    reserves_whole_sequence: bool = Field(
        default=False,
        description="whether the engine admits a request only once KV cache for its whole sequence (prompt and every "
        "output token) is free, and never evicts one it started. TensorRT-LLM: yes (its default capacity scheduler "
        "policy, GUARANTEED_NO_EVICT; docs 'Useful Runtime Options'); vLLM: no (it admits on the blocks a request "
        "holds now and preempts on a shortage); SGLang: no (it admits on an estimate of future tokens, "
        "--schedule-conservativeness). True: at a concurrency above the largest batch whose whole sequences fit "
        "memory, the rest wait for a slot (evaluate's slot queue); false: no slot queue is priced",
    )
    prefill_mixes_with_decode: bool = Field(
        default=True,
        description="whether the engine's scheduler runs prefill chunks in the same forward step as the running "
        "decodes, under one token budget (max_num_tokens). vLLM V1: yes (chunked prefill is always on; the "
        "scheduler adds waiting prompts' tokens to the decode steps within max_num_batched_tokens); TensorRT-LLM: "
        "yes (in-flight batching puts context and generation requests in one batch within max_num_tokens); SGLang: "
        "no by default (Scheduler.get_next_batch_to_run runs a batch of waiting prompts first and a decode step "
        "only when none is waiting; mixing is opt-in, --enable-mixed-chunk). False: a prompt's first token comes "
        "at the end of its whole prefill batch, and no decode round rides on its steps (evaluate.under_load)",
    )
    # Memory.
    usable_memory_fraction: PositiveFloat = Field(
        le=1,
        description="share of HBM the engine may use at all: 1 unless the engine caps itself (vLLM's "
        "--gpu-memory-utilization 0.9); not fitted (the reserve below is)",
    )
    runtime_overhead_gib: NonNegativeFloat = Field(
        description="the engine's own reserve per GPU: CUDA context, library workspaces, CUDA graphs, allocator "
        "slack, memory it leaves free (fitted, 0.5-16 GiB, in the default profiles)"
    )
    comm_buffer_gib: NonNegativeFloat = Field(description="collective buffers per GPU when it takes part in TP/EP")
    # Scheduler limits of the engine the profile models.
    max_batch: PositiveInt = Field(description="largest number of sequences the engine schedules at once")
    max_num_tokens: PositiveInt = Field(description="largest prefill chunk, in tokens, per forward step")
    source: str = Field(description="how the numbers were obtained")
    fit_rows: PositiveInt | None = Field(default=None, description="measured rows the fitted fields were fitted on")
    fit_median_abs_error: NonNegativeFloat | None = Field(
        default=None, description="median |predicted / measured - 1| on those rows (None: not fitted)"
    )


@cache
def _all_profiles() -> dict[str, Profile]:
    found = {}
    for path in sorted(PROFILE_DIR.glob("*.json")):
        profile = Profile.model_validate(json.loads(path.read_text()))
        found[profile.name] = profile
    return found


def reload_profiles() -> None:
    """Read ``profiles/*.json`` again on the next lookup (after a refit rewrote them)."""
    _all_profiles.cache_clear()
    _composed.cache_clear()


@cache
def _composed(gpu_name: str, engine: str) -> Profile | None:
    """The composed profile of ``engine`` on ``gpu_name`` from the stored ones (``compose.compose``), or None."""
    return compose(gpu_name, engine, list(_all_profiles().values()))


def composed_profiles() -> list[Profile]:
    """Every composed profile the stored ones give: one per GPU with a default profile and engine without a
    profile of that GPU, in the stored profiles' order, then the engines'; last, each engine's on the generic
    profile (``generic+<engine>``, for GPUs without a stored profile)."""
    gpus = dict.fromkeys(p.gpu for p in _all_profiles().values() if p.default and p.gpu != ANY_GPU)
    return [c for gpu in (*gpus, ANY_GPU) for engine in ENGINES if (c := _composed(gpu, engine)) is not None]


def list_profiles() -> list[Profile]:
    return list(_all_profiles().values())


def profile_names() -> tuple[str, ...]:
    """The names ``get_profile`` knows: the stored profiles', then the composed ones'."""
    return (*_all_profiles(), *(p.name for p in composed_profiles()))


def get_profile(name: str) -> Profile:
    """A stored profile by name, or a composed one (``<GPU's default profile>+<engine>``, ``composed_profiles``)."""
    profiles = _all_profiles()
    if name in profiles:
        return profiles[name]
    composed = next((p for p in composed_profiles() if p.name == name), None)
    if composed is None:
        hint = f" (composed: {', '.join(p.name for p in composed_profiles())})" if SEPARATOR in name else ""
        raise SpecError("profile", f"unknown profile {quoted(name)}; known: {', '.join(profiles)}{hint}")
    return composed


def profile_for_gpu(gpu_name: str, engine: str = DEFAULT_ENGINE) -> Profile:
    """The profile a plan for ``engine`` on ``gpu_name`` is priced with: the engine's profile for that
    GPU (fitted to the engine's runs under load); else one composed of the GPU's hardware fields and the
    engine's behaviour fitted on its other GPUs (``compose.py``; named e.g. ``h100-sxm+sglang``); else the
    GPU's default profile (its hardware fields; the name a plan carries says which profile priced it); else,
    for a GPU without a stored profile, the engine's behaviour on the generic one (``generic+vllm``; the
    leave-one-GPU-out check in benchmarks/accuracy/README.md, "Composed profiles"); else the generic one."""
    profiles = _all_profiles().values()
    own = [p for p in profiles if p.engine_default and p.gpu == gpu_name and p.engine == engine]
    if own:
        return own[0]
    composed = _composed(gpu_name, engine)
    if composed is not None:
        return composed
    default = [p for p in profiles if p.default and p.gpu == gpu_name]
    if default:
        return default[0]
    return _composed(ANY_GPU, engine) or get_profile("generic")


def load_profile_file(path: str | Path) -> Profile:
    """A profile JSON file (what ``shardplan calibrate --out`` writes); a file that is not one is a
    ``SpecError`` naming the field. Read as every input file is (``models.files.read_text``: a regular file
    only, so a FIFO cannot block, within ``MAX_PROFILE_BYTES``, strict UTF-8, a path no file can have is bad
    input), and as strict as every other JSON input (a repeated key, a lone surrogate, an integer past any float
    are bad input), but NaN and Infinity are left to the fields' ranges, which name the field."""
    text = read_text(path, "profile", MAX_PROFILE_BYTES)
    return profile_from_data(parse_json(text, "profile", str(path), keep_non_finite=True), str(path))


# What a profile from a file may hold beyond the model's own bounds (which only say "positive"): far
# outside every fitted profile (efficiencies 0.05-1, overheads of micro- to milliseconds, a few GiB),
# and tight enough that no time, byte count or batch priced from them leaves a float or 64-bit range
# (an efficiency of 5e-324 made every time infinite; a max_batch of 1e30 overflowed the solver).
_FILE_FLOOR = 1e-4  # efficiencies and scales: a GPU at a ten-thousandth of its peak is not a profile
_FILE_LIMITS: dict[str, tuple[float, float]] = {
    **{name: (_FILE_FLOOR, 2.0) for name in (
        "gemm_efficiency", "low_precision_gemm_ratio", "fp4_gemm_ratio", "attention_efficiency", "moe_efficiency",
        "hbm_efficiency",
        "kv_stream_efficiency", "mla_stream_efficiency", "scaleup_bw_efficiency", "scaleout_bw_efficiency",
        "low_precision_stream_ratio",
    )},
    "attention_fixed_us": (0.0, 1e9),
    "full_width_passes": (0.0, 1e4),  # kernels per layer over the hidden width: a handful in practice
    "ttft_queue_share": (0.0, 1.0),  # 1: a new prompt waits for every other prompt in flight
    "ttft_wait_steps": (0.0, 16.0),
    "collective_latency_scale": (_FILE_FLOOR, 1e4),
    "allreduce_oneshot_us": (0.0, 1e9),
    "allreduce_latency_scale": (_FILE_FLOOR, 1e4),
    "usable_memory_fraction": (_FILE_FLOOR, 1.0),
    "gemm_half_tokens": (0.0, 1e9),
    **{name: (0.0, 1e9) for name in ("moe_fixed_us", "moe_routed_token_ns", "layer_overhead_us", "step_overhead_us")},
    "request_overhead_ms": (0.0, 1e9),
    **{name: (0.0, 1 << 20) for name in ("runtime_overhead_gib", "comm_buffer_gib")},  # GiB: a petabyte
    "max_batch": (1, 1 << 20),  # the CLI's --batch maximum
    "max_num_tokens": (1, 1 << 30),
}
# The only true/false fields: elsewhere a JSON true is not a number.
_FLAGS = ("default", "engine_default", "prefill_mixes_with_decode", "reserves_whole_sequence")
# Fields a file may hold without a range: words, and the fit's own record (not used to price anything).
_UNPRICED = ("name", "gpu", "software", "engine", "source", "fit_rows", "fit_median_abs_error", *_FLAGS)


def profile_from_data(data: object, shown: str) -> Profile:
    """A profile from a file's parsed JSON, checked field by field (``SpecError`` naming the field)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, bool) and key not in _FLAGS:
                raise SpecError(f"profile {key}", f"{shown}: expected a number, got {value}")
        # The words are printed as they are (the plan names its profile): no character may steer a terminal.
        data = {key: printable(value) if isinstance(value, str) else value for key, value in data.items()}
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "profile"
        raise SpecError(f"profile {where}", f"{shown}: {first['msg']}") from None
    for name, (low, high) in _FILE_LIMITS.items():
        value = getattr(profile, name)
        if value is not None and not low <= value <= high:
            raise SpecError(f"profile {name}", f"{shown}: {value:g} is outside {low:g}..{high:g}")
    if profile.gpu == ANY_GPU:
        return profile
    return profile.model_copy(update={"gpu": _known_gpu(profile.gpu, shown)})


def _known_gpu(name: str, shown: str) -> str:
    """A profile file's ``gpu`` as the preset's name (an alias such as ``h100`` read as ``H100-SXM``): a plan's note
    compares it with the cluster's GPU, and a GPU no preset holds ('H999') was no fit's, only a typo or a made-up
    file (``shardplan calibrate`` writes a preset's name, ``generic`` ``ANY_GPU``)."""
    try:
        return get_gpu(name).name
    except SpecError:
        known = ", ".join(g.name for g in list_gpus())
        raise SpecError("profile gpu", f"{shown}: {quoted(name)} is not a known GPU; known: {known}, or "
                                       f"{ANY_GPU!r} for any") from None
