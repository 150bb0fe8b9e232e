"""The operator's TLS read buffers: 32 KiB per connection, not asyncio's 256 KiB (issue 14)."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from collections.abc import Iterator

import pytest

from llmscale.controller.tlsbuffers import TLS_READ_BUFFER_BYTES, shrink_tls_read_buffers


@pytest.fixture()
def restore_max_size() -> Iterator[None]:
    before = asyncio.sslproto.SSLProtocol.max_size
    yield
    asyncio.sslproto.SSLProtocol.max_size = before


def _buffer_bytes() -> int:
    loop = asyncio.new_event_loop()
    try:
        proto = asyncio.sslproto.SSLProtocol(loop, asyncio.Protocol(), ssl.create_default_context(), None)
        return len(proto._ssl_buffer)  # what each connection keeps resident
    finally:
        loop.close()


@pytest.mark.usefixtures("restore_max_size")
def test_a_tls_connection_opened_afterwards_reads_through_32_kib() -> None:
    shrink_tls_read_buffers(64 * 1024)  # the attribute is what sizes each connection's buffer
    assert _buffer_bytes() == 64 * 1024
    shrink_tls_read_buffers()
    assert _buffer_bytes() == TLS_READ_BUFFER_BYTES == 32 * 1024
    # Asked for more than its size, the protocol still hands out at most the buffer.
    loop = asyncio.new_event_loop()
    try:
        proto = asyncio.sslproto.SSLProtocol(loop, asyncio.Protocol(), ssl.create_default_context(), None)
        assert len(proto.get_buffer(1 << 20)) == 32 * 1024
    finally:
        loop.close()


@pytest.mark.usefixtures("restore_max_size")
def test_a_buffer_under_one_tls_record_is_refused() -> None:
    before = asyncio.sslproto.SSLProtocol.max_size
    with pytest.raises(ValueError, match="16 KiB"):
        shrink_tls_read_buffers(8 * 1024)
    assert asyncio.sslproto.SSLProtocol.max_size == before
