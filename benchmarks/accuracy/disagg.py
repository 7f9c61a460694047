"""Disaggregated serving: the AIC-SILICON ``mode=disagg`` runs of ``serving_points.csv`` against the cost model.

``python -m benchmarks.accuracy.disagg`` loads the closed-loop runs with separate prefill and decode pools
whose model and GPU have presets, prices each deployment at its concurrency with the engine's profile for
the GPU (as the colocated benchmark and ``--engine`` do; where the engine has none, the one composed of the GPU's
hardware fields and the engine's behaviour, ``hardware/compose.py``) through ``shardplan evaluate --serving
disagg``'s own path (``solver/cost/disagg.py``:
``metrics.ttft_ms`` = serving stack + waiting + prefill + KV transfer, ``metrics.tpot_ms`` = the decode
worker's round at its batch), and prints the median |error| and the median signed error of TTFT and TPOT
per engine and overall. TTFT carries the engine profile's two TTFT-under-load terms, as the colocated
model's does (``request_overhead_ms``, and ``ttft_queue_share`` of the other prompts queued at the prefill
pool). ``--share-fit`` asks what one queue share fitted to these runs alone would give instead: it fits
it on a grid over its physical range (0 to 0.5) and prints it with leave-one-model-out figures (each
source model priced at the share fitted on the others) beside the in-sample ones; nothing is written.

The rows give each role as ``p<prefill>/d<decode>`` (``tp``, ``pp``, ``ep``, ``dp`` = attention-DP,
``moe_tp`` in ``notes``) and the worker counts in ``notes`` (``disagg: X prefill worker(s) x G GPUs + Y
decode worker(s) x G GPUs``). A worker's layout follows ``serving.py``'s conventions for one pool:
attention TP = ``tp``, ``attn_dp`` = ``dp``, ``expert_tp`` = ``moe_tp``, so ``ep = G / moe_tp`` must equal
the row's ``ep``; ``ep`` = 0 (vLLM without expert parallelism) means the experts are tensor-parallel over
the worker's GPUs (``expert_tp = G``). The concurrency is the whole deployment's; the cluster is the row's
GPU count. Models, GPUs, number formats and KV dtypes as in ``serving.py``.

Each measurement counts once (``once_each``): the source repeats runs under other ids, under the R1 and V3
names, and under layouts with and without attention DP; a copy whose recorded decode worker cannot hold in
memory the sequences its own TTFT and TPOT put on it (Little's law) is set aside, as is, of copies that
still disagree, each but the one on the fewest GPUs. Beside the errors it prints the evidence on TPOT: runs
faster than one token per decode round (``one_token_bound_ms``), the decode worker's colocated runs, and the
repeats (``print_repeat_floor``): setups the rows record identically but measured apart, which put a floor
under the error of any model of the recorded fields.
GB200 is priced with engine profiles carrying the B200 engine fields (``SAME_DIE``), written by
``--write-same-die-profiles``. The pools sit on the row's GPUs (``run_layout``: the decode pool right after the
prefill pool where aligned placement would run past them, so a run inside one NVL72 rack moves its cache over
NVLink). Beside the errors it prints the model without the decode worker's admission (its scheduler's
``ttft_wait_steps`` rounds before the first token, in TTFT since 2026-11-27) and the runs whose measured TTFT is a
large share of their life apart from the rest (``print_stalled``), and the errors per engine version, the
runtime image's tag the row names (``print_versions``).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy import serving
from benchmarks.accuracy.serving import (
    ENGINES,
    MODEL_PRESETS,
    SERVING_CSV,
    SOURCE,
    _source_rows,
    _weights,
    offset_table,
    pair_runs,
)
from benchmarks.accuracy.ttft_shape import repeat_spread
from shardplan.hardware import get_gpu
from shardplan.hardware.cluster import ClusterSpec, parse_cluster
from shardplan.hardware.profile import Profile, list_profiles
from shardplan.models import DType, SpecError, get_model
from shardplan.models.derived import kv_bytes_per_sequence, layer_bytes, lm_head_resident_bytes
from shardplan.rules.disagg import DisaggLayout
from shardplan.rules.disagg_plan import check_disagg
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload, resolve_profile
from shardplan.solver.cost.calibration.engine_fit import ENGINE_FIELDS, ENGINE_LIMITS
from shardplan.solver.cost.calibration.fit import write_profile
from shardplan.solver.cost.calibration.runs import OP_TERM_FIELDS, default_kv, parse_engine, serving_model
from shardplan.solver.cost.calibration.ttft_fit import TTFT_FIELDS
from shardplan.solver.cost.disagg import engine_profile, evaluate_disagg, role_problem
from shardplan.solver.cost.evaluate import max_batch
from shardplan.solver.cost.stage import kv_split

_WORKERS = re.compile(r"disagg: (\d+) prefill worker\(s\) x (\d+) GPUs \+ (\d+) decode worker\(s\) x (\d+) GPUs")
_ROLE = re.compile(r"^p(\d+)/d(\d+)$")
_MOE_TP = re.compile(r"moe_tp p(\d+)/d(\d+)")


@dataclass(frozen=True)
class DisaggRun:
    key: str
    engine: str
    source_model: str  # the row's model (DeepSeek-R1 and -V3 share a preset): the leave-one-out unit
    label: str
    problem: Problem
    layout: DisaggLayout
    ttft_ms: float
    tpot_ms: float
    engine_version: str = ""  # the row's engine column after the engine: the Dynamo runtime image's tag


def _skip_reason(row: dict[str, str]) -> str | None:
    if "mode=disagg" not in row["notes"]:
        return "agg"
    if row["model"] not in MODEL_PRESETS:
        return "no-preset"
    try:
        get_gpu(row["gpu"])
    except SpecError:
        return "no-gpu-preset"
    if not row["concurrency"].strip():
        return "no-concurrency"
    return None


def _roles(text: str, field: str) -> tuple[int, int]:
    match = _ROLE.match(text.strip())
    if match is None:
        raise SpecError(field, f"{text!r} is not p<prefill>/d<decode>")
    return int(match[1]), int(match[2])


def _worker(num_layers: int, tp: int, pp: int, dp: int, ep: int, moe_tp: int, moe: bool, gpus: int) -> Layout:
    if not moe:
        layout = Layout.even(num_layers, pp, tp=tp * dp)  # a dense worker: attention DP is more TP ranks
    else:
        g = tp * dp
        expert_tp = g if ep == 0 else moe_tp
        layout = Layout.even(num_layers, pp, tp=tp, attn_dp=dp, expert_tp=expert_tp)
        if ep and layout.ep != ep:
            raise SpecError("ep", f"ep = G / moe_tp = {layout.ep}, the row {ep}")
    if layout.gpus_per_replica != gpus:
        raise SpecError("num_gpus", f"a worker uses {layout.gpus_per_replica} GPUs, the row {gpus}")
    return layout


def run_layout(prefill: Layout, x: int, decode: Layout, y: int, concurrency: int, cluster: ClusterSpec,
               limits: tuple[int | None, int | None]) -> DisaggLayout:
    """Both pools on the row's GPUs: placed from GPU 0 with each worker aligned (``DisaggLayout.place``), or,
    where that runs past the GPUs the row used, the decode pool right after the prefill pool. A 4-GPU prefill
    worker and an 8-GPU decode worker recorded on 12 GB200 are aligned onto GPUs 0-3 and 8-15; past the 12,
    ``transfer_tier`` sent the cache over the NICs, though all 12 sit in one NVL72 rack (one NVLink domain,
    where the other GB200 runs of up to 72 GPUs are priced). On GPUs 0-3 and 4-11 they stay in it."""
    layout = DisaggLayout.place(prefill, x, decode, y, concurrency, cluster, limits)
    if layout.decode.first_gpu + layout.decode.num_gpus <= cluster.num_gpus:
        return layout
    return layout.model_copy(update={"decode": layout.decode.model_copy(update={"first_gpu": layout.prefill.num_gpus})})


def _run(row: dict[str, str], ttft_ms: float, tpot_ms: float) -> DisaggRun:
    engine, version = parse_engine(row["engine"])
    weights = _weights(row["weights_dtype"])
    isl, osl = int(row["isl"]), int(row["osl"])
    model = serving_model(get_model(MODEL_PRESETS[row["model"]]), weights, default_kv(engine, weights), isl, osl)
    found = _WORKERS.search(row["notes"])
    moe_tp = _MOE_TP.search(row["notes"])
    if found is None or moe_tp is None:
        raise SpecError("notes", "no worker counts or moe_tp")
    x, gp, y, gd = (int(v) for v in found.groups())
    roles = {f: _roles(row[f], f) for f in ("tp", "pp", "ep", "dp")}
    workers = []
    for i, gpus in enumerate((gp, gd)):
        tp, pp, ep, dp = (roles[f][i] for f in ("tp", "pp", "ep", "dp"))
        workers.append(_worker(model.num_layers, tp, pp, max(dp, 1), ep, int(moe_tp.groups()[i]) or 1,
                               model.is_moe, gpus))
    concurrency = int(row["concurrency"])
    gpu = get_gpu(row["gpu"])
    # batch_size: each role's limit per attention-DP rank (TensorRT-LLM's --max_batch_size; the AIC configs
    # give SGLang's per rank too: d256 x 32 ranks = 8,192 in flight); "-" when unstated.
    limits = tuple(int(b) * w.attn_dp if b.isdigit() else None
                   for b, w in zip(re.findall(r"[pd]([^/]+)", row["batch_size"]) or ["-", "-"], workers, strict=True))
    cluster = parse_cluster(f"{int(row['num_gpus'])}x{gpu.name}")
    experts_split = any(w.expert_tp > 1 for w in workers)
    problem = Problem(model=model, cluster=cluster, workload=Workload(isl=isl, osl=osl, batch=concurrency),
                      objective=Objective.THROUGHPUT,
                      allow=frozenset({"expert-tp"}) if experts_split else frozenset(), engine=engine)
    layout = run_layout(workers[0], x, workers[1], y, concurrency, cluster, (limits[0], limits[1]))
    label = (f"{row['model'].split('/')[-1]} {weights.value} {gpu.name} {engine} {x}x(tp{row['tp']} dp{row['dp']}) "
             f"{isl}/{osl} c{concurrency}")
    return DisaggRun(row["source"], engine, row["model"], label, problem, layout, ttft_ms, tpot_ms, version)


def load_runs(path: str | Path = SERVING_CSV) -> tuple[list[DisaggRun], Counter[str]]:
    """The usable runs, each measurement once (``once_each``), and the CSV rows each skip reason took."""
    skipped: Counter[str] = Counter()
    usable = []
    for row in _source_rows(path):
        reason = _skip_reason(row)
        if reason == "agg":
            continue
        if reason is not None:
            skipped[reason] += 1
        else:
            usable.append(row)
    return once_each(pair_runs(usable, _run, skipped), skipped), skipped


# --- one measurement, one run ---------------------------------------------------------------------
def _measurement(run: DisaggRun) -> tuple[object, ...]:
    """What identifies one measurement (as ``serving.py``'s): engine, model preset, formats, GPU, workload,
    concurrency and both measured values to the CSV's digits. DeepSeek-R1 and -V3 share a preset, and the
    source merges dumps that repeat runs under either name."""
    p = run.problem
    return (run.engine, p.model.name, p.model.weights_dtype, p.cluster.gpu.name, p.workload.isl, p.workload.osl,
            run.layout.concurrency, run.ttft_ms, run.tpot_ms)


def decoding_per_worker(run: DisaggRun) -> float:
    """Sequences a decode worker held at once in the measured run, by Little's law on its own figures: of
    the ``C / y`` requests per decode worker, the share of each request's life spent decoding,
    ``(OSL - 1) x TPOT / (TTFT + (OSL - 1) x TPOT)``."""
    osl = run.problem.workload.osl
    decode_ms = (osl - 1) * run.tpot_ms
    return run.layout.concurrency / run.layout.decode.workers * decode_ms / (run.ttft_ms + decode_ms)


def decode_worker_holds(run: DisaggRun) -> int:
    """The most sequences the recorded decode worker's memory holds at the mean context of a decoding
    sequence, ISL + OSL / 2 (lenient: an engine that reserves each request's whole ISL + OSL holds fewer),
    with no scheduler cap: memory alone."""
    wl = run.problem.workload
    mean = wl.model_copy(update={"osl": max(1, wl.osl // 2), "batch": 1, "ttft_ms": None, "tpot_ms": None})
    profile = resolve_profile(run.problem)
    uncapped = profile.model_copy(update={"max_batch": 1 << 22})
    worker = run.layout.decode.layout.model_copy(update={"dp": 1})
    return max_batch(run.problem.model_copy(update={"workload": mean}), worker, uncapped)


def once_each(runs: Sequence[DisaggRun], skipped: Counter[str]) -> list[DisaggRun]:
    """Each measurement once, in file order (``serving.py``'s rule, and one physical check):

    - copies with the same layouts are ``duplicate`` rows;
    - a copy whose decode worker cannot hold in memory the sequences its own figures say it held
      (``decoding_per_worker`` > ``decode_worker_holds``) is ``layout-cannot-hold-run``: the recorded
      layout is not what ran (typically a decode worker recorded as tp N, attention DP 1, whose MLA cache
      is replicated on every GPU, at thousands of sequences: the same launch with attention DP N splits it);
    - of copies left that disagree on the layouts, the one with the fewest GPUs is kept and the others are
      ``layout-conflict`` rows (as ``serving.py``'s ``gpu-count-conflict``)."""
    copies: dict[tuple[object, ...], list[DisaggRun]] = defaultdict(list)
    for r in runs:
        copies[_measurement(r)].append(r)
    kept: list[DisaggRun] = []
    for group in copies.values():
        distinct: list[DisaggRun] = []
        for r in group:
            if any(r.layout == d.layout for d in distinct):
                skipped["duplicate"] += 2
            else:
                distinct.append(r)
        possible = [r for r in distinct if decoding_per_worker(r) <= decode_worker_holds(r)]
        skipped["layout-cannot-hold-run"] += 2 * (len(distinct) - len(possible))
        if possible:
            kept.append(min(possible, key=lambda r: r.layout.num_gpus))
            skipped["layout-conflict"] += 2 * (len(possible) - 1)
    order = {id(r): i for i, r in enumerate(runs)}
    return sorted(kept, key=lambda r: order[id(r)])


# --- one token per step: the fastest a decode round can be -------------------------------------------
def one_token_bound_ms(run: DisaggRun, batch: float, uniform_routing: bool = False) -> float:
    """A lower bound of one decode round of the recorded decode worker at ``batch`` sequences: the bytes
    its busiest GPU must read from HBM, at its peak bandwidth. Counted: its share of the attention weights
    (over attention TP), of the dense and shared-expert weights and LM head (over all its GPUs), the KV
    cache of its attention-DP rank's sequences at the mean context ISL + OSL / 2 in the smallest format an
    engine stores it in (FP8), and per MoE layer the routed experts it must read: ``ceil(top-k / ep)``
    under any routing (every token choosing the same experts, spread evenly), or with
    ``uniform_routing`` the expected count when each of the step's tokens picks its top-k uniformly (the
    cost model's own routing assumption; it reads at least these bytes at no more than the peak, so no
    efficiency field brings its round below this). A run whose
    TPOT is below it emits more than one token per round: speculative decoding (e.g. DeepSeek's
    multi-token prediction), which the rows do not record and the model does not price."""
    model, wl = run.problem.model, run.problem.workload
    worker = run.layout.decode.layout
    gpus = worker.gpus_per_stage
    ep = gpus // worker.expert_tp
    weights = lm_head_resident_bytes(model) / gpus
    for layer in range(model.num_layers):
        lb = layer_bytes(model, layer)
        weights += lb.attention / worker.tp + (lb.dense_ffn + lb.shared_experts) / gpus
        if lb.num_experts and model.moe is not None:
            k = model.moe.experts_per_token
            experts = (lb.num_experts / ep * (1 - (1 - k / lb.num_experts) ** batch) if uniform_routing
                       else math.ceil(k / ep))
            weights += experts * lb.expert / worker.expert_tp
    fp8_kv = model.with_dtypes(kv=DType.FP8) if model.kv_dtype.bytes > 1 else model
    per_rank = math.ceil(batch / worker.attn_dp)
    kv = per_rank * kv_bytes_per_sequence(fp8_kv, wl.isl + wl.osl // 2) / kv_split(model, worker.tp)
    return (weights + kv) / worker.pp / run.problem.cluster.gpu.hbm_bytes_per_s * 1e3


def faster_than_one_token(run: DisaggRun, uniform_routing: bool = False) -> bool:
    """Whether the measured TPOT is below ``one_token_bound_ms`` at the sequences the run decoded at once."""
    return run.tpot_ms < one_token_bound_ms(run, decoding_per_worker(run), uniform_routing)


@dataclass(frozen=True)
class Priced:
    run: DisaggRun
    ttft_ms: float
    tpot_ms: float
    fits: bool  # both pools fit memory at the priced chunk and batch
    bottleneck: str
    detail: str  # the TTFT's parts and the decode batch, for --rows

    @property
    def ttft_error(self) -> float:
        return self.ttft_ms / self.run.ttft_ms - 1

    @property
    def tpot_error(self) -> float:
        return self.tpot_ms / self.run.tpot_ms - 1


def holds_a_sequence(run: DisaggRun) -> bool:
    """Whether each role's worker holds its weights and one sequence in the default profile's memory. Some
    rows record workers that cannot (DeepSeek-R1 on one GPU per worker): a layout mis-recorded, not a run
    the model can price."""
    for pool in run.layout.pools:
        worker = pool.layout.model_copy(update={"dp": 1})
        if max_batch(role_problem(run.problem, pool.role, 1), worker) == 0:
            return False
    return True


def price(runs: Sequence[DisaggRun], queue_share: float | None = None, admission: bool = True) -> list[Priced]:
    """Each run as ``evaluate --serving disagg`` prices it (``queue_share``: the profile's unless given;
    ``admission`` False: without the decode worker's scheduler iterations before the first token, i.e. the
    profile's ``ttft_wait_steps`` at 0, what the model priced before 2026-11-27)."""
    out = []
    for r in runs:
        profile = None if admission else engine_profile(r.problem).model_copy(update={"ttft_wait_steps": 0.0})
        plan = evaluate_disagg(r.problem, r.layout, profile, queue_share=queue_share)
        memory = not any(d.rule == "MEM-001" for d in check_disagg(plan))
        pred = plan.prediction
        m = pred.metrics
        detail = (f"prefill {pred.prefill.prefill_ms:.0f} kv {pred.kv.transfer_ms + pred.kv.relayout_ms:.1f} "
                  f"({pred.kv.tier}) admission {pred.admission_ms:.0f} waiting {pred.waiting_ms:.0f} ms, "
                  f"decode batch {pred.decode.batch}")
        out.append(Priced(r, m.ttft_ms, m.tpot_ms, memory, pred.bottleneck, detail))
    return out


def table(priced: Sequence[Priced]) -> list[tuple[str, int, float, float, float, float]]:
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in priced:
        groups[p.run.engine].append(p)
        groups["all"].append(p)
    rows = []
    for g in (*ENGINES, "all"):
        ps = groups.get(g)
        if ps:
            rows.append((g, len(ps), statistics.median(abs(p.ttft_error) for p in ps),
                         statistics.median(abs(p.tpot_error) for p in ps),
                         statistics.median(p.ttft_error for p in ps), statistics.median(p.tpot_error for p in ps)))
    return rows


def print_table(title: str, priced: Sequence[Priced]) -> None:
    print(title)
    print(f"  {'group':10s} {'runs':>5s} {'|TTFT|':>8s} {'|TPOT|':>8s} {'TTFT bias':>9s} {'TPOT bias':>9s}")
    for g, n, ttft, tpot, ttft_bias, tpot_bias in table(priced):
        print(f"  {g:10s} {n:5d} {ttft:8.1%} {tpot:8.1%} {ttft_bias:+9.1%} {tpot_bias:+9.1%}")


# --- what one queue share fitted to these runs would give ----------------------------------------
SHARE_GRID = tuple(i / 40 for i in range(21))  # 0 (evenly spread arrivals) .. 0.5 (one burst), by 0.025


def ttft_loss(priced: Sequence[Priced]) -> float:
    """Median |log(predicted / measured)| TTFT: symmetric in over- and under-prediction."""
    return statistics.median(abs(math.log(p.ttft_ms / p.run.ttft_ms)) for p in priced)


def fit_share(runs: Sequence[DisaggRun]) -> float:
    """The grid's share with the least TTFT loss on ``runs`` (the smallest on ties)."""
    return min(SHARE_GRID, key=lambda k: (ttft_loss(price(runs, k)), k))


def leave_one_model_out(runs: Sequence[DisaggRun]) -> tuple[list[Priced], dict[str, float]]:
    """Each source model's runs priced at the share fitted on the other models' runs."""
    out: list[Priced] = []
    shares = {}
    for model in sorted({r.source_model for r in runs}):
        train = [r for r in runs if r.source_model != model]
        shares[model] = fit_share(train)
        out += price([r for r in runs if r.source_model == model], shares[model])
    return out, shares


def share_fit(runs: Sequence[DisaggRun]) -> None:
    share = fit_share(runs)
    print(f"one queue share fitted on all {len(runs)} runs: {share:.3f} (the profiles': "
          + ", ".join(sorted({f"{resolve_profile(r.problem).name} {resolve_profile(r.problem).ttft_queue_share:g}"
                              for r in runs})) + ")")
    print_table(f"  in-sample, at {share:.3f}:", price(runs, share))
    held, shares = leave_one_model_out(runs)
    print_table("  leave-one-model-out, each model at the share fitted on the others ("
                + ", ".join(f"{m.split('/')[-1]} {k:.3f}" for m, k in shares.items()) + "):", held)


# --- engine profiles for a GPU the engines were never measured on colocated ---------------------------
# GB200's GPU is the B200's Blackwell die with the same 8 TB/s of HBM3e (hardware/presets/gpus.json: both
# NVIDIA datasheets); it differs in memory (186 GB), clocks (1,200 W: its dense FLOPS are 11 % higher, in its
# hardware profile) and a 72-GPU NVLink domain. Its AIC-SILICON runs are all disaggregated (none colocated with
# a preset model), so no engine fit exists for it: its engine profiles take the B200 engine profiles' own
# fields (the engine's serving stack, the weight stream the engine's kernels reach on this die, the per-layer
# cost) on top of GB200's hardware fields. Nothing is fitted to the GB200 runs.
SAME_DIE = {"GB200-NVL72": "B200-SXM"}


def same_die_profile(engine_profile: Profile, hardware: Profile) -> Profile:
    """``hardware`` (a GPU's default profile) with ``engine_profile``'s engine fields, TTFT fields, scheduler
    limits and operator terms: an engine profile for a GPU with the same die as ``engine_profile``'s."""
    own = (*ENGINE_FIELDS, *TTFT_FIELDS, *ENGINE_LIMITS[engine_profile.engine], *OP_TERM_FIELDS)
    gpu_name = hardware.name
    return Profile.model_validate({**hardware.model_dump(), **{
        **{field: getattr(engine_profile, field) for field in own},
        "name": f"{gpu_name}-{engine_profile.engine}",
        "software": engine_profile.software,
        "engine": engine_profile.engine,
        "default": False,
        "engine_default": True,
        "source": (f"{gpu_name} (hardware fields) with every other field of {engine_profile.name} (same GPU die, "
                   "benchmarks/accuracy/disagg.py SAME_DIE; nothing fitted on this GPU), whose source: "
                   + engine_profile.source),
        "fit_rows": None,
        "fit_median_abs_error": None,
    }})


def same_die_profiles() -> list[Profile]:
    """The engine profiles ``SAME_DIE`` gives: one per engine profile of the die's measured GPU."""
    profiles = list_profiles()
    out = []
    for gpu, measured in SAME_DIE.items():
        hardware = next(p for p in profiles if p.default and p.gpu == gpu)
        out += [same_die_profile(p, hardware) for p in profiles if p.engine_default and p.gpu == measured]
    return out


# --- the same worker serving both roles: colocated runs beside disaggregated ones --------------------
def _worker_key(problem: Problem, layout: Layout, engine: str) -> tuple[object, ...]:
    wl = problem.workload
    return (engine, problem.model.name, problem.model.weights_dtype, problem.cluster.gpu.name, wl.isl, wl.osl,
            layout.tp, layout.attn_dp, layout.expert_tp, layout.pp, layout.gpus_per_replica)


def colocated_pairs(priced: Sequence[Priced], path: Path) -> list[tuple[Priced, serving.Priced]]:
    """Each disaggregated run beside the colocated runs of ``serving.py`` (same source) with the same
    engine, model, formats, GPU, ISL/OSL and the same worker layout as its decode worker, at the
    concurrency each decode worker carries (``C / y``): the same worker, priced and measured in both modes."""
    colocated: dict[tuple[object, ...], list[serving.ServingRun]] = defaultdict(list)
    for run in serving.load_runs(path)[0]:
        colocated[_worker_key(run.problem, run.layout, run.engine)].append(run)
    pairs = []
    for p in priced:
        layout = p.run.layout
        per_worker = layout.concurrency / layout.decode.workers
        same = [c for c in colocated.get(_worker_key(p.run.problem, layout.decode.layout, p.run.engine), [])
                if c.concurrency == per_worker]
        pairs += [(p, c) for c in serving.price(same)]
    return pairs


def print_colocated_pairs(priced: Sequence[Priced], path: Path) -> None:
    pairs = colocated_pairs(priced, path)
    if not pairs:
        return
    measured = [p.run.tpot_ms / c.run.tpot_ms for p, c in pairs]
    predicted = [p.tpot_ms / c.tpot_ms for p, c in pairs]
    print(f"the decode worker's layout measured colocated too ({len(pairs)} pairs: same engine, model, formats, "
          "GPU, ISL/OSL, layout, concurrency per worker): TPOT disaggregated / colocated, median (range): "
          f"measured {statistics.median(measured):.2f} ({min(measured):.2f}-{max(measured):.2f}), "
          f"predicted {statistics.median(predicted):.2f} ({min(predicted):.2f}-{max(predicted):.2f}); "
          "TPOT predicted / measured, median: colocated "
          f"{statistics.median(c.tpot_ms / c.run.tpot_ms for _, c in pairs):.2f}, "
          f"disaggregated {statistics.median(p.tpot_ms / p.run.tpot_ms for p, _ in pairs):.2f}")


# --- runs whose first token waits a share of the request's life ---------------------------------------
STALLED_SHARE = 0.15  # a diagnostic split, not a model term: the model's own TTFT share in runs the closed
# loop binds stays under 0.1 (prefill, transfer and admission are tens of rounds against OSL - 1 of them)


def ttft_share(run: DisaggRun) -> float:
    """The measured TTFT's share of the measured request's life, TTFT / (TTFT + (OSL - 1) x TPOT): by
    Little's law, the share of the requests in flight that are not yet decoding."""
    decode_ms = (run.problem.workload.osl - 1) * run.tpot_ms
    return run.ttft_ms / (run.ttft_ms + decode_ms)


def print_stalled(priced: Sequence[Priced]) -> None:
    """Per engine, the runs whose measured TTFT is at least ``STALLED_SHARE`` of their life apart from the
    rest, each split by whether the decode worker runs attention DP: how many, and the model's median
    |TTFT error| and bias on them."""
    print(f"runs whose measured TTFT is >= {STALLED_SHARE:g} of the request's life (TTFT / e2e: the share of "
          "the requests in flight not yet decoding) and the rest, by the decode worker's attention DP: runs, "
          "median |TTFT error|, TTFT bias:")
    for engine in ENGINES:
        cells = []
        for stalled in (True, False):
            for dp in (False, True):
                ps = [p for p in priced if p.run.engine == engine and (ttft_share(p.run) >= STALLED_SHARE) == stalled
                      and (p.run.layout.decode.layout.attn_dp > 1) == dp]
                if ps:
                    name = f"share {'>=' if stalled else '<'} {STALLED_SHARE:g}, dp {'> 1' if dp else '1'}"
                    cells.append(f"{name}: {len(ps)}, {statistics.median(abs(p.ttft_error) for p in ps):.1%}, "
                                 f"{statistics.median(p.ttft_error for p in ps):+.1%}")
        print(f"  {engine:8s} " + "; ".join(cells))


def print_versions(priced: Sequence[Priced], unadmitted: Sequence[Priced]) -> None:
    """Per engine and version (the Dynamo runtime image's tag the row names), the runs, how many are stalled
    (``STALLED_SHARE``), and the median |TTFT error| without the decode worker's admission and with it (bias
    beside): where the model's TTFT holds and where the stalled runs sit."""
    before = {id(p.run): p for p in unadmitted}
    groups: dict[tuple[str, str], list[Priced]] = defaultdict(list)
    for p in priced:
        groups[(p.run.engine, p.run.engine_version.split(" [")[0])].append(p)
    print(f"per engine version (the runtime image's tag): runs, stalled (TTFT >= {STALLED_SHARE:g} of the life), "
          "median |TTFT error| without the admission -> with it (bias):")
    for (engine, version), ps in sorted(groups.items()):
        stalled = sum(ttft_share(p.run) >= STALLED_SHARE for p in ps)
        was = statistics.median(abs(before[id(p.run)].ttft_error) for p in ps)
        now, bias = statistics.median(abs(p.ttft_error) for p in ps), statistics.median(p.ttft_error for p in ps)
        print(f"  {engine:8s} {version:28s} {len(ps):4d} runs, {stalled:3d} stalled: "
              f"{was:6.1%} -> {now:6.1%} ({bias:+.1%})")


# --- repeats: what no model of the recorded fields can reach ------------------------------------------
def recorded_configuration(run: DisaggRun) -> tuple[object, ...]:
    """Everything the row records of how the run was set up: engine, model preset, formats, GPU, workload,
    concurrency and both pools (workers and layouts). Runs that share it are one question to any model of
    these fields, so where their measurements differ, something the row does not record differed."""
    p = run.problem
    return (run.engine, p.model.name, p.model.weights_dtype, p.model.kv_dtype, p.cluster.gpu.name,
            p.workload.isl, p.workload.osl, run.layout.concurrency, run.layout.prefill, run.layout.decode)


def print_repeat_floor(priced: Sequence[Priced]) -> None:
    """Per engine and metric, ``ttft_shape.repeat_spread`` over the runs grouped by ``recorded_configuration``:
    how many configurations were measured more than once with different results, how far apart (median of
    max / min - 1), and the floor: the median |error| over those runs of the best single prediction per
    configuration (the geometric mean of its runs); beside it, the model's median |error| on the same runs."""
    print("configurations measured more than once with different results (same engine, model, formats, GPU, "
          "workload, concurrency and both pools): how many, median spread (max / min - 1), the median |error| "
          "of the best single prediction per configuration over its runs (a floor for any model of these "
          "fields), and the model's on the same runs:")
    errors: dict[str, Callable[[Priced], float]] = {"ttft_ms": lambda p: p.ttft_error,
                                                    "tpot_ms": lambda p: p.tpot_error}
    for engine in ENGINES:
        by_config: dict[tuple[object, ...], list[Priced]] = defaultdict(list)
        for p in priced:
            if p.run.engine == engine:
                by_config[recorded_configuration(p.run)].append(p)
        cells = []
        for metric, error in errors.items():
            count, spread, floor = repeat_spread((c, getattr(p.run, metric)) for c, ps in by_config.items() for p in ps)
            repeated = [p for ps in by_config.values() if len({getattr(q.run, metric) for q in ps}) > 1 for p in ps]
            model = statistics.median(abs(error(p)) for p in repeated) if repeated else math.nan
            cells.append(f"{metric[:4].upper()} {count}" + (
                f", spread {spread:.1%}, floor {floor:.1%}, model {model:.1%}" if count else ""))
        print(f"  {engine:8s} {sum(map(len, by_config.values())):4d} runs: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.disagg", description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=Path, default=SERVING_CSV, help="serving_points.csv")
    ap.add_argument("--rows", action="store_true", help="also print every run: predicted against measured")
    ap.add_argument("--share-fit", action="store_true",
                    help="fit one queue share to these runs; print in-sample and leave-one-model-out figures")
    ap.add_argument("--write-same-die-profiles", action="store_true",
                    help="write the engine profiles SAME_DIE gives (after any refit of the measured GPU's)")
    args = ap.parse_args(argv)
    if args.write_same_die_profiles:
        for profile in same_die_profiles():
            print(f"wrote {write_profile(profile)}")
        return 0
    runs, skipped = load_runs(args.points)
    held = [r for r in runs if holds_a_sequence(r)]
    if len(held) < len(runs):
        skipped["worker-cannot-hold-weights"] += 2 * (len(runs) - len(held))
    runs = held
    print(f"{len(runs)} disaggregated runs ({2 * len(runs)} rows) of {SOURCE}; skipped rows: "
          + ", ".join(f"{k} {v}" for k, v in skipped.most_common()))
    if args.share_fit:
        share_fit(runs)
        return 0
    priced = price(runs)
    print_table("evaluate --serving disagg vs measured; error = predicted / measured - 1:", priced)
    unadmitted = price(runs, admission=False)
    print_table("  without the decode worker's admission (ttft_wait_steps 0: the model before 2026-11-27):", unadmitted)
    print_stalled(priced)
    print_versions(priced, unadmitted)
    print_table("  of which both pools fit memory:", [p for p in priced if p.fits])
    print("runs whose TPOT is below one token per decode round (one_token_bound_ms: speculative decoding),")
    for uniform, name in ((False, "under any routing"), (True, "under uniform routing (the model's)")):
        fast = Counter(p.run.engine for p in priced if faster_than_one_token(p.run, uniform))
        print(f"  {name}: " + ", ".join(f"{e} {fast[e]} of {sum(p.run.engine == e for p in priced)}"
                                          for e in ENGINES))
    print_table("  the runs at or above the uniform-routing bound (what one token per round can price):",
                [p for p in priced if not faster_than_one_token(p.run, True)])
    print_colocated_pairs(priced, args.points)
    print_repeat_floor(priced)
    print("per engine, the median ratio (predicted / measured) and the median |error| left after dividing by it:")
    print(f"  {'engine':10s} {'TTFT ratio':>10s} {'|TTFT| left':>11s} {'TPOT ratio':>10s} {'|TPOT| left':>11s}")
    for engine, ttft_ratio, ttft_left, tpot_ratio, tpot_left in offset_table(priced):  # duck-typed: same fields
        print(f"  {engine:10s} {ttft_ratio:10.2f} {ttft_left:11.1%} {tpot_ratio:10.2f} {tpot_left:11.1%}")
    light = [p for p in priced if p.run.problem.workload.batch is not None and p.run.problem.workload.batch <= 16]
    gap = {e: statistics.median(p.run.ttft_ms - p.ttft_ms for p in light if p.run.engine == e)
           for e in ENGINES if any(p.run.engine == e for p in light)}
    print("at concurrency <= 16, the median measured - predicted TTFT (ms): "
          + ", ".join(f"{e} {v:.0f} ({sum(p.run.engine == e for p in light)} runs)" for e, v in gap.items()))
    print("rate set by: " + ", ".join(f"{k} {v}" for k, v in Counter(p.bottleneck for p in priced).most_common()))
    for bottleneck, _ in Counter(p.bottleneck for p in priced).most_common():
        print_table(f"  where the rate is set by {bottleneck}:", [p for p in priced if p.bottleneck == bottleneck])
    if args.rows:
        print_rows(priced)
    return 0


def print_rows(priced: Sequence[Priced]) -> None:
    print("every run: TTFT and TPOT predicted / measured (ms), what sets the rate, the predicted TTFT's parts:")
    for p in sorted(priced, key=lambda p: (p.run.engine, p.run.label)):
        print(f"  {p.run.label}: TTFT {p.ttft_ms:.0f} / {p.run.ttft_ms:.0f}, TPOT {p.tpot_ms:.1f} / "
              f"{p.run.tpot_ms:.1f}; {p.bottleneck}; {p.detail}")


if __name__ == "__main__":
    raise SystemExit(main())
