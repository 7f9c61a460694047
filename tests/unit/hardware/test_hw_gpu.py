"""GPU presets: loading, lookup by name and alias, provenance and sane magnitudes, rate fallback."""

from __future__ import annotations

import csv
from enum import Enum
from pathlib import Path

import pytest
from pydantic import ValidationError

from shardplan.hardware import GPUSpec, get_gpu, list_gpus
from shardplan.models.errors import SpecError

# The GPU names the shared calibration data uses (column `gpu` of perf_points.csv).
CALIBRATION_GPU_NAMES = {
    "H100-SXM-80GB": "H100-SXM",
    "H200-SXM-141GB": "H200-SXM",
    "A100-SXM4-80GB": "A100-SXM-80GB",
    "A100-PCIE-80GB": "A100-PCIe-80GB",
    "L40S-48GB": "L40S",
    "RTX-PRO-6000-Blackwell-Server": "RTX-PRO-6000-Server",
    "B200-SXM-180GB": "B200-SXM",
    "GB200-NVL72": "GB200-NVL72",
    "GH200-480GB": "GH200-96GB",
}

SHORT_NAMES = {
    "h100": "H100-SXM",
    "h200": "H200-SXM",
    "h800": "H800-SXM",
    "h20": "H20",
    "b200": "B200-SXM",
    "gb200": "GB200-NVL72",
    "gh200": "GH200-96GB",
    "a100": "A100-SXM-80GB",
    "a100-pcie": "A100-PCIe-80GB",
    "l40s": "L40S",
    "mi300x": "MI300X",
    "rtx-pro-6000": "RTX-PRO-6000-Server",
}


def test_all_twelve_presets_load_in_file_order():
    names = [g.name for g in list_gpus()]
    assert len(names) == 12
    assert names[0] == "H100-SXM"
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("alias,name", sorted({**CALIBRATION_GPU_NAMES, **SHORT_NAMES}.items()))
def test_lookup_by_alias_and_short_name(alias, name):
    assert get_gpu(alias).name == name


@pytest.mark.parametrize("spelling", ["H100-SXM", "h100-sxm", "  H100 SXM ", "h100_sxm", "NVIDIA H100-SXM"])
def test_lookup_ignores_case_spaces_underscores_and_vendor(spelling):
    assert get_gpu(spelling).name == "H100-SXM"


def test_calibration_csv_gpu_names_all_resolve():
    csv_path = Path("/work/shared/calibration/perf_points.csv")
    if not csv_path.exists():
        pytest.skip("shared calibration data not present")
    with csv_path.open(newline="") as fh:
        names = {row["gpu"] for row in csv.DictReader(fh)}
    for name in names:
        assert get_gpu(name).name == CALIBRATION_GPU_NAMES[name]


def test_unknown_gpu_names_field_and_lists_presets():
    with pytest.raises(SpecError) as info:
        get_gpu("H999")
    assert info.value.field == "gpu"
    assert "'H999'" in str(info.value)
    assert "H100-SXM" in str(info.value) and "MI300X" in str(info.value)


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.name)
def test_preset_has_source_and_sane_magnitudes(gpu: GPUSpec):
    assert len(gpu.source) > 40  # a real citation, not a placeholder
    assert 16 <= gpu.hbm_gib <= 512
    assert 0.5 <= gpu.hbm_tb_per_s <= 20
    assert 100 <= gpu.bf16_tflops <= 5000
    if gpu.fp8_tflops is not None:
        assert gpu.fp8_tflops >= gpu.bf16_tflops
    if gpu.fp4_tflops is not None:
        assert gpu.fp8_tflops is not None and gpu.fp4_tflops >= gpu.fp8_tflops
    assert 16 <= gpu.scaleup_gb_per_s <= 1000
    assert 10 <= gpu.scaleout_gb_per_s <= 200
    # a NIC is never faster than the GPU's own scale-up fabric, except where there is none (domain 1)
    assert gpu.scaleup_domain_gpus == 1 or gpu.scaleout_gb_per_s <= gpu.scaleup_gb_per_s


def test_datasheet_numbers_of_a_few_presets():
    h100 = get_gpu("h100")
    assert (h100.hbm_gib, h100.hbm_tb_per_s, h100.bf16_tflops, h100.fp8_tflops) == (80, 3.35, 989.4, 1978.9)
    assert h100.scaleup_gb_per_s == 450  # 900 GB/s NVLink 4 is bidirectional
    assert get_gpu("h800").scaleup_gb_per_s == 200
    gb200 = get_gpu("gb200")
    assert (gb200.scaleup_domain_gpus, gb200.gpus_per_node) == (72, 4)
    assert gb200.domain_spans_nodes and not h100.domain_spans_nodes
    assert get_gpu("a100").fp8_tflops is None
    assert get_gpu("GH200-480GB").hbm_gib == 96  # the 480 GB is Grace's LPDDR5X


def test_unit_conversions():
    h100 = get_gpu("h100")
    assert h100.hbm_bytes == 80 * 1024**3
    assert h100.hbm_bytes_per_s == 3.35e12
    assert h100.flops_per_s("bf16") == pytest.approx(989.4e12)


def test_tflops_native_rates():
    b200 = get_gpu("b200")
    assert (b200.tflops("bf16"), b200.tflops("fp8"), b200.tflops("fp4")) == (2250, 4500, 9000)
    assert b200.tflops("FP16") == 2250  # 16-bit floats share the BF16 rate


def test_tflops_fallback_when_the_class_is_missing():
    h100, a100 = get_gpu("h100"), get_gpu("a100")
    assert h100.tflops("fp4") == 1978.9  # no FP4 units: W4A8 at the FP8 rate
    assert a100.tflops("fp8") == 312  # no FP8 units: dequantised to 16-bit
    assert a100.tflops("fp4") == 312
    assert not h100.supports("fp4") and h100.supports("fp8") and not a100.supports("fp8")


def test_tflops_reads_str_enums_by_value():
    class Kind(str, Enum):  # like a dtype's compute class
        FP8 = "fp8"

    assert get_gpu("h100").tflops(Kind.FP8) == 1978.9


def test_unknown_compute_class():
    with pytest.raises(SpecError) as info:
        get_gpu("h100").tflops("int3")
    assert info.value.field == "compute_class"


def _spec(**overrides) -> dict:
    fields = get_gpu("h100").model_dump()
    fields.update(overrides)
    return fields


def test_spec_is_frozen_and_strict():
    gpu = get_gpu("h100")
    with pytest.raises(ValidationError):
        gpu.hbm_gib = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        GPUSpec(**_spec(hbm_gib="80"))
    with pytest.raises(ValidationError):
        GPUSpec(**_spec(color="green"))


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"fp8_tflops": 500.0}, "fp8_tflops"),  # below BF16
        ({"fp8_tflops": None, "fp4_tflops": 4000.0}, "fp4_tflops"),  # FP4 without FP8
        ({"fp4_tflops": 1000.0}, "fp4_tflops"),  # below FP8
        ({"scaleup_domain_gpus": 12}, "scaleup_domain_gpus"),  # neither holds nor splits 8-GPU nodes
    ],
)
def test_spec_invariants(overrides, field):
    with pytest.raises(ValidationError) as info:
        GPUSpec(**_spec(**overrides))
    inner = info.value.errors()[0]["ctx"]["error"]
    assert isinstance(inner, SpecError) and inner.field == field


def test_nonpositive_numbers_are_rejected():
    with pytest.raises(ValidationError):
        GPUSpec(**_spec(hbm_tb_per_s=0.0))
    with pytest.raises(ValidationError):
        GPUSpec(**_spec(gpus_per_node=0))
