"""One browser session's relay: the extension on one socket, a CDP client (Playwright's
`connect_over_cdp`) on the other.

The CDP client believes it talks to a browser. The extension can only debug tabs
(`chrome.debugger`), so what a client sends before any tab is attached is answered here:
`Browser.getVersion`, `Browser.setDownloadBehavior`, and the top-level `Target.setAutoAttach`,
which attaches the person's tab and announces it with `Target.attachedToTarget`. Tabs are
created and closed here too (`Target.createTarget`, `Target.closeTarget` with the matching
`Target.detachedFromTarget`). Everything else is forwarded to the tab; child sessions (frames,
workers) pass through.

Order matters: a reply must never overtake an event the browser sent before it (Playwright
would apply a stale frame tree). Replies to forwarded commands are therefore written by the
same loop that forwards the extension's events, in the order they arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from browser_relay.errors import RelayError, WireError
from browser_relay.wire import (
    Attached,
    AttachedTab,
    CdpEvent,
    Detached,
    ForwardedEvent,
    Reply,
    call,
    parse_from_extension,
)

__all__ = [
    "CALL_TIMEOUT_SECONDS",
    "DEFAULT_CONTEXT",
    "GRACE_SECONDS",
    "RESTRICTED_SCHEMES",
    "ForwardTo",
    "RelaySession",
    "Tab",
]

log = structlog.get_logger(__name__)

DEFAULT_CONTEXT = "instance-ai-default-context"
RESTRICTED_SCHEMES = ("chrome:", "chrome-extension:", "devtools:", "edge:")
GRACE_SECONDS = 15.0
CALL_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class ForwardTo:
    """A pending extension call whose reply goes straight to the CDP client."""

    cdp_id: int
    session_id: str | None


@dataclass
class Tab:
    tab_id: int | str
    target_info: dict[str, Any]

    @property
    def target_id(self) -> str:
        return str(self.target_info["targetId"])


class RelaySession:
    def __init__(
        self,
        session_id: str,
        *,
        grace_seconds: float = GRACE_SECONDS,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.session_id = session_id
        self._grace = grace_seconds
        self._call_timeout = call_timeout
        self._on_change = on_change
        self.extension: ServerConnection | None = None
        self.client: ServerConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any] | ForwardTo] = {}
        # The CDP client's session for a tab is the tab's target id.
        self._tabs: dict[str, Tab] = {}
        self._children: dict[str, int | str] = {}
        self._grace_timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> str:
        if self.extension is not None:
            return "connected"
        return "reconnecting" if self._grace_timer is not None else "waiting"

    # -- the extension side ---------------------------------------------------------------

    async def serve_extension(self, socket: ServerConnection) -> None:
        if self.extension is not None:
            # A reconnect after the extension's worker restarted: the newcomer wins, so a
            # half-dead socket cannot lock the person out.
            await self.extension.close(1000, "replaced by a new connection of the extension")
        self.extension = socket
        self._cancel_grace()
        self._on_change()
        # Its answers arrive through the loop below, so the re-attachment runs beside it.
        reattach = asyncio.create_task(self._reattach())
        try:
            async for raw in socket:
                await self._from_extension(socket, raw)
        except ConnectionClosed:
            pass
        finally:
            reattach.cancel()
            if self.extension is socket:
                await self._extension_gone()

    async def _from_extension(self, socket: ServerConnection, raw: str | bytes) -> None:
        try:
            message = parse_from_extension(raw)
        except WireError as exc:
            # That frame is refused; the connection, and everything in flight, carries on.
            log.info("browser relay refused a frame", session=self.session_id, reason=str(exc))
            await socket.send(json.dumps({"method": "error", "params": {"message": str(exc)}}))
            return
        if isinstance(message, Reply):
            await self._reply(message)
        elif isinstance(message, ForwardedEvent):
            await self._event(message.params)
        elif isinstance(message, Detached):
            await self._tab_gone(message.params.tab_id)
        elif isinstance(message, Attached):
            await self._announce(message.params)

    async def _reply(self, reply: Reply) -> None:
        waiting = self._pending.pop(reply.id, None)
        if isinstance(waiting, ForwardTo):
            if reply.error is not None:
                await self._to_client(
                    {
                        "id": waiting.cdp_id,
                        "sessionId": waiting.session_id,
                        "error": _error(reply.error),
                    }
                )
            else:
                result = reply.result if reply.result is not None else {}
                await self._to_client(
                    {"id": waiting.cdp_id, "sessionId": waiting.session_id, "result": result}
                )
        elif waiting is not None and not waiting.done():
            if reply.error is not None:
                waiting.set_exception(RelayError(reply.error))
            else:
                waiting.set_result(reply.result)

    async def _event(self, event: CdpEvent) -> None:
        tab = self._tab_by_id(event.tab_id)
        if event.method == "Target.attachedToTarget":
            info = event.params.get("targetInfo") or {}
            child = str(event.params.get("sessionId", ""))
            if str(info.get("url", "")).startswith(RESTRICTED_SCHEMES):
                # Never expose the browser's own pages; let the target run on unobserved.
                if event.params.get("waitingForDebugger"):
                    await self._call_nowait(
                        "forwardCDPCommand",
                        {
                            "tabId": event.tab_id,
                            "sessionId": child,
                            "method": "Runtime.runIfWaitingForDebugger",
                        },
                    )
                return
            self._children[child] = event.tab_id
        elif event.method == "Target.detachedFromTarget":
            self._children.pop(str(event.params.get("sessionId", "")), None)
        elif event.method == "Page.frameNavigated" and tab and not event.session_id:
            frame = event.params.get("frame") or {}
            if not frame.get("parentId"):
                tab.target_info["url"] = frame.get("url", tab.target_info.get("url"))
        session = event.session_id or (tab.target_id if tab else None)
        await self._to_client(
            {"sessionId": session, "method": event.method, "params": event.params}
        )

    async def _tab_gone(self, tab_id: int | str) -> None:
        tab = self._tab_by_id(tab_id)
        if tab is None:
            return
        self._tabs.pop(tab.target_id, None)
        for child in [c for c, owner in self._children.items() if owner == tab_id]:
            self._children.pop(child)
        await self._to_client(
            {
                "method": "Target.detachedFromTarget",
                "params": {"sessionId": tab.target_id, "targetId": tab.target_id},
            }
        )

    async def _extension_gone(self) -> None:
        self.extension = None
        for waiting in self._pending.values():
            if isinstance(waiting, ForwardTo):
                await self._to_client(
                    {
                        "id": waiting.cdp_id,
                        "sessionId": waiting.session_id,
                        "error": _error(
                            "the browser extension disconnected while this command ran; it has "
                            f"{self._grace:.0f} s to reconnect"
                        ),
                    }
                )
            elif not waiting.done():
                waiting.set_exception(RelayError("the browser extension disconnected"))
        self._pending.clear()
        self._children.clear()
        if self.client is not None:
            self._grace_timer = asyncio.get_running_loop().call_later(
                self._grace, lambda: asyncio.ensure_future(self._grace_over())
            )
        self._on_change()

    async def _grace_over(self) -> None:
        self._grace_timer = None
        self._tabs.clear()
        if self.extension is None and self.client is not None:
            await self.client.close(1001, "the browser extension disconnected")
        self._on_change()

    def _cancel_grace(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None

    async def _reattach(self) -> None:
        """After a reconnect, attach the tabs the CDP client knew again. A new debugger
        attachment has none of the old one's state (enabled domains, execution contexts), so
        each tab is announced as detached and then attached afresh: the client builds a new
        page for it instead of waiting on contexts that are gone."""
        for tab in list(self._tabs.values()):
            await self._tab_gone(tab.tab_id)
            try:
                attached = await self._call("attachToTab", {"tabId": tab.tab_id})
                await self._announce(AttachedTab.model_validate(attached))
            except (RelayError, ValueError):
                log.info("browser relay lost a tab on reconnect", session=self.session_id)

    # -- the CDP side ---------------------------------------------------------------------

    async def serve_client(self, socket: ServerConnection) -> None:
        if self.client is not None:
            await socket.close(1008, "another CDP client is already connected to this session")
            return
        self.client = socket
        self._on_change()
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for raw in socket:
                # CDP clients pipeline: each command is answered as soon as it can be.
                task = asyncio.create_task(self._command(raw))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            self.client = None
            for task in tasks:
                task.cancel()
            self._cancel_grace()
            # The extension is let go below: its tabs mean nothing to the next client.
            self._tabs.clear()
            self._children.clear()
            if self.extension is not None:
                await self.extension.close(1000, "the automation client disconnected")
            self._on_change()

    async def _command(self, raw: str | bytes) -> None:
        try:
            message = json.loads(raw)
            cdp_id, method = int(message["id"]), str(message["method"])
            params = message.get("params") or {}
            session = message.get("sessionId")
        except (ValueError, KeyError, TypeError):
            await self._to_client(
                {"id": 0, "error": {"code": -32700, "message": "malformed CDP message"}}
            )
            return
        try:
            result = await self._handle(cdp_id, method, params, session)
        except (RelayError, TimeoutError) as exc:
            await self._to_client(
                {"id": cdp_id, "sessionId": session, "error": _error(str(exc) or "timed out")}
            )
            return
        if result is not None:
            await self._to_client({"id": cdp_id, "sessionId": session, "result": result})

    async def _handle(
        self, cdp_id: int, method: str, params: dict[str, Any], session: str | None
    ) -> dict[str, Any] | None:
        """The result of an answered command, or None when the reply is forwarded later."""
        if method == "Browser.getVersion":
            # Playwright reads the version after "/" and a user agent without "Headless" as a
            # browser with a window: the person's own.
            return {
                "protocolVersion": "1.3",
                "product": "Chrome/InstanceAI-Relay",
                "revision": "0",
                "userAgent": "InstanceAI-CDP-Relay/1.0",
                "jsVersion": "0",
            }
        if method == "Browser.setDownloadBehavior":
            return {}
        if method == "Target.setAutoAttach" and not session:
            await self._attach_first_tab()
            return {}
        if method == "Target.getTargetInfo" and (not session or session in self._tabs):
            tab = self._tabs.get(session or "") or next(iter(self._tabs.values()), None)
            return {"targetInfo": tab.target_info} if tab else {}
        if method == "Target.getTargets":
            return {"targetInfos": [tab.target_info for tab in self._tabs.values()]}
        if method == "Target.createTarget":
            attached = AttachedTab.model_validate(
                await self._call("createTab", {"url": params.get("url")})
            )
            return {"targetId": await self._announce(attached)}
        if method == "Target.closeTarget":
            tab = self._tabs.get(str(params.get("targetId")))
            if tab is None:
                raise RelayError(
                    f"no tab with target id {params.get('targetId')!r} in this session"
                )
            await self._call("closeTab", {"tabId": tab.tab_id})
            await self._tab_gone(tab.tab_id)
            return {"success": True}
        await self._forward(cdp_id, method, params, session)
        return None

    async def _attach_first_tab(self) -> None:
        if self._tabs:
            for tab in self._tabs.values():
                await self._announce(AttachedTab(tab_id=tab.tab_id, target_info=tab.target_info))
            return
        await self._announce(AttachedTab.model_validate(await self._call("attachToTab", {})))

    async def _announce(self, attached: AttachedTab) -> str:
        info = {"browserContextId": DEFAULT_CONTEXT, **attached.target_info, "attached": True}
        tab = Tab(tab_id=attached.tab_id, target_info=info)
        self._tabs[tab.target_id] = tab
        await self._to_client(
            {
                "method": "Target.attachedToTarget",
                "params": {
                    "sessionId": tab.target_id,
                    "targetInfo": info,
                    "waitingForDebugger": False,
                },
            }
        )
        return tab.target_id

    async def _forward(
        self, cdp_id: int, method: str, params: dict[str, Any], session: str | None
    ) -> None:
        if session in self._tabs:
            tab_id, child = self._tabs[session].tab_id, None
        elif session in self._children:
            tab_id, child = self._children[session], session
        elif session is None and self._tabs:
            tab_id, child = next(iter(self._tabs.values())).tab_id, None
        else:
            raise RelayError(f"no attached tab for session {session!r}")
        arguments = {"tabId": tab_id, "method": method, "params": params}
        if child is not None:
            arguments["sessionId"] = child
        await self._send(
            "forwardCDPCommand", arguments, ForwardTo(cdp_id=cdp_id, session_id=session)
        )

    # -- calls to the extension -----------------------------------------------------------

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        call_id = await self._send(method, params, future)
        try:
            return await asyncio.wait_for(future, self._call_timeout)
        except TimeoutError:
            self._pending.pop(call_id, None)
            raise RelayError(
                f"the browser extension did not answer {method} in {self._call_timeout:.0f} s"
            ) from None

    async def _call_nowait(self, method: str, params: dict[str, Any]) -> None:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.exception())
        await self._send(method, params, future)

    async def _send(
        self, method: str, params: dict[str, Any], waiting: asyncio.Future[Any] | ForwardTo
    ) -> int:
        extension = self.extension
        if extension is None:
            raise RelayError(
                "no browser is connected to this session"
                + (" (the extension is reconnecting)" if self._grace_timer is not None else "")
            )
        call_id = next(self._ids)
        self._pending[call_id] = waiting
        try:
            await extension.send(call(call_id, method, params))
        except ConnectionClosed:
            self._pending.pop(call_id, None)
            raise RelayError("the browser extension disconnected") from None
        return call_id

    async def _to_client(self, message: dict[str, Any]) -> None:
        client = self.client
        if client is None:
            return
        with contextlib.suppress(ConnectionClosed):
            await client.send(json.dumps({k: v for k, v in message.items() if v is not None}))

    def _tab_by_id(self, tab_id: int | str) -> Tab | None:
        return next((tab for tab in self._tabs.values() if tab.tab_id == tab_id), None)

    async def close(self) -> None:
        self._cancel_grace()
        for socket in (self.client, self.extension):
            if socket is not None:
                await socket.close(1001, "the relay is shutting down")


def _error(message: str) -> dict[str, Any]:
    return {"code": -32000, "message": message}
