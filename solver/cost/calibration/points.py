"""Measured points as the cost model sees them: each usable CSV row becomes (Problem, Layout, metric).

Reads the columns of ``shared/calibration/perf_points.csv`` (see its README) and maps every row it
can to a ``Point``; every row it cannot is returned as a ``Skipped`` with one reason from
``SKIP_REASONS``. No fitting and no prediction here (``calibrate`` and ``measures`` do those).

Conventions, for what the tables leave unstated:

- **models** by the ``model`` column (``MODEL_ALIASES``); BLOOM-176B, Falcon-180B and GPT-J-6B have
  no preset and are skipped. "LLaMA 70B/7B" of TensorRT-LLM v0.9 are Llama-2 (its notes say so).
- **number formats**: FP8 and FP4 rows use FP8 / NVFP4 weights; the KV cache is the row's
  ``kv_cache_dtype`` where stated. Where it is not: the ModelOpt pre-quantised FP8 and NVFP4
  checkpoints of the v1.0 tables ship an FP8 KV cache, so fp8; BF16 rows keep a bf16 cache.
  Splitwise does not state formats: fp16 weights and cache (its Llama-2 checkpoints are fp16 and
  A100 has no FP8).
- **MoE layouts** (EP is never stated): the engine-flow tables (v0.9, v0.14, v0.17) ran TensorRT-LLM's
  default for MoE, experts tensor-parallel over the TP group (``moe_tp = tp``, ``moe_ep = 1``): our
  layout with ``expert_tp = tp`` (``allow={"expert-tp"}``).
- **windows**: Mistral-7B's sliding window and Llama 4's chunked attention are replayed as full
  attention: TensorRT-LLM keeps every layer's KV cache for the whole sequence unless a maximum
  attention window is configured, which the published runs did not do.
- **context limit**: Splitwise ran Llama-2-70B at prompts beyond its 4,096-token window; the
  measurement stands, so the replayed model's context limit is lifted to the row's ISL + OSL.
- **MoE layouts of the v1.0 tables**: the doc's MoE command passes ``--ep``, and its YAML nests
  ``enable_attention_dp`` under ``cuda_graph_config``, where it is not an option of that section;
  we read the runs as TensorRT-LLM's ``--ep`` default without attention DP: attention
  tensor-parallel over the row's TP GPUs, experts spread over the same GPUs (``ep = tp``).
- **software generation** (``Point.software``, the profile a point is priced with, recorded in
  ``Point.problem.profile``): ``trtllm`` for the v0.17 and v1.0 tables (the GPUs' default
  profiles), ``trtllm-0.14`` for the v0.14 table and serving runs (about 10 % slower, and less
  KV room on memory-starved layouts), ``trtllm-0.9`` and ``splitwise`` for the older engines (the
  README: a newer engine can be up to 2x faster on the same hardware).
- **offline runs are finite** (``Point.requests``): the max-throughput tables of v0.14, v0.17 and v1.0 ran
  ``trtllm-bench throughput`` on a synthetic dataset of ``OFFLINE_REQUESTS[(ISL, OSL)]`` requests of uniform
  lengths, all queued at once (the perf-overview's ``$num_requests`` table, the same from v0.14 to v1.0). With
  uniform lengths the requests run in waves of the largest batch that fits, and the last wave is partial:
  1,500 requests at 128/4096 and a batch of 1,058 are one full wave and one of 442, which no steady state
  at 1,058 describes. ``measures`` prices such a row as that drain.
- **overload**: serving TTFT/ITL rows whose offered rate is at least ``OVERLOAD_SHARE`` of the
  request rate the same configuration sustained with every request sent at once (read off its
  rate-inf throughput rows) are queueing measurements, skipped as ``overload-latency``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardplan.hardware import ClusterSpec, get_gpu
from shardplan.models import DType, ModelSpec, SpecError, get_model
from shardplan.models.errors import quoted
from shardplan.models.files import read_csv_rows
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload

MODEL_ALIASES = {
    "Llama-3.1-8B": "llama-3.1-8b",
    "Llama-3.1-70B": "llama-3.1-70b",
    "Llama-3.1-405B": "llama-3.1-405b",
    "Llama-3.3-70B": "llama-3.3-70b",
    "Llama-3-70B": "llama-3-70b",
    "Llama-2-70B": "llama-2-70b",
    "Llama-2-7B": "llama-2-7b",
    "Mistral-7B": "mistral-7b",
    "Mixtral-8x7B": "mixtral-8x7b",
    "Mixtral-8x22B": "mixtral-8x22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Llama-4-Scout-17B-16E": "llama-4-scout",
    "Llama-4-Maverick-17B-128E": "llama-4-maverick",
}

# Which profile generation a source's measurements belong to.
SOFTWARE = {
    "TRTLLM-PERF-v0.17": "trtllm",
    "TRTLLM-PERF-v1.0": "trtllm",
    "TRTLLM-PERF-v0.14": "trtllm-0.14",
    "TRTLLM-SERVING-v0.14": "trtllm-0.14",
    "TRTLLM-PERF-v0.9": "trtllm-0.9",
    "SPLITWISE-PROFILE": "splitwise",
}
# Newest first: a GPU's default profile is the one of the newest generation measured on it.
GENERATIONS = ("trtllm", "trtllm-0.14", "trtllm-0.9", "splitwise")


def profile_name(gpu: str, software: str) -> str:
    """``H100-SXM``, ``trtllm`` -> ``h100-sxm``; older generations carry their name as a suffix."""
    base = gpu.lower()
    return base if software == "trtllm" else f"{base}-{software}"

# Sources whose MoE rows spread the experts over the stage (``--ep``) instead of slicing them by TP.
_EXPERT_PARALLEL_SOURCES = {"TRTLLM-PERF-v1.0"}

# Requests per (ISL, OSL) of the offline max-throughput tables: the ``$num_requests`` table of TensorRT-LLM's
# docs/source/performance/perf-overview.md ("Preparing a Dataset": the same nine pairs in the older versions, e.g.
# v0.17 @258c7540; v1.0 @00f37686 adds 1000/2000), every request of exactly ISL input and OSL output tokens
# (``prepare_dataset.py ... --input-stdev=0 --output-stdev=0``), all queued at once by ``trtllm-bench throughput``.
OFFLINE_REQUESTS: dict[tuple[int, int], int] = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000,
}
# The tables measured that way (v0.9 ran static batches at a stated batch, priced per GPU).
_OFFLINE_SOURCES = {"TRTLLM-PERF-v0.14", "TRTLLM-PERF-v0.17", "TRTLLM-PERF-v1.0"}

# What a metric is, for grouping the results: the acceptance targets are per kind.
THROUGHPUT, LATENCY, SERVING = "max-throughput", "latency", "serving-throughput"
METRIC_KIND = {
    "output_tokens_per_s_total": THROUGHPUT,  # offline tables; serving rows are SERVING (below)
    "output_tokens_per_s_per_gpu": THROUGHPUT,
    "ttft_ms": LATENCY,
    "ttft_mean_ms": LATENCY,
    "itl_mean_ms": LATENCY,
    "prefill_time_ms": LATENCY,
    "decode_time_per_token_ms": LATENCY,
    "request_throughput_req_per_s": SERVING,
    "total_tokens_per_s_total": SERVING,
}

SKIP_REASONS = {
    "no-preset": "model has no preset (BLOOM-176B, Falcon-180B, GPT-J-6B)",
    "flagged-anomalous": "the source flags the batch-64 Splitwise rows as anomalous (likely memory-limited)",
    "overload-latency": "TTFT/ITL at an offered rate of at least 90 % of what the same configuration sustained "
    "with every request sent at once (its rate-inf row): queueing of the benchmark's 500 requests behind the "
    "server's unstated batch limit, not a property of the layout",
    "unknown-metric": "metric the cost model does not predict",
    "bad-row": "row does not describe a valid problem (unknown GPU, dtype or layout)",
}


@dataclass(frozen=True)
class Point:
    """One measured number and everything needed to predict it."""

    row_id: str
    source: str
    metric: str
    value: float
    kind: str
    group: str | None
    gpu: str  # GPU preset name
    software: str
    num_gpus: int
    problem: Problem
    layout: Layout
    rate_qps: float | None = None  # serving: offered request rate (inf: all at once)
    requests: int | None = None  # offline tables: requests of the run, all queued at once (None: steady state)
    label: str = field(default="", compare=False)

    @property
    def profile_key(self) -> tuple[str, str]:
        """(GPU preset name, software generation): the profile a point is priced with."""
        return self.gpu, self.software


@dataclass(frozen=True)
class Skipped:
    row_id: str
    source: str
    model: str
    metric: str
    reason: str


# A measured value's range, in any of the metrics' units (tokens/s, requests/s, ms): far beyond real
# measurements both ways, and narrow enough that the fit's log(predicted / measured) stays finite (a
# subnormal value such as 5e-324 made it infinite, and SciPy's warnings broke the one error line).
MIN_VALUE, MAX_VALUE = 1e-9, 1e15

# The columns every row is read by, and those parsed before a row can be skipped as bad (each value
# must parse for every row: they decide which rows are overload runs).
REQUIRED_COLUMNS = ("id", "source_id", "model", "weights_dtype", "kv_cache_dtype", "gpu", "num_gpus", "tp", "pp",
                    "dp", "isl", "osl", "batch_size", "request_rate_qps", "metric", "value", "config_group", "notes")


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV's rows as dicts; a file that is not a UTF-8 CSV with every required column, a short or
    long row, or an unreadable isl/osl/value/rate is a ``SpecError`` naming the column or the line."""
    rows = []
    for line, row in read_csv_rows(path, "points", REQUIRED_COLUMNS, skip_blank_cells=True):
        for column, parse in (("isl", int), ("osl", int), ("value", float)):
            try:
                number = parse(row[column])
            except ValueError:
                raise SpecError(f"points row {line}", f"{column} {row[column][:20]!r} is not a number") from None
            if not (math.isfinite(number) and number > 0):
                raise SpecError(f"points row {line}", f"{column} must be a finite number > 0")
            if column == "value" and not MIN_VALUE <= number <= MAX_VALUE:
                raise SpecError(f"points row {line}", f"value {number:g} is outside {MIN_VALUE:g}..{MAX_VALUE:g}")
        try:
            _rate(row)
        except ValueError:
            rate = row["request_rate_qps"][:20]
            raise SpecError(f"points row {line}",
                            f"request_rate_qps {rate!r} is not a rate (a number > 0, inf, or blank)") from None
        rows.append(row)
    return rows


