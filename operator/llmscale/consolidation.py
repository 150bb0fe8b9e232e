"""Consolidation candidates of the fleet report (issue 23): merge small deployments, by simulation.

Pure: deployments, their recorded hourly traffic and their specs in; candidates out. A *group* is
the deployments serving the same model with the same engine (type, image, args), GPU type and
GPUs per replica — they could be one deployment. For each group of two or more:

1. the recorded traffic: per deployment, hourly request rate, mean prompt and output tokens
   (the engines' finished requests and prompt tokens, the operator's tokens/s);
2. each deployment's own peak hour and the merged traffic's peak hour (the hourly rates summed);
3. the replicas each peak needs, **from the simulator** (:func:`llmscale.sim.fleet.simulate`): a
   fixed pool of ``n`` replicas (``StaticReplicas``) serves :data:`SIM_MINUTES` of Poisson arrivals
   at the peak rate with the recorded mean lengths, after :data:`WARMUP_MINUTES` of warm-up; the
   need is the smallest ``n`` whose every measured minute meets both p95s of the spec's SLO;
4. separately the group holds ``Σ max(floor, own need)`` replicas at peak; merged
   ``max(largest floor, merged need)``; the difference × GPUs per replica is the GPUs saved at
   peak, and × :data:`HOURS_PER_MONTH` × the group's mean ``gpuHourUsd`` the dollars a month — a
   floor is paid every hour, so a saving of floors is a saving every hour of the month.

``floors_exceed_peak`` marks the second kind of candidate the runbook names: the merged peak
needs fewer replicas than the floors summed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmscale.api import LLMDeploymentSpec
from llmscale.fleetreport import Deployment, Recorded, Samples
from llmscale.model import ReplicaModel
from llmscale.sim.baselines import StaticReplicas
from llmscale.sim.engine_args import engine_config
from llmscale.sim.fleet import FleetConfig, simulate
from llmscale.sim.report import summarize
from llmscale.sim.trace import Trace

__all__ = ["HOURS_PER_MONTH", "SIM_MINUTES", "WARMUP_MINUTES", "Candidate", "Traffic", "candidates",
           "replicas_needed", "traffic_of"]

HOURS_PER_MONTH = 730.0
#: Measured minutes of each simulated peak, and the warm-up before them.
SIM_MINUTES = 10
WARMUP_MINUTES = 2


@dataclass(frozen=True, slots=True)
class Traffic:
    """One deployment's recorded interactive traffic: hourly ``(t, requests/s, prompt, output)``."""

    hours: tuple[tuple[float, float, float, float], ...]

    def peak(self) -> tuple[float, float, float, float]:
        """The hour of the highest request rate (zeros when there is none)."""
        return max(self.hours, key=lambda h: h[1], default=(0.0, 0.0, 0.0, 0.0))


@dataclass(frozen=True, slots=True)
class Candidate:
    """A group that could be one deployment, and what merging saves at its peak."""

    deployments: tuple[str, ...]
    model: str
    separate_replicas: int
    merged_replicas: int
    floors: int
    gpus_per_replica: int
    gpu_hour_usd: float
    merged_peak_rps: float

    @property
    def gpus_saved(self) -> int:
        return (self.separate_replicas - self.merged_replicas) * self.gpus_per_replica

    @property
    def usd_per_month_saved(self) -> float:
        return self.gpus_saved * HOURS_PER_MONTH * self.gpu_hour_usd

    @property
    def floors_exceed_peak(self) -> bool:
        """The merged peak needs fewer replicas than the floors summed."""
        return self.merged_replicas < self.floors


def traffic_of(rec: Recorded, *, start: float, now: float) -> Traffic:
    """Hourly traffic of the interactive pool from the recorded series inside ``(start, now]``."""
    pool = rec.pools.get("interactive", {})
    out = dict(_inside(pool.get("tokens_per_second", ()), start, now))
    prompt = dict(_inside(rec.input_tokens_per_second, start, now))
    hours = []
    for t, rps in _inside(rec.requests_per_second, start, now):
        if rps > 0:
            hours.append((t, rps, prompt.get(t, 0.0) / rps, out.get(t, 0.0) / rps))
    return Traffic(tuple(hours))


def _inside(samples: Samples, start: float, end: float) -> list[tuple[float, float]]:
    return [(t, v) for t, v in samples if start < t <= end and math.isfinite(v)]


