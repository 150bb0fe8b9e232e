"""The read buffer of every TLS connection the operator holds: 32 KiB instead of asyncio's 256 KiB.

asyncio allocates a read buffer of ``SSLProtocol.max_size`` bytes (256 KiB, zero-filled, so
resident at once) for each TLS connection it opens (CPython ``Lib/asyncio/sslproto.py``,
``SSLProtocol.__init__`` and ``get_buffer``; Python 3.11 and later). Kopf keeps one connection per
watch stream — one per watched resource and namespace, 60 for ten namespaces — and opens one more
per concurrent request to the API server, with no limit in its own session
(``aiohttp.TCPConnector(limit=0)``; llmscale's login now bounds them, :mod:`llmscale.controller.apisession`).
In a creation burst of 300 LLMDeployments the operator held 360 connections to the API server: 74 MB
of read buffers (``tracemalloc``, issue 14), and the heap they fragmented did not shrink after the
burst. A 32 KiB buffer holds any watch event or status answer in a few reads (an LLMDeployment
with its status is about 10 KiB of JSON); a large LIST is read in more, smaller reads.
"""

from __future__ import annotations

import asyncio.sslproto

__all__ = ["TLS_READ_BUFFER_BYTES", "shrink_tls_read_buffers"]

#: Bytes of the read buffer of each TLS connection opened afterwards.
TLS_READ_BUFFER_BYTES = 32 * 1024


def shrink_tls_read_buffers(size: int = TLS_READ_BUFFER_BYTES) -> None:
    """Make every TLS connection asyncio opens from now on, in this process, read through a buffer
    of ``size`` bytes (a class attribute of asyncio's ``SSLProtocol``: process-wide).

    Raises:
        ValueError: ``size`` is under 16 KiB, one TLS record (RFC 8446, section 5.1).
    """
    if size < 16 * 1024:
        raise ValueError(f"a TLS read buffer of {size} bytes is under one TLS record (16 KiB)")
    asyncio.sslproto.SSLProtocol.max_size = size