def load_points(path: str | Path) -> tuple[list[Point], list[Skipped]]:
    """Every row of the CSV at ``path``, as a usable point or a skip with its reason."""
    return points_from_rows(read_rows(path))


def points_from_rows(rows: Iterable[dict[str, str]]) -> tuple[list[Point], list[Skipped]]:
    rows = list(rows)
    capacity = _measured_capacity(rows)
    points, skipped = [], []
    for row in rows:
        reason = _skip_reason(row, capacity)
        if reason is None:
            try:
                points.append(_point(row))
                continue
            except (SpecError, ValueError, KeyError):
                reason = "bad-row"
        skipped.append(Skipped(row["id"], row["source_id"], row["model"], row["metric"], reason))
    return points, skipped


def skip_counts(skipped: Iterable[Skipped]) -> Counter[str]:
    return Counter(s.reason for s in skipped)


def skipped_summary(skipped: Iterable[Skipped]) -> str:
    """Why rows were skipped, for one line: each reason's count, with the first row it took
    ('2 rows skipped: no-preset 2 (row id 1, model 'NoSuchModel')')."""
    rows = list(skipped)
    if not rows:
        return "the file has no data rows"
    first: dict[str, Skipped] = {}
    for row in rows:
        first.setdefault(row.reason, row)
    parts = [f"{reason} {n} (row id {quoted(first[reason].row_id, 20)}, model {quoted(first[reason].model, 40)})"
             for reason, n in skip_counts(rows).most_common()]
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''} skipped: {'; '.join(parts)}"


