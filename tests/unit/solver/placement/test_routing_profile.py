"""Uniform routing is built once per model, not once per plan a search prices."""

from __future__ import annotations

import pytest

import shardplan.solver.placement.plan as plan
from shardplan.models.load_profile import uniform_profile
from shardplan.solver.placement.plan import routing_profile
from tests.factory import problem


def test_uniform_routing_is_built_once_per_model_and_is_one_token_per_expert(monkeypatch: pytest.MonkeyPatch):
    built: list[int] = []

    def counting(num_experts: int, layers: tuple[int, ...], tokens: float):
        built.append(num_experts)
        return uniform_profile(num_experts, layers, tokens)

    monkeypatch.setattr(plan, "uniform_profile", counting)
    plan._uniform_routing.cache_clear()
    try:
        first = routing_profile(problem("qwen3-30b-a3b", "1xH100"))
        again = routing_profile(problem("qwen3-30b-a3b", "2xH100", isl=2048))  # another problem, the same model
        other = routing_profile(problem("mixtral-8x7b", "2xH100"))
    finally:
        plan._uniform_routing.cache_clear()
    assert built == [128, 8]  # Qwen3-30B-A3B's 128 experts once, Mixtral's 8 once
    assert again is first and first.num_experts == 128 and len(first.layers) == 48
    assert set(first.loads[0]) == {1.0} and set(other.loads[-1]) == {1.0}
