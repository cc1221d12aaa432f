"""The sandbox service API at the HTTP level, on a real service process and real Docker
sandboxes: bad input, the in-flight limit, keys and tenants through the CLI, the sandbox n8n
expects (its tools and hardening), egress as n8n's service does it, idle stop and delete, the
engine going away, the service restarted mid-exec."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest

from sandbox import identity
from sandbox.engine import SandboxLimits
from sandbox.job_launcher import LAUNCHER_CAPABILITIES
from sandbox.kinds import service_key
from sandbox.runtimes import GVISOR_HOST_PIDS_FACTOR, GVISOR_KERNEL_MEMORY, RUNSC
from server.settings import DATABASE_FILE_NAME
from tests.engine_proxy import engine_proxy
from tests.sandbox_api_fixtures import STATIC_KEY, SandboxApiServer
from tests.sandbox_fixtures import (
    HostView,
    exec_in,
    owned_container,
    owned_containers,
    remove_owned,
)

KEY = {"X-Api-Key": STATIC_KEY}


@pytest.fixture
async def api(sandbox_api: SandboxApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sandbox_api.url, headers=KEY, timeout=120) as client:
        yield client


@pytest.fixture
async def sandbox(api: httpx.AsyncClient) -> AsyncIterator[str]:
    """A fresh sandbox of the static key's tenant, deleted afterwards."""
    sandbox_id = str(uuid.uuid4())
    made = await api.post("/sandboxes", json={"id": sandbox_id})
    assert made.status_code == 201, made.text
    yield sandbox_id
    await api.delete(f"/sandboxes/{sandbox_id}")


async def run(api: httpx.AsyncClient, sandbox_id: str, command: str, **body: Any) -> dict[str, Any]:
    """Run a command; its exit event with the whole stdout and stderr."""
    answer = await api.post(
        f"/sandboxes/{sandbox_id}/executions", json={"command": command, **body}
    )
    assert answer.status_code == 200, answer.text
    events = [json.loads(line) for line in answer.text.splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))
    exit_event: dict[str, Any] = events[-1]
    assert exit_event["type"] == "exit", events
    exit_event["stdout"] = "".join(e["data"] for e in events if e["type"] == "stdout")
    exit_event["stderr"] = "".join(e["data"] for e in events if e["type"] == "stderr")
    return exit_event


