"""Real headless Chromium for the browser tests, and a stand-in for the browser extension.

The stand-in speaks the relay's extension protocol and does what the real extension does
with `chrome.debugger`, but against a real Chromium tab's own DevTools socket (tab scope only,
as `chrome.debugger.attach({tabId})` gives): it attaches tabs, creates and closes them,
forwards commands (child sessions included) and sends the tab's events back. Like the real
extension, it answers a forwarded command from the loop that reads the tab, so replies and
events keep the browser's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from aiohttp import web
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from browser_relay.wire import MAX_MESSAGE_BYTES
from tests.waiting import until

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass(frozen=True)
class Chromium:
    """A headless Chromium with its DevTools HTTP endpoint on loopback."""

    http: str
    process: subprocess.Popen[bytes]


@pytest.fixture
def chromium() -> Iterator[Chromium]:
    with run_chromium() as browser:
        yield browser


@contextlib.contextmanager
def run_chromium() -> Iterator[Chromium]:
    """Debian's Chromium, headless, its DevTools endpoint on a free loopback port."""
    executable = shutil.which("chromium")
    assert executable, "scripts/setup-system installs Debian's chromium"
    # Chromium's helpers may still touch the profile as it exits: never an error here.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [
                executable,
                *CHROMIUM_ARGS,
                "--headless=new",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Its own process group: the helpers it starts end with it.
            start_new_session=True,
        )
        assert process.stderr is not None
        http = ""
        for line in process.stderr:
            found = re.search(rb"DevTools listening on ws://([\d.]+:\d+)/", line)
            if found:
                http = f"http://{found.group(1).decode()}"
                break
        assert http, "chromium did not start its DevTools endpoint"
        try:
            yield Chromium(http=http, process=process)
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            with contextlib.suppress(ProcessLookupError):  # helpers still running, if any
                os.killpg(process.pid, signal.SIGKILL)
            process.stderr.close()


