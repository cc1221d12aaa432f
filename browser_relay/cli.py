"""`instance-ai browser-relay`: the relay on its own, for one browser session.

It prints where Playwright connects (the CDP URL and its token header) and the setup page a
person opens to connect their browser, then serves until Ctrl-C. The service runs the same
relay inside itself (settings `INSTANCE_AI_BROWSER_RELAY_*`); this is for using it without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Annotated

import typer

from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSessions

__all__ = ["browser_relay"]


def browser_relay(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 0,
    key: Annotated[str, typer.Option(help="the session's key (hashed before any use)")] = "local",
    public_url: Annotated[
        str | None, typer.Option(help="the relay's origin as the person's browser reaches it")
    ] = None,
) -> None:
    """Serve the browser relay: the extension's endpoint, the CDP endpoint, the setup page."""
    asyncio.run(_serve(host, port, key, public_url))


async def _serve(host: str, port: int, key: str, public_url: str | None) -> None:
    relay = await RelayServer(
        BrowserSessions(), host=host, port=port, public_url=public_url
    ).start()
    endpoints = relay.endpoints(key)
    print(
        json.dumps(
            {
                "cdpUrl": endpoints.cdp_url,
                "cdpHeaders": endpoints.cdp_headers,
                "setupUrl": endpoints.setup_url,
            }
        ),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(asyncio.CancelledError):
        await stop.wait()
    await relay.close()