def error_of(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == status
    return str(body["error"])


# -- bad input ------------------------------------------------------------------------------


async def test_health_needs_no_key_and_everything_else_does(sandbox_api: SandboxApiServer) -> None:
    async with httpx.AsyncClient(base_url=sandbox_api.url) as bare:
        assert (await bare.get("/healthz")).json() == {"status": "ok"}
        assert "X-Api-Key" in error_of(await bare.get("/sandboxes"), 401)
        wrong = await bare.get("/sandboxes", headers={"X-Api-Key": "wrong"})
        error_of(wrong, 401)


async def test_bad_requests_say_what_to_change_and_leave_nothing(
    api: httpx.AsyncClient, sandbox: str
) -> None:
    base = f"/sandboxes/{sandbox}"
    assert error_of(await api.get("/no/such/route"), 404) == "not found"
    error_of(await api.patch(base), 405)
    assert "not JSON" in error_of(await api.post("/sandboxes", content=b"{nope"), 400)
    assert "ephemeral" in error_of(await api.post("/sandboxes", json={"ephemeral": "maybe"}), 400)
    assert "egress" in error_of(await api.post("/sandboxes", json={"egress": "everywhere"}), 400)
    assert "UUID" in error_of(await api.get("/sandboxes/NOT-A-UUID"), 400)
    assert "command" in error_of(await api.post(f"{base}/executions", json={}), 400)
    too_long = {"command": "true", "timeout_ms": 31 * 60 * 1000}
    assert "30 minutes" in error_of(await api.post(f"{base}/executions", json=too_long), 400)
    assert "path" in error_of(await api.get(f"{base}/files/content"), 400)
    bad_flag = await api.get(f"{base}/files", params={"path": "/tmp", "recursive": "perhaps"})
    assert "recursive" in error_of(bad_flag, 400)
    assert "src" in error_of(await api.post(f"{base}/files/copy", json={"dest": "/tmp/x"}), 400)

    # An upload over the limit is refused before it is read: nothing is written.
    big = b"x" * (10 * 1024 * 1024 + 1)
    path = {"path": "/home/user/too-big.bin"}
    assert "limit" in error_of(await api.put(f"{base}/files", params=path, content=big), 413)
    assert (await api.get(f"{base}/stat", params=path)).status_code == 404
    # None of the refused creates left a sandbox behind.
    assert [r["id"] for r in (await api.get("/sandboxes")).json()].count(sandbox) == 1


async def test_requests_past_the_in_flight_limit_get_429_with_retry_after(
    api: httpx.AsyncClient, sandbox: str
) -> None:
    # The service under test allows 32 requests in flight per sandbox.
    held = asyncio.Event()
    opened = 0

    async def hold() -> None:
        nonlocal opened
        body = {"command": "sleep 60", "timeout_ms": 90000}
        async with api.stream("POST", f"/sandboxes/{sandbox}/executions", json=body) as r:
            assert r.status_code == 200
            opened += 1
            if opened == 32:
                held.set()
            async for _ in r.aiter_lines():
                pass

    streams = [asyncio.create_task(hold()) for _ in range(32)]
    await asyncio.wait_for(held.wait(), 60)
    busy = await api.get(f"/sandboxes/{sandbox}/stat", params={"path": "/home/user"})
    assert "in flight" in error_of(busy, 429)
    assert busy.headers["retry-after"] == "1"
    # Another sandbox is not held back by this one's load, nor is the list.
    assert (await api.get("/sandboxes")).status_code == 200
    # A stream that ends (here: its client leaves) gives its place back; the commands go on
    # until the sandbox is deleted.
    for stream in streams:
        stream.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    await asyncio.sleep(0.5)
    after = await api.get(f"/sandboxes/{sandbox}/stat", params={"path": "/home/user"})
    assert after.status_code == 200


# -- keys and tenants -----------------------------------------------------------------------


async def test_keys_are_made_listed_and_revoked_with_the_cli(sandbox_api: SandboxApiServer) -> None:
    key = sandbox_api.new_key("tenant-cli")
    assert key.startswith("iasb_")
    listed = sandbox_api.cli("sandbox-api", "key", "ls", "--json")
    assert "tenant-cli" in listed.stdout and key not in listed.stdout
    again = sandbox_api.cli("sandbox-api", "key", "create", "tenant-cli")
    assert again.returncode == 1 and "exists" in again.stderr
    bad = sandbox_api.cli("sandbox-api", "key", "create", "no spaces please")
    assert bad.returncode == 1 and "name" in bad.stderr

    async with httpx.AsyncClient(
        base_url=sandbox_api.url, headers={"X-Api-Key": key}, timeout=60
    ) as tenant:
        made = (await tenant.post("/sandboxes")).json()
        assert [r["id"] for r in (await tenant.get("/sandboxes")).json()] == [made["id"]]
        async with httpx.AsyncClient(base_url=sandbox_api.url, headers=KEY) as static:
            assert made["id"] not in [r["id"] for r in (await static.get("/sandboxes")).json()]
            error_of(await static.delete(f"/sandboxes/{made['id']}"), 404)
            taken = await static.post("/sandboxes", json={"id": made["id"]})
            assert "another tenant" in error_of(taken, 409)
        revoked = sandbox_api.cli("sandbox-api", "key", "revoke", "tenant-cli")
        assert revoked.returncode == 0, revoked.stderr
        error_of(await tenant.get("/sandboxes"), 401)
    # The revoked tenant's sandbox is still there for the operator to see.
    listed = sandbox_api.cli("sandbox", "ls", "--json")
    assert service_key(made["id"]) in listed.stdout


# -- the sandbox n8n expects ----------------------------------------------------------------


async def test_the_sandbox_has_what_n8n_expects_hardened_like_thread_sandboxes(
    api: httpx.AsyncClient,
    sandbox: str,
    sandbox_api: SandboxApiServer,
    sandbox_limits: SandboxLimits,
) -> None:
    found = await run(
        api,
        sandbox,
        "id -u; echo $HOME; pwd; node --version; npm --version; python3 --version; "
        "rg --version | head -1; curl --version | head -1; ls -d /home/user/workspace; "
        "cat /etc/hostname",
    )
    assert found["exit_code"] == 0, found
    uid, home, pwd, node, npm, python, rg, curl, workspace, host = found["stdout"].split("\n")[:10]
    assert uid != "0" and home == "/home/user" and pwd == "/home/user"
    major, minor = (int(p) for p in node.removeprefix("v").split(".")[:2])
    assert (major, minor) >= (22, 16)
    assert npm and python.startswith("Python 3") and rg.startswith("ripgrep")
    assert curl.startswith("curl") and workspace == "/home/user/workspace"

    view = HostView.of(owned_container(sandbox_api.owner, host))
    assert view.read_only and view.no_new_privileges
    # None, but the job launcher's two under runsc (tests/test_runsc_engine.py: nothing of
    # them reaches what it starts).
    launcher = frozenset(LAUNCHER_CAPABILITIES)
    assert view.capabilities == (launcher if view.launcher else frozenset())
    assert view.launcher == (view.driver == "runsc")
    assert view.network == "none"
    # Under the runtime the service chose, with its limits (tests/test_sandbox.py checks them).
    assert view.runtime == sandbox_limits.runtime
    gvisor = sandbox_limits.runtime == RUNSC
    assert view.pids == 512 * (GVISOR_HOST_PIDS_FACTOR if gvisor else 1)
    assert view.memory == 1024 * 1024 * 1024 + (GVISOR_KERNEL_MEMORY if gvisor else 0)
    assert view.user == "1000:1000"
    # The home is the sandbox's own volume (with its size limit): files outlive the container.
    assert view.volumes["/home/user"].startswith(identity.volume_name(sandbox_api.owner, ""))
    # The network interfaces from /proc (gVisor has no /sys/class/net): loopback alone.
    interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    inside = await run(api, sandbox, f"grep CapEff /proc/self/status; {interfaces}")
    assert "0000000000000000" in inside["stdout"] and inside["stdout"].split()[-1] == "lo"


async def test_egress_reaches_the_trusted_registry_and_refuses_private_addresses(
    api: httpx.AsyncClient, sandbox: str, sandbox_api: SandboxApiServer
) -> None:
    registry = subprocess.run(
        ["npm", "config", "get", "registry"], capture_output=True, text=True, check=True
    ).stdout.strip()
    reached = await run(
        api, sandbox, f"curl -sS -m 30 -o /dev/null -w '%{{http_code}}' {registry}is-number"
    )
    assert reached["stdout"] == "200", reached
    # A private address is refused by the proxy itself: nothing is sent there.
    refused = await run(
        api,
        sandbox,
        "curl -sS -m 10 -o /dev/null -w '%{http_code}' http://user:topsecret@10.9.8.7/",
    )
    assert refused["stdout"] == "403", refused
    line = sandbox_api.wait_for_log("egress refused")
    assert service_key(sandbox) in line and "topsecret" not in "".join(sandbox_api.log)
    assert "internal address" in line

    closed = str(uuid.uuid4())
    assert (await api.post("/sandboxes", json={"id": closed, "egress": "none"})).status_code == 201
    try:
        nothing = await run(api, closed, f"curl -sS -m 10 -o /dev/null {registry}is-number")
        assert "403" in nothing["stderr"] and nothing["exit_code"] != 0, nothing
        changed = await api.post("/sandboxes", json={"id": closed, "egress": "public"})
        assert "egress" in error_of(changed, 409)
    finally:
        await api.delete(f"/sandboxes/{closed}")


# -- lifecycle faults -----------------------------------------------------------------------


@pytest.fixture
def own_server(tmp_path: Path, docker_client: docker.DockerClient) -> Iterator[SandboxApiServer]:
    """A service of this test's own (its settings, its owner), stopped and cleaned after."""
    server = SandboxApiServer(
        data_dir=tmp_path / "data", owner=f"test-sbxapi-{uuid.uuid4().hex[:10]}", env={}
    )
    yield server
    server.stop()
    remove_owned(docker_client, server.owner)


async def wait_for(check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.25)
    raise AssertionError("timed out")


@pytest.mark.timeout(240)
async def test_idle_sandboxes_stop_keeping_files_and_ephemeral_ones_go(
    own_server: SandboxApiServer,
) -> None:
    # A window roomy enough that no step of this test (on a busy machine) outlasts it.
    own_server.env |= {
        "INSTANCE_AI_SANDBOX_API_IDLE_STOP_SECONDS": "8",
        "INSTANCE_AI_SANDBOX_API_POOL_SIZE": "0",
    }
    own_server.start()
    async with httpx.AsyncClient(base_url=own_server.url, headers=KEY, timeout=60) as api:
        kept, passing = str(uuid.uuid4()), str(uuid.uuid4())
        await api.post("/sandboxes", json={"id": kept})
        await api.post("/sandboxes", json={"id": passing, "ephemeral": True})
        path = {"path": "/home/user/workspace/kept.txt"}
        await api.put(f"/sandboxes/{kept}/files", params=path, content=b"kept")
        host = (await run(api, kept, "cat /etc/hostname"))["stdout"].strip()

        async def stopped() -> bool:
            return bool((await api.get(f"/sandboxes/{kept}")).json()["status"] == "stopped")

        await wait_for(stopped)

        async def exited() -> bool:
            # The record says stopped first (a request meanwhile wakes it), then the engine
            # stops (or suspends) the container: a moment later under gVisor.
            return owned_container(own_server.owner, host).status == "exited"

        await wait_for(exited, timeout_s=30)
        # Woken by the next call, quietly (no 409: an idle stop is not a crash).
        read = await api.get(f"/sandboxes/{kept}/files/content", params=path)
        assert read.status_code == 200 and read.content == b"kept"
        assert (await api.get(f"/sandboxes/{kept}")).json()["status"] == "running"
        # Its way out came back with it (resumed, its bridge runs on): the proxy answers, here
        # refusing a private address.
        private = "curl -sS -m 10 -o /dev/null -w '%{http_code}' http://10.9.8.7/"
        assert (await run(api, kept, private))["stdout"] == "403"

        async def gone() -> bool:
            return (await api.get(f"/sandboxes/{passing}")).status_code == 404

        await wait_for(gone)


@pytest.mark.timeout(240)
async def test_the_engine_away_is_503_and_then_the_sandbox_is_back(
    own_server: SandboxApiServer, tmp_path: Path
) -> None:
    with engine_proxy(tmp_path) as proxy:
        own_server.env |= {
            "DOCKER_HOST": proxy.docker_host,
            "INSTANCE_AI_SANDBOX_ENGINE_PROBE_SECONDS": "0.5",
            "INSTANCE_AI_SANDBOX_API_POOL_SIZE": "0",
        }
        own_server.start()
        async with httpx.AsyncClient(base_url=own_server.url, headers=KEY, timeout=60) as api:
            sandbox_id = str(uuid.uuid4())
            assert (await api.post("/sandboxes", json={"id": sandbox_id})).status_code == 201
            path = {"path": "/home/user/note.txt"}
            await api.put(f"/sandboxes/{sandbox_id}/files", params=path, content=b"note")
            proxy.cut()
            try:

                async def refused() -> bool:
                    answer = await api.get(f"/sandboxes/{sandbox_id}/files/content", params=path)
                    return answer.status_code == 503

                await wait_for(refused)
                made = await api.post("/sandboxes")
                error_of(made, 503)
            finally:
                proxy.restore()

            async def back() -> httpx.Response | None:
                answer = await api.get(f"/sandboxes/{sandbox_id}/files/content", params=path)
                return answer if answer.status_code != 503 else None

            answer = await wait_for(back)
            # The container lived through it: the same files, and no restart to report.
            assert answer.status_code == 200 and answer.content == b"note"
            assert [r["id"] for r in (await api.get("/sandboxes")).json()] == [sandbox_id]


@pytest.mark.timeout(240)
async def test_a_service_restarted_mid_exec_loses_no_sandbox(own_server: SandboxApiServer) -> None:
    own_server.env |= {"INSTANCE_AI_SANDBOX_API_POOL_SIZE": "0"}
    own_server.start()
    address = own_server.url.removeprefix("http://")
    sandbox_id = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=own_server.url, headers=KEY, timeout=60) as api:
        await api.post("/sandboxes", json={"id": sandbox_id})
        await api.put(
            f"/sandboxes/{sandbox_id}/files", params={"path": "/home/user/a.txt"}, content=b"a"
        )
        body = {"command": "echo begun; sleep 97", "exec_id": "long-one"}
        async with api.stream("POST", f"/sandboxes/{sandbox_id}/executions", json=body) as r:
            async for line in r.aiter_lines():
                if "begun" in line:
                    break
            own_server.stop(signal.SIGKILL)
    own_server.start(address)
    async with httpx.AsyncClient(base_url=own_server.url, headers=KEY, timeout=60) as api:
        again = await api.post("/sandboxes", json={"id": sandbox_id})
        assert again.status_code == 200
        read = await api.get(
            f"/sandboxes/{sandbox_id}/files/content", params={"path": "/home/user/a.txt"}
        )
        assert read.status_code == 200 and read.content == b"a"
        # The execution went with the process that ran it, and so did its command.
        error_of(await api.get(f"/sandboxes/{sandbox_id}/executions/long-one"), 404)
        left = await run(api, sandbox_id, "ps -eo args | grep -c '[s]leep 97' || true")
        assert left["stdout"].strip() == "0"


