"""Number formats of weights and KV cache, with the bytes one element really occupies.

Block-scaled 4-bit formats carry their scales: MXFP4 stores one 8-bit scale per 32 values
(4.25 bits), NVFP4 one FP8 scale per 16 values (4.5 bits), INT4 as AWQ/GPTQ packs it one 16-bit
scale per group of 128 (4.125 bits). FP8 per-tensor or 128x128-block scales are below 0.1 % and
are ignored.
"""

from __future__ import annotations

from enum import Enum

from shardplan.models.errors import SpecError, quoted


class DType(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"  # NVFP4
    MXFP4 = "mxfp4"
    INT4 = "int4"

    @property
    def bytes(self) -> float:
        """Bytes per element, scales included."""
        return _BYTES[self]

    @property
    def compute_class(self) -> str:
        """Which tensor-core rate a GEMM with these weights runs at: bf16, fp8 or fp4.

        INT4 weight-only kernels dequantise to 16-bit before the multiply, so they run at the
        16-bit rate; MXFP4 and NVFP4 run natively on GPUs with FP4 units (the GPU spec says which).
        """
        return _COMPUTE_CLASS[self]

    @classmethod
    def parse(cls, text: str, field: str = "dtype") -> DType:
        key = text.strip().lower().replace("bfloat16", "bf16").replace("float16", "fp16")
        key = {"float8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8", "nvfp4": "fp4", "w4a16": "int4"}.get(key, key)
        try:
            return cls(key)
        except ValueError:
            names = ", ".join(d.value for d in cls)
            raise SpecError(field, f"unknown dtype {quoted(text)}; one of {names}") from None


_BYTES = {
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.FP4: 4.5 / 8,
    DType.MXFP4: 4.25 / 8,
    DType.INT4: 4.125 / 8,
}

_COMPUTE_CLASS = {
    DType.BF16: "bf16",
    DType.FP16: "bf16",
    DType.FP8: "fp8",
    DType.FP4: "fp4",
    DType.MXFP4: "fp4",
    DType.INT4: "bf16",
}
