"""Drift detectors: alerts that compare this week with the last one (issue 23). Pure (strings).

The runbook's weekly cadence — look at the gauges together so that drift is noticed while it is
small — as Prometheus alerts, one group (``llmscale.drift``) of the chart's PrometheusRule, each
with a runbook in docs/runbooks.md. Every detector compares the last :data:`WEEK` with the week
before it (``offset``), so a daily or weekly season cancels out, and each has a floor so that a
ratio of two near-zero numbers does not page:

- **Prefix-cache hit rate falling**: prompt tokens served from the prefix cache over prompt tokens
  looked up (the engines' counters, vLLM V1, vLLM before 0.11 and SGLang names) this week below
  :data:`HIT_RATE_KEPT` of last week's, last week's above :data:`HIT_RATE_FLOOR`.
- **Preemptions per request creeping up**: preempted (SGLang: retracted) over finished requests
  this week above :data:`PREEMPTION_GROWTH` times last week's and above
  :data:`PREEMPTIONS_PER_REQUEST_FLOOR`.
- **Utilisation sliding**: the mean of ``llmscale_busy_ratio`` (share of pods with a running
  request) this week below :data:`UTILISATION_KEPT` of last week's, last week's above 0.1.
- **$/M tokens rising at constant traffic**: the mean of ``llmscale_usd_per_million_tokens`` this
  week above :data:`COST_GROWTH` times last week's while tokens/s moved less than
  :data:`TRAFFIC_TOLERANCE` (a cost that rises with falling traffic is the floor's, not drift).
- **Capacity per replica after an engine change** (the upgrade check): ``llmscale_engine_spec_hash``
  (a digest of ``spec.engine`` type, image and args) changed between 6 and 24 hours ago, and the
  peak goodput per Ready replica of the last :data:`AFTER` (all after the change) is under
  :data:`CAPACITY_KEPT` of the peak of the week before the change while the pool's peak tokens/s
  kept up (at least :data:`PEAK_TRAFFIC_KEPT` of it): the same traffic needs more replicas.
  Peak goodput per replica is the capacity the pool demonstrated, a lower bound of the engine's.
"""

from __future__ import annotations

from typing import Any

from llmscale.signals.profiles import get_profile

__all__ = [
    "AFTER",
    "CAPACITY_KEPT",
    "COST_GROWTH",
    "HIT_RATE_FLOOR",
    "HIT_RATE_KEPT",
    "PEAK_TRAFFIC_KEPT",
    "PREEMPTIONS_PER_REQUEST_FLOOR",
    "PREEMPTION_GROWTH",
    "TRAFFIC_TOLERANCE",
    "UTILISATION_KEPT",
    "WEEK",
    "drift_group",
    "engine_names",
]

#: The window compared with the same window one window earlier.
WEEK = "7d"
#: Hit rate this week under this share of last week's fires …
HIT_RATE_KEPT = 0.8
#: … when last week's was above this (a cache that never hit cannot fall).
HIT_RATE_FLOOR = 0.1
#: Preemptions per request this week above this multiple of last week's fires …
PREEMPTION_GROWTH = 2.0
#: … when they are above this many per request now (1 in 100).
PREEMPTIONS_PER_REQUEST_FLOOR = 0.01
#: Mean busy share this week under this share of last week's fires.
UTILISATION_KEPT = 0.8
#: Mean $/M tokens this week above this multiple of last week's fires …
COST_GROWTH = 1.2
#: … while the mean tokens/s moved less than this share.
TRAFFIC_TOLERANCE = 0.15
#: The upgrade check's window after the change (the change is 6 to 24 hours old).
AFTER = "6h"
#: Peak goodput per replica after the change under this share of the week before fires …
CAPACITY_KEPT = 0.85
#: … when the pool's peak tokens/s after the change is at least this share of the week before.
PEAK_TRAFFIC_KEPT = 0.9

#: Engine labels (llmscale.signals.queries.DEFAULT_LABELS) the engine-counter rules sum by.
_BY = "namespace, llmscale_dev_deployment"
_ENGINE_WHO = "LLMDeployment {{ $labels.namespace }}/{{ $labels.llmscale_dev_deployment }}"
_WHO = "LLMDeployment {{ $labels.namespace }}/{{ $labels.name }}"
_PROFILES = ("vllm", "vllm-legacy", "sglang")


def engine_names(field: str) -> tuple[str, ...]:
    """The metric names of one :class:`MetricProfile` field over the vLLM and SGLang profiles."""
    names = (getattr(get_profile(p), field) for p in _PROFILES)
    return tuple(dict.fromkeys(n for n in names if n))


def _any(field: str) -> str:
    """A selector of any engine's counter for ``field`` (one pod exports one engine's names)."""
    return '{__name__=~"' + "|".join(engine_names(field)) + '"}'


