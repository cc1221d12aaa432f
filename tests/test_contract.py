"""The gRPC contract: every service declared, discoverable, healthy, and honest about what is
not built yet; the committed generated code matches the .proto files."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from instance_ai.json_text import from_json, to_json
from instance_ai.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    pipeline_pb2,
    pipeline_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
from server.app import Application

ROOT = Path(__file__).resolve().parents[1]
SERVICES = [
    "instance_ai.v1.Agent",
    "instance_ai.v1.Tools",
    "instance_ai.v1.Workspace",
    "instance_ai.v1.Pipeline",
    "instance_ai.v1.Credentials",
    "instance_ai.v1.Browser",
    "instance_ai.v1.Gateway",
]


def test_generated_code_matches_the_proto_files() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "proto" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


async def _reflect(
    channel: grpc.aio.Channel, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield request

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    async for response in stub.ServerReflectionInfo(requests()):
        return response
    raise AssertionError("reflection returned nothing")


async def test_reflection_lists_every_service_and_describes_them(
    channel: grpc.aio.Channel,
) -> None:
    listed = await _reflect(channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {service.name for service in listed.list_services_response.service}
    assert set(SERVICES) | {"grpc.health.v1.Health"} <= names

    described = await _reflect(
        channel,
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="instance_ai.v1.Agent"),
    )
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    agent_file = next(f for f in files if f.name == "instance_ai/v1/agent.proto")
    methods = {m.name for m in agent_file.service[0].method}
    assert methods == {
        "SendMessage",
        "StreamEvents",
        "Confirm",
        "CancelRun",
        "CancelTask",
        "CorrectTask",
        "GetThreadStatus",
        "DeleteThread",
        "CreateThread",
        "GetThread",
        "ListThreads",
        "UpdateThread",
        "ListMessages",
    }


async def test_health_reports_serving_for_the_server_and_each_service(
    channel: grpc.aio.Channel,
) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ["", *SERVICES]:
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


async def test_a_build_without_sandboxes_is_unavailable_and_says_why(
    channel: grpc.aio.Channel,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await pipeline_pb2_grpc.PipelineStub(channel).BuildWorkflow(
            pipeline_pb2.BuildWorkflowRequest(thread_id="t1", file_path="src/a.workflow.ts")
        )
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "INSTANCE_AI_SANDBOX_PROVIDER" in (error.value.details() or "")
    tools = await tools_pb2_grpc.ToolsStub(channel).ListTools(tools_pb2.ListToolsRequest())
    assert {"build-workflow", "search-nodes", "workspace_write_file"} <= {
        t.name for t in tools.tools
    }


async def test_an_unexpected_error_is_internal_with_a_reference_and_no_details(
    app: Application, agent: agent_pb2_grpc.AgentStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(thread_id: str) -> None:
        raise RuntimeError("secret-internal-detail")

    await app.parts.events.append("t1", "tick", {})  # the thread exists
    monkeypatch.setattr(app.parts.threads, "status", broken)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await agent.GetThreadStatus(agent_pb2.GetThreadStatusRequest(thread_id="t1"))
    assert error.value.code() is grpc.StatusCode.INTERNAL
    details = error.value.details() or ""
    assert "reference err_" in details
    assert "secret-internal-detail" not in details


def test_json_fields_keep_every_json_type_exactly() -> None:
    value = {"n": 3, "x": 3.0, "nested": [1, {"m": 40}], "huge": 2**53 + 1, "flag": True}
    back = from_json(to_json(value))
    assert back == value
    assert [type(back[k]) for k in ("n", "x", "flag")] == [int, float, bool]
    assert type(back["nested"][1]["m"]) is int
    assert back["huge"] == 9007199254740993  # a double would have said ...992


async def test_whole_numbers_in_tool_schemas_stay_whole(channel: grpc.aio.Channel) -> None:
    listed = await tools_pb2_grpc.ToolsStub(channel).ListTools(tools_pb2.ListToolsRequest())
    defaults = [
        prop["default"]
        for tool in listed.tools
        for prop in from_json(tool.input_schema_json).get("properties", {}).values()
        if isinstance(prop, dict) and prop.get("type") == "integer" and "default" in prop
    ]
    assert defaults and all(type(d) is int for d in defaults)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "must be a JSON object, not an array"),
        ('{"a": ', "is not valid JSON"),
        ('{"a": NaN}', "holds NaN"),
        ('{"a": 1e999}', "holds 1e999, a number too large"),
        ("[" * 100_000, "nests arrays or objects too deeply"),
    ],
)
async def test_a_json_field_that_is_not_an_object_is_refused_saying_which_and_why(
    channel: grpc.aio.Channel, text: str, says: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await tools_pb2_grpc.ToolsStub(channel).CallTool(
            tools_pb2.CallToolRequest(thread_id="t1", tool_name="search-nodes", arguments_json=text)
        )
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert f"arguments_json {says}" in (error.value.details() or "")
