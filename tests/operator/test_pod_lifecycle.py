"""Pod lifecycle numbers derived from the spec: the grace period a drain gets, and the rollout's
progress deadline (issue 11, cases 5 and 7), as properties over the whole range the CRD accepts.

Case 5: the grace period was 222 s (207 s after a 15 s preStop), so a 4-minute stream did not fit,
and a 20-minute one was past the 900 s cap. Case 7: no ``progressDeadlineSeconds``, so a 900 s
cold start was reported as a failed rollout at Kubernetes' default 600 s.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llmscale.api import LLMDeploymentSpec
from llmscale.controller.manifests.children import deployment_manifest
from llmscale.controller.manifests.podtemplate import (
    longest_generation_seconds,
    pod_template,
    progress_deadline_seconds,
    termination_grace_seconds,
)

#: The one-hour cap of the grace period (docs/operator.md, "Drain").
GRACE_CAP_S = 3600
#: The preStop hook's endpoint delay, before it starts watching the running requests.
ENDPOINT_DELAY_S = 15


def spec(**overrides: Any) -> LLMDeploymentSpec:
    data: dict[str, Any] = {"model": {"name": "chat", "preset": "llama-3.1-8b"}}
    data.update(overrides)
    return LLMDeploymentSpec.model_validate(data)


@st.composite
def drain_specs(draw: st.DrawFn) -> LLMDeploymentSpec:
    """Specs over the CRD's whole range of context limit, TTFT and ITL SLO, and cold start."""
    return spec(
        model={"name": "chat", "preset": "llama-3.1-8b",
               "contextLimitTokens": draw(st.integers(256, 2_097_152))},
        slo={"ttftP95Seconds": draw(st.floats(0.001, 600)), "itlP95Seconds": draw(st.floats(0.0001, 60))},
        headroom={"coldStartSeconds": draw(st.floats(0, 7200))},
    )


@given(drain_specs())
def test_the_longest_generation_fits_in_the_grace_period_unless_past_the_cap(s: LLMDeploymentSpec) -> None:
    grace = termination_grace_seconds(s)
    assert 60 <= grace <= GRACE_CAP_S
    needed = ENDPOINT_DELAY_S + longest_generation_seconds(s)
    if needed <= GRACE_CAP_S - 10:
        assert grace >= needed, (grace, needed)
    else:
        assert grace == GRACE_CAP_S
    pod = pod_template("chat", s, "interactive")["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace


def test_a_four_minute_stream_fits_with_the_defaults() -> None:
    # 222 s before: 207 s after the preStop, less than 240 s.
    assert termination_grace_seconds(spec()) - ENDPOINT_DELAY_S >= 4 * 60


def test_a_twenty_minute_generation_fits_when_the_context_allows_it() -> None:
    # 12,288 tokens at 0.1 s: 1,230.8 s, past the old 900 s cap.
    s = spec(model={"name": "chat", "preset": "llama-3.1-8b", "contextLimitTokens": 12288})
    assert longest_generation_seconds(s) >= 20 * 60
    assert termination_grace_seconds(s) - ENDPOINT_DELAY_S >= longest_generation_seconds(s)


COLD_STARTS = given(st.floats(0, 7200))


@COLD_STARTS
def test_the_progress_deadline_is_never_below_kubernetes_default(cold_start_s: float) -> None:
    assert progress_deadline_seconds(spec(headroom={"coldStartSeconds": cold_start_s})) >= 600


@COLD_STARTS
def test_the_progress_deadline_outlasts_the_startup_probe(cold_start_s: float) -> None:
    s = spec(headroom={"coldStartSeconds": cold_start_s})
    probe = pod_template("chat", s, "interactive")["spec"]["containers"][0]["startupProbe"]
    assert progress_deadline_seconds(s) > probe["failureThreshold"] * probe["periodSeconds"]  # a restart is seen first


@COLD_STARTS
def test_the_progress_deadline_outlasts_two_cold_starts(cold_start_s: float) -> None:
    assert progress_deadline_seconds(spec(headroom={"coldStartSeconds": cold_start_s})) >= math.ceil(2 * cold_start_s)


@COLD_STARTS
def test_the_deployment_carries_the_progress_deadline(cold_start_s: float) -> None:
    s = spec(headroom={"coldStartSeconds": cold_start_s})
    assert (deployment_manifest("chat", "ns", s, "interactive", 1, {})["spec"]["progressDeadlineSeconds"]
            == progress_deadline_seconds(s))


def test_a_900_second_cold_start_is_not_a_failed_rollout() -> None:
    assert progress_deadline_seconds(spec(headroom={"coldStartSeconds": 900})) > 900 * 1.5