def _ratio(num: str, den: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return (f"(sum by ({_BY}) (increase({_any(num)}[{WEEK}]{off}))\n"
            f" / sum by ({_BY}) (increase({_any(den)}[{WEEK}]{off})))")


def _avg(metric: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return f"avg_over_time({metric}[{WEEK}]{off})"


def _alert(name: str, expr: str, for_: str, summary: str, description: str, runbook: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": "warning"},
        "annotations": {"summary": summary, "description": description, "runbook_url": f"{runbook}#{name.lower()}"},
    }


def drift_group(runbook_url: str) -> dict[str, Any]:
    """The ``llmscale.drift`` rule group; ``runbook_url`` is docs/runbooks.md's address."""
    hit_now, hit_before = (_ratio("prefix_cache_hits_total", "prefix_cache_queries_total", o) for o in ("", WEEK))
    pre_now, pre_before = (_ratio("preemptions_total", "requests_total", o) for o in ("", WEEK))
    busy = 'llmscale_busy_ratio{pool="interactive"}'
    cost, tokens = "llmscale_usd_per_million_tokens", "llmscale_tokens_per_second"
    per_replica = ('(llmscale_goodput_tokens_per_second{pool="interactive"}\n'
                   ' / on (namespace, name, pool) clamp_min(llmscale_ready_replicas{pool="interactive"}, 1))')
    traffic = 'llmscale_tokens_per_second{pool="interactive"}'
    rules = [
        _alert(
            "LLMScalePrefixCacheHitRateFalling",
            f"{hit_now}\n< {HIT_RATE_KEPT:g} * {hit_before}\nand\n{hit_before} > {HIT_RATE_FLOOR:g}",
            "1h",
            f"The prefix-cache hit rate of {_ENGINE_WHO} fell week over week",
            f"Prompt tokens served from the prefix cache over prompt tokens looked up, last {WEEK}, is under "
            f"{HIT_RATE_KEPT:.0%} of the week before: every miss is prefill the GPUs redo.",
            runbook_url,
        ),
        _alert(
            "LLMScalePreemptionsPerRequestRising",
            f"{pre_now}\n> {PREEMPTION_GROWTH:g} * {pre_before}\nand\n{pre_now} > {PREEMPTIONS_PER_REQUEST_FLOOR:g}",
            "1h",
            f"Preemptions per request of {_ENGINE_WHO} are creeping up",
            f"Preempted over finished requests, last {WEEK}, is over {PREEMPTION_GROWTH:g}× the week before and "
            f"over {PREEMPTIONS_PER_REQUEST_FLOOR:g} per request: the KV cache is running short more often.",
            runbook_url,
        ),
        _alert(
            "LLMScaleUtilisationSliding",
            f"{_avg(busy)}\n< {UTILISATION_KEPT:g} * {_avg(busy, WEEK)}\nand\n{_avg(busy, WEEK)} > 0.1",
            "1h",
            f"The utilisation of {_WHO} is sliding week over week",
            f"The mean share of pods with a running request, last {WEEK}, is under {UTILISATION_KEPT:.0%} of the "
            "week before: the same GPUs do less work.",
            runbook_url,
        ),
        _alert(
            "LLMScaleCostPerTokenRising",
            f"{_avg(cost)}\n> {COST_GROWTH:g} * {_avg(cost, WEEK)}\nand\n"
            f"abs({_avg(tokens)} / {_avg(tokens, WEEK)} - 1) < {TRAFFIC_TOLERANCE:g}",
            "1h",
            f"USD per million tokens of {_WHO} pool {{{{ $labels.pool }}}} rose at constant traffic",
            f"Mean $/M tokens, last {WEEK}, is over {COST_GROWTH:g}× the week before while tokens/s moved less "
            f"than {TRAFFIC_TOLERANCE:.0%}: the pool holds more GPU time for the same work.",
            runbook_url,
        ),
        _alert(
            "LLMScaleCapacityDroppedAfterEngineChange",
            f"max_over_time({per_replica}[{AFTER}:5m])\n"
            f"< {CAPACITY_KEPT:g} * max_over_time({per_replica}[{WEEK}:5m] offset 1d)\n"
            f"and on (namespace, name, pool)\nmax_over_time({traffic}[{AFTER}])\n"
            f">= {PEAK_TRAFFIC_KEPT:g} * max_over_time({traffic}[{WEEK}] offset 1d)\n"
            "and on (namespace, name)\n(changes(llmscale_engine_spec_hash[1d]) > 0)\n"
            f"unless on (namespace, name)\n(changes(llmscale_engine_spec_hash[{AFTER}]) > 0)",
            "30m",
            f"Capacity per replica of {_WHO} fell after its engine image or args changed",
            f"Peak goodput per Ready replica in the {AFTER} after spec.engine changed is under {CAPACITY_KEPT:.0%} "
            "of the week before at the same peak traffic: re-run the benchmark and re-derive the capacity note.",
            runbook_url,
        ),
    ]
    return {"name": "llmscale.drift", "rules": rules}
