"""Every RPC of the contract, fuzzed at the gRPC boundary with property-based inputs.

Requests are generated from the services' own descriptors: random and hostile strings (path
tricks, control characters, right-to-left marks, very long ids), integers at and past their
type's edges, NaN and infinities, deep, wide, huge-numbered, malformed and non-object JSON in
every `*_json` field, unknown enum values.
Whatever comes in, the answer is a status a client can act on (never UNKNOWN or INTERNAL,
which would mean an unhandled error), and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from instance_ai.v1 import (
    agent_pb2,
    browser_pb2,
    credentials_pb2,
    gateway_pb2,
    pipeline_pb2,
    tools_pb2,
    workspace_pb2,
)
from sandbox.image.build import BuiltImage
from server.app import Application
from server.settings import Settings, load_settings
from tests.sandbox_fixtures import remove_owned

pytestmark = pytest.mark.attack

SERVICES = [
    module.DESCRIPTOR.services_by_name[name]
    for module, name in (
        (agent_pb2, "Agent"),
        (workspace_pb2, "Workspace"),
        (tools_pb2, "Tools"),
        (pipeline_pb2, "Pipeline"),
        (credentials_pb2, "Credentials"),
        (browser_pb2, "Browser"),
        (gateway_pb2, "Gateway"),
    )
]
METHODS = [method for service in SERVICES for method in service.methods]
# Statuses that say "the server did not expect this": the ones the boundary must never give.
UNHANDLED = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
TRIED: Counter[str] = Counter()

HOSTILE_STRINGS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "../../../../etc/passwd",
        "/etc/shadow",
        "a/../../b",
        "%2e%2e/%2e%2e/etc",
        "\u202etxt.exe",
        "\x00",
        "line\nbreak",
        "x" * 5000,
        "🧨" * 300,
        "${{7*7}}",
        "'; DROP TABLE events; --",
        "t1",
        "http://127.0.0.1:1/",
        "file:///etc/passwd",
        "n8n-nodes-base.set",
    ]
)
TEXT = st.one_of(
    HOSTILE_STRINGS,
    st.text(st.characters(exclude_categories=["Cs"]), max_size=200),
)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.integers(min_value=2**53, max_value=2**80),
    TEXT,
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=40,
)
# What a `*_json` field may hold: an object (the contract), anything else JSON, or not JSON.
JSON_TEXT = st.one_of(
    st.dictionaries(TEXT, JSON, max_size=5).map(json.dumps),
    JSON.map(json.dumps),
    st.sampled_from(["[" * 50_000, '{"a": NaN}', '{"a": 1e999}', '{"a":', "\ufeff{}"]),
    TEXT,
)
INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = st.sampled_from([low, high, 0, -1 if low < 0 else 1, 1])
    return st.one_of(edges, st.integers(min_value=low, max_value=high))


def field_values(field: Any, depth: int) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return JSON_TEXT if field.name.endswith("_json") else TEXT
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=2000)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=64 if kind == FieldDescriptor.TYPE_DOUBLE else 32)
    if kind in INT_RANGES:
        return integers(*INT_RANGES[kind])
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [value.number for value in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(min_value=-5, max_value=99))
    assert field.message_type is not None
    return messages(field.message_type, depth + 1)


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    cls = GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if _is_map(field):
            assert field.message_type is not None
            key, value = field.message_type.fields
            fields[field.name] = st.dictionaries(
                field_values(key, depth), field_values(value, depth), max_size=3
            )
        elif field.is_repeated:
            fields[field.name] = st.lists(field_values(field, depth), max_size=3)
        else:
            fields[field.name] = field_values(field, depth)
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: _build(cls, values))


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if _is_map(field):
            target = getattr(message, name)
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            target = getattr(message, name)
            for item in value:
                target.add().CopyFrom(item) if isinstance(item, Message) else target.append(item)
        elif isinstance(value, Message):
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


class ServerThread:
    """The real service on a loop of its own, so the test can call it with blocking stubs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.app = Application(settings)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.app.start(), self.loop).result(120)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self.app.stop(grace=1), self.loop).result(120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def channel(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: docker.DockerClient,
    sandbox_image: BuiltImage,
) -> Iterator[grpc.Channel]:
    # Real sandboxes: fuzzed commands and paths land in a hardened container, never the host.
    owner = f"fuzz-{uuid.uuid4().hex[:10]}"
    settings = load_settings(
        port=0,
        data_dir=Path(tmp_path_factory.mktemp("fuzz") / "data"),
        sandbox_provider="docker",
        sandbox_owner=owner,
        sandbox_pool_size=0,
        http_port=0,
    )
    try:
        with ServerThread(settings) as server, grpc.insecure_channel(server.app.address) as chan:
            yield chan
            health = health_pb2_grpc.HealthStub(chan).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING  # still serving
    finally:
        remove_owned(docker_client, owner)


def caller(channel: grpc.Channel, method: MethodDescriptor) -> Callable[[Message], None]:
    path = f"/{method.containing_service.full_name}/{method.name}"
    response = GetMessageClass(method.output_type)
    serialize = GetMessageClass(method.input_type).SerializeToString

    if method.server_streaming:
        stream = channel.unary_stream(
            path, request_serializer=serialize, response_deserializer=response.FromString
        )

        def call_stream(request: Message) -> None:
            # Live streams (StreamEvents with follow) end at the client's deadline.
            for _index, _reply in zip(range(50), stream(request, timeout=2), strict=False):
                pass

        return call_stream
    unary = channel.unary_unary(
        path, request_serializer=serialize, response_deserializer=response.FromString
    )
    return lambda request: unary(request, timeout=10)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.containing_service.name}.{m.name}")
def test_no_input_makes_an_rpc_fail_unhandled(
    channel: grpc.Channel, method: MethodDescriptor
) -> None:
    call = caller(channel, method)

    @settings(
        max_examples=60,
        deadline=None,
        database=None,  # nothing written into the checkout
        derandomize=True,  # the same inputs on every run: a failure reproduces
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(messages(method.input_type))
    def answers_with_a_status_a_client_can_act_on(request: Message) -> None:
        TRIED[method.name] += 1
        try:
            call(request)
        except grpc.RpcError as error:
            code = error.code()
            details = error.details()
            assert code not in UNHANDLED, (method.name, request, details)
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                assert method.server_streaming, (method.name, request)

    answers_with_a_status_a_client_can_act_on()
    assert TRIED[method.name] > 0


def test_zz_report_how_many_inputs_were_tried(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last in this module: the figure for docs/security.md."""
    with capsys.disabled():
        print(f"\nRPC fuzzing: {sum(TRIED.values())} inputs over {len(TRIED)} methods")
    assert not TRIED or len(TRIED) == len(METHODS)
