"""The Tools service: list the registered tools and call one in a thread."""

from __future__ import annotations

import grpc

from instance_ai.json_text import to_json
from instance_ai.v1 import tools_pb2, tools_pb2_grpc
from server.api.caller import caller_of
from server.api.convert import request_object
from server.core.validation import check_thread_id
from server.tools.calls import ToolCalls
from server.tools.registry import dump

__all__ = ["ToolsServicer"]


class ToolsServicer(tools_pb2_grpc.ToolsServicer):
    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls

    async def ListTools(
        self, request: tools_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> tools_pb2.ListToolsResponse:
        user = caller_of(context).user_id
        return tools_pb2.ListToolsResponse(
            tools=[
                tools_pb2.ToolInfo(
                    name=spec.name,
                    description=spec.description,
                    group=spec.group,
                    input_schema_json=to_json(schema),
                    hitl_action=spec.hitl_action or "",
                    available=available,
                    requires=spec.requires,
                )
                for spec, schema, available in self._calls.registry.overview(user)
                if available or request.include_unavailable
            ]
        )

    async def CallTool(
        self, request: tools_pb2.CallToolRequest, context: grpc.aio.ServicerContext
    ) -> tools_pb2.CallToolResponse:
        check_thread_id(request.thread_id)
        result = await self._calls.direct(
            request.thread_id,
            request.tool_name,
            request_object(request.arguments_json, "arguments_json"),
            caller=caller_of(context),
        )
        return tools_pb2.CallToolResponse(result_json=to_json(dump(result)))