@pytest.mark.timeout(240)
async def test_gc_removes_a_pool_claimed_sandbox_whose_record_is_gone(
    own_server: SandboxApiServer,
) -> None:
    own_server.env |= {"INSTANCE_AI_SANDBOX_API_POOL_SIZE": "1"}
    own_server.start()

    async def pool_ready() -> bool:
        # Ready once its worker runs (the last step of warming it, just before it is pooled).
        members = [
            c
            for c in owned_containers(own_server.owner)
            if identity.LABEL_POOL in c.labels and c.status == "running"
        ]
        # (Asked inside: `docker top` of a gVisor sandbox lists the host's processes.)
        return any(exec_in(m, "pgrep", "-f", "bin/worker[.]mjs").exit_code == 0 for m in members)

    await wait_for(pool_ready)
    await asyncio.sleep(1)
    async with httpx.AsyncClient(base_url=own_server.url, headers=KEY, timeout=60) as api:
        lost, kept = str(uuid.uuid4()), str(uuid.uuid4())
        await api.post("/sandboxes", json={"id": lost})  # claims the pool member
        await api.post("/sandboxes", json={"id": kept})
        lost_host = (await run(api, lost, "cat /etc/hostname"))["stdout"].strip()
        kept_host = (await run(api, kept, "cat /etc/hostname"))["stdout"].strip()
    # Claimed from the pool: its labels are the pool's, only its name says whose it is.
    assert owned_container(own_server.owner, lost_host).labels[identity.LABEL_THREAD] == ""
    own_server.stop()
    # The service's stop leaves none of its sandboxes running (the pool's member removed).
    assert [c.name for c in owned_containers(own_server.owner) if c.status == "running"] == []
    # Its record goes as a delete's would while the engine was away (the container stayed).
    with sqlite3.connect(own_server.data_dir / DATABASE_FILE_NAME) as db:
        db.execute("DELETE FROM service_sandboxes WHERE id = ?", (lost,))
    collected = own_server.cli("sandbox", "gc", "--json")
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout)["removedSandboxes"]
    assert not [c for c in owned_containers(own_server.owner) if c.id.startswith(lost_host)]
    # Its sandbox kept (stopped, or suspended where the engine has snapshots), to wake again.
    assert owned_container(own_server.owner, kept_host).status == "exited"
