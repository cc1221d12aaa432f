"""A headless Chromium behind the relay: the sandboxed browser.

Evaluation jobs and headless use have no person's browser to borrow, so the browser tools can
drive a Chromium that runs inside the thread's sandbox instead. It is reached the same way as a
person's browser: `PipeExtension` plays the extension's part towards the relay (same protocol,
same relay token), and on the other side speaks CDP to the whole browser over its pipe
(`--remote-debugging-pipe`, NUL-terminated JSON; the sandbox carries the pipe on a process's
stdin and stdout). Tabs are attached as flat sessions (`Target.attachToTarget` with
`flatten`); the tab's target id is its tab id, its frames' and workers' sessions are the child
sessions, and a tab that an attached tab opens (a popup) is attached and announced like the
extension announces one.

One loop reads the pipe and writes to the relay, so replies keep their order relative to the
browser's events, as the relay requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from browser_relay.errors import BrowserGone
from browser_relay.server import RelayServer
from browser_relay.sessions import BrowserSession
from browser_relay.wire import MAX_MESSAGE_BYTES

__all__ = [
    "IDLE_SECONDS",
    "REAP_INTERVAL_SECONDS",
    "START_TIMEOUT_SECONDS",
    "CdpPipe",
    "HeadlessBrowsers",
    "Launch",
    "PipeExtension",
]

log = structlog.get_logger(__name__)

START_TIMEOUT_SECONDS = 20.0
IDLE_SECONDS = 600.0
REAP_INTERVAL_SECONDS = 30.0


class CdpPipe(Protocol):
    """A browser's CDP pipe: messages written to it, messages read from `stdout`."""

    stdout: asyncio.StreamReader

    async def write(self, data: bytes) -> None: ...

    def stderr_tail(self) -> str: ...

    async def close(self) -> None: ...


