"""Human views of the CLI's results: rich tables on a terminal, plain text when piped.

Each ``*_rows`` function builds the data ``--json`` prints; each ``print_*`` shows the same data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from shardplan.hardware import list_gpus
from shardplan.hardware.profile import Profile, composed_profiles, list_profiles
from shardplan.models import presets
from shardplan.models.derived import kv_bytes_per_token, parameter_counts, weight_bytes_total
from shardplan.rules.plan import Plan
from shardplan.solver.outputs.report import (
    Finding,
    RunnerUp,
    layout_lines,
    limits_at_text,
    measured_error_text,
    metric_text,
)

# Piped output keeps a wide, fixed width so tables do not wrap and the bytes do not depend on the
# terminal that happened to run the command.


class _Console(Console):
    """rich's console, except that a closed stdout raises ``BrokenPipeError`` for ``main`` to end
    quietly with exit 0: rich itself exits with 1, which is shardplan's code for "infeasible"."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


# A closed stdout (``shardplan solve >&-``) is None, not a stream: rich then writes nowhere.
console = _Console(highlight=False, width=None if sys.stdout is not None and sys.stdout.isatty() else 160)


def model_rows() -> list[dict[str, Any]]:
    rows = []
    for preset in presets():
        spec = preset.load()
        counts = parameter_counts(spec)
        rows.append(
            {
                "id": preset.id,
                "aliases": list(preset.aliases),
                "architecture": spec.architecture,
                "layers": spec.num_layers,
                "moe": spec.is_moe,
                "experts": spec.moe.num_experts if spec.moe else 0,
                "params_total": counts.total,
                "params_active": counts.active,
                "weights_dtype": spec.weights_dtype.value,
                "weight_bytes": round(weight_bytes_total(spec)),
                "kv_bytes_per_token": round(kv_bytes_per_token(spec)),
                "source": preset.source,
            }
        )
    return rows


def gpu_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": g.name,
            "aliases": list(g.aliases),
            "hbm_gib": g.hbm_gib,
            "hbm_tb_per_s": g.hbm_tb_per_s,
            "bf16_tflops": g.bf16_tflops,
            "fp8_tflops": g.fp8_tflops,
            "fp4_tflops": g.fp4_tflops,
            "scaleup_gb_per_s": g.scaleup_gb_per_s,
            "scaleup_domain_gpus": g.scaleup_domain_gpus,
            "gpus_per_node": g.gpus_per_node,
            "scaleout_gb_per_s": g.scaleout_gb_per_s,
            "source": g.source,
        }
        for g in list_gpus()
    ]


def profile_rows() -> list[dict[str, Any]]:
    """Every calibration profile, stored then composed: what it models and how well it was fitted (a composed
    profile was fitted on nothing; ``composed`` says where each of its fields came from, None for a stored one)."""

    def row(p: Profile, composed: bool) -> dict[str, Any]:
        return {
            "name": p.name,
            "engine": p.engine,
            "gpu": p.gpu,
            "software": p.software,
            "default": p.default,
            "engine_default": p.engine_default,
            "rows_fitted": p.fit_rows,
            "median_abs_error": p.fit_median_abs_error,
            "composed": p.source if composed else None,
        }

    return [row(p, False) for p in list_profiles()] + [row(p, True) for p in composed_profiles()]


def print_profiles(rows: list[dict[str, Any]]) -> None:
    table = Table(title="Calibration profiles (default: for the GPU / for the GPU with its engine / composed: for an "
                  "engine with no profile of the GPU, the GPU's hardware fields with the engine's behaviour fitted on "
                  "its other GPUs)", title_justify="left")
    for col in ("name", "engine", "GPU", "default", "rows", "median |err|", "software"):
        table.add_column(col, justify="right" if col in ("rows", "median |err|") else "left")
    for r in rows:
        error = r["median_abs_error"]
        table.add_row(
            r["name"], r["engine"] or "-", r["gpu"],
            "engine" if r["engine_default"] else "gpu" if r["default"] else "composed" if r.get("composed") else "",
            _opt(r["rows_fitted"]),
            "-" if error is None else f"{error:.1%}", r["software"],
        )
    console.print(table)


def print_models(rows: list[dict[str, Any]]) -> None:
    table = Table(title="Model presets", title_justify="left")
    for col in ("alias", "id", "layers", "experts", "total", "active", "weights", "KV B/token"):
        table.add_column(col, justify="right" if col not in ("alias", "id") else "left")
    for r in rows:
        table.add_row(
            r["aliases"][0] if r["aliases"] else r["id"],
            r["id"],
            str(r["layers"]),
            str(r["experts"] or "-"),
            _billions(r["params_total"]),
            _billions(r["params_active"]),
            f'{r["weight_bytes"] / 1e9:.1f} GB {r["weights_dtype"]}',
            f'{r["kv_bytes_per_token"]:,}',
        )
    console.print(table)


