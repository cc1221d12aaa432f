"""The Pipeline service: BuildWorkflow now; verification and the workflow loop come with the
verify issue."""

from __future__ import annotations

import grpc

from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc
from server.errors import NotImplementedCapabilityError
from server.runtime import Runtime
from server.runtime.validation import check_thread_id
from server.tools.build import BuildIssueModel, BuildWorkflowOutput
from server.tools.registry import ToolRegistry

VERIFY = "simulated verification and the workflow loop (verify issue)"


class PipelineServicer(pipeline_pb2_grpc.PipelineServicer):
    def __init__(self, runtime: Runtime, registry: ToolRegistry) -> None:
        self._runtime = runtime
        self._registry = registry

    async def BuildWorkflow(
        self, request: pipeline_pb2.BuildWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.BuildWorkflowResponse:
        check_thread_id(request.thread_id)
        arguments = {
            "filePath": request.file_path,
            "workflowId": request.workflow_id or None,
            "projectId": request.project_id or None,
            "name": request.name or None,
            "workItemId": request.work_item_id or None,
            "isSupportingWorkflow": request.is_supporting_workflow,
        }
        result = await self._registry.call(
            self._runtime,
            request.thread_id,
            "build-workflow",
            {k: v for k, v in arguments.items() if v is not None},
        )
        assert isinstance(result, BuildWorkflowOutput)
        return _response(result)

    async def VerifyWorkflow(
        self, request: pipeline_pb2.VerifyWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.VerifyWorkflowResponse:
        raise NotImplementedCapabilityError(VERIFY)

    async def ReportVerdict(
        self, request: pipeline_pb2.ReportVerdictRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.ReportVerdictResponse:
        raise NotImplementedCapabilityError(VERIFY)

    async def GetWorkItem(
        self, request: pipeline_pb2.GetWorkItemRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.GetWorkItemResponse:
        raise NotImplementedCapabilityError(VERIFY)


def _issue(issue: BuildIssueModel) -> pipeline_pb2.BuildIssue:
    return pipeline_pb2.BuildIssue(
        message=issue.message,
        source=issue.source,
        code=issue.code or "",
        node_name=issue.node_name or "",
        path=issue.path or "",
        line=issue.line or 0,
        column=issue.column or 0,
        file=issue.file or "",
    )


def _response(result: BuildWorkflowOutput) -> pipeline_pb2.BuildWorkflowResponse:
    response = pipeline_pb2.BuildWorkflowResponse(
        success=result.success,
        workflow_id=result.workflow_id or "",
        workflow_name=result.workflow_name or "",
        work_item_id=result.work_item_id or "",
        file_path=result.file_path,
        source_hash=result.source_hash or "",
        errors=[_issue(i) for i in result.errors],
        warnings=[_issue(i) for i in result.warnings],
    )
    if result.remediation is not None:
        response.remediation.CopyFrom(
            pipeline_pb2.Remediation(
                category=result.remediation.category,
                should_edit=result.remediation.should_edit,
                guidance=result.remediation.guidance,
                reason=result.remediation.reason or "",
            )
        )
    return response
