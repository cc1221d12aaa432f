"""API keys, the loopback-only rule without keys, and TLS."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from instance_ai.v1 import agent_pb2, agent_pb2_grpc
from instance_ai_client.connection import ClientConfig
from server.app import Application
from server.settings import Settings
from tests.conftest import serving

KEY = "test-key-0123456789"


async def status_call(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
    await agent_pb2_grpc.AgentStub(channel).GetThreadStatus(
        agent_pb2.GetThreadStatusRequest(thread_id="t1"), metadata=metadata
    )


@pytest.mark.parametrize(
    ("metadata", "accepted"),
    [
        ((("authorization", f"Bearer {KEY}"),), True),
        ((("authorization", f"bearer {KEY}"),), True),
        ((("authorization", "Bearer other-key"),), False),
        ((("authorization", KEY),), False),  # no Bearer scheme
        ((("authorization", f"Bearer {KEY}x"),), False),
        ((), False),
    ],
    ids=["right-key", "lower-case-scheme", "wrong-key", "no-scheme", "longer-key", "no-key"],
)
async def test_api_keys_are_required(
    make_settings: Callable[..., Settings],
    metadata: tuple[tuple[str, str], ...],
    accepted: bool,
) -> None:
    async with Application(make_settings(api_keys=f"first-key,{KEY}")) as app:
        await app.parts.events.append("t1", "x")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            if accepted:
                await status_call(channel, metadata)
                return
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await status_call(channel, metadata)
            assert error.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "authorization: Bearer" in (error.value.details() or "")
            # Streaming RPCs are guarded the same way.
            stream = agent_pb2_grpc.AgentStub(channel).StreamEvents(
                agent_pb2.StreamEventsRequest(thread_id="t1"), metadata=metadata
            )
            with pytest.raises(grpc.aio.AioRpcError) as stream_error:
                async for _ in stream:
                    pass
            assert stream_error.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_health_answers_without_a_key(make_settings: Callable[..., Settings]) -> None:
    async with serving(make_settings(api_keys=KEY)) as (_app, channel):
        response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def list_services(
    channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]
) -> list[str]:
    """Server reflection's ListServices: a bidirectionally streaming RPC."""
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([request]), metadata=metadata
    )
    names: list[str] = []
    async for response in stream:
        names += [service.name for service in response.list_services_response.service]
    return names


async def test_request_streaming_rpcs_need_a_key_too(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings(api_keys=KEY)) as (_app, channel):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await list_services(channel, ())
        assert error.value.code() is grpc.StatusCode.UNAUTHENTICATED
        names = await list_services(channel, (("authorization", f"Bearer {KEY}"),))
    assert "instance_ai.v1.Agent" in names


async def test_keys_from_a_file(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(f"# service keys\n\n{KEY}\n")
    async with Application(make_settings(api_keys_file=key_file)) as app:
        await app.parts.events.append("t1", "x")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            await status_call(channel, (("authorization", f"Bearer {KEY}"),))
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await status_call(channel, (("authorization", "Bearer # service keys"),))
            assert error.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_without_keys_only_loopback_is_bound(make_settings: Callable[..., Settings]) -> None:
    async with Application(make_settings(host="0.0.0.0")) as app:
        assert app.grpc.host == "127.0.0.1"
    async with Application(make_settings(host="0.0.0.0", api_keys=KEY)) as app:
        assert app.grpc.host == "0.0.0.0"


async def test_tls(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    async with Application(make_settings(tls_cert_file=cert, tls_key_file=key)) as app:
        client = ClientConfig(server=f"localhost:{app.port}", tls_ca_file=cert)
        async with client.channel() as channel:
            response = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        assert response.status == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"localhost:{app.port}") as plain:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await health_pb2_grpc.HealthStub(plain).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
        assert error.value.code() is grpc.StatusCode.UNAVAILABLE
