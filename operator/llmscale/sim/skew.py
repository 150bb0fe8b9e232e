"""A simulated engine deliberately unlike the performance model (issue 27, item 3).

The policy sizes the pool from :class:`llmscale.model.ReplicaModel`; the simulator runs the
replicas on whatever :class:`~llmscale.sim.replica.StepCostModel` it is given. :class:`SkewedCost`
wraps the model's roofline with efficiencies the model does not know — compute ×``compute``,
memory bandwidth ×``bandwidth`` — and a per-step overhead: a step takes
``max((weights + kv × kv_s) / bandwidth, tokens × compute_s / compute) + overhead_s``. The policy
must then learn the error from the SLO (the capacity correction) rather than trust the model.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmscale.sim.replica import StepCostModel, roofline_coefficients

__all__ = ["SkewedCost"]


@dataclass(frozen=True)
class SkewedCost:
    """A replica whose step times differ from ``base``'s.

    Attributes:
        base: the model the policy believes (a roofline: :func:`roofline_coefficients` must read it).
        compute: compute efficiency relative to the model's (0.5: prefill and large batches take
            twice as long).
        bandwidth: memory-bandwidth efficiency relative to the model's (weight and KV reads).
        overhead_s: seconds added to every step (scheduling, sampling, detokenisation the model
            does not count).

    Raises:
        ValueError: ``base`` is not a roofline, or an efficiency is not positive, or the overhead
            is negative.
    """

    base: StepCostModel
    compute: float = 1.0
    bandwidth: float = 1.0
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.compute > 0 and self.bandwidth > 0 and self.overhead_s >= 0):
            raise ValueError("efficiencies must be positive and the overhead non-negative")
        coeffs = roofline_coefficients(self.base)
        if coeffs is None:
            raise ValueError("the base cost model is not a roofline")
        object.__setattr__(self, "_coeffs", coeffs)

    @property
    def kv_cache_capacity_tokens(self) -> int:
        """The base model's KV cache: the skew is in time, not memory."""
        return self.base.kv_cache_capacity_tokens

    def step_time(
        self, decode_seqs: int, kv_tokens_read: float, prefill_tokens: int = 0, prefill_pairs: float | None = None
    ) -> float:
        """Seconds of one engine step (the roofline with the skewed efficiencies, plus the overhead;
        the base has no attention term, so ``prefill_pairs`` changes nothing)."""
        w, kv, comp = self._coeffs  # type: ignore[attr-defined]
        memory = (w + kv_tokens_read * kv) / self.bandwidth
        compute = (decode_seqs + prefill_tokens) * comp / self.compute
        return float(max(memory, compute) + self.overhead_s)

    def describe(self) -> str:
        """E.g. ``compute ×0.5, bandwidth ×1, +2 ms a step``."""
        extra = f", +{self.overhead_s * 1000:g} ms a step" if self.overhead_s else ""
        return f"compute ×{self.compute:g}, bandwidth ×{self.bandwidth:g}{extra}"
