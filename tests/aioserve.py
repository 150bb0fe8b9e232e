"""A real aiohttp server on 127.0.0.1 for tests of the operator's HTTP clients."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web


async def start(app: web.Application) -> web.AppRunner:
    """Start ``app`` on a free port of 127.0.0.1; return its runner (``runner.cleanup()`` stops it,
    :func:`url_of` says where it listens)."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def url_of(runner: web.AppRunner) -> str:
    """The base URL of a runner :func:`start` started, ``http://127.0.0.1:PORT``."""
    return f"http://127.0.0.1:{runner.addresses[0][1]}"


@contextlib.asynccontextmanager
async def serving_app(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1; yield the base URL, and stop the server on exit."""
    runner = await start(app)
    try:
        yield url_of(runner)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  method: str = "*") -> AsyncIterator[str]:
    """Serve every path of ``method`` (``*``: any) with ``handler`` on a free port of 127.0.0.1;
    yield the base URL, and stop the server on exit."""
    app = web.Application()
    app.router.add_route(method, "/{tail:.*}", handler)
    async with serving_app(app) as url:
        yield url
