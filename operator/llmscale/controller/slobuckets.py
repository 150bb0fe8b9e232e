"""The ``SLOTargetsOnBuckets`` condition: whether each SLO target is a bound of the engine's latency
histogram, and if not, the bucket it lies in, the largest interpolation error there and the
nearest bound to set instead (:mod:`llmscale.signals.buckets`). Pure.

Why it matters: a p95 read inside the bucket holding the target can be either side of it, so such
minutes are judged conservatively (only a p95 at most the bucket's lower bound counts as met) and
a breach read there neither moves the capacity correction nor asks for a replica.
"""

from __future__ import annotations

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.events import clip
from llmscale.policy.types import ConditionResult
from llmscale.signals.buckets import wide_bucket
from llmscale.signals.profiles import MetricProfile

__all__ = ["SLO_TARGETS_ON_BUCKETS", "SLO_TARGETS_REASONS", "slo_buckets_condition"]

#: The condition type.
SLO_TARGETS_ON_BUCKETS = "SLOTargetsOnBuckets"
#: Its reasons (docs/troubleshooting.md has a row for each).
SLO_TARGETS_REASONS = ("TargetsOnBounds", "TargetInsideBucket", "BucketsUnknown")


def _g(value: float) -> str:
    return f"{value:g}"


def slo_buckets_condition(spec: LLMDeploymentSpec, profile: MetricProfile) -> ConditionResult:
    """Return ``SLOTargetsOnBuckets`` for the spec's SLO against the profile's histogram bounds.

    - ``True``/``TargetsOnBounds``: both targets are bucket bounds: every p95 is judged exactly.
    - ``False``/``TargetInsideBucket``: a target lies inside a bucket; the message names it, the
      largest error (the bucket's width) and the nearest bound, e.g. vLLM's TTFT with the default
      2 s SLO: bucket (1, 2.5] s, error up to 1.5 s, set 2.5 (or 1).
    - ``Unknown``/``BucketsUnknown``: the profile does not know its buckets (SGLang): p95s are
      compared plainly.
    """
    if profile.ttft_buckets_s is None and profile.itl_buckets_s is None:
        return ConditionResult("Unknown", "BucketsUnknown", (
            f"The bucket bounds of profile {profile.name}'s latency histograms are not known: p95s are compared "
            "with the SLO as read, and one inside a wide bucket may be off by that bucket's width"))
    targets = (
        ("TTFT", "spec.slo.ttftP95Seconds", spec.slo.ttft_p95_seconds, profile.ttft_buckets_s, profile.ttft_histogram),
        ("ITL", "spec.slo.itlP95Seconds", spec.slo.itl_p95_seconds, profile.itl_buckets_s, profile.itl_histogram),
    )
    inside = []
    for what, field, target, bounds, histogram in targets:
        bucket = wide_bucket(target, bounds)
        if bucket is None:
            continue
        other = bucket.hi if bucket.nearest_bound == bucket.lo else bucket.lo
        alternative = f" (or {_g(other)})" if other != float("inf") else ""
        error = f"up to {_g(bucket.error_s)} s" if bucket.error_s != float("inf") else "any amount"
        inside.append(
            f"the {what} SLO {_g(target)} s lies inside bucket ({_g(bucket.lo)}, {_g(bucket.hi)}] s of {histogram}, "
            f"where a p95 may be off by {error}: a minute counts as met only with the p95 at "
            f"most {_g(bucket.lo)} s, and a breach read inside the bucket is neither learnt from nor answered; "
            f"set {field} to {_g(bucket.nearest_bound)}{alternative} to judge it exactly")
    if not inside:
        return ConditionResult("True", "TargetsOnBounds", (
            f"Both SLO targets are bucket bounds of profile {profile.name}'s histograms: every p95 is judged exactly"))
    text = "; ".join(inside)
    return ConditionResult("False", "TargetInsideBucket", clip(text[0].upper() + text[1:]))
