"""One GPU type as the planner sees it: capacity, bandwidths, peak tensor-core rates, node shape.

The numbers of the built-in GPUs live as data in ``presets/gpus.json``, each with the document it
comes from; this module loads them through the same model users would fill in themselves, and
looks them up by name or alias. Units are in the field names and follow the datasheets:

- capacity in GiB (2^30 B). Datasheets say "80 GB"; HBM and GDDR parts are binary-sized, so the
  figure is read as GiB. What the driver exposes is 1-6 % lower (ECC, reserved memory): that
  share belongs to the calibration profile's usable fraction, not here.
- bandwidths in decimal units: HBM in TB/s (10^12 B/s), links in GB/s (10^9 B/s), each link
  bandwidth per GPU and per direction (NVLink "900 GB/s" is 450 each way).
- tensor-core rates DENSE, in TFLOPS (10^12 FLOP/s). Datasheets often print the 2:4-sparse rate
  with a footnote; those are halved.

It must not: measure, calibrate (achieved efficiencies are the profile's job) or import anything
of ours but ``SpecError``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from shardplan.hardware._errors import as_spec_error
from shardplan.models.errors import SpecError, quoted

COMPUTE_CLASSES = ("bf16", "fp8", "fp4")

# 16-bit floats of either kind run at the same tensor-core rate on every preset GPU.
_CLASS_ALIASES = {
    "fp16": "bf16",
    "bfloat16": "bf16",
    "float16": "bf16",
    "float8": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}


class GPUSpec(BaseModel):
    """A GPU type with its default node and scale-up domain."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1, description="canonical preset name, e.g. 'H100-SXM'")
    aliases: tuple[str, ...] = Field(default=(), description="other names accepted by get_gpu (case-insensitive)")
    hbm_gib: PositiveFloat = Field(description="device memory capacity in GiB (2^30 B), as the datasheet states it")
    hbm_tb_per_s: PositiveFloat = Field(description="peak device-memory bandwidth in TB/s (10^12 B/s)")
    bf16_tflops: PositiveFloat = Field(
        description="peak DENSE BF16/FP16 tensor-core rate in TFLOPS (not the 2:4-sparse rate)"
    )
    fp8_tflops: PositiveFloat | None = Field(
        default=None, description="peak DENSE FP8 tensor-core rate in TFLOPS; None = no FP8 tensor cores"
    )
    fp4_tflops: PositiveFloat | None = Field(
        default=None, description="peak DENSE FP4 (NVFP4/MXFP4) tensor-core rate in TFLOPS; None = no FP4 tensor cores"
    )
    scaleup_gb_per_s: PositiveFloat = Field(
        description="per-GPU, per-direction bandwidth inside the scale-up domain in GB/s (10^9 B/s): "
        "NVLink/xGMI aggregate, or PCIe for cards without such a fabric"
    )
    scaleup_domain_gpus: PositiveInt = Field(
        description="GPUs that reach each other without a NIC by default: the node (HGX, OAM, PCIe server) "
        "or a whole rack (GB200 NVL72)"
    )
    gpus_per_node: PositiveInt = Field(description="GPUs in one default node (HGX board 8, GB200 compute tray 4)")
    scaleout_gb_per_s: PositiveFloat = Field(
        description="per-GPU, per-direction NIC bandwidth in GB/s (400 Gb/s InfiniBand = 50 GB/s), typical deployment"
    )
    profiles_from: str | None = Field(
        default=None,
        description="a GPU of the same die, memory and clocks whose calibration profiles price this one, which has "
        "none of its own (H800-SXM: H100-SXM's); the profiles' efficiencies apply to this GPU's own peaks and links",
    )
    vendor: Literal["nvidia", "amd"] = Field(
        default="nvidia", description="who makes it: which serving engines run on it (TensorRT-LLM needs CUDA)"
    )
    source: str = Field(min_length=1, description="datasheet or document the numbers come from")

    @model_validator(mode="after")
    def _consistent(self) -> GPUSpec:
        if self.fp8_tflops is not None and self.fp8_tflops < self.bf16_tflops:
            raise SpecError("fp8_tflops", f"{self.name}: FP8 rate {self.fp8_tflops} is below BF16 {self.bf16_tflops}")
        if self.fp4_tflops is not None:
            if self.fp8_tflops is None:
                raise SpecError("fp4_tflops", f"{self.name}: an FP4 rate without an FP8 rate")
            if self.fp4_tflops < self.fp8_tflops:
                raise SpecError("fp4_tflops", f"{self.name}: FP4 rate {self.fp4_tflops} is below FP8 {self.fp8_tflops}")
        domain, node = self.scaleup_domain_gpus, self.gpus_per_node
        if domain % node and node % domain:
            raise SpecError(
                "scaleup_domain_gpus", f"{self.name}: a {domain}-GPU domain neither holds nor splits {node}-GPU nodes"
            )
        return self

    @property
    def domain_spans_nodes(self) -> bool:
        """True for rack-scale fabrics (NVL72), where one scale-up domain joins several nodes."""
        return self.scaleup_domain_gpus > self.gpus_per_node

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * 2**30

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12

    def supports(self, compute_class: str) -> bool:
        """Whether the GPU has tensor cores for this class natively (no fallback)."""
        key = _compute_class(compute_class)
        return {"bf16": True, "fp8": self.fp8_tflops is not None, "fp4": self.fp4_tflops is not None}[key]

    def tflops(self, compute_class: str) -> float:
        """Peak dense TFLOPS a GEMM of this class runs at: "bf16", "fp8" or "fp4".

        A class the GPU lacks falls back to the next wider one it has, because engines then
        dequantise the weights and multiply at that rate: FP4 runs at the FP8 rate where there is
        one (W4A8 kernels on Hopper), else at BF16 (W4A16 on Ampere); FP8 without FP8 units runs
        at BF16 (e.g. FP8 weights on A100). ``supports`` tells whether a rate is native.
        """
        key = _compute_class(compute_class)
        if key == "fp4" and self.fp4_tflops is not None:
            return self.fp4_tflops
        if key in ("fp4", "fp8") and self.fp8_tflops is not None:
            return self.fp8_tflops
        return self.bf16_tflops

    def flops_per_s(self, compute_class: str) -> float:
        return self.tflops(compute_class) * 1e12


