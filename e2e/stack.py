"""The whole local stack in one command (docs/e2e.md): build (cached), control plane, Prometheus,
pod runner.

    .venv/bin/python e2e/stack.py up|down|status|env

Runs :mod:`llmscale.localcluster.stack` (``python -m llmscale.localcluster.stack`` does the same).
"""

from llmscale.localcluster.stack import main

if __name__ == "__main__":
    raise SystemExit(main())
