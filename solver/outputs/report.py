"""What a plan report says, in the terminal and in one self-contained HTML file.

Three parts:
- findings: which constraints bind the plan (memory per stage, the engine's batch limit, TTFT/TPOT
  limits, the cluster's GPU count, the user's pins), derived from the plan's slack and from pricing the
  next batch size the solver could have taken; and the runner-up, the best plan with another replica
  shape (solve again with the winner's (tp, sp, attention groups, expert-tp, stages) forbidden), with
  the objective and its components side by side;
- ``metric_text``: the numbers as both views print them, so a reader (and the browser test) finds the
  same TTFT, TPOT and tokens/s in the terminal and in the page;
- the HTML: ``plan_report`` and ``enumeration_report`` fill ``report_template.html`` with plotly
  figures (plotly.js inlined once: the file opens with no network) and a collapsible outline of the
  execution DAG.

plotly is imported inside the functions that draw, on purpose: only ``--report`` needs it, and its import
adds about 0.1 s to every ``shardplan solve`` (measured with ``python -X importtime``, 2026-12).
"""

from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from shardplan.hardware.profile import ENGINE_NAMES
from shardplan.models.errors import SolverLimitError
from shardplan.rules.capacity import engine_batch_limit
from shardplan.rules.plan import Plan
from shardplan.rules.prediction import StageTiming
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise
from shardplan.solver.outputs.plan_json import degrees
from shardplan.solver.space import Shape

if TYPE_CHECKING:  # plotly itself is imported lazily (see the module docstring)
    from plotly.graph_objects import Figure

STATUS_ORDER = ("binds", "tight", "pinned", "slack")
TIGHT = 0.05  # a limit with less than this share left is "tight"


# --- numbers as printed -------------------------------------------------------------------------------


def metric_text(metrics: dict[str, Any]) -> dict[str, str]:
    """The plan's headline numbers as the terminal and the HTML page print them."""
    return {
        "ttft": f"{metrics['ttft_ms']:,.1f} ms",
        "tpot": f"{metrics['tpot_ms']:,.2f} ms",
        "decode_step": f"{metrics['decode_step_ms']:,.2f} ms",
        "e2e": f"{metrics['e2e_ms']:,.0f} ms",
        "tokens_per_s_per_user": f"{metrics['output_tokens_per_s_per_user']:,.1f} tok/s",
        "tokens_per_s": f"{metrics['output_tokens_per_s']:,.0f} tok/s",
        "tokens_per_s_per_gpu": f"{metrics['output_tokens_per_s_per_gpu']:,.1f} tok/s",
        "batch": f"{metrics['batch']:,}",
    }


def measured_error_text(data: dict[str, Any]) -> str | None:
    """The plan's ``measured_error`` in one line: how far its engine's predictions fell from measured runs
    under load in its serving mode, whether any was on this GPU, and at the plan's load; None where the plan
    carries none."""
    found = data.get("measured_error")
    if not found:
        return None
    mode = "one pool" if found["serving"] == "colocated" else "disaggregated"
    gpus = ", ".join(found["gpus"]) + ("" if found["gpu_measured"] else ", none on this GPU")
    band = found["band"]
    load = (f"no run at {found['in_flight']:,} in flight" if band is None else
            f"at {_band_text(band)} in flight ({_runs(band['runs'])}) TTFT {band['ttft']['median_abs']:.0%}, "
            f"TPOT {band['tpot']['median_abs']:.0%}")
    over = "".join(f"; off as its median run, {part}, over the limit" for part in over_limit_parts(found))
    return (f"measured error of {ENGINE_NAMES[found['engine']]}, {mode}, on {_runs(found['runs'])} ({gpus}): median "
            f"|error| TTFT {found['ttft']['median_abs']:.0%}, TPOT {found['tpot']['median_abs']:.0%} (bias "
            f"{found['ttft']['median']:+.0%}, {found['tpot']['median']:+.0%}); {load}{over}")


def limits_at_text(data: dict[str, Any]) -> str | None:
    """The plan's ``limits_at`` in one line: the limits it was held to so that it meets the user's at its engine's
    median measured error, and the rounds that took; None where it was held at the user's limits."""
    found = data.get("limits_at")
    if not found:
        return None
    parts = []
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        given, held = found["given"][key], found["held"][key]
        if given is not None:
            parts.append(f"{name} {held:,g} ms" + (" as given" if held == given else f" for the {given:,g} given"))
    rounds = found["rounds"]
    done = f"{rounds} round{'' if rounds == 1 else 's'} of tightening"
    if found.get("stopped"):
        how = f"{done} done; {found['stopped']}, so this plan is the last round's that finished"
    elif found.get("batch_cap"):
        how = (f"after {done}, a plan with the engine's batch capped at {found['batch_cap']:,} per attention group, "
               "a load whose runs measured closer to the predictions, did better")
    else:
        how = done if rounds else "none needed tightening"
    return f"limits held at the median measured error: {', '.join(parts)} ({how})"


def over_limit_parts(found: dict[str, Any]) -> list[str]:
    """Each limit a plan's ``measured_error`` says it would break off as its median run, as ``TTFT would be 2,407
    ms`` (TTFT to the ms, TPOT to 0.1 ms, as the plan's lines print them)."""
    shown = (("ttft_ms", "TTFT", 0), ("tpot_ms", "TPOT", 1))
    return [f"{name} would be {found['at_median_error'][key]:,.{digits}f} ms" for key, name, digits in shown
            if key in found["over_limit"]]


def _runs(count: int) -> str:
    return f"{count:,} run{'' if count == 1 else 's'}"


def _band_text(band: dict[str, Any]) -> str:
    low, high = band["low"], band["high"]
    return f"{low:,}+" if high is None else f"{low:,}" if low == high else f"{low:,}-{high:,}"


def gpu_span(gpus: list[int]) -> str:
    return f"{gpus[0]}-{gpus[-1]}" if len(gpus) > 1 else str(gpus[0])


