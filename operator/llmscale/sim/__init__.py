"""The fleet and traffic simulator: the operator's policy and the baselines over a trace, in
simulated time, judged by goodput per GPU-hour at a stated SLO attainment.

See ``docs/simulate.md``. Modules: :mod:`~llmscale.sim.trace` (load the Azure and Mooncake formats,
synthesise days and weeks), :mod:`~llmscale.sim.replica` (one engine), :mod:`~llmscale.sim.engine_args`
(its limits from the spec), :mod:`~llmscale.sim.latency` (vLLM's histograms and
``histogram_quantile``), :mod:`~llmscale.sim.fleet` (pools, router, time loop),
:mod:`~llmscale.sim.baselines` (hpa, keda-queue, keda-llmd, kpa, aibrix-kv, static-peak, oracle,
llmscale), :mod:`~llmscale.sim.calibrate` (capacity at the SLO), :mod:`~llmscale.sim.report`
(figures), :mod:`~llmscale.sim.plot` (matplotlib), :mod:`~llmscale.sim.runner` (scenarios).
"""

from llmscale.sim.baselines import POLICY_NAMES, SETTING_GRID, TUNABLE
from llmscale.sim.calibrate import Capacity, calibrate, calibrate_sizes
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import Autoscaler, FleetConfig, Observation, ScaleDecision, SimResult, simulate
from llmscale.sim.latency import LatencyRecorder, histogram_quantile
from llmscale.sim.replica import EngineConfig, ReplicaEngine
from llmscale.sim.report import minute_scores, minute_series, request_meets, summarize
from llmscale.sim.runner import Scenario, build_autoscaler, run_policy, sweep_settings
from llmscale.sim.trace import (
    TRACE_CITATION,
    DiurnalEnvelope,
    Trace,
    WeeklyEnvelope,
    load_azure_csv,
    load_mooncake_jsonl,
    load_trace,
    synthesize,
)

__all__ = [
    "POLICY_NAMES",
    "SETTING_GRID",
    "TRACE_CITATION",
    "TUNABLE",
    "Autoscaler",
    "Capacity",
    "DiurnalEnvelope",
    "EngineConfig",
    "FleetConfig",
    "LatencyRecorder",
    "Observation",
    "ReplicaEngine",
    "ScaleDecision",
    "Scenario",
    "SimResult",
    "Trace",
    "WeeklyEnvelope",
    "build_autoscaler",
    "calibrate",
    "calibrate_sizes",
    "engine_config",
    "histogram_quantile",
    "load_azure_csv",
    "load_mooncake_jsonl",
    "load_trace",
    "minute_scores",
    "minute_series",
    "request_meets",
    "run_policy",
    "simulate",
    "summarize",
    "sweep_settings",
    "synthesize",
]