def print_gpus(rows: list[dict[str, Any]]) -> None:
    table = Table(title="GPU presets (dense peak rates)", title_justify="left")
    for col in ("name", "HBM GiB", "TB/s", "bf16 TF", "fp8 TF", "fp4 TF", "scale-up GB/s", "domain", "NIC GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        table.add_row(
            r["name"], f'{r["hbm_gib"]:g}', f'{r["hbm_tb_per_s"]:g}', f'{r["bf16_tflops"]:g}',
            _opt(r["fp8_tflops"]), _opt(r["fp4_tflops"]), f'{r["scaleup_gb_per_s"]:g}',
            str(r["scaleup_domain_gpus"]), f'{r["scaleout_gb_per_s"]:g}',
        )
    console.print(table)


def print_plan(
    data: dict[str, Any],
    plan: Plan | None = None,
    findings: list[Finding] | None = None,
    runner: RunnerUp | None = None,
    runner_note: str | None = None,
) -> None:
    """A plan dict (``output.plan_dict``): layout, metrics, memory per GPU, binding constraints and, when
    given, why it beat the runner-up (``report.runner_up``)."""
    text = metric_text(data["metrics"])
    cluster = plan.problem.cluster if plan is not None else None
    short = (f"{cluster.num_nodes} x {cluster.gpus_per_node} {cluster.gpu.name} ({cluster.num_gpus} GPUs)"
             if cluster is not None else data["cluster"])
    timing = f", solved in {data['solve_time_s']:.2f} s" if data.get("solve_time_s") is not None else ""
    if data.get("gap") is not None:  # a time limit stopped the search: how far from the proven bound
        timing += f", within {data['gap']:.2%} of the proven bound"
    # Text from the input files (a config's name, a profile file's name) is printed as Text, never as markup:
    # rich reads [...] as markup, and a profile named "[/bold]" ended in MarkupError (exit 3); "[link=...]"
    # made a link of it.
    console.print(Text.assemble((data["model"], "bold"), f" on {short}: {data['status']}, objective "
                                                         f"{data['objective']}{timing}"))
    console.print(Text(data["cluster"], style="dim"))
    wl = plan.problem.workload if plan is not None else None

    console.print("[bold]Layout[/bold]")
    total = cluster.num_gpus if cluster is not None else data["num_gpus"]
    per_node = cluster.gpus_per_node if cluster is not None else max(data["num_gpus"], 1)
    for line in layout_lines(data, total, per_node):
        console.print(f"  {line}", markup=False)

    engine = f" for {data['engine']}" if data.get("engine") else ""
    console.print(Text.assemble(("Metrics", "bold"), f"{engine}, calibration profile {data['profile']}"))
    given = plan is not None and isinstance(plan.problem.profile, Profile)  # --profile FILE: its own name
    composed = {p.name: p.source for p in composed_profiles()}
    if not given and data["profile"] in composed:
        console.print(Text.assemble("  ", (composed[data["profile"]], "dim")))
    request = f" ({wl.isl:,} in, {wl.osl:,} out)" if wl is not None else ""
    console.print(
        f"  TTFT [bold]{text['ttft']}[/bold]   TPOT [bold]{text['tpot']}[/bold]   end-to-end {text['e2e']}{request}"
        f"   batch {text['batch']} per replica"
    )
    console.print(
        f"  decode step {text['decode_step']} (TPOT less the prefill sharing its steps)"
        f"   {text['tokens_per_s_per_user']} per user"
    )
    console.print(
        f"  throughput [bold]{text['tokens_per_s']}[/bold] (cluster), {text['tokens_per_s_per_gpu']} per GPU"
        f"   ({data['microbatches']} decode microbatch{'es' if data['microbatches'] != 1 else ''} in flight)"
    )
    measured = measured_error_text(data)
    if measured is not None:
        console.print(Text.assemble("  ", (measured, "dim")))
    held = limits_at_text(data)
    if held is not None:
        console.print(Text.assemble("  ", (held, "dim")))

    table = Table(title="Memory per GPU (GiB): every GPU of a stage holds the same", title_justify="left")
    for col in ("stage", "GPUs", "weights", "KV cache", "activations", "overhead", "total", "limit", "free"):
        table.add_column(col, justify="right")
    stages = {s["index"]: s for s in data["stages"]}
    for r in data["memory_per_stage"]:
        free = f"{r['free']:.1f}" if r["free"] >= 0 else f"[red]{r['free']:.1f}[/red]"
        gpus = stages[r["stage"]]["gpus"]
        table.add_row(
            str(r["stage"]), f"{gpus[0]}-{gpus[-1]}" if len(gpus) > 1 else str(gpus[0]),
            f"{r['weights']:.1f}", f"{r['kv_cache']:.2f}", f"{r['activations']:.2f}",
            f"{r['overhead']:.1f}", f"{r['total']:.1f}", f"{r['limit']:.1f}", free,
        )
    console.print(table)
    if not data["fits"]:
        console.print(f"[red]does not fit: {data['short_gib']:.1f} GiB short on the fullest GPU[/red]")

    if findings:
        console.print("[bold]Binding constraints[/bold]")
        for f in findings:
            console.print(Text.assemble("  ", (f"{f.status:>6}", _STATUS_STYLE[f.status]), f"  {f.message}"))
    if runner is not None or runner_note:
        console.print("[bold]Why this plan[/bold]")
        if runner is None:
            console.print(f"  {runner_note}", markup=False)
        else:
            for i, line in enumerate(runner.lines):
                console.print(f"  {line}" if i == 0 else f"    {line}", markup=False)
            proven = "" if runner.proven else ", not proven optimal"
            console.print(f"  [dim](runner-up solved in {runner.seconds:.2f} s{proven}; --no-runner-up skips it)[/dim]")


