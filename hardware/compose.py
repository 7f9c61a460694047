"""Composed profiles: an engine's behaviour on a GPU for which that engine has no profile of its own.

A calibration profile mixes two kinds of field. Some describe the GPU and the kernels' use of it (the GEMM curve,
the streams, the collectives, the memory reserve, the operator terms); others describe the serving engine's
scheduler and serving stack, the same on every GPU the engine runs on: its scheduler limits and policies (set
per engine, ``engine_fit.ENGINE_LIMITS``) and its three TTFT-under-load fields (fitted once per engine over
all its GPUs' runs, ``ttft_fit``). ``BEHAVIOUR_FIELDS`` are the latter. Where an engine has no profile for a
GPU, ``compose`` takes the GPU's hardware fields from one profile (the *base*) and the behaviour fields from
the engine's fitted profiles of other GPUs, so that, e.g., SGLang on H100 pays SGLang's fixed cost per
request and prefills as SGLang does, instead of being priced as TensorRT-LLM.

Which base, and whether the engine's two per-GPU step fields (``STEP_FIELDS``: fitted per engine and GPU)
travel with the engine or stay with the GPU, was decided by a leave-one-GPU-out check on the runs under load
(``python -m benchmarks.accuracy.compose``; benchmarks/accuracy/README.md, "Composed profiles"). This module
holds and finds numbers only; it prices nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

# Engine behaviour, the same in every fitted profile of an engine: the scheduler's limits and policies (the
# engine's defaults, engine_fit.ENGINE_LIMITS) and the serving stack's TTFT terms (one fit per engine over
# every GPU's runs, ttft_fit.TTFT_FIELDS). tests/unit/hardware/test_compose.py checks these against both.
BEHAVIOUR_FIELDS: tuple[str, ...] = (
    "max_batch", "max_num_tokens", "usable_memory_fraction", "prefill_mixes_with_decode", "reserves_whole_sequence",
    "ttft_queue_share", "ttft_wait_steps", "request_overhead_ms",
)
# The two fields fitted per engine and GPU on the engine's TPOT (engine_fit.ENGINE_FIELDS): the share of HBM peak
# its kernels stream weights at and its fixed cost per layer.
STEP_FIELDS: tuple[str, ...] = ("layer_overhead_us", "hbm_efficiency")
# The engines whose profile of a GPU carries that GPU's hardware fields and operator terms for a composition, in
# order of preference: TensorRT-LLM's is fitted on the most data (its runs and its offline tables together).
# Every engine profile of a GPU holds the same fields outside STEP_FIELDS and the engine's own (serving.py's
# base_profile), and a composition on one takes both from the engine: the choice changes no number, only the source.
BASE_ORDER: tuple[str, ...] = ("trtllm", "vllm", "sglang")
SEPARATOR = "+"  # a composed profile is named <GPU's default profile>+<engine>, e.g. h100-sxm+sglang
# The GPU the generic profile is stored for: any GPU without a stored profile of its own (a preset nobody measured,
# H20, MI300X, or one a user describes; H800 takes H100-SXM's, GPUSpec.profiles_from). Composing for it gives
# generic+<engine>.
ANY_GPU = "*"


Copy = TypeVar("Copy", bound="ProfileLike")


class ProfileLike(Protocol):
    """What a composition reads of a ``profile.Profile`` (that module looks compositions up, so this one cannot
    import it: the import graph has no circles)."""

    @property
    def name(self) -> str: ...

    @property
    def gpu(self) -> str: ...

    @property
    def engine(self) -> str | None: ...

    @property
    def software(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def default(self) -> bool: ...

    @property
    def engine_default(self) -> bool: ...

    @property
    def fit_rows(self) -> int | None: ...

    def model_copy(self: Copy, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Copy: ...


P = TypeVar("P", bound=ProfileLike)


def fitted_engine_profiles(engine: str, profiles: Sequence[P], without_gpu: str | None = None) -> list[P]:
    """The engine's profiles fitted on its own runs (copies written for another GPU with the same die fit no rows,
    ``fit_rows`` None, and add nothing of their own), ``without_gpu``'s left out, in name order."""
    return sorted((p for p in profiles if p.engine_default and p.engine == engine and p.fit_rows is not None
                   and p.gpu != without_gpu), key=lambda p: p.name)


