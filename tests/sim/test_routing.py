"""The simulated router's policies (``FleetConfig.routing``) and the routing benchmark's small case.

A trace of conversations that each resend a growing prefix (Mooncake format: equal block ids are
equal prefixes) on a fixed pool of four replicas: every policy serves every request; prefix-aware
routing finds more of each prompt cached than random or least-loaded spreading (the point of
routing by prefix); without block hashes prefix-aware is least-loaded exactly; an unknown policy
is refused. The benchmark runs end to end on a few minutes of such a trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from benchmarks import routing

from llmscale.api import LLMDeploymentSpec
from llmscale.model import ReplicaModel
from llmscale.sim.baselines import StaticReplicas
from llmscale.sim.fleet import ROUTINGS, FleetConfig, simulate
from llmscale.sim.trace import Trace, load_mooncake_jsonl

ROOT = Path(__file__).resolve().parents[2]
SPEC = LLMDeploymentSpec.model_validate({"model": {"name": "m", "preset": "llama-3.1-8b",
                                                   "contextLimitTokens": 32768},
                                         "replicas": {"min": 1, "max": 8}})


def conversations(path: Path, *, talks: int = 24, turns: int = 8, seconds: float = 240.0, seed: int = 1) -> Path:
    """A Mooncake-format trace: ``talks`` conversations, each turn resending the one before plus
    two new 512-token blocks, turns spread at random over ``seconds``."""
    rng = np.random.default_rng(seed)
    rows = []
    next_id = 0
    for _ in range(talks):
        blocks: list[int] = []
        for t in np.sort(rng.uniform(0, seconds, turns)):
            blocks = [*blocks, next_id, next_id + 1]
            next_id += 2
            rows.append({"timestamp": int(t * 1000), "input_length": 512 * len(blocks), "output_length": 64,
                         "hash_ids": list(blocks)})
    rows.sort(key=lambda r: int(str(r["timestamp"])))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def serve(trace: Trace, routing: str) -> tuple[int, float]:
    """(requests finished, prefix-cache hit rate) on four replicas."""
    res = simulate(trace, StaticReplicas(4), ReplicaModel.from_spec(SPEC),
                   fleet=FleetConfig(initial_replicas=4, min_replicas=4, max_replicas=4, routing=routing),
                   context_limit_tokens=SPEC.model.context_limit_tokens)
    done = int((np.asarray(res.requests.finish) >= 0).sum())
    return done, res.prefix_cache_hits_tokens / max(1, res.prefix_cache_queries_tokens)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_prefix_aware_routing_finds_more_of_each_prompt_cached(tmp_path: Path, seed: int) -> None:
    trace = load_mooncake_jsonl(conversations(tmp_path / "talks.jsonl", seed=seed))
    got = {routing: serve(trace, routing) for routing in ROUTINGS}
    assert {done for done, _ in got.values()} == {len(trace)}
    hits = {routing: rate for routing, (_, rate) in got.items()}
    assert hits["prefix-aware"] > 1.15 * hits["least-loaded"] and hits["prefix-aware"] > 1.5 * hits["random"], hits


def test_without_hashes_prefix_aware_is_least_loaded(tmp_path: Path) -> None:
    hashed = load_mooncake_jsonl(conversations(tmp_path / "talks.jsonl", talks=8))
    plain = Trace(hashed.arrival_s, hashed.prompt_tokens, hashed.output_tokens, hashed.is_batch, hashed.start_s,
                  hashed.duration_s)
    a = simulate(plain, StaticReplicas(3), ReplicaModel.from_spec(SPEC),
                 fleet=FleetConfig(initial_replicas=3, routing="prefix-aware"))
    b = simulate(plain, StaticReplicas(3), ReplicaModel.from_spec(SPEC),
                 fleet=FleetConfig(initial_replicas=3, routing="least-loaded"))
    assert a.requests.finish == b.requests.finish and a.requests.replica == b.requests.replica


def test_random_routing_is_seeded(tmp_path: Path) -> None:
    trace = load_mooncake_jsonl(conversations(tmp_path / "talks.jsonl", talks=8))

    def replicas(seed: int) -> list[int]:
        return list(simulate(trace, StaticReplicas(3), ReplicaModel.from_spec(SPEC),
                             fleet=FleetConfig(initial_replicas=3, routing="random", routing_seed=seed)).requests.replica)
    assert replicas(7) == replicas(7) != replicas(8)


def test_an_unknown_routing_is_refused() -> None:
    with pytest.raises(ValueError, match="routing must be one of least-loaded, random, prefix-aware"):
        FleetConfig(routing="round-robin")


def test_the_routing_benchmark_small_case(tmp_path: Path) -> None:
    trace = conversations(tmp_path / "talks.jsonl", talks=12, turns=6, seconds=180)
    assert routing.main(["--trace", str(trace), "--minutes", "3", "--warmup-minutes", "1", "--out", str(tmp_path),
                         "--spec", str(ROOT / "benchmarks" / "long-context-llama-8b-h100.yaml")]) == 0
    text = (tmp_path / "routing.md").read_text()
    for name in ROUTINGS:
        assert f"| {name} | " in text
    rows = json.loads((tmp_path / "routing-long-context-llama-8b-h100.json").read_text())["rows"]
    assert {r["routing"] for r in rows} == set(ROUTINGS)
    assert all(r["minutes_meeting_slo_fraction"] == 1.0 and r["replicas"] >= 1 for r in rows)
