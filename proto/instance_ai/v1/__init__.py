"""The gRPC contract of instance-ai, package `instance_ai.v1` (generated modules beside this).

`SERVICES` lists the full name of every service the contract declares."""

from __future__ import annotations

from instance_ai.v1 import (
    agent_pb2,
    browser_pb2,
    credentials_pb2,
    gateway_pb2,
    pipeline_pb2,
    tools_pb2,
    workspace_pb2,
)

SERVICES: tuple[str, ...] = tuple(
    service.full_name
    for module in (
        agent_pb2,
        tools_pb2,
        workspace_pb2,
        pipeline_pb2,
        credentials_pb2,
        browser_pb2,
        gateway_pb2,
    )
    for service in module.DESCRIPTOR.services_by_name.values()
)