@dataclass(eq=False)
class ExtensionStandIn:
    """Plays the extension: the relay on one side, real tab DevTools sockets on the other."""

    devtools: str
    relay_url: str
    relay: ClientConnection | None = None
    tabs: dict[str, ClientConnection] = field(default_factory=dict)
    # Our call id on a tab socket → the relay's call id (a forwarded command) or a future.
    pending: dict[int, int | asyncio.Future[Any]] = field(default_factory=dict)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # Methods whose arrival makes the stand-in drop the relay connection (a crash mid-command).
    drop_on: set[str] = field(default_factory=set)
    readers: set[asyncio.Task[None]] = field(default_factory=set)
    received: list[dict[str, Any]] = field(default_factory=list)

    async def run(self) -> None:
        async with connect(self.relay_url, max_size=MAX_MESSAGE_BYTES) as relay:
            self.relay = relay
            watcher = asyncio.create_task(self._watch_popups())
            self.readers.add(watcher)
            try:
                async for raw in relay:
                    message = json.loads(raw)
                    self.received.append(message)
                    if "id" in message:
                        task = asyncio.create_task(self._handle(message))
                        self.readers.add(task)
                        task.add_done_callback(self.readers.discard)
            except ConnectionClosed:
                pass
            finally:
                self.relay = None

    async def _watch_popups(self) -> None:
        """Like the extension's chrome.tabs.onCreated: a tab opened by an attached tab is
        attached too, and announced (`attachedTab`)."""
        async with httpx.AsyncClient() as client:
            browser_url = (await client.get(f"{self.devtools}/json/version")).json()
        async with connect(
            browser_url["webSocketDebuggerUrl"], max_size=MAX_MESSAGE_BYTES
        ) as browser:
            await browser.send(
                json.dumps(
                    {"id": 1, "method": "Target.setDiscoverTargets", "params": {"discover": True}}
                )
            )
            async for raw in browser:
                message = json.loads(raw)
                info = (message.get("params") or {}).get("targetInfo") or {}
                if (
                    message.get("method") == "Target.targetCreated"
                    and info.get("type") == "page"
                    and info.get("openerId") in self.tabs
                ):
                    attached = await self._attach(info["targetId"])
                    await self._send({"method": "attachedTab", "params": attached})

    async def send_raw(self, text: str) -> None:
        assert self.relay is not None
        await self.relay.send(text)

    async def disconnect(self) -> None:
        if self.relay is not None:
            await self.relay.close()

    async def close(self) -> None:
        await self.disconnect()
        for tab in list(self.tabs.values()):
            await tab.close()
        for task in list(self.readers):
            task.cancel()

    async def _handle(self, message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        method = message["method"]
        try:
            if method == "forwardCDPCommand" and params["method"] in self.drop_on:
                await self.disconnect()
                return
            if method == "attachToTab":
                result = await self._attach(params.get("tabId"))
            elif method == "createTab":
                async with httpx.AsyncClient() as client:
                    url = quote(params.get("url") or "about:blank", safe=":/?&=%#")
                    target = (await client.put(f"{self.devtools}/json/new?{url}")).json()
                result = await self._attach(target["id"])
            elif method == "closeTab":
                async with httpx.AsyncClient() as client:
                    await client.get(f"{self.devtools}/json/close/{params['tabId']}")
                result = {}
            elif method == "forwardCDPCommand":
                await self._tab_call(
                    params["tabId"],
                    params["method"],
                    params.get("params"),
                    params.get("sessionId"),
                    reply_to=message["id"],
                )
                return
            else:
                raise RuntimeError(f"unknown method {method}")
            await self._send({"id": message["id"], "result": result})
        except Exception as exc:
            await self._send({"id": message["id"], "error": str(exc) or type(exc).__name__})

    async def _attach(self, tab_id: str | None) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            targets = (await client.get(f"{self.devtools}/json/list")).json()
        pages = [t for t in targets if t["type"] == "page"]
        target = next(t for t in pages if tab_id is None or t["id"] == tab_id)
        if target["id"] not in self.tabs:
            socket = await connect(target["webSocketDebuggerUrl"], max_size=MAX_MESSAGE_BYTES)
            self.tabs[target["id"]] = socket
            task = asyncio.create_task(self._read_tab(target["id"], socket))
            self.readers.add(task)
            task.add_done_callback(self.readers.discard)
        info = await self._tab_call(target["id"], "Target.getTargetInfo")
        return {"tabId": target["id"], "targetInfo": info["targetInfo"]}

    async def _read_tab(self, tab_id: str, socket: ClientConnection) -> None:
        try:
            async for raw in socket:
                message = json.loads(raw)
                if "id" in message:
                    waiting = self.pending.pop(message["id"], None)
                    error = (message.get("error") or {}).get("message")
                    if isinstance(waiting, int):
                        reply = {"error": error} if error else {"result": message.get("result", {})}
                        await self._send({"id": waiting, **reply})
                    elif waiting is not None:
                        if error:
                            waiting.set_exception(RuntimeError(error))
                        else:
                            waiting.set_result(message.get("result", {}))
                else:
                    event = {"tabId": tab_id, "method": message["method"]}
                    event["params"] = message.get("params", {})
                    if message.get("sessionId"):
                        event["sessionId"] = message["sessionId"]
                    await self._send({"method": "forwardCDPEvent", "params": event})
        except ConnectionClosed:
            pass
        finally:
            self.tabs.pop(tab_id, None)
            with contextlib.suppress(ConnectionClosed):
                await self._send({"method": "detachedFromTab", "params": {"tabId": tab_id}})

    async def _tab_call(
        self,
        tab_id: str,
        method: str,
        params: dict[str, Any] | None = None,
        session_id: str | None = None,
        reply_to: int | None = None,
    ) -> Any:
        socket = self.tabs.get(tab_id)
        if socket is None:
            raise RuntimeError(f"tab {tab_id} is not attached")
        call_id = next(self.ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = reply_to if reply_to is not None else future
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        await socket.send(json.dumps(message))
        return None if reply_to is not None else await future

    async def _send(self, message: dict[str, Any]) -> None:
        if self.relay is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.relay.send(json.dumps(message))


@contextlib.asynccontextmanager
async def extension(devtools: str, relay_url: str) -> AsyncIterator[ExtensionStandIn]:
    stand_in = ExtensionStandIn(devtools=devtools, relay_url=relay_url)
    task = asyncio.create_task(stand_in.run())
    await until(
        lambda: stand_in.relay is not None or task.done(), "the extension connecting", every_s=0.01
    )
    if task.done():
        task.result()  # raises why it could not connect
    try:
        yield stand_in
    finally:
        await stand_in.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def serve_pages(pages: dict[str, str]) -> AsyncIterator[str]:
    """HTML pages on a free 127.0.0.1 port, by path; its base URL. `{port}` in a page becomes
    the port, so a page can embed a frame from another site (`http://localhost:{port}/...`)."""
    port: list[int] = []

    def answer(html: str) -> Any:
        async def handler(_request: web.Request) -> web.Response:
            return web.Response(text=html.replace("{port}", str(port[0])), content_type="text/html")

        return handler

    app = web.Application()
    for path, html in pages.items():
        app.router.add_get(path, answer(html))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port[0]}"
    finally:
        await runner.cleanup()
