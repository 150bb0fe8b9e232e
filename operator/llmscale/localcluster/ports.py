"""Free TCP ports on 127.0.0.1 for the local cluster, the demo and the tests (standard library only:
``e2e/cluster/cluster.py`` runs before any virtualenv exists)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]

# Ports handed out by free_port() in this process. The kernel may give the same ephemeral port to
# two binds in a row once the first socket is closed, and the control plane's ports are all picked
# before any process binds them: without this set, two components could get one port ("port clash").
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (nothing listens on it once this
    returns), never one this process handed out before."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise SystemExit("no free TCP port on 127.0.0.1 after 100 tries")
