#!/usr/bin/env python3
"""Local Kubernetes control plane for llmscale's end-to-end tests (e2e/README-cluster.md).

    python3 e2e/cluster/cluster.py up|down|status|env

Runs :mod:`llmscale.localcluster.cluster` from this checkout's source, so it works before any
virtualenv exists (that module uses only the standard library and ``openssl``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "operator"))

from llmscale.localcluster.cluster import main

if __name__ == "__main__":
    raise SystemExit(main())