def _middle(values: list[Any]) -> Any:
    """The common value, or the median where they differ: the lower middle one for whole numbers and flags (a
    value the engine can be set to), the mean of the two middle ones for an even count of floats."""
    if all(isinstance(v, bool | int) for v in values):
        return statistics.median_low(values)
    return round(statistics.median(values), 4)


def engine_fields(sources: Sequence[ProfileLike], fields: Sequence[str]) -> dict[str, Any]:
    """Each of ``fields`` over ``sources``: their common value, or their median (``_middle``)."""
    return {f: _middle([getattr(p, f) for p in sources]) for f in fields}


def base_for(gpu: str, engine: str, profiles: Sequence[P]) -> P | None:
    """The profile whose hardware fields a composition for ``engine`` on ``gpu`` takes: another engine's profile of
    the GPU (the first in ``BASE_ORDER``), which carries the operator terms an engine fit starts from, else the
    GPU's default (table) profile; None for a GPU with neither."""
    siblings = {p.engine: p for p in profiles if p.engine_default and p.gpu == gpu and p.engine != engine}
    for other in BASE_ORDER:
        if other in siblings:
            return siblings[other]
    return next((p for p in profiles if p.default and p.gpu == gpu), None)


def fields_from_engine(base: ProfileLike) -> tuple[str, ...]:
    """The fields a composition on ``base`` takes from the engine's other GPUs (leave one GPU out,
    benchmarks/accuracy/README.md "Composed profiles"). On another engine's profile of the GPU: the behaviour and
    the step fields, which the engine fits were fitted with beside the operator terms that base carries (pooled
    median |TTFT| / |TPOT| 28.2 / 11.8 %, against 29.5 / 14.3 % keeping the other engine's step fields and 80.0 /
    24.8 % for today's fallback). On a table profile: the behaviour only, the candidate fixed before the check for
    GPUs with no engine profile at all (34.8 / 24.3 %); its own step fields were fitted without those terms."""
    return (*BEHAVIOUR_FIELDS, *STEP_FIELDS) if base.engine_default else BEHAVIOUR_FIELDS


def compose_on(base: P, engine: str, sources: Sequence[ProfileLike], fields: Sequence[str], name: str) -> P:
    """``base`` with ``fields`` taken from ``sources`` (the engine's fitted profiles of other GPUs), named
    ``name``; its source says, in one line, which field came from where."""
    differ = [f for f in fields if len({getattr(p, f) for p in sources}) > 1]
    how = f" (the median of {', '.join(differ)})" if differ else ""
    software = sources[0].software.split(",")[0].split(" (")[0]
    on = "GPUs without measurements" if base.gpu == ANY_GPU else base.gpu
    return base.model_copy(update={
        **engine_fields(sources, fields),
        "name": name,
        "engine": engine,
        "default": False,
        "engine_default": False,
        "software": f"{software} behaviour on {on} (composed)",
        "source": (f"composed: hardware fields from {base.name}; {', '.join(fields)} from "
                   f"{' and '.join(p.name for p in sources)}{how}"),
        "fit_rows": None,
        "fit_median_abs_error": None,
    })


def composed_name(default_profile: str, engine: str) -> str:
    return f"{default_profile}{SEPARATOR}{engine}"


def compose(gpu: str, engine: str, profiles: Sequence[P]) -> P | None:
    """The composed profile of ``engine`` on ``gpu`` from ``profiles``, or None where there is nothing to compose:
    the engine has a profile of the GPU, or no fitted profile of any other GPU, or the GPU no profile at all.
    ``ANY_GPU`` composes on the generic profile (behaviour fields only: it is a table-like profile)."""
    if any(p.engine_default and p.gpu == gpu and p.engine == engine for p in profiles):
        return None
    sources = fitted_engine_profiles(engine, profiles, without_gpu=gpu)
    base = base_for(gpu, engine, profiles)
    default = next((p.name for p in profiles if p.default and p.gpu == gpu), None)
    if not sources or base is None or default is None:
        return None
    return compose_on(base, engine, sources, fields_from_engine(base), composed_name(default, engine))
