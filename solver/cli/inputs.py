"""Turn command-line values into a ``Problem`` and a ``Layout``: names to specs, strings to ranges.

The CLI calls these; the solver itself only ever sees the finished ``Problem``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from shardplan.hardware import parse_cluster
from shardplan.hardware.cluster import MAX_GPUS
from shardplan.hardware.profile import (
    DEFAULT_ENGINE,
    ENGINES,
    MAX_PROFILE_BYTES,
    Engine,
    Profile,
    get_profile,
    profile_from_data,
)
from shardplan.models import DType, ModelSpec, SpecError, get_model
from shardplan.models.errors import printable, spec_error_from
from shardplan.models.files import read_json
from shardplan.models.load_profile import ExpertLoadProfile, load_profile, zipf_profile
from shardplan.rules.catalog import check_allow
from shardplan.rules.layout import Layout
from shardplan.rules.problem import MAX_BATCH as MAX_ENGINE_BATCH
from shardplan.rules.problem import Objective, Pins, Problem, Workload, problem_notes

DEFAULT_MODEL = "deepseek-v3"
DEFAULT_CLUSTER = "2x8xH200"


@dataclass
class ProblemArgs:
    """Everything the shared command-line options carry, before validation."""

    model: str | ModelSpec = DEFAULT_MODEL  # a preset or a config.json path; or a model already loaded
    cluster: str = DEFAULT_CLUSTER
    objective: str = "latency"
    isl: int = 1024
    osl: int = 256
    batch: int | None = None
    mem_cap_gib: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    weights_dtype: str | None = None
    kv_dtype: str | None = None
    profile: str | None = None  # a profile name, or the path of a profile file (``calibrate --out``)
    engine: str | None = None  # vllm, sglang or trtllm; None: DEFAULT_ENGINE
    allow: tuple[str, ...] = ()
    pins: dict[str, Any] = field(default_factory=dict)  # pins[degree]: the pinned value, None when free
    load_profile: str | None = None  # a .json or .csv file of tokens per expert per MoE layer
    zipf: float | None = None  # synthetic Zipf routing with this exponent
    redundant_slots: int = 0  # expert slots per GPU beyond ceil(experts / ep)
    max_batch: int | None = None  # the engine's sequences per attention group at once; None: the profile's


ZIPF_SEED = 0  # the synthetic profile's shuffle: fixed, so a plan is reproducible

# Documented maxima of the numeric flags, checked before any work. They are far beyond any real
# deployment and keep every scaled quantity the solver builds from them inside 64-bit integers
# (the solver clamps SLA and memory limits to its variables' bounds; these bound the rest).
MAX_TOKENS = 10_000_000  # isl, osl and isl + osl (the model's own context limit applies too)
MAX_BATCH = 1 << 20  # concurrent sequences per replica
MAX_MEM_CAP_GIB = float(1 << 40)  # per GPU; anything above the GPU's memory binds nothing
MAX_LIMIT_MS = 1e15  # ttft-ms, tpot-ms: ~31,700 years, i.e. no limit
MAX_REDUNDANT_SLOTS = 4096  # the most experts a config may have (models.hf_config.MAX_EXPERTS)
MAX_ZIPF_EXPONENT = 100.0  # past ~10 every token already goes to one expert


_STAGE = re.compile(r"^\s*(\d{1,9})\s*:\s*(\d{1,9})\s*$")
MAX_STAGES = 1024  # no model has more layers (models.hf_config.MAX_LAYERS)


def parse_stages(text: str) -> tuple[tuple[int, int], ...]:
    """``"0:30,30:61"`` -> ((0, 30), (30, 61)).

    Only the syntax is checked here; ``check_stages`` checks the ranges against the model.
    """
    parts = text.split(",")
    if len(parts) > MAX_STAGES:
        raise SpecError("stages", f"{len(parts)} ranges; at most {MAX_STAGES}")
    ranges = []
    for part in parts:
        match = _STAGE.match(part)
        if match is None:
            shown = repr(part.strip())[:40]
            raise SpecError("stages", f"{shown} is not START:END (e.g. 0:30,30:61)")
        ranges.append((int(match[1]), int(match[2])))
    return tuple(ranges)


def check_stages(stages: tuple[tuple[int, int], ...], num_layers: int) -> None:
    """The ranges must cut 0..num_layers into consecutive stages (an empty one is PP-001's to name)."""
    at = 0
    for start, end in stages:
        if start != at or end < start:
            raise SpecError("stages", f"{start}:{end} does not continue at layer {at}")
        at = end
    if at != num_layers:
        raise SpecError("stages", f"cover {at} layers; the model has {num_layers}")


def build_problem(args: ProblemArgs) -> Problem:
    """Validate every input and assemble the problem; any bad value raises ``SpecError``."""
    _positive("isl", args.isl, MAX_TOKENS)
    _positive("osl", args.osl, MAX_TOKENS)
    if args.isl + args.osl > MAX_TOKENS:
        raise SpecError("isl", f"isl + osl = {args.isl + args.osl:,} exceeds the maximum of {MAX_TOKENS:,} tokens")
    if args.batch is not None:
        _positive("batch", args.batch, MAX_BATCH)
    if args.max_batch is not None:  # Problem's own bound would name it "max_batch", not the option
        _positive("max-batch", args.max_batch, MAX_ENGINE_BATCH)
    for name, most in (("mem_cap_gib", MAX_MEM_CAP_GIB), ("ttft_ms", MAX_LIMIT_MS), ("tpot_ms", MAX_LIMIT_MS)):
        value = getattr(args, name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise SpecError(name.replace("_", "-"), f"must be a finite number > 0, got {value}")
        if value is not None and value > most:
            raise SpecError(name.replace("_", "-"), f"must be at most {most:g}, got {value:g}")
    # checked here, not left to zipf_profile: its error names its own argument, "exponent", not the option
    if args.zipf is not None and not (args.zipf >= 0 and math.isfinite(args.zipf)):
        raise SpecError("zipf", f"must be a finite number >= 0, got {args.zipf}")
    if args.zipf is not None and args.zipf > MAX_ZIPF_EXPONENT:
        raise SpecError("zipf", f"must be at most {MAX_ZIPF_EXPONENT:g}, got {args.zipf:g}")
    model = args.model if isinstance(args.model, ModelSpec) else get_model(args.model)
    # "is not None": an empty dtype (a script's unset variable) is an unknown one, not the checkpoint's.
    weights = DType.parse(args.weights_dtype, "weights-dtype") if args.weights_dtype is not None else None
    kv = DType.parse(args.kv_dtype, "kv-dtype") if args.kv_dtype is not None else None
    if kv is not None and kv not in (DType.BF16, DType.FP16, DType.FP8):
        raise SpecError("kv-dtype", f"KV cache in {kv.value} is not supported; use bf16, fp16 or fp8")
    model = model.with_dtypes(weights, kv)
    cluster = parse_cluster(args.cluster)
    try:
        objective = Objective(args.objective)
    except ValueError:
        raise SpecError("objective", f"{args.objective!r}; one of latency, throughput") from None
    check_allow(args.allow)  # evaluate runs no search, whose own check (search_base) would name it
    pins = dict(args.pins)
    if isinstance(pins.get("stages"), str):
        pins["stages"] = parse_stages(pins["stages"])
    check_pins(pins, model.num_layers)
    pins = read_engines_tp(pins, model.is_moe)
    if args.redundant_slots is None or not 0 <= args.redundant_slots <= MAX_REDUNDANT_SLOTS:
        raise SpecError("redundant-slots",
                        f"must be an integer in 0..{MAX_REDUNDANT_SLOTS}, got {args.redundant_slots}")
    expert_load = build_expert_load(args, model)
    try:
        problem = Problem(
            model=model,
            cluster=cluster,
            workload=Workload(isl=args.isl, osl=args.osl, batch=args.batch, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms),
            objective=objective,
            mem_cap_gib=args.mem_cap_gib,
            allow=frozenset(args.allow),
            pins=Pins(**{k: v for k, v in pins.items() if v is not None}),
            engine=resolve_engine(args.engine),
            profile=read_profile(args.profile),
            expert_load=expert_load,
            redundant_slots=args.redundant_slots,
            max_batch=args.max_batch,
        )
    except ValidationError as exc:
        raise option_error(exc) from None
    for text in problem_notes(problem):  # e.g. a profile of another GPU: said beside the result, human view or JSON
        note_on_stderr(text)
    return problem


def resolve_engine(engine: str | None) -> Engine:
    """The engine a plan is priced for: the one named, else ``DEFAULT_ENGINE``."""
    if engine is None:
        return DEFAULT_ENGINE
    if engine not in ENGINES:
        raise SpecError("engine", f"{engine!r}; one of {', '.join(ENGINES)}")
    return cast(Engine, engine)  # one of the Literal's values: checked on the line above


def read_profile(profile: str | None) -> str | Profile | None:
    """``--profile``: a profile file (a path ending in .json, or any existing file) is read and
    checked; a name must be a known profile."""
    if profile is None:
        return None
    if profile.endswith(".json") or os.path.isfile(profile):
        return profile_from_data(read_json(profile, "profile", MAX_PROFILE_BYTES), profile)
    get_profile(profile)  # an unknown name is bad input now, not an error deep in pricing
    return profile


def build_expert_load(args: ProblemArgs, model: ModelSpec) -> ExpertLoadProfile | None:
    """The routing profile: read from ``--load-profile``, or Zipf-shaped with ``--zipf``, or None
    (uniform routing). A file is checked against the model's expert count and MoE layers; every
    error names the option and the field, e.g. ``load-profile layers.3: ... expected 256 experts``."""
    if args.load_profile is None and args.zipf is None:
        return None
    if args.load_profile is not None and args.zipf is not None:
        raise SpecError("zipf", "give either --load-profile or --zipf, not both")
    option = "load-profile" if args.load_profile is not None else "zipf"
    if model.moe is None:
        raise SpecError(option, f"{model.name} has no MoE layers")
    moe = model.moe
    try:
        if args.load_profile is not None:
            return load_profile(args.load_profile, moe.num_experts, moe.layers)
        if args.zipf is not None:
            # Only ratios matter to a placement: one token per expert on average.
            return zipf_profile(moe.num_experts, moe.layers, args.zipf, float(moe.num_experts), seed=ZIPF_SEED)
    except SpecError as exc:  # the file as a whole ("profile": unreadable, not JSON) is the option itself
        raise SpecError(option if exc.field == "profile" else f"{option} {exc.field}", exc.reason) from None
    return None


def engine_with_emit(engine: str | None, emit_engine: str | None) -> str | None:
    """``--emit X`` prices with engine X: it is the engine unless ``--engine`` names another, which
    would launch a plan priced for one engine on a different one."""
    if emit_engine is None or engine is None:
        return engine or emit_engine
    if engine != emit_engine:
        raise SpecError("emit", f"{emit_engine} launch commands for a plan priced with --engine {engine}: "
                                "give the same engine to both, or only one of them")
    return engine


def check_experts_out(problem: Problem, experts_out: str | None) -> None:
    """--experts-out of a dense model has nothing to write: say so before solving."""
    if experts_out and not problem.model.is_moe:
        raise SpecError("experts-out", "the model has no MoE layers: there is no expert placement to write")


def check_pool_routing(args: ProblemArgs, serving: str) -> None:
    """A routing profile is priced through an expert placement, which the pools do not build: a disaggregated
    search would price uniform routing and drop the profile without a word, so it is refused, as
    ``evaluate --serving disagg`` refuses it."""
    if serving == "colocated":
        return
    for option, given in (("load-profile", args.load_profile), ("zipf", args.zipf)):
        if given is not None:
            raise SpecError(option, f"expert placement per pool is not supported with --serving {serving} yet, "
                                    "so the pools would price uniform routing (--serving colocated takes it)")


def check_decodes(problem: Problem) -> None:
    """A disaggregated deployment's decode pool starts after the first token, which the prefill pool makes: with
    --osl 1 it never runs, so it has no TPOT and no capacity to price, and the deployment is one prefill pool.
    ``solve``, ``enumerate`` and ``evaluate`` with a disaggregated --serving refuse it alike."""
    if problem.workload.osl < 2:
        raise SpecError("osl", "a disaggregated deployment decodes after the first token: give --osl >= 2")


def per_group_tp(tp: int, sp: int, attn_dp: int, expert_tp: int, ep: int) -> int | None:
    """The tp per attention group that gives a stage ``ep`` when ``tp`` was counted over the whole stage,
    as the engines count it (SGLang's ``--tp 8 --dp 8 --enable-dp-attention``, TensorRT-LLM's ``tp_size: 8``
    with ``enable_attention_dp``: 8 GPUs, attention in 8 groups of 1), or None when that reading does not fit
    either. shardplan's tp is per attention group (a stage has tp x sp x attn_dp GPUs, DESIGN.md), so read
    that way ``tp=8,attn_dp=8,ep=8`` asks for 64 GPUs, whose ep is 64.

    >>> per_group_tp(8, 1, 8, 1, 8), per_group_tp(8, 1, 4, 1, 8), per_group_tp(8, 1, 8, 1, 64)
    (1, 2, None)
    """
    if attn_dp <= 1 or tp % attn_dp:
        return None
    whole = tp // attn_dp
    return whole if whole * sp * attn_dp == ep * expert_tp else None


# The notes of the command running, held until it has a result (``held_notes``); None: print at once.
_HELD_NOTES: ContextVar[list[str] | None] = ContextVar("shardplan_held_notes", default=None)


def note_on_stderr(text: str) -> None:
    """A remark beside the result, on stderr (stdout stays the result alone, JSON included); inside
    ``held_notes`` it waits for the command's result."""
    held = _HELD_NOTES.get()
    if held is None:
        print_notes([text])
    else:
        held.append(text)


@contextmanager
def held_notes() -> Iterator[list[str]]:
    """Hold the notes raised inside the block: the CLI prints them (``print_notes``) once the command has
    a result, and drops them when it ends in bad input, whose stderr is its one error line."""
    notes: list[str] = []
    token = _HELD_NOTES.set(notes)
    try:
        yield notes
    finally:
        _HELD_NOTES.reset(token)


def print_notes(notes: list[str]) -> None:
    for text in notes:
        print(f"shardplan: note: {printable(text)}", file=sys.stderr)


def read_engines_tp(pins: dict[str, Any], is_moe: bool, note: Callable[[str], None] = note_on_stderr) -> dict[str, Any]:
    """Pinned degrees that only the engines' reading of tp makes consistent (tp over the whole stage,
    ``per_group_tp``: the DESIGN.md contract's own ``workers=1,tp=8,attn_dp=8,ep=8``) with tp per attention
    group, as shardplan counts it, and a note saying so; any other pins unchanged (degrees no reading makes
    consistent are left to ``layout_from_pins`` and the rules, which name the field)."""
    tp, attn_dp, ep = pins.get("tp"), pins.get("attn_dp"), pins.get("ep")
    if not is_moe or tp is None or attn_dp is None or ep is None:
        return pins
    sp, expert_tp = pins.get("sp") or 1, pins.get("expert_tp") or 1
    if tp * sp * attn_dp == ep * expert_tp:  # shardplan's reading already fits
        return pins
    per_group = per_group_tp(tp, sp, attn_dp, expert_tp, ep)
    if per_group is None:
        return pins
    note(f"tp {tp} with attn_dp {attn_dp} and ep {ep} read as the engines count tp (over the whole stage): "
         f"{tp * sp} GPUs per stage, tp {per_group} in each attention group")
    return {**pins, "tp": per_group}


def layout_from_pins(problem: Problem) -> Layout:
    """The layout ``evaluate`` prices: the pinned degrees, even stages unless given, ep implied.

    ``--ep`` is checked against the structure rather than multiplied in (003 §3-4): MoE layers
    use all of a stage's GPUs, so ep must equal G / expert_tp (pins in the engines' reading of tp were
    already turned into shardplan's by ``read_engines_tp``).
    """
    p, model = problem.pins, problem.model
    tp, sp, attn_dp, expert_tp = p.tp or 1, p.sp or 1, p.attn_dp, p.expert_tp or 1
    if attn_dp is None:
        # An --ep wider than the attention group means attention data parallelism fills the stage.
        attn_dp = max(1, (p.ep or 1) * expert_tp // (tp * sp)) if model.is_moe else 1
    dp, batch = p.dp or 1, problem.workload.batch or 1
    try:
        if p.stages is not None:
            layout = Layout(stages=p.stages, dp=dp, tp=tp, sp=sp, attn_dp=attn_dp, expert_tp=expert_tp, batch=batch)
        else:
            layout = Layout.even(model.num_layers, p.pp or 1, dp=dp, tp=tp, sp=sp, attn_dp=attn_dp,
                                 expert_tp=expert_tp, batch=batch)
    except ValidationError as exc:
        raise option_error(exc) from None
    if layout.num_layers != model.num_layers:
        raise SpecError("stages", f"cover {layout.num_layers} layers; the model has {model.num_layers}")
    if p.ep is not None and model.is_moe and p.ep != layout.ep:
        raise SpecError("ep", f"{p.ep} but the stage has {layout.gpus_per_stage} GPUs and expert_tp {expert_tp}: "
                              f"ep = G / expert_tp = {layout.ep}")
    for degree, value in (("ep", p.ep), ("expert-tp", p.expert_tp)):  # a pool's pins skip Problem's validator
        if value not in (None, 1) and not model.is_moe:
            raise SpecError(degree, f"{problem.model.name} has no MoE layers")
    if layout.num_gpus > problem.cluster.num_gpus:
        raise SpecError("cluster",
                        f"the layout needs {layout.num_gpus} GPUs; the cluster has {problem.cluster.num_gpus}")
    return layout


def check_pins(pins: dict[str, Any], num_layers: int) -> None:
    """Pinned degrees within documented bounds, before any work: pp at most the model's layers, every
    degree at most ``MAX_GPUS`` (a pin beyond the cluster's GPUs is left to the rules, which name it:
    GPU-001, EP-001), and stages that cover exactly the model's layers."""
    pp = pins.get("pp")
    if pp is not None and pp > num_layers:
        raise SpecError("pp", f"{pp} stages for {num_layers} layers")
    for degree in ("dp", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp"):
        value = pins.get(degree)
        if value is None:
            continue
        name = degree.replace("_", "-")
        if value < 1:
            raise SpecError(name, f"must be a positive integer, got {value}")
        if value > MAX_GPUS:
            raise SpecError(name, f"{value} is more than the {MAX_GPUS:,} GPUs any cluster may have")
    stages = pins.get("stages")
    if stages is not None:
        check_stages(stages, num_layers)


def option_error(exc: ValidationError) -> SpecError:
    """The error of a spec built from command-line values (a ``Problem``, a ``Layout``), its field named as the
    option is typed: ``expert_tp`` is ``expert-tp``. Only for specs whose fields are all options: the fields of a
    file (a config.json, a profile) keep their own names."""
    error = spec_error_from(exc)
    return SpecError(error.field.replace("_", "-"), error.reason)


def _positive(name: str, value: int | None, most: int) -> None:
    if value is None or value < 1:
        raise SpecError(name, f"must be a positive integer, got {value}")
    if value > most:
        raise SpecError(name, f"must be at most {most:,}, got {value:,}")