def layout_lines(data: dict[str, Any], cluster_gpus: int, per_node: int) -> list[str]:
    """The layout in words: replicas, stages, the groups inside a stage."""
    d = data["degrees"]
    G = d["tp"] * d["sp"] * d["attn_dp"]
    lines = [
        f"{_n(d['dp'], 'replica')} x {_n(d['pp'], 'stage')} x {G} GPUs = {data['num_gpus']} of {cluster_gpus} GPUs"
    ]
    inner = [f"tensor parallel {d['tp']}", f"sequence parallel {d['sp']}",
             f"{_n(d['attn_dp'], 'attention group')} of {d['tp'] * d['sp']} GPUs"]
    if d["ep"] > 1 or d["expert_tp"] > 1:
        inner.append(f"expert parallel {d['ep']}" + (f" x expert-tp {d['expert_tp']}" if d["expert_tp"] > 1 else ""))
    lines.append("each stage: " + ", ".join(inner))
    for s in data["stages"]:
        start, end = s["layers"]
        nodes = sorted({g // per_node for g in s["gpus"]})
        where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {nodes[0]}-{nodes[-1]}"
        lines.append(
            f"stage {s['index']}: layers {start}-{end - 1} ({end - start}), GPUs {gpu_span(s['gpus'])} ({where})"
        )
    if d["dp"] > 1:
        per = data["num_gpus"] // d["dp"]
        which, each = ("replica 1", "") if d["dp"] == 2 else (f"replicas 1-{d['dp'] - 1}", f", {per} each")
        lines.append(f"{which}: the same on GPUs {per}-{data['num_gpus'] - 1}{each}")
    return lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


# --- binding constraints -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One constraint and how it stands: ``binds`` (relaxing it would change the plan), ``tight``
    (little slack, not shown to bind), ``pinned`` (fixed by the user) or ``slack``."""

    constraint: str
    status: str
    message: str


def binding_constraints(plan: Plan) -> list[Finding]:
    """The constraints around ``plan``, binding ones first.

    Whether one binds is derived, not guessed: for a throughput plan whose batch is decided, the next
    batch the solver could have taken (twice the sequences) is priced, and every limit it breaks binds
    if it would have raised throughput. The rest is slack: memory left on the fullest GPU, SLA margin,
    GPUs used against the cluster's.
    """
    p, lay, pred = plan.problem, plan.layout, plan.prediction
    m = pred.metrics
    out: list[Finding] = []
    worst = min(pred.memory, key=lambda r: (r.limit_gib - r.total_gib, r.stage))
    free = worst.limit_gib - worst.total_gib

    probe = probe_reasons = None
    decides = p.objective is Objective.THROUGHPUT and p.workload.batch is None
    profile = resolve_profile(p)
    seqs = lay.batch // lay.attn_dp  # sequences one GPU holds: stages x q
    # The next batch the search could have taken: one more sequence per attention group per microbatch.
    next_batch = lay.batch + lay.pp * lay.attn_dp
    if decides:
        probe = evaluate(p, lay.model_copy(update={"batch": next_batch}))
        probe_reasons = []
        if seqs + lay.pp > engine_batch_limit(p, profile):
            probe_reasons.append("batch")
        if not probe.fits:
            probe_reasons.append("memory")
        if p.workload.ttft_ms is not None and probe.metrics.ttft_ms > p.workload.ttft_ms:
            probe_reasons.append("ttft")
        if p.workload.tpot_ms is not None and probe.metrics.tpot_ms > p.workload.tpot_ms:
            probe_reasons.append("tpot")
    better = probe is not None and probe.metrics.output_tokens_per_s > m.output_tokens_per_s
    bigger = f"batch {next_batch:,}"

    # Memory on the fullest GPU.
    if not pred.fits:
        short = max(pred.memory, key=lambda r: r.short_gib)
        out.append(Finding("memory", "binds",
                           f"memory on stage {short.stage} is over the limit: {short.short_gib:.1f} GiB short"))
    elif probe is not None and "memory" in probe_reasons and better:
        over = max(probe.memory, key=lambda r: r.total_gib - r.limit_gib)
        out.append(Finding(
            "memory", "binds",
            f"memory on stage {worst.stage} is the limit: {free:.1f} GiB free of {worst.limit_gib:.1f}; "
            f"{bigger} would need {over.total_gib:.1f} GiB on stage {over.stage}",
        ))
    elif free < TIGHT * worst.limit_gib:
        out.append(Finding("memory", "tight", f"memory on stage {worst.stage} is nearly full: "
                                              f"{free:.1f} GiB free of {worst.limit_gib:.1f}"))
    else:
        out.append(Finding(
            "memory", "slack",
            f"memory: {free:.1f} GiB free on the fullest GPU "
            f"(stage {worst.stage}, {worst.total_gib:.1f} of {worst.limit_gib:.1f} GiB)",
        ))

    # The engine's batch limit, and whether a bigger batch would help at all.
    if probe is not None:
        if not better:
            out.append(Finding(
                "batch", "slack",
                f"batch {lay.batch:,} is where throughput peaks: {bigger} would give "
                f"{probe.metrics.output_tokens_per_s:,.0f} tok/s",
            ))
        elif "batch" in probe_reasons:
            out.append(Finding(
                "batch", "binds",
                f"the engine's batch limit binds: {seqs:,} sequences per GPU, "
                + (f"--max-batch {p.max_batch:,}" if p.max_batch
                   else f"the profile's max_batch is {profile.max_batch:,}"),
            ))

    # Service-level limits.
    for name, limit, value, fmt in (
        ("ttft", p.workload.ttft_ms, m.ttft_ms, "{:.1f}"),
        ("tpot", p.workload.tpot_ms, m.tpot_ms, "{:.2f}"),
    ):
        if limit is None:
            continue
        label = name.upper()
        if probe is not None and name in probe_reasons and better:
            new = probe.metrics.ttft_ms if name == "ttft" else probe.metrics.tpot_ms
            out.append(Finding(name, "binds", f"{label} limit binds: {bigger} would take {label} to "
                                              f"{fmt.format(new)} ms > {limit:g} ms (now {fmt.format(value)} ms)"))
        elif limit - value < TIGHT * limit:
            out.append(Finding(name, "tight", f"{label} limit is nearly reached: {fmt.format(value)} of {limit:g} ms"))
        else:
            out.append(Finding(name, "slack", f"{label} limit: {fmt.format(value)} of {limit:g} ms "
                                              f"({fmt.format(limit - value)} ms to spare)"))

    # GPUs.
    used, total, per_replica = lay.num_gpus, p.cluster.num_gpus, lay.gpus_per_replica
    if p.objective is Objective.THROUGHPUT:
        if total - used < per_replica:
            more = per_replica - (total - used)
            out.append(Finding(
                "gpus", "binds",
                f"the cluster's GPU count binds: {used} of {total} GPUs used; another replica needs {more} more",
            ))
        else:
            out.append(Finding("gpus", "slack", f"GPUs: {used} of {total} used"))
    elif used == total:
        out.append(Finding("gpus", "tight", f"every GPU is used ({used}): more GPUs might lower latency further"))
    elif plan.status == "evaluated":  # a layout the user gave: nothing was compared
        out.append(Finding("gpus", "slack", f"GPUs: {used} of {total} used"))
    else:
        out.append(Finding("gpus", "slack",
                           f"GPUs: {used} of {total} used; the other {total - used} would not lower latency"))

    # What the user fixed.
    pins = {k: v for k, v in p.pins.model_dump().items() if v is not None}
    for key, value in pins.items():
        shown = ",".join(f"{a}:{b}" for a, b in value) if key == "stages" else value
        out.append(Finding("pin", "pinned", f"--{key.replace('_', '-')} {shown} was fixed by you"))
    return sorted(out, key=lambda f: STATUS_ORDER.index(f.status))


# --- the runner-up -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerUp:
    """The best plan with another replica shape, and why the winner beat it."""

    plan: Plan | None
    proven: bool
    seconds: float
    lines: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        if self.plan is None:
            return {"found": False, "proven": self.proven, "seconds": round(self.seconds, 3), "why": list(self.lines)}
        m = self.plan.prediction.metrics
        return {
            "found": True, "proven": self.proven, "seconds": round(self.seconds, 3),
            "degrees": degrees(self.plan.problem, self.plan.layout),
            "stages": [list(s) for s in self.plan.layout.stages],
            "metrics": {"ttft_ms": round(m.ttft_ms, 4), "tpot_ms": round(m.tpot_ms, 4), "e2e_ms": round(m.e2e_ms, 4),
                        "output_tokens_per_s": round(m.output_tokens_per_s, 4), "batch": m.batch},
            "why": list(self.lines),
        }


def runner_up(plan: Plan, time_limit_s: float | None = 10.0, work_limit: float | None = None) -> RunnerUp:
    """Solve again with the winner's (tp, sp, attention groups, expert-tp, stage count) forbidden.

    Replicas are left free: they never change latency and only scale throughput, so forbidding one
    replica count would just return the same shape with another. Costs about one more solve (seeded,
    as ``solve`` is, by the even-stage oracle without the winner's shape); ``time_limit_s`` (wall
    clock) or ``work_limit`` (``Deadline``'s work: the same answer on every machine) bounds it, and an
    unproven best is reported as such. It is a view: a failure is reported, never raised.
    """
    started = time.perf_counter()
    deadline = Deadline(time_limit_s, work_limit)
    try:
        return _runner_up(plan, deadline, started)
    except SolverLimitError:
        return RunnerUp(None, False, time.perf_counter() - started,
                        (f"no runner-up found within {deadline.within()}",))
    except Exception as exc:  # noqa: BLE001 - the plan stands; only the comparison is lost
        return RunnerUp(None, False, time.perf_counter() - started,
                        (f"runner-up could not be computed: {type(exc).__name__}: {exc}",))


def _runner_up(plan: Plan, deadline: Deadline, started: float) -> RunnerUp:
    """``solve``'s search (``optimise``) with the winner's (shape, stage count) excluded."""
    lay = plan.layout
    winner = (Shape(lay.tp, lay.sp, lay.attn_dp, lay.expert_tp), lay.pp)
    result = optimise(plan.problem, deadline, excluded=[winner])
    if isinstance(result, NoPlan):
        return RunnerUp(None, True, time.perf_counter() - started, ("no other replica shape is feasible",))
    elapsed = time.perf_counter() - started
    status = "optimal" if result.proven else "feasible"
    other = decode(plan.problem, result.layout, status, result.objective_value, elapsed)
    return RunnerUp(other, result.proven, elapsed, tuple(compare(plan, other)))


def shape_text(plan: Plan) -> str:
    lay = plan.layout
    text = f"dp={lay.dp} pp={lay.pp} tp={lay.tp} sp={lay.sp} attention groups={lay.attn_dp}"
    if plan.problem.model.is_moe:
        text += f" ep={lay.ep}" + (f" expert-tp={lay.expert_tp}" if lay.expert_tp > 1 else "")
    return text + f", batch {lay.batch:,} ({_n(lay.num_gpus, 'GPU')})"


def compare(winner: Plan, other: Plan) -> list[str]:
    """Why ``winner`` beat ``other``: the objective, its components, the operators that differ most."""
    a, b = winner.prediction.metrics, other.prediction.metrics
    osl = winner.problem.workload.osl
    lines = [f"runner-up: {shape_text(other)}"]
    if winner.problem.objective is Objective.LATENCY:
        lines.append(
            f"end-to-end {b.e2e_ms:,.1f} ms vs {a.e2e_ms:,.1f} ms ({_pct(b.e2e_ms, a.e2e_ms)}): "
            f"TTFT {b.ttft_ms:,.2f} vs {a.ttft_ms:,.2f} ms ({_delta(b.ttft_ms - a.ttft_ms, 2)}), "
            f"{osl - 1} x TPOT {b.tpot_ms:,.3f} vs {a.tpot_ms:,.3f} ms ({_delta((osl - 1) * (b.tpot_ms - a.tpot_ms))})"
        )
        tied = math.isclose(a.e2e_ms, b.e2e_ms, rel_tol=1e-9)
    else:
        lines.append(
            f"{b.output_tokens_per_s:,.0f} tok/s vs {a.output_tokens_per_s:,.0f} "
            f"({_pct(b.output_tokens_per_s, a.output_tokens_per_s)}), "
            f"{b.output_tokens_per_s_per_gpu:,.1f} vs {a.output_tokens_per_s_per_gpu:,.1f} per GPU"
        )
        lines.append(_round_compare(winner, other))
        tied = math.isclose(a.output_tokens_per_s, b.output_tokens_per_s, rel_tol=1e-9)
    if tied:
        lines.append("the objective ties; the tie-break (fewer GPUs, then fewer stages, then the smaller shape) "
                     "chose the winner")
    if winner.problem.objective is Objective.LATENCY:
        for phase, what in (("decode", "per output token"), ("prefill", "prefill")):
            diffs = _op_deltas(winner, other, phase, busiest=False)
            if diffs:
                lines.append(f"{what}, through all stages, runner-up minus winner: "
                             + ", ".join(f"{op} {_delta(ms, 3)}" for op, ms in diffs))
    else:
        diffs = _op_deltas(winner, other, "decode", busiest=True)
        if diffs:
            lines.append("decode round on the busiest stage (one step x microbatches), runner-up minus winner: "
                         + ", ".join(f"{op} {_delta(ms, 3)}" for op, ms in diffs))
    return lines


def _round_parts(plan: Plan) -> tuple[int, float, float, float]:
    """(requests in flight over all replicas, TPOT ms, its decode round ms, its prefill share ms): a
    token costs a decode round plus the other requests' prefill that shares its steps."""
    m = plan.prediction.metrics
    return plan.layout.dp * m.batch, m.tpot_ms, m.decode_step_ms, m.tpot_ms - m.decode_step_ms


def _round_compare(winner: Plan, other: Plan) -> str:
    ta, ca, da, pa = _round_parts(winner)
    tb, cb, db, pb = _round_parts(other)
    return (f"requests in flight {tb:,} vs {ta:,}; TPOT {cb:,.1f} vs {ca:,.1f} ms = decode round {db:,.1f} vs "
            f"{da:,.1f} ({_delta(db - da)}) + prefill share {pb:,.1f} vs {pa:,.1f} ({_delta(pb - pa)})")


def _op_deltas(winner: Plan, other: Plan, phase: str, busiest: bool, top: int = 3) -> list[tuple[str, float]]:
    """The operators whose time (ms) differs most: summed over the stages (one microbatch's pass), or
    on the busiest stage times the microbatches it serves per round (what bounds a pipelined round)."""
    def totals(plan: Plan) -> dict[str, float]:
        stages: Sequence[StageTiming] = plan.prediction.stages
        scale = 1
        if busiest:
            stages = [max(stages, key=lambda st: getattr(st, f"{phase}_ms") + getattr(st, f"send_{phase}_ms"))]
            scale = plan.prediction.microbatches
        out: dict[str, float] = {}
        for st in stages:
            for op, us in getattr(st, f"{phase}_ops_us").items():
                out[op] = out.get(op, 0.0) + scale * us / 1e3
            out["send"] = out.get("send", 0.0) + scale * getattr(st, f"send_{phase}_ms")
        return out

    a, b = totals(winner), totals(other)
    deltas = [(op, b.get(op, 0.0) - a.get(op, 0.0)) for op in sorted(set(a) | set(b))]
    deltas = [d for d in deltas if abs(d[1]) >= 5e-4]
    return sorted(deltas, key=lambda d: -abs(d[1]))[:top]


def _pct(x: float, ref: float) -> str:
    return f"{(x - ref) / ref:+.2%}" if ref else "n/a"


def _delta(ms: float, digits: int = 1) -> str:
    return f"{ms:+,.{digits}f} ms"


# --- HTML ---------------------------------------------------------------------------------------------


def _template() -> str:
    return resources.files("shardplan.solver.outputs").joinpath("report_template.html").read_text(encoding="utf-8")


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs  # lazy: see the module docstring

    js: str = get_plotlyjs()
    return js


def _figure_div(fig: Figure, div_id: str) -> str:
    div: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True})
    return div


def _page(title: str, body: str) -> str:
    """The template with its three slots filled in one pass (the inlined plotly.js is never rescanned)."""
    values = {
        "TITLE": html.escape(title),
        "PLOTLY_JS": _plotly_js().replace("</script>", "<\\/script>"),
        "BODY": body,
    }
    return re.sub(r"\{\{(TITLE|PLOTLY_JS|BODY)\}\}", lambda m: values[m.group(1)], _template())


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def plan_report(
    plan: Plan,
    data: dict[str, Any],
    findings: list[Finding],
    runner: RunnerUp | None = None,
    runner_note: str | None = None,
) -> str:
    """One self-contained HTML page describing a solved (or evaluated) plan."""
    import plotly.graph_objects as go  # lazy: see the module docstring

    p = plan.problem
    text = metric_text(data["metrics"])
    e = html.escape
    parts = [
        f"<h1>{e(data['model'])}</h1>",
        f'<p class="sub">{e(data["cluster"])}</p>',
        f'<p class="sub">objective: {e(data["objective"])}, status: <b id="status">{e(data["status"])}</b>'
        + (f", solved in {data['solve_time_s']:.2f} s" if data.get("solve_time_s") is not None else "")
        + f"; workload {p.workload.isl:,} tokens in, {p.workload.osl:,} out; profile {e(data['profile'])}</p>",
        '<section class="metrics">'
        + "".join(
            f'<div class="metric"><div class="label">{label}</div>'
            f'<div class="value" id="metric-{key}">{e(text[key])}</div></div>'
            for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end-to-end"),
                               ("tokens_per_s", "throughput (cluster)"), ("tokens_per_s_per_gpu", "throughput per GPU"),
                               ("batch", "batch per replica"))
        )
        + "</section>",
        *([f'<p class="sub" id="measured-error">{e(measured)}</p>'] if (measured := measured_error_text(data)) else []),
        *([f'<p class="sub" id="limits-at">{e(held)}</p>'] if (held := limits_at_text(data)) else []),
        "<h2>Layout</h2><ul>"
        + "".join(f"<li>{e(line)}</li>" for line in layout_lines(data, p.cluster.num_gpus, p.cluster.gpus_per_node))
        + "</ul>",
        "<h2>Binding constraints</h2>" + _table(
            ["constraint", "status", ""],
            [[e(f.constraint), f'<span class="st {f.status}">{e(f.status)}</span>', e(f.message)] for f in findings],
            "findings",
        ),
        "<h2>Why this plan</h2>" + _why_html(runner, runner_note),
    ]

    # Memory per GPU, one bar per stage.
    mem = data["memory_per_stage"]
    names = [f"stage {r['stage']}" for r in mem]
    fig = go.Figure()
    for key, label, color in (("weights", "weights", "#4e79a7"), ("kv_cache", "KV cache", "#f28e2b"),
                              ("activations", "activations", "#e15759"), ("overhead", "overhead", "#76b7b2")):
        fig.add_bar(y=names, x=[r[key] for r in mem], name=label, orientation="h", marker_color=color,
                    hovertemplate="%{y}: %{x:.2f} GiB " + label + "<extra></extra>")
    fig.add_bar(y=names, x=[max(0.0, r["free"]) for r in mem], name="free", orientation="h", marker_color="#d9d9d9",
                hovertemplate="%{y}: %{x:.2f} GiB free<extra></extra>")
    limit = mem[0]["limit"]
    fig.add_vline(x=limit, line_dash="dash", line_color="#333", annotation_text=f"limit {limit:.1f} GiB")
    fig.update_layout(barmode="stack", height=160 + 40 * len(mem), margin=dict(l=70, r=20, t=30, b=40),
                      legend_traceorder="normal",
                      xaxis_title="GiB per GPU (every GPU of a stage holds the same)", yaxis_autorange="reversed")
    parts.append("<h2>Memory per GPU</h2>" + _figure_div(fig, "fig-memory"))
    parts.append(_table(
        ["stage", "GPUs", "weights", "KV cache", "activations", "overhead", "total", "limit", "free"],
        [[str(r["stage"]), gpu_span(data["stages"][r["stage"]]["gpus"]), f"{r['weights']:.2f}", f"{r['kv_cache']:.2f}",
          f"{r['activations']:.2f}", f"{r['overhead']:.2f}", f"{r['total']:.2f}", f"{r['limit']:.1f}",
          f"{r['free']:.2f}"]
         for r in mem],
        "numbers",
    ))

    # Time per stage and operator, both phases.
    parts.append("<h2>Time per stage and operator</h2>")
    for phase in ("prefill", "decode"):
        parts.append(_figure_div(_time_figure(data["breakdown"], phase), f"fig-time-{phase}"))
    parts.append(
        '<p class="note">One step of each stage: prefill of a chunk of prompts, decode of one microbatch '
        f"({data['microbatches']} in flight). TTFT sums the prefill steps and sends; "
        "TPOT is the pipelined decode round.</p>"
    )

    parts.append("<h2>Execution DAG</h2>" + _dag_html(plan))
    return _page(f"shardplan: {data['model']}", "\n".join(parts))


