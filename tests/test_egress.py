"""The sandbox's way out: a real container (no network) reaching a local site through the
service's proxy on its mounted socket, under the SSRF rules and the thread's approvals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from server.app import Application
from server.settings import Settings
from tests.conftest import serving
from tests.tool_client import ToolClient, saved_workflow
from tests.web_servers import Servers

pytestmark = pytest.mark.attack

# Node's http client, pointed at HTTP_PROXY the way proxy-aware clients are: absolute-form for
# http (MODE=get), or a CONNECT tunnel (MODE=connect).
CLIENT = r"""
const http = require('http');
const [mode, target] = [process.env.MODE, new URL(process.env.TARGET)];
const proxy = new URL(process.env.HTTP_PROXY);
const show = (status, body) => { console.log(JSON.stringify({status, body})); };
if (mode === 'get') {
  http.get({host: proxy.hostname, port: proxy.port, path: target.href,
            headers: {Host: target.host}}, (res) => {
    let body = '';
    res.on('data', (c) => body += c);
    res.on('end', () => show(res.statusCode, body));
  }).on('error', (e) => show(0, e.message));
} else {
  const req = http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT',
                            path: target.host});
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200) { show(res.statusCode, ''); socket.destroy(); return; }
    const head = `Host: ${target.host}\r\nConnection: close\r\n\r\n`;
    socket.write(`GET ${target.pathname} HTTP/1.1\r\n${head}`);
    let raw = ''; socket.on('data', (c) => raw += c);
    socket.on('end', () => show(200, raw.split('\r\n\r\n').slice(1).join('')));
  });
  req.on('response', (res) => {
    let body = '';
    res.on('data', (c) => body += c);
    res.on('end', () => show(res.statusCode, body));
  });
  req.on('error', (e) => show(0, e.message));
  req.end();
}
"""


@pytest.fixture
async def site() -> AsyncIterator[Servers]:
    servers = Servers()
    await servers.start()
    yield servers
    await servers.close()


async def from_sandbox(app: Application, thread: str, mode: str, url: str) -> dict[str, object]:
    manager = await app.parts.sandboxes.for_thread(thread)
    await manager.write_file(thread, "client.cjs", CLIENT.encode())
    ran = await manager.run_command(
        thread, f"MODE={mode} TARGET='{url}' node client.cjs", timeout_s=30
    )
    assert ran.exit_code == 0, ran.stderr
    return dict(json.loads(ran.stdout.strip().splitlines()[-1]))


async def test_the_sandbox_reaches_only_approved_public_hosts_through_the_proxy(
    make_docker_settings: Callable[..., Settings], site: Servers
) -> None:
    settings = make_docker_settings(web_fetch_allow_hosts=[f"127.0.0.1:{site.site_port}"])
    async with serving(settings) as (app, _channel):
        await app.parts.events.append("egress", "thread-title-updated", {"title": "test"})
        notes = site.url("/notes.txt")
        unapproved = await from_sandbox(app, "egress", "get", notes)
        assert unapproved["status"] == 403 and "not approved" in str(unapproved["body"])
        await app.parts.hitl.allow_domain("egress", "127.0.0.1")
        assert await from_sandbox(app, "egress", "get", notes) == {
            "status": 200,
            "body": "plain notes\nline two",
        }
        tunnelled = await from_sandbox(app, "egress", "connect", notes)
        assert tunnelled == {"status": 200, "body": "plain notes\nline two"}
        for mode in ("get", "connect"):
            victim = await from_sandbox(
                app, "egress", mode, f"http://127.0.0.1:{site.victim_port}/"
            )
            assert victim["status"] == 403, victim
        metadata = await from_sandbox(app, "egress", "get", "http://169.254.169.254/latest/")
        assert metadata["status"] == 403 and "internal address" in str(metadata["body"])
        manager = await app.parts.sandboxes.for_thread("egress")
        plain = f"require('http').get('{notes}').on('error', (e) => console.log(e.code))"
        direct = await manager.run_command("egress", f'node -e "{plain}"', timeout_s=30)
        assert "ENETUNREACH" in direct.stdout or "ECONNREFUSED" in direct.stdout  # no network
    assert site.victim_hits == 0


async def test_explore_node_resources_runs_the_nodes_own_method_through_the_proxy(
    make_docker_settings: Callable[..., Settings],
) -> None:
    seen: list[str] = []

    async def repositories(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        items = [
            {"name": "flows", "html_url": "https://github.com/octo/flows"},
            {"name": "nodes", "html_url": "https://github.com/octo/nodes"},
        ]
        return web.json_response({"items": items, "total_count": 2})

    app_ = web.Application()
    app_.router.add_get("/search/repositories", repositories)
    runner = web.AppRunner(app_)
    await runner.setup()
    # 127.0.0.2: a loopback address the sandbox's NO_PROXY (localhost, 127.0.0.1) leaves to the
    # proxy, as it would a public host.
    site = web.TCPSite(runner, "127.0.0.2", 0)
    await site.start()
    port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    try:
        settings = make_docker_settings(web_fetch_allow_hosts=[f"127.0.0.2:{port}"])
        async with serving(settings) as (app, channel):
            await app.parts.events.append("explore", "thread-title-updated", {"title": "test"})
            await app.parts.hitl.allow_domain("explore", "127.0.0.2")
            credential = await app.parts.instance.credentials.create(
                project_id="personal",
                name="GitHub",
                type_name="githubApi",
                data={"server": f"http://127.0.0.2:{port}", "accessToken": "ghp_PLANTED_42"},
            )
            tools = ToolClient(channel, "explore")
            found = await tools.call(
                "explore-node-resources",
                nodeType="n8n-nodes-base.github",
                resource="getRepositories",
                credentialId=credential.id,
                nodeParameters={"owner": "octo"},
            )
            assert [r["name"] for r in found["results"]] == ["flows", "nodes"]
            assert "ghp_PLANTED_42" not in json.dumps(found)
            unknown = await tools.refused(
                "explore-node-resources", nodeType="n8n-nodes-base.github", resource="nope"
            )
            assert "getRepositories" in (unknown.details() or "")  # names the real ones
    finally:
        await runner.cleanup()
    assert seen == ["token ghp_PLANTED_42"]


async def test_a_live_run_uses_its_credential_through_the_proxy_and_reports_no_secret(
    make_docker_settings: Callable[..., Settings],
) -> None:
    seen: list[str] = []

    async def orders(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Api-Key", ""))
        if request.headers.get("X-Api-Key") != "key-PLANTED-77":
            return web.json_response({"error": "bad key"}, status=401)
        return web.json_response({"orders": 3})

    service = web.Application()
    service.router.add_get("/orders", orders)
    runner = web.AppRunner(service)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.2", 0)  # 127.0.0.2: proxied (see NO_PROXY above)
    await site.start()
    port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    try:
        settings = make_docker_settings(
            web_fetch_allow_hosts=[f"127.0.0.2:{port}"], permissions={"runWorkflow": "always_allow"}
        )
        async with serving(settings) as (app, channel):
            credential = await app.parts.instance.credentials.create(
                project_id="personal",
                name="Orders API",
                type_name="httpHeaderAuth",
                data={"name": "X-Api-Key", "value": "key-PLANTED-77"},
            )
            nodes = [
                {
                    "name": "Start",
                    "type": "n8n-nodes-base.manualTrigger",
                    "typeVersion": 1,
                    "position": [0, 0],
                    "parameters": {},
                },
                {
                    "name": "Fetch",
                    "type": "n8n-nodes-base.httpRequest",
                    "typeVersion": 4.2,
                    "position": [200, 0],
                    "parameters": {
                        "url": f"http://127.0.0.2:{port}/orders",
                        "authentication": "genericCredentialType",
                        "genericAuthType": "httpHeaderAuth",
                        "options": {},
                    },
                    "credentials": {"httpHeaderAuth": {"id": credential.id, "name": "Orders API"}},
                },
            ]
            connections = {"Start": {"main": [[{"node": "Fetch", "type": "main", "index": 0}]]}}
            workflow = await saved_workflow(
                app, "live", "Orders", nodes=nodes, connections=connections
            )
            tools = ToolClient(channel, "live")
            blocked = await tools.call("run-workflow", workflowId=workflow)
            assert blocked["status"] == "error"  # 127.0.0.2 is not approved for the thread yet
            await app.parts.hitl.allow_domain("live", "127.0.0.2")
            ran = await tools.call("run-workflow", workflowId=workflow)
            assert ran["status"] == "success", ran
            output = await tools.call(
                "get-node-output", executionId=ran["executionId"], nodeName="Fetch"
            )
            assert output["data"] == [[{"orders": 3}]]
            assert "key-PLANTED-77" not in json.dumps([blocked, ran, output])
    finally:
        await runner.cleanup()
    assert seen == ["key-PLANTED-77"]
