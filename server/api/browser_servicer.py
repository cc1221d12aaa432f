"""The Browser service: connect links for a person's own browser, and a session's state.

A session belongs to a user: its key is the caller's user id (hashed by the relay before any
use), so a caller can neither read nor link another user's browser session.
"""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2

from browser_relay.server import RelayServer
from browser_relay.sessions import session_id_for, user_key
from instance_ai.v1 import browser_pb2, browser_pb2_grpc
from server.api.caller import caller_of
from server.errors import NotFoundError

__all__ = ["BrowserServicer"]


class BrowserServicer(browser_pb2_grpc.BrowserServicer):
    def __init__(self, relay: RelayServer) -> None:
        self._relay = relay

    async def CreateConnectLink(
        self, request: browser_pb2.CreateConnectLinkRequest, context: grpc.aio.ServicerContext
    ) -> browser_pb2.CreateConnectLinkResponse:
        caller = caller_of(context)
        if request.user_id and request.user_id != caller.user_id:
            raise NotFoundError("a connect link can only be made for the calling user")
        endpoints = self._relay.endpoints(user_key(caller.user_id))
        return browser_pb2.CreateConnectLinkResponse(
            setup_url=endpoints.setup_url,
            session_id=session_id_for(user_key(caller.user_id)),
            expires_at=_timestamp(endpoints.setup_expires_at),
        )

    async def GetBrowserSession(
        self, request: browser_pb2.GetBrowserSessionRequest, context: grpc.aio.ServicerContext
    ) -> browser_pb2.GetBrowserSessionResponse:
        caller = caller_of(context)
        session = self._relay.sessions.get(request.session_id)
        if session is None or session.id != session_id_for(user_key(caller.user_id)):
            raise NotFoundError(f"there is no browser session {request.session_id[:64]!r}")
        response = browser_pb2.GetBrowserSessionResponse(
            session_id=session.id, state=session.relay.state
        )
        if session.connected_at is not None:
            response.connected_at.CopyFrom(_timestamp(session.connected_at))
        return response


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.fromtimestamp(seconds, UTC))
    return stamp
