"""The prefill diagnosis (benchmarks/accuracy/prefill.py) prices each op_points.csv row as the cost model's primitives
do: checked against the roofline and alpha-beta formulas by hand."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.prefill import price_row
from shardplan.hardware import get_gpu
from shardplan.hardware.profile import get_profile

H100 = get_gpu("H100-SXM")


def op_row(op: str, shape: str, dtype: str, latency_us: float, backend: str = "TensorRT-LLM 1.3.0rc20") -> dict:
    return {"gpu": "H100-SXM-80GB", "backend": backend, "op": op, "shape_params": shape, "dtype": dtype,
            "latency_us": str(latency_us)}


def test_a_large_fp8_gemm_is_priced_on_the_gemm_curve():
    profile = get_profile("h100-sxm")
    m = n = k = 8192
    price = price_row(op_row("gemm", f"M={m} N={n} K={k}", "fp8", 884.91), profile)
    assert price is not None
    eff = profile.gemm_efficiency * profile.low_precision_gemm_ratio
    expected_s = 2.0 * n * k * (m + profile.gemm_half_tokens) / (H100.flops_per_s("fp8") * eff)
    assert price.priced_us == pytest.approx(expected_s * 1e6)
    assert price.ratio == pytest.approx(expected_s * 1e6 / 884.91)


def test_a_causal_context_attention_counts_half_the_square():
    profile = get_profile("h100-sxm").model_copy(update={"attention_efficiency": 0.5})
    shape = "batch=2 isl=4096 q_heads=8 kv_heads=1 head_dim=128 causal, no prefix"
    price = price_row(op_row("context_attention", shape, "bfloat16 (kv bf16)", 657.0), profile)
    assert price is not None
    flops = 2 * 2.0 * 8 * 256 * 4096 * 4097 / 2  # batch x 2 x heads x (K and V widths) x sum of 1..ISL keys
    assert price.priced_us == pytest.approx(flops / (H100.flops_per_s("bf16") * 0.5) * 1e6)


def test_an_all_reduce_is_the_ring_or_the_one_shot():
    shape = "num_gpus=8 elements=33554432 (65536 KiB)"
    ring = get_profile("h100-sxm").model_copy(update={"scaleup_bw_efficiency": 0.5, "collective_latency_scale": 1.0})
    price = price_row(op_row("all_reduce", shape, "bfloat16", 322.47, "TensorRT-LLM 1.3.0rc20 custom AR"), ring)
    assert price is not None
    nbytes = 33554432 * 2
    assert price.priced_us == pytest.approx(14 * (1.0 + nbytes / 8 / (450e9 * 0.5) * 1e6))
    small = "num_gpus=8 elements=8192 (16 KiB)"
    oneshot = ring.model_copy(update={"allreduce_oneshot_us": 3.0})
    priced = price_row(op_row("all_reduce", small, "bfloat16", 3.56, "TensorRT-LLM 1.3.0rc20 custom AR"), oneshot)
    assert priced is not None and priced.priced_us == pytest.approx(3.0 + 7 * 16384 / (450e9 * 0.5) * 1e6)
    # NCCL's own points are not the engines' kernels: not priced here
    assert price_row(op_row("all_reduce", small, "half", 18.98, "NCCL 2.29.2 (nccl-tests)"), ring) is None