def _poisson_trace(rps: float, prompt: float, output: float, seed: int) -> Trace:
    minutes = SIM_MINUTES + WARMUP_MINUTES
    duration = minutes * 60.0
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rps * duration))
    arrivals = np.sort(rng.uniform(0.0, duration, n))
    return Trace(arrival_s=arrivals, prompt_tokens=np.full(n, max(1, round(prompt)), dtype=np.int64),
                 output_tokens=np.full(n, max(1, round(output)), dtype=np.int64), is_batch=np.zeros(n, dtype=bool),
                 start_s=0.0, duration_s=duration, source=f"recorded peak: {rps:.3g} req/s")


def replicas_needed(spec: LLMDeploymentSpec, rps: float, prompt: float, output: float, *, seed: int = 0,
                    most: int = 64) -> int:
    """The fewest replicas that meet ``spec.slo`` in every measured minute at ``rps`` (simulated).

    ``most`` bounds the search; 0 requests need 0 replicas. Raises ValueError when ``most`` do not
    meet the SLO (the traffic does not fit the model's bounds)."""
    if rps <= 0:
        return 0
    model = ReplicaModel.from_spec(spec)
    engine = engine_config(spec)
    trace = _poisson_trace(rps, prompt, output, seed)

    def meets(n: int) -> bool:
        res = simulate(trace, StaticReplicas(n), model, engine=engine,
                       fleet=FleetConfig(cold_start_s=spec.headroom.cold_start_seconds, initial_replicas=n,
                                         min_replicas=n, max_replicas=n,
                                         gpus_per_replica=spec.resources.gpus_per_replica),
                       context_limit_tokens=spec.model.context_limit_tokens, itl_slo_s=spec.slo.itl_p95_seconds)
        figures = summarize(res, spec.slo, spec.cost.gpu_hour_usd, WARMUP_MINUTES * 60.0)
        met = figures["minutes_meeting_slo_fraction"]
        return met is not None and float(met) >= 1.0 and not figures["rejected_requests"]

    # Galloping then bisection: more replicas never serve the same requests worse.
    low, high = 0, 1
    while not meets(high):
        if high >= most:
            raise ValueError(f"{most} replicas do not meet the SLO at {rps:.3g} req/s")
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if meets(mid) else (mid, high)
    return high


def _group_key(dep: Deployment, spec: LLMDeploymentSpec) -> tuple[str, str, str, int]:
    return (dep.model, dep.engine, spec.resources.gpu_type, dep.gpus_per_replica)


def candidates(
    deployments: Sequence[Deployment],
    specs: Mapping[tuple[str, str], LLMDeploymentSpec],
    traffic: Mapping[tuple[str, str], Traffic],
    *,
    seed: int = 0,
) -> list[Candidate]:
    """Groups of two or more deployments that could be one, with the simulated saving, most first."""
    groups: dict[tuple[str, str, str, int], list[Deployment]] = {}
    for dep in deployments:
        if dep.key in specs:
            groups.setdefault(_group_key(dep, specs[dep.key]), []).append(dep)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda d: d.key)
        spec = specs[members[0].key]
        separate = 0
        merged: dict[float, list[float]] = {}
        for dep in members:
            own = traffic.get(dep.key, Traffic(()))
            _, rps, prompt, output = own.peak()
            separate += max(dep.min_replicas, replicas_needed(specs[dep.key], rps, prompt, output, seed=seed))
            for t, r, p, o in own.hours:
                acc = merged.setdefault(t, [0.0, 0.0, 0.0])
                acc[0] += r
                acc[1] += r * p
                acc[2] += r * o
        peak_rps, prompt_tok, out_tok = 0.0, 0.0, 0.0
        if merged:
            r, p, o = max(merged.values(), key=lambda v: v[0])
            peak_rps, prompt_tok, out_tok = r, p / r, o / r
        floor = max(d.min_replicas for d in members)
        need = replicas_needed(spec, peak_rps, prompt_tok, out_tok, seed=seed)
        out.append(Candidate(
            deployments=tuple(f"{d.namespace}/{d.name}" for d in members), model=members[0].model,
            separate_replicas=separate, merged_replicas=max(floor, need),
            floors=sum(d.min_replicas for d in members), gpus_per_replica=members[0].gpus_per_replica,
            gpu_hour_usd=sum(d.gpu_hour_usd for d in members) / len(members), merged_peak_rps=peak_rps,
        ))
    return sorted(out, key=lambda c: -c.usd_per_month_saved)
