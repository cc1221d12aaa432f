"""The Browser service over real gRPC: a connect link for the calling user, the setup page it
points at, and the session's state as a real Chromium tab connects through the extension
stand-in."""

from __future__ import annotations

import grpc
import httpx
import pytest

from instance_ai.v1 import browser_pb2, browser_pb2_grpc
from tests.browser_fixtures import Chromium, chromium, extension
from tests.waiting import until

__all__ = ["chromium"]  # fixtures, shared

ALICE = (("x-instance-ai-user", "alice"),)
BOB = (("x-instance-ai-user", "bob"),)


async def test_a_connect_link_leads_to_a_session_the_caller_can_watch(
    channel: grpc.aio.Channel, chromium: Chromium
) -> None:
    stub = browser_pb2_grpc.BrowserStub(channel)
    link = await stub.CreateConnectLink(browser_pb2.CreateConnectLinkRequest(), metadata=ALICE)
    again = await stub.CreateConnectLink(
        browser_pb2.CreateConnectLinkRequest(user_id="alice"), metadata=ALICE
    )
    assert again.setup_url == link.setup_url  # reused while valid: a sent link stays good
    assert "/browser/connect?token=bus_" in link.setup_url
    assert link.expires_at.seconds > 0

    session = await stub.GetBrowserSession(
        browser_pb2.GetBrowserSessionRequest(session_id=link.session_id), metadata=ALICE
    )
    assert session.state == "waiting" and not session.HasField("connected_at")

    async with httpx.AsyncClient() as client:
        page = await client.get(link.setup_url)
        assert page.status_code == 200 and "Connect your browser" in page.text
        minted = (await client.get(link.setup_url.replace("/connect?", "/connect-link?"))).json()
    async with extension(chromium.http, minted["relayUrl"]):

        async def connected() -> browser_pb2.GetBrowserSessionResponse | None:
            found = await stub.GetBrowserSession(
                browser_pb2.GetBrowserSessionRequest(session_id=link.session_id), metadata=ALICE
            )
            return found if found.state == "connected" else None

        session = await until(connected, "the browser session connected", every_s=0.02)
        assert session.state == "connected" and session.HasField("connected_at")


async def test_nobody_reads_or_links_another_users_session(channel: grpc.aio.Channel) -> None:
    stub = browser_pb2_grpc.BrowserStub(channel)
    link = await stub.CreateConnectLink(browser_pb2.CreateConnectLinkRequest(), metadata=ALICE)
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await stub.GetBrowserSession(
            browser_pb2.GetBrowserSessionRequest(session_id=link.session_id), metadata=BOB
        )
    assert hidden.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateConnectLink(
            browser_pb2.CreateConnectLinkRequest(user_id="alice"), metadata=BOB
        )
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub.GetBrowserSession(
            browser_pb2.GetBrowserSessionRequest(session_id="../" * 40), metadata=ALICE
        )
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
