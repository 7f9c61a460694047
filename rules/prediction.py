"""What the cost model predicts for a layout: the metrics, the time breakdown, the memory per GPU.

Plain pydantic data, so ``--json`` can print it whole. Times in milliseconds (per-operator
breakdown in microseconds), memory in GiB.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Metrics(_Data):
    """Latency as users measure it at the plan's concurrency (closed loop, steady state; DESIGN.md)."""

    ttft_ms: float = Field(description="time to first token: the prompt's prefill, plus under load the decode "
                                       "rounds its chunk steps carry and half a step of waiting, and where the "
                                       "engine reserves whole sequences and the batch does not fit memory, the "
                                       "wait for a slot")
    tpot_ms: float = Field(description="time per output token: a decode round plus the prefill of the other "
                                       "requests that shares its steps")
    decode_step_ms: float = Field(description="one decode round of every sequence in flight, no prefill")
    e2e_ms: float = Field(description="ttft + (osl - 1) x tpot")
    output_tokens_per_s: float = Field(description="all replicas: replicas x batch x osl / e2e (Little's law)")
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float = Field(description="what one request sees: 1000 / tpot_ms")
    batch: int = Field(description="concurrent sequences per replica")


class StageTiming(_Data):
    index: int
    layers: tuple[int, int]
    gpus: tuple[int, ...] = Field(description="global GPU ids of replica 0's stage")
    prefill_ms: float = Field(description="one prefill step of the stage (batch or chunk)")
    decode_ms: float = Field(description="one decode step of the stage's microbatch")
    send_prefill_ms: float = Field(description="activations to the next stage after prefill")
    send_decode_ms: float
    prefill_ops_us: dict[str, float] = Field(description="per operator, summed over the stage's layers")
    decode_ops_us: dict[str, float]


# What a GPU may hold beyond its limit and still fit: float rounding of sums in GiB, not memory.
FIT_TOLERANCE_GIB = 1e-9


def within_limit(total_gib: float, limit_gib: float) -> bool:
    """Whether ``total_gib`` on one GPU fits ``limit_gib`` (``MemoryReport.fits``; the batch bisection asks
    it without building a report)."""
    return total_gib <= limit_gib + FIT_TOLERANCE_GIB


class MemoryReport(_Data):
    stage: int
    weights_gib: float
    kv_cache_gib: float
    activations_gib: float
    comm_buffers_gib: float
    runtime_gib: float
    total_gib: float
    capacity_gib: float = Field(description="HBM of the GPU")
    limit_gib: float = Field(description="what the plan may use: the cap, or capacity x usable fraction")

    @property
    def fits(self) -> bool:
        return within_limit(self.total_gib, self.limit_gib)

    @property
    def short_gib(self) -> float:
        return max(0.0, self.total_gib - self.limit_gib)


class Prediction(_Data):
    metrics: Metrics
    stages: tuple[StageTiming, ...]
    memory: tuple[MemoryReport, ...] = Field(description="one GPU of each stage")
    profile: str = Field(description="calibration profile the prediction used")
    microbatches: int = Field(description="decode microbatches a pipeline keeps in flight")
    prefill_chunk: int = Field(description="sequences prefilled together in the steady state")

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory)

    @property
    def prefill_ms(self) -> float:
        """The prompt's chunk through every stage and send: TTFT at concurrency 1."""
        return sum(s.prefill_ms + s.send_prefill_ms for s in self.stages)

    @property
    def worst_memory(self) -> MemoryReport:
        return max(self.memory, key=lambda m: (m.total_gib - m.limit_gib, -m.stage))
