"""The chart's leader election: replicas get no shared fixed Kopf priority (each process draws one),
a fixed priority reaches the operator's settings, and a fixed priority with replicas > 1 is refused.

Why: Kopf pauses every peer that sees a live peer of the same priority, so two replicas with equal
priorities would both stop working (llmscale.controller.settings.OperatorSettings.peering_priority).
"""

from __future__ import annotations

from pathlib import Path

from tests.deploy.helpers import VARIANTS, by_kind
from tests.deploy.test_chart import operator_container, template

from llmscale.controller.settings import load_settings


def _env(docs: list[dict[str, object]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in operator_container(docs)["env"] if "value" in e}


def test_replicas_get_no_fixed_priority_so_each_draws_its_own(helm: Path) -> None:
    for variant in ("leader-election-cluster", "leader-election-namespaced"):
        docs = template(helm, *VARIANTS[variant])
        (deployment,) = by_kind(docs, "Deployment")
        assert deployment["spec"]["replicas"] == 2
        env = _env(docs)
        assert "LLMSCALE_PEERING_PRIORITY" not in env
        settings = load_settings(None, env)
        assert settings.peering_name == "llmscale" and settings.peering_priority is None


def test_a_fixed_priority_reaches_the_settings_of_a_single_replica(helm: Path) -> None:
    env = _env(template(helm, "leaderElection.enabled=true", "leaderElection.priority=100"))
    assert env["LLMSCALE_PEERING_PRIORITY"] == "100"
    assert load_settings(None, env).peering_priority == 100


def test_a_fixed_priority_shared_by_two_replicas_is_refused(helm: Path) -> None:
    proc = template(helm, *VARIANTS["leader-election-cluster"], "leaderElection.priority=5", ok=False)
    assert proc.returncode != 0
    assert "leaderElection/priority" in proc.stderr, proc.stderr
