"""The Pipeline service: typed fronts for the build-workflow, verify-built-workflow,
report-verification-verdict and get-work-item tools (same path, same events)."""

from __future__ import annotations

from typing import Any

import grpc

from instance_ai.json_text import to_json
from instance_ai.v1 import pipeline_pb2, pipeline_pb2_grpc
from server.api.caller import caller_of
from server.api.convert import optional_request_object
from server.core.validation import check_thread_id
from server.tools.build import BuildIssueModel, BuildWorkflowOutput
from server.tools.calls import Output, ToolCalls
from server.tools.registry import dump
from server.tools.spec import ToolModel
from server.tools.verify import VerdictOutput

__all__ = ["PipelineServicer"]


class PipelineServicer(pipeline_pb2_grpc.PipelineServicer):
    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls

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
        result = await self._call(
            context, request.thread_id, "build-workflow", arguments, BuildWorkflowOutput
        )
        return _response(result)

    async def VerifyWorkflow(
        self, request: pipeline_pb2.VerifyWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.VerifyWorkflowResponse:
        check_thread_id(request.thread_id)
        overrides = optional_request_object(
            request.fixture_overrides_json, "fixture_overrides_json"
        )
        arguments: dict[str, Any] = {
            "workflowId": request.workflow_id,
            "workItemId": request.work_item_id or None,
            "inputData": optional_request_object(request.input_data_json, "input_data_json"),
            "triggerNodeName": request.trigger_node_name or None,
            "timeout": request.timeout_ms or None,
            "fixtureOverrides": overrides,
            # The contract's flag allows an empty override for every node overridden.
            "allowZeroItemFixtures": sorted(overrides or {})
            if request.allow_zero_item_fixtures
            else None,
        }
        result = await self._call(
            context, request.thread_id, "verify-built-workflow", arguments, ToolModel
        )
        return pipeline_pb2.VerifyWorkflowResponse(result_json=to_json(dump(result)))

    async def ReportVerdict(
        self, request: pipeline_pb2.ReportVerdictRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.ReportVerdictResponse:
        check_thread_id(request.thread_id)
        arguments: dict[str, Any] = {
            "workItemId": request.work_item_id,
            "workflowId": request.workflow_id,
            "verdict": request.verdict,
            "workflowInspection": request.workflow_inspection,
            "summary": request.summary,
            "runId": request.run_id or None,
            "executionId": request.execution_id or None,
            "failureSignature": request.failure_signature or None,
            "failedNodeName": request.failed_node_name or None,
            "diagnosis": request.diagnosis or None,
            "patch": request.patch or None,
            "remediation": optional_request_object(request.remediation_json, "remediation_json"),
        }
        result = await self._call(
            context, request.thread_id, "report-verification-verdict", arguments, VerdictOutput
        )
        response = pipeline_pb2.ReportVerdictResponse(
            guidance=result.guidance, action=result.action, phase=result.phase, status=result.status
        )
        if result.claim is not None:
            response.claim_json = to_json(result.claim)
        return response

    async def GetWorkItem(
        self, request: pipeline_pb2.GetWorkItemRequest, context: grpc.aio.ServicerContext
    ) -> pipeline_pb2.GetWorkItemResponse:
        check_thread_id(request.thread_id)
        arguments = {"workItemId": request.work_item_id}
        result = await self._call(context, request.thread_id, "get-work-item", arguments, ToolModel)
        return pipeline_pb2.GetWorkItemResponse(work_item_json=to_json(dump(result)))

    async def _call(
        self,
        context: grpc.aio.ServicerContext,
        thread_id: str,
        tool: str,
        arguments: dict[str, Any],
        output: type[Output],
    ) -> Output:
        """The tool's direct call; an unset field (None) leaves the tool's own default."""
        present = {k: v for k, v in arguments.items() if v is not None}
        caller = caller_of(context)
        return await self._calls.direct_as(output, thread_id, tool, present, caller=caller)


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
        mocked_credential_types=result.mocked_credential_types,
        mocked_node_names=result.mocked_node_names,
        credential_note=result.credential_note or "",
        trigger_only=result.trigger_only,
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