def _why_html(runner: RunnerUp | None, note: str | None) -> str:
    if runner is None:
        return f'<p class="note">{html.escape(note or "runner-up not computed")}</p>'
    proven = "" if runner.proven else " (not proven optimal)"
    head = f'<p class="note">computed in {runner.seconds:.2f} s{proven}</p>'
    return head + "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in runner.lines) + "</ul>"


def _time_figure(breakdown: list[dict[str, Any]], phase: str) -> Figure:
    import plotly.graph_objects as go  # lazy: see the module docstring
    from plotly.colors import qualitative

    stages = [f"stage {s['index']}" for s in breakdown]
    ops = sorted({op for s in breakdown for op in s[f"{phase}_ops_us"]})
    palette = qualitative.Dark24 + qualitative.Light24
    fig = go.Figure()
    for i, op in enumerate(ops):
        fig.add_bar(x=stages, y=[s[f"{phase}_ops_us"].get(op, 0.0) / 1e3 for s in breakdown], name=op,
                    marker_color=palette[i % len(palette)], hovertemplate="%{x} " + op + ": %{y:.3f} ms<extra></extra>")
    fig.add_bar(x=stages, y=[s[f"send_{phase}_ms"] for s in breakdown], name="send to next stage",
                marker_color="#7f7f7f",
                hovertemplate="%{x} send: %{y:.3f} ms<extra></extra>")
    fig.update_layout(barmode="stack", title=f"{phase}: one step per stage", yaxis_title="ms",
                      height=380, margin=dict(l=60, r=20, t=50, b=40), legend_traceorder="normal")
    return fig