_STATUS_STYLE = {"binds": "bold red", "tight": "yellow", "pinned": "cyan", "slack": "green"}


def _billions(n: int) -> str:
    return f"{n / 1e12:.2f} T" if n >= 1e12 else f"{n / 1e9:.1f} B"


def _opt(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def print_rules(rows: list[dict[str, Any]], detailed: bool) -> None:
    if detailed:
        r = rows[0]
        console.print(f"[bold]{r['id']}[/bold] {r['name']} ({r['kind']})")
        console.print(f"  enforces: {r['statement']}")
        console.print(f"  source:   {r['source']}")
        if r["switch"]:
            console.print(f"  turn off: --allow {r['switch']}")
        console.print(f"  breaks it: {r['example_bad']}")
        console.print(f"  keeps it:  {r['example_good']}")
        return
    table = Table(title="Rules (shardplan rules ID explains one)", title_justify="left")
    for col in ("id", "name", "kind", "switch", "source", "statement"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], r["name"], r["kind"], r["switch"] or "", r["source"], r["statement"])
    console.print(table)


def print_enumeration(count: int, frontier: list[dict[str, Any]], fastest: dict[str, Any] | None,
                      busiest: dict[str, Any] | None, partial: bool) -> None:
    """The frontier's rows (by e2e), the fastest and the busiest layout of ``count``."""
    cut = " (partial: the enumeration stopped before visiting every layout)" if partial else ""
    console.print(
        f"{count} feasible layouts{cut}; {len(frontier)} on the Pareto frontier of end-to-end latency against "
        "throughput:"
    )
    table = Table(title_justify="left")
    columns = ("#", "dp", "pp", "tp", "sp", "attn groups", "ep", "batch", "GPUs", "TTFT", "TPOT", "e2e", "tok/s",
               "tok/s/GPU")
    for col in columns:
        table.add_column(col, justify="right")
    for row in frontier:
        d, text = row["degrees"], metric_text(row["metrics"])
        table.add_row(
            str(row["index"]), str(d["dp"]), str(d["pp"]), str(d["tp"]), str(d["sp"]), str(d["attn_dp"]), str(d["ep"]),
            f"{row['metrics']['batch']:,}", str(row["num_gpus"]), text["ttft"], text["tpot"], text["e2e"],
            text["tokens_per_s"].removesuffix(" tok/s"), text["tokens_per_s_per_gpu"].removesuffix(" tok/s"),
        )
    console.print(table)
    if fastest is not None and busiest is not None:
        console.print(f"lowest latency: #{fastest['index']} ({metric_text(fastest['metrics'])['e2e']}); "
                      f"highest throughput: #{busiest['index']} ({metric_text(busiest['metrics'])['tokens_per_s']})")


class progress:
    """A progress bar on stderr while work runs, only on a terminal; yields a tick(done, total)."""

    def __init__(self, label: str, enabled: bool = True):
        self.enabled = enabled and sys.stderr.isatty()
        self.bar = Progress(console=Console(stderr=True), transient=True) if self.enabled else None
        self.label = label

    def __enter__(self) -> Callable[[int, int | None], None]:
        bar = self.bar
        if bar is None:
            return lambda done, total: None
        bar.start()
        task: TaskID = bar.add_task(self.label, total=None)
        return lambda done, total: bar.update(task, completed=done, total=total)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.bar:
            self.bar.stop()


class working:
    """A transient spinner on stderr with the seconds elapsed, while a search of unknown length runs (the
    caller, ``working.searching``, enables it only on a terminal); gone before the result prints."""

    def __init__(self, label: str):
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.label = label

    def __enter__(self) -> None:
        self.bar.start()
        self.bar.add_task(self.label, total=None)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.bar.stop()
