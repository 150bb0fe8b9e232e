"""SLOTargetsOnBuckets (issue 21): a target inside a histogram bucket is named, with the bucket, the
largest interpolation error and the nearest bound to set."""

from __future__ import annotations

import pytest

from llmscale.api import LLMDeploymentSpec, ModelSpec, SloSpec
from llmscale.controller.slobuckets import SLO_TARGETS_REASONS, slo_buckets_condition
from llmscale.signals.profiles import get_profile


def spec(ttft: float, itl: float) -> LLMDeploymentSpec:
    return LLMDeploymentSpec(model=ModelSpec(name="chat", preset="llama-3.1-8b"),
                             slo=SloSpec(ttft_p95_seconds=ttft, itl_p95_seconds=itl))


@pytest.mark.parametrize(
    ("ttft", "itl", "profile", "status", "reason", "words"),
    [
        pytest.param(2.0, 0.1, "vllm", "False", "TargetInsideBucket",
                     ("TTFT SLO 2 s", "(1, 2.5]", "up to 1.5 s", "ttftP95Seconds to 2.5 (or 1)"), id="default-2s"),
        pytest.param(2.5, 0.1, "vllm", "True", "TargetsOnBounds", (), id="on-bounds"),
        pytest.param(2.5, 0.12, "vllm", "False", "TargetInsideBucket",
                     ("ITL SLO 0.12 s", "(0.1, 0.15]", "itlP95Seconds to 0.1 (or 0.15)"), id="itl-inside"),
        pytest.param(2.0, 0.1, "vllm-legacy", "False", "TargetInsideBucket", ("(1, 2.5]",), id="legacy"),
        pytest.param(2.0, 0.1, "sglang", "Unknown", "BucketsUnknown", ("sglang",), id="sglang"),
    ],
)
def test_the_slo_buckets_condition_explains_where_each_target_falls(
    ttft: float, itl: float, profile: str, status: str, reason: str, words: tuple[str, ...]
) -> None:
    c = slo_buckets_condition(spec(ttft, itl), get_profile(profile))
    assert (c.status, c.reason) == (status, reason)
    assert c.reason in SLO_TARGETS_REASONS
    for w in words:
        assert w in c.message