def _dag_html(plan: Plan) -> str:
    """Replica -> phase -> stage -> layer -> operator, as nested <details>; replica 0 in full."""
    # Lazily on purpose: networkx costs about 0.2 s of CPU to import, and only DAG work needs it.
    import networkx as nx

    from shardplan.solver.dag import build_dag

    try:
        dag = build_dag(plan, "logical")
    except Exception as exc:  # the DAG is a view here: a failure must not cost the whole report
        return (f'<p class="note">the execution DAG could not be built: {html.escape(type(exc).__name__)}: '
                f"{html.escape(str(exc))}</p>")

    order = {n: i for i, n in enumerate(nx.topological_sort(dag))}
    # tree[(key, value)]: the branch below, e.g. ("replica", 0) -> ("phase", "decode") -> ...; tree["_nodes"]:
    # the (node, attributes) pairs that stop at this depth.
    tree: dict[Any, Any] = {}
    for node, d in sorted(dag.nodes(data=True), key=lambda item: order[item[0]]):
        path: list[tuple[str, Any]] = []
        for key in ("replica", "phase", "stage", "layer"):
            if key in d and d[key] is not None:
                path.append((key, d[key]))
            else:
                break
        branch = tree
        for step in path:
            branch = branch.setdefault(step, {})
        branch.setdefault("_nodes", []).append((node, d))

    e = html.escape
    edges = dag.number_of_edges()

    def node_li(node: str, d: dict[str, Any]) -> str:
        ranks = d.get("ranks") or ()
        where = f" GPUs {gpu_span(list(ranks))}" if ranks else ""
        extra = f", {len(d['experts'])} experts" if d.get("experts") else ""
        us = d.get("est_us")
        timing = f" {us:,.1f} us" if us else ""
        op = f" {e(str(d['op']))}" if d.get("op") else ""
        return (f'<li><span class="kind">{e(str(d.get("kind")))}</span>{op}{timing}'
                f'<span class="dim">{e(where)}{e(extra)} [{e(str(node))}]</span></li>')

    def render(branch: dict[Any, Any], depth: int, replica0: bool) -> str:
        html_parts = []
        leaves = branch.get("_nodes", [])
        if leaves:
            html_parts.append("<ul>" + "".join(node_li(n, d) for n, d in leaves) + "</ul>")
        for key, value in [k for k in branch if k != "_nodes"]:
            child = branch[(key, value)]
            count = _count(child)
            if key == "replica" and value != 0:
                gpus = sorted({r for _, d in _walk(child) for r in (d.get("ranks") or ())})
                on_gpus = gpu_span(gpus) if gpus else "-"
                html_parts.append(f"<details><summary>replica {value}: as replica 0, on GPUs {on_gpus} "
                                  f'<span class="dim">({count} nodes)</span></summary></details>')
                continue
            label = {"replica": "replica", "phase": "", "stage": "stage", "layer": "layer"}[key]
            title = f"{label} {value}".strip()
            if key == "layer":
                kinds: set[str] = {d["layer_kind"] for _, d in _walk(child) if d.get("layer_kind")}
                title += f" ({', '.join(sorted(kinds))})" if kinds else ""
            opened = " open" if key in ("replica",) and value == 0 else ""
            html_parts.append(f'<details{opened}><summary>{e(title)} <span class="dim">({count} nodes)</span></summary>'
                              f"{render(child, depth + 1, replica0)}</details>")
        return "".join(html_parts)

    folded = dag.graph.get("folded")
    detail = e(str(dag.graph.get("detail", "logical")))
    head = (f'<p class="note">{dag.number_of_nodes():,} nodes, {edges:,} edges ({detail} detail'
            + (", replicas folded into one" if folded else "")
            + "). Open a branch to see its stages, layers and operators; "
            "us = the cost model's estimate.</p>")
    return head + f'<div class="dag">{render(tree, 0, True)}</div>'