def _skip_reason(row: dict[str, str], capacity: dict[tuple[Any, ...], float]) -> str | None:
    if row["model"] not in MODEL_ALIASES:
        return "no-preset"
    if row["metric"] not in METRIC_KIND:
        return "unknown-metric"
    if row["source_id"] == "SPLITWISE-PROFILE" and "anomalous" in row["notes"]:
        return "flagged-anomalous"
    if row["metric"] in ("ttft_mean_ms", "itl_mean_ms"):
        rate = _rate(row)
        if rate == math.inf:
            return "overload-latency"
        limit = capacity.get(_serving_config(row))
        if rate is not None and limit is not None and rate >= OVERLOAD_SHARE * limit:
            return "overload-latency"
    return None


# A serving run offered at least this share of the request rate its configuration sustained
# with every request sent at once is an overload run: its latencies are queueing.
OVERLOAD_SHARE = 0.9


def _serving_config(row: dict[str, str]) -> tuple[Any, ...]:
    return tuple(row[k] for k in ("source_id", "model", "weights_dtype", "gpu", "tp", "pp", "isl", "osl"))


def _measured_capacity(rows: list[dict[str, str]]) -> dict[tuple[Any, ...], float]:
    """Requests/s each serving configuration sustained at rate inf, read off whichever of its
    throughput rows were published (request, output-token or total-token throughput)."""
    found: dict[tuple[Any, ...], float] = {}
    for row in rows:
        if _rate(row) != math.inf:
            continue
        isl, osl, value = int(row["isl"]), int(row["osl"]), float(row["value"])
        per = {
            "request_throughput_req_per_s": 1,
            "output_tokens_per_s_total": osl,
            "total_tokens_per_s_total": isl + osl,
        }
        if row["metric"] in per:
            key = _serving_config(row)
            found[key] = max(found.get(key, 0.0), value / per[row["metric"]])
    return found


