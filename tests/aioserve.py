"""A real aiohttp server on 127.0.0.1 for tests of the operator's HTTP clients."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web


@contextlib.asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  method: str = "*") -> AsyncIterator[str]:
    """Serve every path of ``method`` (``*``: any) with ``handler`` on a free port of 127.0.0.1;
    yield the base URL, and stop the server on exit."""
    app = web.Application()
    app.router.add_route(method, "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
