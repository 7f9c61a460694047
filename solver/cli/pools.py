"""Turn ``--prefill workers=3,tp=4`` and ``--decode workers=1,attn_dp=8,ep=8`` into a ``DisaggLayout``.

A pool's keys are the single-pool flags' names (``pp tp sp ep attn_dp expert_tp stages``, dashes or
underscores) plus ``workers`` and ``batch`` (as ``--batch`` is per replica: the most sequences one worker
holds, the engine's batch limit; by default what the concurrency gives it). ``stages`` takes the
``--stages`` form, its ranges continuing after commas (``stages=0:40,40:80``). Each worker's layout is
built by the same code as ``evaluate``'s pins (``layout_from_pins``), so ep is checked against the stage
the same way, and the engines' spelling (``tp=8,attn_dp=8,ep=8``: tp over the whole worker) is read as they
mean it, with a note; every error names the pool and the field (``decode ep: ...``).
"""

from __future__ import annotations

import re
from typing import Any

from shardplan.hardware.cluster import MAX_GPUS
from shardplan.models import SpecError
from shardplan.models.errors import quoted
from shardplan.rules.disagg import DisaggLayout
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Pins, Problem
from shardplan.solver.cli.inputs import check_pins, layout_from_pins, note_on_stderr, parse_stages, read_engines_tp

POOL_KEYS = ("workers", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp", "stages", "batch")
_RANGE = re.compile(r"^\s*\d{1,9}\s*:\s*\d{1,9}\s*$")
MAX_POOL_TEXT = 4096


def parse_pool(role: str, text: str) -> dict[str, Any]:
    """``"workers=3,tp=4"`` -> {"workers": 3, "tp": 4}; keys and values checked, nothing built."""
    if len(text) > MAX_POOL_TEXT:
        raise SpecError(role, f"{len(text)} characters; at most {MAX_POOL_TEXT}")
    values: dict[str, Any] = {}
    last = None
    for part in text.split(","):
        if "=" not in part:
            if last == "stages" and _RANGE.match(part):
                values["stages"] += "," + part.strip()
                continue
            raise SpecError(role, f"{quoted(part.strip())} is not KEY=VALUE (keys: {', '.join(POOL_KEYS)})")
        key, _, value = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if key not in POOL_KEYS:
            # A short key names the field, as every pool error does; a long one is quoted shortened instead.
            named = key if len(key) <= 40 else ""
            shown = "" if named or not key else f" {quoted(key)}"
            raise SpecError(f"{role} {named}" if named else role, f"unknown key{shown}; one of {', '.join(POOL_KEYS)}")
        if key in values:
            raise SpecError(f"{role} {key}", "given twice")
        value = value.strip()
        if key == "stages":
            values[key] = value
        elif not value.isdecimal() or len(value) > 9:  # isdigit() takes "²", which int() refuses
            raise SpecError(f"{role} {key}", f"must be a positive integer, got {quoted(value)}")
        else:
            values[key] = int(value)
            if values[key] < 1 or values[key] > MAX_GPUS:
                raise SpecError(f"{role} {key}", f"must be an integer in 1..{MAX_GPUS:,}, got {values[key]}")
        last = key
    return values


def worker_layout(role: str, problem: Problem, values: dict[str, Any]) -> Layout:
    """One worker's layout from a pool's values, through ``layout_from_pins`` (dp 1, batch 1)."""
    pins = {k: v for k, v in values.items() if k not in ("workers", "batch")}
    try:
        if "stages" in pins:
            pins["stages"] = parse_stages(pins["stages"])
        check_pins(pins, problem.model.num_layers)
        pins = read_engines_tp(pins, problem.model.is_moe, lambda text: note_on_stderr(f"{role} pool: {text}"))
        pool_problem = problem.model_copy(update={
            "pins": Pins(**pins),
            "workload": problem.workload.model_copy(update={"batch": 1}),
        })
        return layout_from_pins(pool_problem)
    except SpecError as exc:
        raise SpecError(f"{role} {exc.field}", exc.reason) from None
    except ValueError as exc:  # a pydantic check on the pins (stages against pp)
        raise SpecError(role, str(exc).splitlines()[-1].strip()) from None


def refuse_pools(prefill: str | None, decode: str | None, dag_path: str | None = None,
                 emit_engine: str | None = None) -> None:
    """A colocated ``evaluate`` given a pool, a DAG or a launch to write: bad input, said as such."""
    for option, given in (("prefill", prefill), ("decode", decode), ("dag", dag_path), ("emit", emit_engine)):
        if given is not None:
            raise SpecError(option, "only with --serving disagg here (for one layout, `shardplan solve` with the "
                                    "same pins writes the DAG and the launch commands)" if option in ("dag", "emit")
                            else "a pool is only given with --serving disagg")


def disagg_layout(problem: Problem, prefill: str | None, decode: str | None) -> DisaggLayout:
    """Both pools placed from GPU 0 at the problem's concurrency (``--batch``, 1 if not given)."""
    specs = {}
    for role, text in (("prefill", prefill), ("decode", decode)):
        if text is None:
            raise SpecError(role, f"--serving disagg needs --{role} workers=N,tp=...")
        specs[role] = parse_pool(role, text)
    p, d = (worker_layout(role, problem, specs[role]) for role in ("prefill", "decode"))
    return DisaggLayout.place(p, specs["prefill"].get("workers", 1), d, specs["decode"].get("workers", 1),
                              problem.workload.batch or 1, problem.cluster,
                              (specs["prefill"].get("batch"), specs["decode"].get("batch")))


__all__ = ["POOL_KEYS", "disagg_layout", "parse_pool", "refuse_pools", "worker_layout"]