def _rate(row: dict[str, str]) -> float | None:
    """The offered requests/s (inf: every request at once; None: blank, not a serving run); ``ValueError``
    for anything else that is not a number > 0 (NaN, 0 or a negative rate made the fit's residuals NaN)."""
    text = row.get("request_rate_qps", "").strip()
    if not text:
        return None
    rate = math.inf if text == "inf" else float(text)
    if not rate > 0:
        raise ValueError(text)
    return rate


def _dtypes(row: dict[str, str]) -> tuple[DType, DType]:
    weights_text, kv_text = row["weights_dtype"].strip(), row["kv_cache_dtype"].strip()
    if weights_text == "not stated":
        return DType.FP16, DType.FP16  # Splitwise: fp16 checkpoints on A100/H100
    weights = DType.parse(weights_text, "weights_dtype")
    if kv_text != "not stated":
        return weights, DType.parse(kv_text, "kv_cache_dtype")
    if weights in (DType.FP8, DType.FP4):
        return weights, DType.FP8  # ModelOpt FP8/NVFP4 checkpoints carry an FP8 KV cache
    return weights, weights


def _model(row: dict[str, str], context: int) -> ModelSpec:
    weights, kv = _dtypes(row)
    model = get_model(MODEL_ALIASES[row["model"]]).with_dtypes(weights, kv)
    if context > model.max_position_embeddings:
        model = model.model_copy(update={"max_position_embeddings": context})
    if model.attention.sliding_window is not None:
        # Full-length KV in every layer: the engines measured here keep it unless a maximum
        # attention window is configured, and none of the published runs did.
        attention = model.attention.model_copy(update={"sliding_window": None, "sliding_window_layers": ()})
        model = model.model_copy(update={"attention": attention})
    return model


