"""``python -m benchmarks.accuracy.maverick``: what the FP8 checkpoint's number formats per module and attention
data parallelism would do to the Llama-4-Maverick rows of the TensorRT-LLM v1.0 table (README, "Llama-4-Maverick's
memory gap on H100: 16-bit non-expert weights and attention DP, tried, not taken").

The H100 FP8 rows come out 78-134 % too fast because the model gives them about 23 GiB more KV cache per GPU than
the measurements leave room for ("Offline tables as finite runs"). One candidate is a checkpoint that keeps every
weight outside the routed experts in 16 bits, served with attention data parallelism, which replicates those
weights on every GPU. This prints, for the points convention of today and for each what-if (``VARIANTS``): the
weights per GPU it implies; the H100 rows' memory at the largest batch that fits; the decode step those rows
would need at that batch at the GPU's peak HBM bandwidth beside the most their measured throughput allows; and
the group's median |error| with each table's profile and on the user-facing path (TensorRT-LLM's default profile
of the GPU), per GPU and row, with the whole user-facing figure of the tables. Nothing is written and no profile
is refit; no variant is the points convention.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Sequence

from benchmarks.accuracy import POINTS_CSV
from shardplan.hardware import get_gpu
from shardplan.hardware.profile import Profile, get_profile, profile_for_gpu
from shardplan.models import DType
from shardplan.models.derived import (
    embedding_bytes,
    kv_bytes_per_sequence,
    layer_bytes,
    lm_head_resident_bytes,
    parameter_counts,
)
from shardplan.rules.problem import memory_limit_gib
from shardplan.solver.cost.calibration.measures import predict
from shardplan.solver.cost.calibration.points import THROUGHPUT, Point, load_points
from shardplan.solver.cost.evaluate import max_batch, memory_reports
from shardplan.solver.cost.memory import GIB
from shardplan.solver.cost.stage import stage_shape

MODEL = "Llama-4-Maverick-17B-128E"
FP8_ONLY = frozenset({DType.FP8})
FP8_AND_FP4 = frozenset({DType.FP8, DType.FP4})


@dataclasses.dataclass(frozen=True)
class Variant:
    """A what-if for the Maverick rows: which checkpoints (by their routed experts' format) keep the non-expert
    weights (attention, dense FFN, shared expert) in 16 bits; whether attention runs data-parallel (one attention
    group per GPU, the experts spread over all of them); whether the embedding, and the LM head, stay split over
    the stage's GPUs under attention DP (the cost model gives each attention group whole ones); and whether the
    engine's batch limit holds per attention-DP rank."""

    name: str
    sixteen_bit_rest: frozenset[DType] = frozenset()
    attention_dp: bool = False
    embedding_split: bool = False
    lm_head_split: bool = False
    batch_limit_per_rank: bool = False


VARIANTS = (
    Variant("today: every linear weight in the checkpoint's format, TP8"),
    Variant("16-bit non-expert weights (FP8 checkpoint)", FP8_ONLY),
    Variant("attention DP", attention_dp=True),
    Variant("attention DP + 16-bit non-expert (FP8 checkpoint)", FP8_ONLY, attention_dp=True),
    Variant("  + embedding split", FP8_ONLY, attention_dp=True, embedding_split=True),
    Variant("  + embedding and LM head split", FP8_ONLY, attention_dp=True, embedding_split=True, lm_head_split=True),
    Variant("  + batch limit per attention-DP rank", FP8_ONLY, attention_dp=True, batch_limit_per_rank=True),
    Variant("attention DP + 16-bit non-expert (FP8 and FP4)", FP8_AND_FP4, attention_dp=True),
    Variant("  + batch limit per attention-DP rank", FP8_AND_FP4, attention_dp=True, batch_limit_per_rank=True),
)
MEMORY_VARIANTS = VARIANTS[:6]  # the ones that differ in memory


def apply(point: Point, variant: Variant) -> Point:
    """The point as the variant replays it: its model's non-expert weights in 16 bits when its routed experts
    are in one of ``variant.sixteen_bit_rest``; with attention DP, one attention group per GPU of the stage
    (tp 1) and the experts spread over the stage (expert_tp 1)."""
    model = point.problem.model
    if model.expert_dtype in variant.sixteen_bit_rest:
        model = model.model_copy(update={"weights_dtype": DType.BF16})
    layout = point.layout
    if variant.attention_dp:
        gpus_per_stage = layout.tp * layout.sp * layout.attn_dp
        layout = layout.model_copy(update={"tp": 1, "sp": 1, "attn_dp": gpus_per_stage, "expert_tp": 1})
    problem = point.problem.model_copy(update={"model": model})
    return dataclasses.replace(point, problem=problem, layout=layout)


def ends_freed_bytes(point: Point, variant: Variant) -> float:
    """Bytes per GPU the embedding and the LM head free when the variant splits them over the stage's G GPUs
    rather than each one-GPU attention group holding them whole: (1 - 1/G) of each one split."""
    if point.layout.attn_dp == 1:
        return 0.0
    model = point.problem.model
    split_bytes = (embedding_bytes(model) * variant.embedding_split
                   + lm_head_resident_bytes(model) * variant.lm_head_split)
    return (1.0 - 1.0 / point.layout.gpus_per_stage) * split_bytes


def replay(point: Point, profile: Profile, variant: Variant) -> tuple[Point, Profile]:
    """The variant's point and the profile it is priced with: the batch limit multiplied by the attention-DP
    ranks when the variant has one scheduler per rank (TensorRT-LLM's ``max_batch_size`` under attention DP,
    examples/models/core/llama4/README.md); the memory the split ends free given back as a higher cap."""
    replayed = apply(point, variant)
    if variant.batch_limit_per_rank:
        profile = profile.model_copy(update={"max_batch": profile.max_batch * replayed.layout.attn_dp})
    freed_gib = ends_freed_bytes(replayed, variant) / GIB
    if freed_gib:
        # The GPU grows by as much: a cap above the GPU's memory leaves the capacity as the limit.
        cap_gib = memory_limit_gib(replayed.problem, profile) + freed_gib
        cluster = replayed.problem.cluster
        gpu = cluster.gpu.model_copy(update={"hbm_gib": cluster.gpu.hbm_gib + freed_gib})
        problem = replayed.problem.model_copy(
            update={"mem_cap_gib": cap_gib, "cluster": cluster.model_copy(update={"gpu": gpu})}
        )
        replayed = dataclasses.replace(replayed, problem=problem)
    return replayed, profile


def user_profile(point: Point) -> Profile:
    return profile_for_gpu(point.gpu, "trtllm")


def own_profile(point: Point) -> Profile:
    return get_profile(point.problem.profile)


def error(point: Point, profile: Profile) -> tuple[float, int]:
    """Signed relative error of the prediction and the batch it was made at."""
    measure = predict(point, profile)
    return measure.value / point.value - 1.0, measure.batch


def resident_weights_bytes(point: Point, profile: Profile, variant: Variant) -> float:
    """Weights one GPU of the (first) stage holds under the variant."""
    one = point.layout.model_copy(update={"batch": 1})
    return memory_reports(point.problem, one, profile)[0].weights_gib * GIB - ends_freed_bytes(point, variant)


def streamed_bytes_per_step(point: Point, profile: Profile, variant: Variant, batch: int) -> float:
    """Bytes one GPU must read from HBM in a decode step of ``batch`` sequences, whatever the kernels: its
    resident weights less the routed experts no token picked, plus the KV cache at the mean context. Routing is
    taken as uniform (the cost model's assumption): each of a layer's ``batch x top_k`` picks lands on any of its
    E experts alike, so one expert goes unread with probability (1 - 1/E)^(batch x top_k)."""
    model, layout = point.problem.model, point.layout
    shape = stage_shape(model, layout)
    nbytes = resident_weights_bytes(point, profile, variant)
    for layer in model.moe.layers if model.moe else ():
        b = layer_bytes(model, layer)
        local_experts = -(-b.num_experts // shape.ep)
        unread_share = (1.0 - 1.0 / b.num_experts) ** (batch * model.moe.experts_per_token)
        nbytes -= local_experts * unread_share * b.expert / shape.expert_tp
    isl, osl = point.problem.workload.isl, point.problem.workload.osl
    sequences_here = -(-batch // shape.attn_dp)
    return nbytes + sequences_here * kv_bytes_per_sequence(model, isl + osl // 2) / (shape.kv_split * shape.sp)


def step_allowance_ms(point: Point, batch: int) -> float:
    """The longest a decode step may take for the run to reach its measured throughput at ``batch``: the run's
    time (requests x OSL / measured tokens/s) over its decode steps (waves of ``batch``, OSL steps each); its
    prefill only shortens it."""
    requests, osl = point.requests or batch, point.problem.workload.osl
    run_s = requests * osl / point.value
    return run_s / (-(-requests // batch) * osl) * 1e3


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _shape_label(p: Point) -> str:
    return f"{p.problem.workload.isl}/{p.problem.workload.osl}"


def print_weights(points: Sequence[Point]) -> None:
    """Parameters by component and the weights one GPU of the H100 rows' 8-GPU stage holds per variant."""
    counts = parameter_counts(points[0].problem.model)
    parts = ("attention", "dense_ffn", "shared_experts", "routed_experts", "embedding", "lm_head")
    print("== parameters (billions): " + ", ".join(f"{p} {getattr(counts, p) / 1e9:.3f}" for p in parts))
    h100 = next(p for p in points if p.gpu == "H100-SXM")
    print("== weights per GPU of the H100 FP8 rows (GiB):")
    for variant in MEMORY_VARIANTS:
        v, profile = replay(h100, user_profile(h100), variant)
        print(f"    {variant.name:55s} {resident_weights_bytes(v, profile, variant) / GIB:6.2f}")


def print_h100_rows(points: Sequence[Point]) -> None:
    """Each H100 row at the largest batch that fits under each variant (user-facing profile): weights and KV
    cache per GPU, the batch, the error; then the decode step at that batch at peak HBM bandwidth against the
    most the measurement allows."""
    print("== H100 FP8 rows at the largest batch that fits (h100-sxm-trtllm): weights / KV GiB per GPU, batch, "
          "error; decode step at peak HBM (uniform routing) / the most the measured throughput allows, ms")
    for variant in MEMORY_VARIANTS:
        cells = []
        for p in (q for q in points if q.gpu == "H100-SXM"):
            v, profile = replay(p, user_profile(p), variant)
            top = max_batch(v.problem, v.layout, profile)
            report = memory_reports(v.problem, v.layout.model_copy(update={"batch": top}), profile)[0]
            weights_gib = resident_weights_bytes(v, profile, variant) / GIB
            err, _ = error(v, profile)
            floor_ms = streamed_bytes_per_step(v, profile, variant, top) / (get_gpu(v.gpu).hbm_tb_per_s * 1e9)
            cells.append(f"{_shape_label(p)} {weights_gib:.1f}/{report.kv_cache_gib:.1f} b{top} {err:+.0%} "
                         f"{floor_ms:.1f}/{step_allowance_ms(v, top):.1f}")
        print(f"    {variant.name[:44]:44s} " + " | ".join(cells))


def print_groups(points: Sequence[Point], tables: Sequence[Point]) -> None:
    """The group's median |error| both ways and per GPU, every row's error, and the user-facing figure of all
    the tables' rows with the group's replaced by the variant's."""
    others = [abs(error(p, user_profile(p))[0]) for p in tables if MODEL not in p.problem.model.name]
    for variant in VARIANTS:
        own = [error(*replay(p, own_profile(p), variant))[0] for p in points]
        user = [error(*replay(p, user_profile(p), variant)) for p in points]
        by_gpu: dict[str, list[float]] = defaultdict(list)
        for p, (err, _) in zip(points, user, strict=True):
            by_gpu[p.gpu].append(abs(err))
        whole = _median(others + [abs(err) for err, _ in user])
        print(f"== {variant.name.strip()}: own {_median([abs(e) for e in own]):.1%}, user-facing "
              f"{_median([abs(e) for e, _ in user]):.1%}; all {len(others) + len(user)} user-facing rows {whole:.1%}")
        print("    per GPU: " + ", ".join(f"{g} {_median(es):.1%} ({len(es)})" for g, es in sorted(by_gpu.items())))
        print("    rows: " + "  ".join(f"{p.row_id} {err:+.0%} b{batch}"
                                       for p, (err, batch) in zip(points, user, strict=True)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.maverick", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    points, _ = load_points(POINTS_CSV)
    tables = [p for p in points if p.kind == THROUGHPUT and p.source.startswith("TRTLLM-PERF")]
    mine = [p for p in tables if MODEL in p.problem.model.name]
    print(f"{len(mine)} {MODEL} rows of the TensorRT-LLM tables")
    print_weights(mine)
    print_h100_rows(mine)
    print_groups(mine, tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
