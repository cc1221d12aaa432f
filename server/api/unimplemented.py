"""Services declared in the contract whose capability has not landed: every RPC answers
UNIMPLEMENTED, naming what it is waiting for. Each entry goes when its capability lands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from instance_ai.v1 import (
    browser_pb2,
    browser_pb2_grpc,
)

# (servicer base, add-to-server function, descriptor, capability per RPC)
PENDING: list[tuple[type, Callable[[Any, grpc.aio.Server], None], Any, dict[str, str]]] = [
    (
        browser_pb2_grpc.BrowserServicer,
        browser_pb2_grpc.add_BrowserServicer_to_server,
        browser_pb2.DESCRIPTOR.services_by_name["Browser"],
        {"*": "the browser relay (browser relay issue)"},
    ),
]


def _unimplemented(full_name: str, capability: str) -> Callable[..., Any]:
    message = f"{full_name} is not implemented yet: it needs {capability}"

    async def unary(_self: Any, _request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    return unary


def add_pending_services(server: grpc.aio.Server) -> list[str]:
    """Register every pending service; returns their full names."""
    names = []
    for base, add_to_server, service, capabilities in PENDING:
        if any(m.server_streaming for m in service.methods):
            # A pending streaming RPC would need a streaming stub; there is none now.
            raise TypeError(f"{service.full_name} has a streaming RPC: give it a stub")
        methods = {
            method.name: _unimplemented(
                f"{service.name}.{method.name}",
                capabilities.get(method.name, capabilities["*"]),
            )
            for method in service.methods
        }
        servicer_class = type(f"Pending{service.name}Servicer", (base,), methods)
        add_to_server(servicer_class(), server)
        names.append(service.full_name)
    return names