def _walk(branch: dict[Any, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key, value in branch.items():
        if key == "_nodes":
            yield from value
        else:
            yield from _walk(value)


def _count(branch: dict[Any, Any]) -> int:
    return sum(1 for _ in _walk(branch))


def enumeration_report(problem: Problem, rows: list[dict[str, Any]], marks: list[bool], partial: bool = False) -> str:
    """The latency-throughput scatter of every enumerated plan with its Pareto frontier, and the frontier's table.
    ``rows``: each plan's index, degrees, num_gpus and metrics (``plan_dict``'s); ``partial``: the
    enumeration stopped before visiting every layout."""
    import plotly.graph_objects as go  # lazy: see the module docstring

    e = html.escape
    def hover(row: dict[str, Any]) -> str:
        d = row["degrees"]
        return (f"#{row['index']} dp={d['dp']} pp={d['pp']} tp={d['tp']} sp={d['sp']} groups={d['attn_dp']} "
                f"ep={d['ep']}"
                f"<br>batch {row['metrics']['batch']:,}, {row['num_gpus']} GPUs")

    fig = go.Figure()
    for on, name, color in ((False, "dominated", "#9aa5b1"), (True, "Pareto frontier", "#d62728")):
        pts = [r for r, m in zip(rows, marks, strict=True) if m == on]
        fig.add_scatter(
            x=[r["metrics"]["e2e_ms"] for r in pts], y=[r["metrics"]["output_tokens_per_s"] for r in pts],
            mode="markers", name=name, marker=dict(color=color, size=9 if on else 7),
            text=[hover(r) for r in pts], hovertemplate="%{text}<br>%{x:,.0f} ms, %{y:,.0f} tok/s<extra></extra>",
        )
    front = sorted((r for r, m in zip(rows, marks, strict=True) if m), key=lambda r: r["metrics"]["e2e_ms"])
    fig.add_scatter(x=[r["metrics"]["e2e_ms"] for r in front], y=[r["metrics"]["output_tokens_per_s"] for r in front],
                    mode="lines", line=dict(color="#d62728", shape="hv"), name="frontier", hoverinfo="skip")
    fig.update_layout(xaxis_title="end-to-end latency of a request (ms)", yaxis_title="output tokens/s (cluster)",
                      xaxis_type="log", height=520, margin=dict(l=70, r=20, t=30, b=50))
    table = _table(
        ["#", "dp", "pp", "tp", "sp", "attn groups", "ep", "batch", "GPUs", "TTFT", "TPOT", "e2e", "tok/s",
         "tok/s/GPU"],
        [[str(r["index"]), *(str(r["degrees"][k]) for k in ("dp", "pp", "tp", "sp", "attn_dp", "ep")),
          f"{r['metrics']['batch']:,}", str(r["num_gpus"]), *(e(metric_text(r["metrics"])[k]) for k in
          ("ttft", "tpot", "e2e", "tokens_per_s", "tokens_per_s_per_gpu"))] for r in front],
        "numbers",
    )
    body = "\n".join([
        f"<h1>{e(problem.model.name)}: every feasible layout</h1>",
        f'<p class="sub">{e(problem.cluster.describe())}</p>',
        f'<p class="sub">objective used for each layout\'s boundaries and batch: {e(problem.objective.value)}; '
        f'workload {problem.workload.isl:,} tokens in, {problem.workload.osl:,} out</p>',
        f'<p><b id="plan-count">{len(rows)}</b> feasible layouts, '
        f'<b id="pareto-count">{len(front)}</b> on the Pareto frontier '
        "of end-to-end latency against cluster throughput"
        + (" (partial: the enumeration stopped before visiting every layout)" if partial else "") + ".</p>",
        _figure_div(fig, "fig-pareto"),
        "<h2>Pareto frontier</h2>" + table,
    ])
    return _page(f"shardplan: {problem.model.name} layouts", body)


def write_report(path: str, page: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def findings_dicts(findings: list[Finding]) -> list[dict[str, str]]:
    return [asdict(f) for f in findings]



# --- serving modes: tokens/s per GPU against tokens/s per user ------------------------------------

MODE_COLORS = {"colocated": "#4e79a7", "disagg": "#e15759"}
MODE_NAMES = {"colocated": "colocated", "disagg": "disaggregated"}


def pools_brief(data: dict[str, Any]) -> str:
    """A disaggregated plan's pools in one line: ``prefill 2x(tp=4) decode 1x(tp=2,attn_dp=4,batch=64)``, a
    pool's batch limit where it has one (an enumeration lists a decode layout at several: without it, two such
    rows held at the same requests in flight read the same)."""
    def one(pool: dict[str, Any]) -> str:
        deg = pool["degrees"]
        shape = ",".join(f"{k}={deg[k]}" for k in ("pp", "tp", "sp", "attn_dp") if deg[k] != 1) or "1 GPU"
        limit = f",batch={pool['max_batch']}" if pool.get("max_batch") else ""
        return f"{pool['workers']}x({shape}{limit})"

    return f"prefill {one(data['prefill'])} decode {one(data['decode'])}"


def pool_spec(pool: dict[str, Any]) -> str:
    """The pool as ``evaluate --serving disagg --prefill/--decode`` takes it, its batch limit included: a
    decode pool's limit is part of the deployment (with it the pool at its limit sets the rate, without
    it the same requests in flight may push it further), so the same pools need it.

    >>> pool_spec({"workers": 1, "degrees": {"pp": 1, "tp": 2, "sp": 1, "ep": 1, "attn_dp": 1, "expert_tp": 1},
    ...            "max_batch": 278})
    'workers=1,tp=2,batch=278'
    """
    deg = pool["degrees"]
    parts = [f"workers={pool['workers']}"]
    parts += [f"{k}={deg[k]}" for k in ("pp", "tp", "sp", "attn_dp", "ep", "expert_tp") if deg[k] != 1]
    if pool.get("max_batch"):
        parts.append(f"batch={pool['max_batch']}")
    return ",".join(parts)


def pool_line(role: str, pool: dict[str, Any]) -> str:
    """One pool of a disaggregated plan in words: workers, their shape (as ``--prefill``/``--decode``
    take it), GPUs and memory."""
    first, last = pool["gpus"]
    return (f"{role:<8} {pool['workers']} worker(s) x {pool['gpus_per_worker']} GPUs (--{role} {pool_spec(pool)}), "
            f"GPUs {first}-{last}, {pool['memory']['total']:.1f} of {pool['memory']['limit']:.1f} GiB per GPU")


def shape_brief(data: dict[str, Any]) -> str:
    """Either mode's plan in one line: a colocated layout's degrees, or a disaggregated plan's pools."""
    if data.get("prefill") is not None:
        return pools_brief(data)
    d = data["degrees"]
    return ", ".join(f"{k}={d[k]}" for k in ("dp", "pp", "tp", "sp", "attn_dp", "ep") if d.get(k, 1) != 1) or "1 GPU"


def _per_gpu_figure(series: list[tuple[str, list[dict[str, Any]], dict[str, Any]]],
                    frontier: list[dict[str, Any]] | None = None) -> Figure:
    """Output tokens/s per GPU (y) against tokens/s per user (x): one trace per (name, plans, marker);
    ``frontier``: plans joined by a step line, highest per-user rate last."""
    import plotly.graph_objects as go  # lazy: see the module docstring

    def xy(rows: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
        return ([r["metrics"]["output_tokens_per_s_per_user"] for r in rows],
                [r["metrics"]["output_tokens_per_s_per_gpu"] for r in rows])

    fig = go.Figure()
    for name, rows, marker in series:
        x, y = xy(rows)
        fig.add_scatter(x=x, y=y, mode="markers", name=name, marker=marker,
                        text=[f"{r['num_gpus']} GPUs: {html.escape(shape_brief(r))}" for r in rows],
                        hovertemplate="%{text}<br>%{x:,.1f} tok/s/user, %{y:,.1f} tok/s/GPU<extra></extra>")
    if frontier:
        x, y = xy(sorted(frontier, key=lambda r: r["metrics"]["output_tokens_per_s_per_user"]))
        # Vertical first: between two frontier plans, what is reachable is the lower per-GPU rate.
        fig.add_scatter(x=x, y=y, mode="lines", line=dict(color="#d62728", shape="vh"), showlegend=False,
                        hoverinfo="skip")
    fig.update_layout(xaxis_title="output tokens/s per user (1000 / TPOT)", yaxis_title="output tokens/s per GPU",
                      height=480, margin=dict(l=70, r=20, t=30, b=50), xaxis_rangemode="tozero",
                      yaxis_rangemode="tozero")
    return fig


def _serving_row(data: dict[str, Any]) -> list[str]:
    """A plan's cells in the serving tables: GPUs, the two axes, TTFT, TPOT, requests/s, its shape."""
    m, text = data["metrics"], metric_text(data["metrics"])
    requests = m["output_tokens_per_s"] / data["workload"]["osl"]
    shown = [text[k] for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft", "tpot")]
    return [str(data["num_gpus"]), *map(html.escape, shown), f"{requests:,.2f}", html.escape(shape_brief(data))]


SERVING_HEADER = ["GPUs", "tok/s/GPU", "tok/s/user", "TTFT", "TPOT", "requests/s", "layout"]


def _workload_line(problem: Problem) -> str:
    wl = problem.workload
    limits = [f"TTFT \u2264 {wl.ttft_ms:g} ms" if wl.ttft_ms is not None else "",
              f"TPOT \u2264 {wl.tpot_ms:g} ms" if wl.tpot_ms is not None else ""]
    shown = ", ".join(x for x in limits if x)
    return f"workload {wl.isl:,} tokens in, {wl.osl:,} out" + (f"; {shown}" if shown else "")


def _no_plan_note(data: dict[str, Any]) -> str:
    """Why a mode has no plan: the rules that refused it, or the time limit that cut it short."""
    if data["status"] == "infeasible":
        return "infeasible: " + "; ".join(f"{c['rule']}: {c['message']}" for c in data["conflict"])
    return data["message"]


def serving_report(problem: Problem, modes: dict[str, dict[str, Any]], chosen: str | None, serving: str,
                   rate_rps: float | None = None) -> str:
    """The page of ``solve --serving``: each mode's best plan (``modes``: each mode's JSON object) on the
    tokens/s per GPU against tokens/s per user chart, side by side in one table, then each in words."""
    e = html.escape
    series = []
    planned = {mode: data for mode, data in modes.items() if "metrics" in data}  # neither infeasible nor cut short
    for mode, data in planned.items():
        marker = dict(color=MODE_COLORS[mode], size=16 if mode == chosen else 11,
                      symbol="star" if mode == chosen else "circle")
        series.append((MODE_NAMES[mode] + (" (chosen)" if mode == chosen else ""), [data], marker))
    rows = []
    for mode, data in modes.items():
        cells = (_serving_row(data) if mode in planned else ["", "", "", "", "", "", e(_no_plan_note(data))])
        mark = " <b>chosen</b>" if mode == chosen else ""
        rows.append([f'<span id="mode-{mode}">{e(MODE_NAMES[mode])}</span>{mark}', e(data["status"]), *cells])
    goal = (f"the fewest GPUs that sustain {rate_rps:g} requests/s" if rate_rps is not None
            else "the most output tokens/s per GPU")
    parts = [
        f"<h1>{e(problem.model.name)}: serving {e(serving)}</h1>",
        f'<p class="sub">{e(problem.cluster.describe())}</p>',
        f'<p class="sub">{e(_workload_line(problem))}; objective: {e(goal)}; chosen: '
        f'<b id="chosen">{e(MODE_NAMES[chosen]) if chosen else "none (no mode has a plan)"}</b></p>',
        _figure_div(_per_gpu_figure(series), "fig-modes") if series else "",
        "<h2>Both modes</h2>" if len(modes) > 1 else "<h2>The plan</h2>",
        _table(["mode", "status", *SERVING_HEADER], rows, "numbers"),
    ]
    for mode, data in planned.items():
        if mode == "disagg":
            lines = [pool_line("prefill", data["prefill"]), pool_line("decode", data["decode"]),
                     f"KV transfer of one prompt: {data['kv_transfer']['bytes_per_prompt'] / 1e6:,.1f} MB over "
                     f"{data['kv_transfer']['tier']}; {data['metrics']['batch']:,} requests in flight, "
                     f"rate set by {data['metrics']['bottleneck']}"]
        else:
            lines = layout_lines(data, problem.cluster.num_gpus, problem.cluster.gpus_per_node)
        lines += [line for line in (measured_error_text(data), limits_at_text(data)) if line is not None]
        parts.append(f"<h2>{e(MODE_NAMES[mode])}</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")
    return _page(f"shardplan: {problem.model.name} serving", "\n".join(parts))


def frontier_report(problem: Problem, rows: list[dict[str, Any]], pareto: list[int],
                              partial: bool = False) -> str:
    """The page of ``enumerate --serving disagg|auto``: every deployment (and with auto every colocated
    layout, in its own colour) on the tokens/s per GPU against tokens/s per user chart, the frontier
    marked and joined, and the frontier's table. ``rows``: each plan's JSON object with its ``index``
    (a colocated one has no ``prefill``); ``pareto``: the frontier's indices."""
    e = html.escape
    on = set(pareto)
    front = sorted((r for r in rows if r["index"] in on), key=lambda r: r["metrics"]["output_tokens_per_s_per_user"])
    colocated = [r for r in rows if r.get("prefill") is None]
    both = bool(colocated) and len(colocated) < len(rows)
    series = [("colocated, dominated", [r for r in colocated if r["index"] not in on], dict(color="#1f77b4", size=7)),
              ("disaggregated, dominated" if both else "dominated",
               [r for r in rows if r["index"] not in on and r.get("prefill") is not None],
               dict(color="#9aa5b1", size=7)),
              ("frontier", front, dict(color="#d62728", size=9))]
    series = [entry for entry in series if entry[1] or entry[0] == "frontier"]
    what = "colocated layouts and disaggregated deployments" if both else (
        "colocated layouts" if colocated else "disaggregated deployments")
    table = _table(["#", *SERVING_HEADER], [[str(r["index"]), *_serving_row(r)] for r in front], "numbers")
    body = "\n".join([
        f"<h1>{e(problem.model.name)}: {what}</h1>",
        f'<p class="sub">{e(problem.cluster.describe())}</p>',
        f'<p class="sub">{e(_workload_line(problem))}</p>',
        f'<p><b id="plan-count">{len(rows)}</b> {"plans" if both else what.split()[-1]}, '
        f'<b id="pareto-count">{len(front)}</b> on the frontier of tokens/s per GPU against tokens/s per user'
        + (" (partial: the enumeration stopped before visiting every candidate)" if partial else "") + ".</p>",
        _figure_div(_per_gpu_figure(series, front), "fig-pareto"),
        "<h2>Frontier</h2>" + table,
    ])
    return _page(f"shardplan: {problem.model.name} {what}", body)
