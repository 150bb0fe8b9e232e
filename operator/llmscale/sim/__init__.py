"""The fleet and traffic simulator: the operator's policy and the baselines over a trace, in
simulated time, judged by goodput per GPU-hour at a stated SLO attainment.

See ``docs/simulate.md``. Modules: :mod:`~llmscale.sim.trace` (load and synthesise traces),
:mod:`~llmscale.sim.replica` (one engine), :mod:`~llmscale.sim.fleet` (pools, router, time loop),
:mod:`~llmscale.sim.baselines` (hpa, keda-queue, kpa, static-peak, oracle, llmscale),
:mod:`~llmscale.sim.calibrate` (capacity at the SLO), :mod:`~llmscale.sim.report` (figures),
:mod:`~llmscale.sim.plot` (matplotlib), :mod:`~llmscale.sim.runner` (scenarios).
"""

from llmscale.sim.baselines import POLICY_NAMES
from llmscale.sim.calibrate import Capacity, calibrate
from llmscale.sim.fleet import Autoscaler, FleetConfig, Observation, ScaleDecision, SimResult, simulate
from llmscale.sim.replica import EngineConfig, ReplicaEngine
from llmscale.sim.report import minute_series, summarize
from llmscale.sim.runner import Scenario, build_autoscaler, run_policy
from llmscale.sim.trace import TRACE_CITATION, DiurnalEnvelope, Trace, load_azure_csv, synthesize

__all__ = [
    "POLICY_NAMES",
    "TRACE_CITATION",
    "Autoscaler",
    "Capacity",
    "DiurnalEnvelope",
    "EngineConfig",
    "FleetConfig",
    "Observation",
    "ReplicaEngine",
    "ScaleDecision",
    "Scenario",
    "SimResult",
    "Trace",
    "build_autoscaler",
    "calibrate",
    "load_azure_csv",
    "minute_series",
    "run_policy",
    "simulate",
    "summarize",
    "synthesize",
]
