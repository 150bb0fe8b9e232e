"""``llmscale`` under :mod:`tracemalloc`, for ``benchmarks/scale.py --tracemalloc``: what the operator
holds, by the line that allocated it.

    .venv/bin/python benchmarks/traced_operator.py DUMP run --kubeconfig ... (llmscale's own arguments)

Imports the operator and the Kubernetes client's API modules, then starts tracing (frames of each
allocation's stack: ``LLMSCALE_TRACEMALLOC_FRAMES``, 6 by default), then runs ``llmscale`` with the
rest of the arguments. On
SIGUSR1 it writes a snapshot to ``DUMP`` (:meth:`tracemalloc.Snapshot.dump`, read it back with
:meth:`tracemalloc.Snapshot.load`). Tracing slows the process and adds its own memory: use it for
the breakdown, never for the RSS figure. What was imported before tracing is not in the snapshot.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


def main() -> int:
    """Trace, install the dump on SIGUSR1, run ``llmscale`` with ``sys.argv[2:]``; its exit status."""
    dump = Path(sys.argv[1])
    # Imported before tracing starts: the Kubernetes client's API modules take minutes to import
    # under tracemalloc (and are the same whatever the objects).
    import kubernetes.client

    from llmscale.cli import main as llmscale
    from llmscale.commands import run  # noqa: F401

    for api in ("CoreV1Api", "AppsV1Api", "BatchV1Api", "CustomObjectsApi", "CoordinationV1Api",
                "AutoscalingV2Api", "PolicyV1Api", "EventsV1Api"):
        getattr(kubernetes.client, api, None)
    tracemalloc.start(int(os.environ.get("LLMSCALE_TRACEMALLOC_FRAMES", "6")))

    def write(_signum: int, _frame: FrameType | None) -> None:
        tracemalloc.take_snapshot().dump(str(dump.with_suffix(".tmp")))
        dump.with_suffix(".tmp").replace(dump)

    signal.signal(signal.SIGUSR1, write)
    return llmscale(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
