"""The joint-fit diagnosis (benchmarks/accuracy/joint.py): its fit of any fields on any mix of runs and table rows
gives back the fields that made synthetic measurements."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.joint import fit_fields
from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.engine_fit import ENGINE_BOUNDS, ENGINE_LIMITS, table_errors
from tests.unit.solver.cost.calibration.test_engine_profiles import _table_point


def test_the_table_rows_alone_give_back_the_engine_fields_that_made_them():
    # Two models with different weight per layer and GPU (Llama-3.1-8B at TP1, Llama-3.1-70B at TP8) and
    # decode-heavy and prefill-heavy rows: no pair of fields other than the truth prices them all alike.
    pytest.importorskip("scipy")
    truth = get_profile("h100-sxm").model_copy(
        update={**ENGINE_LIMITS["trtllm"], "layer_overhead_us": 25.0, "hbm_efficiency": 0.7})
    rows = [_table_point(name, tp, isl, osl, truth)
            for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 8)) for isl, osl in ((128, 2048), (2048, 128))]
    start = truth.model_copy(update={"layer_overhead_us": 60.0, "hbm_efficiency": 0.9})
    fields = ("hbm_efficiency", "layer_overhead_us")
    fitted = fit_fields(start, fields, [ENGINE_BOUNDS[f] for f in fields], [], rows)
    assert fitted.hbm_efficiency == pytest.approx(0.7, rel=0.02)
    assert fitted.layer_overhead_us == pytest.approx(25.0, rel=0.03)
    assert max(abs(e) for e in table_errors(rows, fitted)) < 0.005