def _cluster(gpu_name: str, num_gpus: int) -> ClusterSpec:
    gpu = get_gpu(gpu_name)
    per_node = min(num_gpus, gpu.gpus_per_node)
    if num_gpus % per_node:
        raise SpecError("num_gpus", f"{num_gpus} GPUs do not fill whole {per_node}-GPU nodes")
    domain = None
    if gpu.domain_spans_nodes:  # NVL72: one rack-scale domain holds every GPU of the row
        domain = num_gpus
    return ClusterSpec.from_gpu(gpu, num_gpus // per_node, per_node, scaleup_domain_gpus=domain)


def _layout(row: dict[str, str], model: ModelSpec, batch: int) -> tuple[Layout, frozenset[str]]:
    tp, pp, dp = int(row["tp"]), int(row["pp"]), int(row["dp"] or 1)
    if model.is_moe and row["source_id"] in _EXPERT_PARALLEL_SOURCES:
        degrees = dict(tp=tp, attn_dp=1, expert_tp=1)
        allow: frozenset[str] = frozenset()
    elif model.is_moe:
        degrees = dict(tp=tp, attn_dp=1, expert_tp=tp)
        allow = frozenset({"expert-tp"})
    else:
        degrees = dict(tp=tp)
        allow = frozenset()
    return Layout.even(model.num_layers, pp, dp=dp, batch=batch, **degrees), allow


def _point(row: dict[str, str]) -> Point:
    isl, osl = int(row["isl"]), int(row["osl"])
    metric = row["metric"]
    model = _model(row, isl + osl)
    gpu = get_gpu(row["gpu"])
    num_gpus = int(row["num_gpus"])
    batch_text = row["batch_size"].strip()
    batch = int(batch_text) if batch_text else 1
    layout, allow = _layout(row, model, batch)
    if layout.num_gpus != num_gpus:
        raise SpecError("num_gpus", f"layout uses {layout.num_gpus} GPUs, the row {num_gpus}")
    kind = METRIC_KIND[metric]
    rate = _rate(row)
    if row["source_id"] == "TRTLLM-SERVING-v0.14" and metric == "output_tokens_per_s_total":
        kind = SERVING
    stated_batch = int(batch_text) if batch_text else None
    software = SOFTWARE.get(row["source_id"], "trtllm")
    requests = None
    if row["source_id"] in _OFFLINE_SOURCES and metric == "output_tokens_per_s_total" and rate is None:
        requests = OFFLINE_REQUESTS.get((isl, osl))
    problem = Problem(
        model=model,
        cluster=_cluster(gpu.name, num_gpus),
        workload=Workload(isl=isl, osl=osl, batch=stated_batch),
        objective=Objective.THROUGHPUT if kind != LATENCY else Objective.LATENCY,
        allow=allow,
        profile=profile_name(gpu.name, software),
    )
    label = f"{row['model']} {row['weights_dtype']} {gpu.name} tp{row['tp']}pp{row['pp']} {isl}/{osl}"
    if stated_batch:
        label += f" b{stated_batch}"
    if rate is not None:
        label += f" @{row['request_rate_qps']}qps"
    return Point(
        row_id=row["id"],
        source=row["source_id"],
        metric=metric,
        value=float(row["value"]),
        kind=kind,
        group=row["config_group"].strip() or None,
        gpu=gpu.name,
        software=software,
        num_gpus=num_gpus,
        problem=problem,
        layout=layout,
        rate_qps=rate,
        requests=requests,
        label=label,
    )
