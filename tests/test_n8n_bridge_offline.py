"""The bridge when the n8n behind it does not answer: n8n's pages are a 502 that says so, the
assistant's routes a 503 (who is asking cannot be checked), never a 500."""

from __future__ import annotations

import httpx

from instance_ai_cli import n8n_local
from instance_ai_client.connection import ClientConfig
from n8n_bridge.app import BridgeConfig, bridge_app


async def test_an_n8n_that_does_not_answer_is_said_so() -> None:
    nobody = f"http://127.0.0.1:{n8n_local.free_port()}"
    config = BridgeConfig(n8n_url=nobody, client=ClientConfig(server="127.0.0.1:1"))
    transport = httpx.ASGITransport(app=bridge_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://bridge") as client:
        page = await client.get("/assistant")
        assert page.status_code == 502
        assert nobody in page.json()["message"]
        settings = await client.get("/rest/module-settings")
        assert settings.status_code == 502
        cookie = {"cookie": "n8n-auth=anything", "browser-id": "b"}
        threads = await client.get("/rest/instance-ai/threads", headers=cookie)
        assert threads.status_code == 503
        assert "n8n is not answering" in threads.json()["message"]
        assert (await client.get("/rest/instance-ai/threads")).status_code == 401