class PipeExtension:
    def __init__(self, pipe: CdpPipe, relay_url: str) -> None:
        self._pipe = pipe
        self._relay_url = relay_url
        self._relay: ClientConnection | None = None
        self._ids = itertools.count(1)
        # Our id on the pipe → the relay's call id (a forwarded command) or a future.
        self._pending: dict[int, int | asyncio.Future[Any]] = {}
        self._tabs: dict[str, str] = {}  # target id (= tab id) → its flat session id
        self._tab_of_session: dict[str, str] = {}  # a tab's or child's session → tab id
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Serve until either side goes; then the other is closed too."""
        try:
            async with connect(self._relay_url, max_size=MAX_MESSAGE_BYTES) as relay:
                self._relay = relay
                reader = self._spawn(self._read_pipe())
                await self._call("Target.setDiscoverTargets", {"discover": True})
                async for raw in relay:
                    self._spawn(self._from_relay(json.loads(raw)))
                reader.cancel()
        except ConnectionClosed:
            pass
        finally:
            for task in list(self._tasks):
                task.cancel()
            await self._pipe.close()

    # -- from the relay ---------------------------------------------------------------------

    async def _from_relay(self, message: dict[str, Any]) -> None:
        if "id" not in message:
            return  # the relay's notices about frames it refused: nothing to do
        params = message.get("params") or {}
        method = message.get("method")
        try:
            if method == "forwardCDPCommand":
                session = self._command_session(str(params["tabId"]), params.get("sessionId"))
                await self._send(
                    str(params["method"]), params.get("params") or {}, session, message["id"]
                )
                return
            if method == "attachToTab":
                result = await self._attach(params.get("tabId") or await self._first_page())
            elif method == "createTab":
                created = await self._call(
                    "Target.createTarget", {"url": params.get("url") or "about:blank"}
                )
                result = await self._attach(created["targetId"])
            elif method == "closeTab":
                await self._call("Target.closeTarget", {"targetId": str(params["tabId"])})
                result = {}
            else:
                raise ValueError(f"unknown method {method!r}")
            await self._to_relay({"id": message["id"], "result": result})
        except (BrowserGone, KeyError, ValueError, RuntimeError) as exc:
            await self._to_relay({"id": message["id"], "error": str(exc) or type(exc).__name__})

    def _command_session(self, tab_id: str, child: str | None) -> str:
        if tab_id not in self._tabs:
            raise ValueError(f"tab {tab_id} is not attached")
        if child is None:
            return self._tabs[tab_id]
        if self._tab_of_session.get(child) != tab_id:
            raise ValueError(f"session {child} does not belong to tab {tab_id}")
        return child

    async def _first_page(self) -> str:
        targets = (await self._call("Target.getTargets"))["targetInfos"]
        pages = [t["targetId"] for t in targets if t.get("type") == "page"]
        if pages:
            return str(pages[0])
        return str((await self._call("Target.createTarget", {"url": "about:blank"}))["targetId"])

    async def _attach(self, target_id: str) -> dict[str, Any]:
        if target_id not in self._tabs:
            attached = await self._call(
                "Target.attachToTarget", {"targetId": target_id, "flatten": True}
            )
            self._tabs[target_id] = attached["sessionId"]
            self._tab_of_session[attached["sessionId"]] = target_id
        info = await self._call("Target.getTargetInfo", {"targetId": target_id})
        return {"tabId": target_id, "targetInfo": info["targetInfo"]}

    # -- from the browser -------------------------------------------------------------------

    async def _read_pipe(self) -> None:
        try:
            while True:
                raw = await self._pipe.stdout.readuntil(b"\0")
                await self._from_browser(json.loads(raw[:-1]))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        reason = "the sandboxed browser exited"
        tail = self._pipe.stderr_tail().strip().splitlines()[-3:]
        log.info("headless browser gone", stderr=tail)
        for waiting in self._pending.values():
            if isinstance(waiting, asyncio.Future) and not waiting.done():
                waiting.set_exception(BrowserGone(reason))
        self._pending.clear()
        if self._relay is not None:
            await self._relay.close(1011, reason)

    async def _from_browser(self, message: dict[str, Any]) -> None:
        if "id" in message:
            waiting = self._pending.pop(int(message["id"]), None)
            error = (message.get("error") or {}).get("message")
            if isinstance(waiting, int):
                reply = {"error": error} if error else {"result": message.get("result", {})}
                await self._to_relay({"id": waiting, **reply})
            elif waiting is not None and not waiting.done():
                if error:
                    waiting.set_exception(RuntimeError(error))
                else:
                    waiting.set_result(message.get("result", {}))
            return
        method, params = str(message.get("method")), message.get("params") or {}
        session = message.get("sessionId")
        if session is None:
            await self._browser_event(method, params)
            return
        tab_id = self._tab_of_session.get(session)
        if tab_id is None:
            return  # a session of a tab that is already gone
        if method == "Target.attachedToTarget":
            self._tab_of_session[str(params.get("sessionId"))] = tab_id
        elif method == "Target.detachedFromTarget":
            self._tab_of_session.pop(str(params.get("sessionId")), None)
        event: dict[str, Any] = {"tabId": tab_id, "method": method, "params": params}
        if session != self._tabs.get(tab_id):
            event["sessionId"] = session
        await self._to_relay({"method": "forwardCDPEvent", "params": event})

    async def _browser_event(self, method: str, params: dict[str, Any]) -> None:
        info = params.get("targetInfo") or {}
        if (
            method == "Target.targetCreated"
            and info.get("type") == "page"
            and info.get("openerId") in self._tabs
        ):
            # Like the extension's tabs.onCreated: a popup of an attached tab is attached too.
            self._spawn(self._announce_popup(str(info["targetId"])))
        elif (
            method == "Target.detachedFromTarget" and params.get("sessionId") in self._tabs.values()
        ):
            await self._tab_gone(self._tab_of_session[str(params["sessionId"])])
        elif method == "Target.targetDestroyed" and params.get("targetId") in self._tabs:
            await self._tab_gone(str(params["targetId"]))

    async def _announce_popup(self, target_id: str) -> None:
        with contextlib.suppress(BrowserGone, RuntimeError, KeyError):
            await self._to_relay({"method": "attachedTab", "params": await self._attach(target_id)})

    async def _tab_gone(self, tab_id: str) -> None:
        session = self._tabs.pop(tab_id, None)
        if session is None:
            return
        for known, owner in list(self._tab_of_session.items()):
            if owner == tab_id:
                del self._tab_of_session[known]
        await self._to_relay({"method": "detachedFromTab", "params": {"tabId": tab_id}})

    # -- plumbing ---------------------------------------------------------------------------

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._send(method, params or {}, None, future)
        return await future

    async def _send(
        self,
        method: str,
        params: dict[str, Any],
        session: str | None,
        waiting: int | asyncio.Future[Any],
    ) -> None:
        call_id = next(self._ids)
        self._pending[call_id] = waiting
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        try:
            await self._pipe.write(json.dumps(message).encode() + b"\0")
        except Exception as exc:
            self._pending.pop(call_id, None)
            raise BrowserGone(f"the sandboxed browser is gone: {exc}") from exc

    async def _to_relay(self, message: dict[str, Any]) -> None:
        if self._relay is not None:
            with contextlib.suppress(ConnectionClosed):
                await self._relay.send(json.dumps(message))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


Launch = Callable[[], Awaitable[CdpPipe]]


class HeadlessBrowsers:
    """One headless browser per relay session key, started on demand and attached to the
    relay as that session's extension. A browser no tool has asked for in `idle_seconds` is
    stopped (a sandbox can outlive its use by far; an idle Chromium holds hundreds of MB), and
    the next call starts a fresh one."""

    def __init__(
        self,
        relay: RelayServer,
        *,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._relay = relay
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._last_used: dict[str, float] = {}
        self._starting: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def ensure(self, key: str, launch: Launch) -> BrowserSession:
        """The session of the browser for `key`, launching one (with `launch`) if none runs."""
        self._last_used[key] = self._clock()
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(), name="headless-browser-reaper")
        session = self._relay.sessions.session(key)
        async with self._starting.setdefault(key, asyncio.Lock()):
            running = self._running.get(key)
            if running is not None and not running.done():
                if session.relay.state == "connected":
                    return session
                running.cancel()  # up but cut off from the relay: replaced, never leaked
                with contextlib.suppress(asyncio.CancelledError):
                    await running
            pipe = await launch()
            token = self._relay.sessions.mint_relay_token(session)
            adapter = PipeExtension(pipe, self._relay.extension_url(session, token, local=True))
            task = asyncio.create_task(adapter.run(), name=f"headless-browser-{session.id}")
            self._running[key] = task
            task.add_done_callback(lambda done: self._ended(key, done))
            await self._until_connected(session, task, pipe)
            return session

    def _ended(self, key: str, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]

    @staticmethod
    async def _until_connected(
        session: BrowserSession, task: asyncio.Task[None], pipe: CdpPipe
    ) -> None:
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_SECONDS
        while session.relay.state != "connected" or session.relay.extension is None:
            if task.done() or asyncio.get_running_loop().time() > deadline:
                task.cancel()
                detail = pipe.stderr_tail().strip().splitlines()[-3:]
                raise BrowserGone(
                    "the sandboxed browser did not start"
                    + (f": {' / '.join(detail)}" if detail else "")
                )
            await asyncio.sleep(0.02)

    def running(self, key: str) -> bool:
        task = self._running.get(key)
        return task is not None and not task.done()

    async def stop_idle(self) -> list[str]:
        """Stop the browsers unused for `idle_seconds`; their keys."""
        now = self._clock()
        idle = [
            key
            for key in list(self._running)
            if now - self._last_used.get(key, now) >= self._idle_seconds
        ]
        for key in idle:
            log.info(
                "stopping an idle headless browser", key_hash=self._relay.sessions.session(key).id
            )
            await self.stop(key)
        return idle

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(REAP_INTERVAL_SECONDS, self._idle_seconds / 2))
            await self.stop_idle()

    async def stop(self, key: str) -> None:
        self._last_used.pop(key, None)
        task = self._running.pop(key, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for key in list(self._running):
            await self.stop(key)
