"""The figures of a run under the one SLO definition: a minute is judged by the histogram quantiles
of what vLLM observed in it (silence from a stalled pool is not success), a request by its TTFT and
the share of its gaps over the ITL target."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.api import SloSpec
from llmscale.sim.fleet import ReplicaRecord, SimResult
from llmscale.sim.latency import LatencyRecorder
from llmscale.sim.replica import RequestTable
from llmscale.sim.report import minute_scores, request_meets, summarize

SLO = SloSpec(ttft_p95_seconds=2.0, itl_p95_seconds=0.1)


def result(table: RequestTable, rec: LatencyRecorder, end_s: float, itl_slo_s: float = 0.1) -> SimResult:
    n = len(table)
    return SimResult(
        policy="hand-made", start_s=0.0, end_s=end_s, requests=table, is_batch=np.zeros(n, bool),
        rejected=np.zeros(n, bool), replicas=[ReplicaRecord("interactive", 0.0, 0.0)], latency=rec,
        itl_slo_s=itl_slo_s,
    )


@pytest.mark.parametrize(
    ("output", "ttft_s", "slow", "finished", "meets"),
    [
        pytest.param(21, 0.5, 1, True, True, id="20-gaps-1-slow-is-within-p95"),
        pytest.param(21, 0.5, 2, True, False, id="20-gaps-2-slow-is-over"),
        pytest.param(2, 0.5, 1, True, False, id="1-gap-slow"),
        pytest.param(1, 0.5, 0, True, True, id="one-token-no-gap"),
        pytest.param(1, 2.5, 0, True, False, id="ttft-over"),
        pytest.param(50, 0.5, 0, False, False, id="unfinished"),
    ],
)
def test_a_request_is_judged_by_its_ttft_with_its_own_p95_gap(
    output: int, ttft_s: float, slow: int, finished: bool, meets: bool
) -> None:
    table = RequestTable([10.0], [100], [output])
    table.first_token[0] = 10.0 + ttft_s
    table.finish[0] = 30.0 if finished else -1.0
    table.slow_gaps[0] = slow
    assert bool(request_meets(result(table, LatencyRecorder(0.0, 60.0), 60.0), SLO)[0]) is meets


def test_request_figures_refuse_a_run_counted_against_another_itl_target() -> None:
    table = RequestTable([10.0], [100], [5])
    with pytest.raises(ValueError, match="ITL target"):
        request_meets(result(table, LatencyRecorder(0.0, 60.0), 60.0, itl_slo_s=0.2), SLO)


def _seven_minutes() -> SimResult:
    """Minute 0: 40 quick first tokens and fast gaps. Minute 1: fast gaps but 10 % slow ones.
    A request arrives at 150 s and gets its first token at 350 s: minutes 2, 3 and 4 see no
    TTFT at all while it waits (stalled), minute 5 sees its 200 s TTFT. Minute 6 is empty."""
    rec = LatencyRecorder(0.0, 420.0)
    for k in range(40):
        rec.add_ttft(1.0 + k, 0.3)
    rec.add_itl(30.0, 0.02, 1000)
    rec.add_itl(70.0, 0.02, 900)
    rec.add_itl(80.0, 0.3, 100)
    rec.add_ttft(350.0, 200.0)
    table = RequestTable([150.0], [100], [1])
    table.first_token[0] = table.finish[0] = 350.0
    return result(table, rec, 420.0)


def test_minutes_are_judged_by_their_histograms() -> None:
    meets, t95, i95, t = minute_scores(_seven_minutes(), SLO)
    assert meets.tolist() == [True, False, False, False, False, False, True]
    assert t.tolist() == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0]
    assert i95[1] > 0.1 and t95[5] > 2.0 and np.isnan(t95[6])


def test_a_stall_is_not_silence() -> None:
    # Minutes 2 to 4 see no TTFT while the request waits: they miss, not pass.
    meets, _, _, _ = minute_scores(_seven_minutes(), SLO)
    assert meets.tolist()[2:5] == [False, False, False]


def test_the_warm_up_is_left_out_of_the_judgement() -> None:
    assert minute_scores(_seven_minutes(), SLO, warmup_s=120.0)[0].tolist() == [False] * 4 + [True]


def test_summary_goodput_counts_the_tokens_of_requests_that_met_the_slo() -> None:
    rec = LatencyRecorder(0.0, 600.0)
    table = RequestTable([100.0, 200.0, 300.0], [100, 100, 100], [11, 21, 31])
    for i, (ttft, slow) in enumerate([(0.5, 0), (3.0, 0), (0.5, 2)]):
        table.first_token[i] = table.arrival[i] + ttft
        table.finish[i] = table.arrival[i] + 10.0
        table.slow_gaps[i] = slow
        rec.add_ttft(table.first_token[i], ttft)
    s = summarize(result(table, rec, 600.0), SLO, gpu_hour_usd=2.0, warmup_s=60.0)
    assert s["requests"] == 3 and s["goodput_tokens"] == 11  # request 1: TTFT; request 2: 2 of 30 gaps
    assert s["slo_attainment"] == pytest.approx(1 / 3)
    assert s["minutes"] == 9 and s["prefix_cache_hit_fraction"] is None
    assert s["gpu_hours"] == pytest.approx(540 / 3600)