def _compute_class(text: str) -> str:
    # str-valued enums (such as a dtype's compute class) are read by value: str() would give 'Enum.MEMBER'
    key = str(getattr(text, "value", text)).strip().lower()
    key = _CLASS_ALIASES.get(key, key)
    if key not in COMPUTE_CLASSES:
        raise SpecError("compute_class", f"unknown compute class {text!r}; one of {', '.join(COMPUTE_CLASSES)}")
    return key


def _normalise(name: str) -> str:
    """Lookup key: case, spaces, underscores and a vendor prefix do not matter."""
    key = "-".join(str(name).strip().lower().replace("_", " ").split())
    for vendor in ("nvidia-", "amd-"):
        if key.startswith(vendor):
            key = key[len(vendor):]
    return key


@lru_cache(maxsize=1)
def list_gpus() -> tuple[GPUSpec, ...]:
    """Every preset GPU, in the order of ``presets/gpus.json``."""
    text = resources.files("shardplan.hardware").joinpath("presets/gpus.json").read_text(encoding="utf-8")
    try:
        gpus = TypeAdapter(tuple[GPUSpec, ...]).validate_json(text)
    except ValidationError as exc:
        raise as_spec_error(exc, "presets/gpus.json") from None
    _index(gpus)  # fail at load time on a clash, not at the first unlucky lookup
    return gpus


@lru_cache(maxsize=1)
def _lookup() -> dict[str, GPUSpec]:
    return _index(list_gpus())


def _index(gpus: tuple[GPUSpec, ...]) -> dict[str, GPUSpec]:
    index: dict[str, GPUSpec] = {}
    for gpu in gpus:
        for key in {_normalise(n) for n in (gpu.name, *gpu.aliases)}:
            if key in index:
                raise SpecError("presets/gpus.json", f"{key!r} names both {index[key].name} and {gpu.name}")
            index[key] = gpu
    return index


def get_gpu(name: str) -> GPUSpec:
    """The preset called ``name`` or one of its aliases, case-insensitively.

    >>> get_gpu("h100").name
    'H100-SXM'
    """
    gpu = _lookup().get(_normalise(name))
    if gpu is None:
        names = ", ".join(g.name for g in list_gpus())
        raise SpecError("gpu", f"unknown GPU {quoted(name)}; presets: {names}")
    return gpu
