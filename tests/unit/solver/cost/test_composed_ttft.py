"""SGLang on H100, which has no SGLang profile, is priced with SGLang's serving stack (its composed profile)."""

from __future__ import annotations

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.evaluate import evaluate
from tests.unit.solver.cost.factory import layout, problem


def sglang_on_h100(concurrency: int = 1, profile: str | None = None):
    p = problem("llama-3.1-8b", "1xH100", isl=1000, osl=100, profile=profile).model_copy(update={"engine": "sglang"})
    return p, layout(p, batch=concurrency)


def test_its_ttft_carries_sglangs_fixed_cost_per_request():
    p, lay = sglang_on_h100()
    priced = evaluate(p, lay)
    assert priced.profile == "h100-sxm+sglang"
    without = evaluate(p, lay, get_profile("h100-sxm+sglang").model_copy(update={"request_overhead_ms": 0.0}))
    # SGLang's fixed cost per request, fitted on its H200 and B200 runs: 176 ms (h200-sxm-sglang.json).
    assert priced.metrics.ttft_ms - without.metrics.ttft_ms == pytest.approx(176.0, abs=1e-3)


def test_under_load_it_prefills_as_sglang_does_not_as_the_table_profile_assumed():
    p, lay = sglang_on_h100(concurrency=32)
    composed = evaluate(p, lay)
    table = evaluate(*sglang_on_h100(concurrency=32, profile="h100-sxm"))  # what priced it before composition
    # SGLang's prefill-first scheduler runs no decode round in its prefill steps, and every request pays its fixed
    # cost: the first token comes later than the table profile (mixing, no fixed cost) says.
    assert composed.metrics.ttft_ms > table.metrics.ttft_ms + 176.0
