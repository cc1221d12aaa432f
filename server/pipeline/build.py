"""Build: compile a workspace workflow source in the thread's sandbox, validate it in layers,
add TypeScript diagnostics when it fails, and save it by the workflow bound to the file.

Layers, each finding tagged with its source:
- in the sandbox: `load` / `export` / `timeout` (the source did not produce a workflow),
  `graph` (SDK graph checks), `schema` (node parameter schemas, with line and column), `sdk`
  (source lint);
- here: `catalog` (node types, versions, retired types, parameter keys) and `credentials`
  (credential slots);
- `typescript`: the compiler over the file and its imports, when anything above failed or
  when the source opted into typed node parameters.

A failed build is a result (`success: false` with errors and a remediation), never an RPC
error, and never saves anything.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from sandbox.errors import FileTooLargeError, PathEscapeError, WorkspaceFileNotFoundError
from sandbox.protocol import Sandboxes, ToolchainHost, WorkflowToolchain
from sandbox.toolchain_results import Compiled, SdkIssue
from server.catalog import CatalogService
from server.catalog.catalog import Catalog, Finding
from server.core.caller import LOCAL, Caller
from server.errors import InvalidArgumentError, NotFoundError, UnavailableError
from server.instance import Workflows
from server.instance.types import (
    Binding,
    CredentialInfo,
    Workflow,
    WorkflowContent,
    WorkflowGoneError,
)
from server.pipeline.credential_binding import resolve_credentials
from server.pipeline.judgement import AskModel, judge_plan
from server.pipeline.simulation import (
    BASE,
    SUPPORTED_TRIGGERS,
    PlanEntry,
    mocked_nodes,
    plan_simulation,
)
from server.pipeline.work_item_machine import Remediation

__all__ = [
    "SOURCE_SUFFIXES",
    "BuildIssue",
    "BuildOutcome",
    "BuildRequest",
    "SandboxLookup",
    "Validation",
    "WorkflowBuilder",
]

log = structlog.get_logger(__name__)

SOURCE_SUFFIXES = (".ts", ".tsx", ".mts", ".json")

SandboxLookup = Callable[[str], Awaitable[Sandboxes]]
# The credentials a caller may use (their projects'), to bind at build.
CredentialLookup = Callable[[Caller], Awaitable[list[CredentialInfo]]]


@dataclass(frozen=True, kw_only=True)
class BuildIssue:
    message: str
    source: str
    code: str | None = None
    node_name: str | None = None
    path: str | None = None
    line: int | None = None
    column: int | None = None
    file: str | None = None


@dataclass(kw_only=True)
class BuildOutcome:
    success: bool
    file_path: str
    workflow_id: str | None = None
    workflow_name: str | None = None
    work_item_id: str | None = None
    source_hash: str | None = None
    remediation: Remediation | None = None
    errors: list[BuildIssue] = field(default_factory=list)
    warnings: list[BuildIssue] = field(default_factory=list)
    # For verification (not part of the tool's result): the saved version, the fixtures the
    # source declared, and the simulation plan (None: it could not be made).
    version_id: str | None = None
    fixtures: dict[str, Any] = field(default_factory=dict)
    simulation_plan: list[PlanEntry] | None = None
    # Node name → credential types mocked on it (no single matching credential to bind).
    mocked_credentials: dict[str, list[str]] = field(default_factory=dict)
    credential_note: str | None = None
    # Every trigger is an event trigger a test run cannot fire: the build finishes the work
    # item (nothing to verify); it runs when its event comes.
    trigger_only: bool = False

    @property
    def mocked_credential_types(self) -> list[str]:
        return sorted({kind for kinds in self.mocked_credentials.values() for kind in kinds})


@dataclass(frozen=True, kw_only=True)
class Validation:
    """A source checked as a build would check it, nothing saved: the outcome (success,
    errors, warnings, the credentials a save would mock) and the compiled workflow, when it
    compiled."""

    outcome: BuildOutcome
    workflow: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    thread_id: str
    file_path: str
    workflow_id: str | None = None
    project_id: str | None = None
    name: str | None = None
    work_item_id: str | None = None
    is_supporting_workflow: bool = False
    # Whose build: new workflows go into their project; they bind only workflows they see.
    caller: Caller = LOCAL


class WorkflowBuilder:
    def __init__(
        self,
        *,
        sandboxes: SandboxLookup,
        catalog: CatalogService,
        workflows: Workflows,
        credentials: CredentialLookup | None = None,
        judge: AskModel | None = None,
        judge_timeout_s: float = 60.0,
        max_source_bytes: int = 1024 * 1024,
        compile_timeout_s: float = 5.0,
        diagnostics_timeout_s: float = 5.0,
    ) -> None:
        self._sandboxes = sandboxes
        self._max_source_bytes = max_source_bytes
        self._compile_timeout_s = compile_timeout_s
        self._diagnostics_timeout_s = diagnostics_timeout_s
        self._catalog = catalog
        self._workflows = workflows
        self._credentials = credentials
        self._judge = judge
        self._judge_timeout_s = judge_timeout_s
        # One build of a file at a time: two first builds racing must not make two workflows.
        # Each entry counts its users, so it goes when the last one leaves.
        self._file_locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    async def bound_workflow(self, thread_id: str, file_path: str) -> str | None:
        """The workflow the thread's file is bound to (its earlier builds saved into it)."""
        binding = await self._workflows.binding(thread_id, file_path)
        return binding.workflow_id if binding is not None else None

    async def saves_into(self, workflow_id: str, caller: Caller) -> bool:
        """Whether a build into `workflow_id` would save (it exists, the caller sees it, it
        is not archived); otherwise the build itself says why not."""
        found = await self._workflows.get(workflow_id)
        return found is not None and caller.sees(found.project_id) and not found.is_archived

    async def toolchain(self, thread_id: str) -> WorkflowToolchain:
        manager = await self._sandboxes(thread_id)
        if not isinstance(manager, ToolchainHost) or not manager.runs_image:
            raise UnavailableError(
                "building workflows needs Docker sandboxes (INSTANCE_AI_SANDBOX_PROVIDER=docker)"
            )
        return manager.toolchain(thread_id)

    async def apply_credentials(
        self,
        workflow: Workflow,
        credentials: dict[str, dict[str, str]],
        parameters: dict[str, dict[str, Any]] | None = None,
        *,
        caller: Caller,
    ) -> list[str]:
        """Put real credentials (node name → credential type → id) on a saved workflow, all
        or none, as a new version: each id must be a credential the caller may use, of the
        slot's type. Nodes whose mocked credentials are now all real (and AI roots, whose
        verdict follows their model's credentials) are planned afresh, so verification runs
        them for real; every other entry (the model's judgements and fixtures among them) is
        kept. Returns the nodes changed."""
        usable = {c.id: c for c in await self._credentials(caller)} if self._credentials else {}
        refs: dict[str, dict[str, Any]] = {}
        for node, slots in credentials.items():
            for kind, credential_id in slots.items():
                found = usable.get(credential_id)
                if found is None:
                    raise NotFoundError(
                        f"credential {credential_id!r} (for {kind} on {node!r}) does not exist "
                        "or is not one the user may use; list-credentials shows those they may"
                    )
                if found.type != kind:
                    raise InvalidArgumentError(
                        f"credential {credential_id!r} is a {found.type} credential, but "
                        f"{node!r} needs {kind}: choose a {kind} credential"
                    )
                refs.setdefault(node, {})[kind] = {"id": found.id, "name": found.name}
        fixtures, plan = await self._workflows.verification_inputs(workflow.current_version_id)
        still_mocked = {
            name: left
            for name, kinds in mocked_nodes(plan).items()
            if (left := [k for k in kinds if k not in refs.get(name, {})])
        }
        nodes = [
            {**n, "credentials": {**(n.get("credentials") or {}), **refs[str(n["name"])]}}
            if n.get("name") in refs
            else n
            for n in workflow.nodes
        ]
        replanned = (
            _plan(
                {"nodes": nodes, "connections": workflow.connections},
                fixtures,
                still_mocked,
                await self._catalog.get(),
            )
            if plan is not None
            else None
        )
        reconciled = None
        if plan is not None and replanned is not None:
            fresh = {e.node_name: e.as_json() for e in replanned}
            satisfied = set(mocked_nodes(plan)) - set(still_mocked)
            reconciled = [
                fresh.get(e["nodeName"], e)
                if e["nodeName"] in satisfied or e.get("source") == "ai_root"
                else e
                for e in plan
            ]
        return await self._workflows.replace_credentials(
            workflow.id, refs, parameters, simulation_plan=reconciled
        )

    async def build(self, request: BuildRequest) -> BuildOutcome:
        outcome = BuildOutcome(
            success=False, file_path=request.file_path, work_item_id=request.work_item_id
        )
        refusal = _refuse_path(request.file_path)
        if refusal:
            return _failed(outcome, [BuildIssue(message=refusal, source="input")])
        toolchain = await self.toolchain(request.thread_id)
        key = (request.thread_id, posixpath.normpath(request.file_path))
        lock, users = self._file_locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                # Looked up while the sandbox compiles.
                binding = asyncio.ensure_future(
                    self._workflows.binding(request.thread_id, request.file_path)
                )
                try:
                    return await self._compile_and_save(toolchain, request, outcome, binding)
                finally:
                    if not binding.done():
                        binding.cancel()
                    elif not binding.cancelled():
                        binding.exception()  # unused after a failed compile: mark it seen
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._file_locks[key]

    async def validate(self, request: BuildRequest) -> Validation:
        """What `build` would say of the file, saving nothing: the same compile and layers of
        checks, and the credentials the save would bind or mock (against the workflow the file
        is bound to, or `request.workflow_id`)."""
        outcome = BuildOutcome(success=False, file_path=request.file_path)
        refusal = _refuse_path(request.file_path)
        if refusal:
            return Validation(
                outcome=_failed(outcome, [BuildIssue(message=refusal, source="input")])
            )
        toolchain = await self.toolchain(request.thread_id)
        checked = await self._compile_checked(toolchain, request, outcome)
        if isinstance(checked, BuildOutcome):
            return Validation(outcome=checked)
        workflow, _fixtures = checked
        outcome.success = True
        if self._credentials is not None:
            target = request.workflow_id or await self.bound_workflow(
                request.thread_id, request.file_path
            )
            existing = await self._workflows.get(target, request.caller) if target else None
            resolution = resolve_credentials(
                list(workflow.get("nodes") or []),
                available=await self._credentials(request.caller),
                previous=existing.nodes if existing is not None else (),
                needed=(await self._catalog.get()).credential_types_needed,
            )
            outcome.mocked_credentials = resolution.mocked
            outcome.credential_note = resolution.note()
        return Validation(outcome=outcome, workflow=workflow)

    async def _compile_checked(
        self, toolchain: WorkflowToolchain, request: BuildRequest, outcome: BuildOutcome
    ) -> tuple[dict[str, Any], dict[str, Any]] | BuildOutcome:
        """The compiled workflow and the fixtures its source declared, its warnings on
        `outcome`; or `outcome` failed with the errors."""
        try:
            compiled = await toolchain.compile(
                request.file_path,
                timeout_s=self._compile_timeout_s,
                max_bytes=self._max_source_bytes,
            )
        except FileTooLargeError as exc:
            advice = "; move reusable parts into chunks/ files and import them"
            return _failed(outcome, [BuildIssue(message=f"{exc}{advice}", source="input")])
        except (PathEscapeError, WorkspaceFileNotFoundError) as exc:
            return _failed(outcome, [BuildIssue(message=str(exc), source="input")])
        outcome.source_hash = compiled.source_hash
        is_typescript = not request.file_path.endswith(".json")
        if not compiled.ok:
            errors = [_stage_issue(compiled, request.file_path)]
            if is_typescript and compiled.stage in ("load", "export"):
                errors += await self._diagnostics(toolchain, request, errors)
            return _failed(outcome, errors)

        workflow = compiled.workflow
        catalog = await self._catalog.get()
        issues = [_sandbox_issue(i, request.file_path) for i in compiled.issues]
        issues += [_catalog_issue(f) for f in catalog.check_workflow(workflow)]
        errors = _dedupe([i for severity, i in issues if severity == "error"])
        outcome.warnings = _dedupe([i for severity, i in issues if severity != "error"])
        if is_typescript and (errors or compiled.typed):
            errors += await self._diagnostics(toolchain, request, errors)
        if errors:
            return _failed(outcome, errors)
        return workflow, compiled.fixtures

    async def _compile_and_save(
        self,
        toolchain: WorkflowToolchain,
        request: BuildRequest,
        outcome: BuildOutcome,
        binding: asyncio.Future[Binding | None],
    ) -> BuildOutcome:
        checked = await self._compile_checked(toolchain, request, outcome)
        if isinstance(checked, BuildOutcome):
            return checked
        workflow, fixtures = checked
        catalog = await self._catalog.get()
        bound = await binding
        target = request.workflow_id or (bound.workflow_id if bound else None)
        existing = await self._workflows.get(target) if target is not None else None
        if existing is not None and not request.caller.sees(existing.project_id):
            # Another project's workflow: as if it did not exist (nothing is saved).
            gone = WorkflowGoneError(existing.id, archived=False)
            return _blocked(outcome, gone, bound=bound is not None and bound.workflow_id == target)
        if self._credentials is not None:
            resolution = resolve_credentials(
                list(workflow.get("nodes") or []),
                available=await self._credentials(request.caller),
                previous=existing.nodes if existing is not None else (),
                needed=catalog.credential_types_needed,
            )
            workflow = {**workflow, "nodes": resolution.nodes}
            outcome.mocked_credentials = resolution.mocked
            outcome.credential_note = resolution.note()
        plan = _plan(workflow, fixtures, outcome.mocked_credentials, catalog)
        if plan is not None and self._judge is not None:
            plan = await judge_plan(
                self._judge, workflow, plan, declared=set(fixtures), timeout_s=self._judge_timeout_s
            )
        outcome.simulation_plan = plan
        triggers = catalog.triggers(list(workflow.get("nodes") or []))
        outcome.trigger_only = bool(triggers) and all(
            t.get("type") not in SUPPORTED_TRIGGERS for t in triggers
        )
        return await self._save(outcome, request, bound, target, workflow, fixtures)

    async def _diagnostics(
        self, toolchain: WorkflowToolchain, request: BuildRequest, originals: list[BuildIssue]
    ) -> list[BuildIssue]:
        """TypeScript errors not already reported; none when the check fails or times out
        (the original errors stand on their own)."""
        try:
            report = await toolchain.diagnose(
                request.file_path, timeout_s=self._diagnostics_timeout_s
            )
        except Exception as exc:  # the check is a bonus: never let it hide the real errors
            log.warning("typescript diagnostics failed", error=str(exc))
            return []
        if not report.ok:
            log.info("typescript diagnostics unavailable", reason=report.message)
            return []
        found = [
            BuildIssue(
                message=f"{d.file}({d.line},{d.column}): error {d.code}: {d.message}",
                source="typescript",
                code=d.code,
                line=d.line,
                column=d.column,
                file=d.file,
            )
            for d in report.diagnostics
        ]
        return [issue for issue in _dedupe(found) if issue not in originals]

    async def _save(
        self,
        outcome: BuildOutcome,
        request: BuildRequest,
        binding: Binding | None,
        target: str | None,
        workflow: dict[str, Any],
        fixtures: dict[str, Any],
    ) -> BuildOutcome:
        caller = request.caller
        try:
            saved = await self._workflows.save_from_source(
                thread_id=request.thread_id,
                file_path=request.file_path,
                source_hash=outcome.source_hash or "",
                content=WorkflowContent(
                    name=request.name or str(workflow.get("name") or "My workflow"),
                    nodes=list(workflow.get("nodes") or []),
                    connections=dict(workflow.get("connections") or {}),
                    settings=dict(workflow.get("settings") or {}),
                ),
                workflow_id=target,
                project_id=request.project_id or caller.project_id,
                is_supporting=request.is_supporting_workflow,
                fixtures=fixtures,
                simulation_plan=[e.as_json() for e in outcome.simulation_plan]
                if outcome.simulation_plan is not None
                else None,
            )
        except WorkflowGoneError as gone:
            return _blocked(
                outcome, gone, bound=binding is not None and binding.workflow_id == target
            )
        outcome.success = True
        outcome.workflow_id = saved.id
        outcome.workflow_name = saved.name
        outcome.version_id = saved.current_version_id
        outcome.fixtures = fixtures
        return outcome


def _blocked(outcome: BuildOutcome, gone: WorkflowGoneError, *, bound: bool) -> BuildOutcome:
    """A save into a workflow that is gone: never recreated behind the caller's back."""
    state = "is archived" if gone.archived else "was deleted"
    advice = (
        "Restore it with unarchive-workflow and build again."
        if gone.archived
        else "Ask the user whether to recreate it; building a copy of the file under a new "
        "path creates a new workflow."
    )
    outcome.workflow_id = gone.workflow_id
    outcome.errors = [BuildIssue(message=f"workflow {gone.workflow_id} {state}", source="input")]
    outcome.remediation = Remediation(
        category="blocked",
        should_edit=False,
        reason="bound_workflow_deleted" if bound else "workflow_not_found",
        guidance=f"Workflow {gone.workflow_id} {state}, so this build was not saved. {advice}",
    )
    return outcome


def _plan(
    workflow: dict[str, Any],
    fixtures: dict[str, Any],
    mocked: dict[str, list[str]],
    catalog: Catalog,
) -> list[PlanEntry] | None:
    """The simulation plan; a failure to make one never blocks the save (verification then
    warns that it has no plan)."""

    try:
        return plan_simulation(
            workflow,
            declared_outputs=fixtures,
            mocked=mocked,
            is_trigger=catalog.is_trigger,
            runs_in_sandbox=lambda type_name: type_name.startswith(BASE),
        )
    except Exception:
        log.warning("no simulation plan for this build", exc_info=True)
        return None


def _refuse_path(file_path: str) -> str | None:
    if "\n" in file_path or len(file_path) > 1024 or "workflow(" in file_path:
        return (
            "build-workflow takes the path of a workspace file, not source code: write the "
            "source to a file such as src/NAME.workflow.ts first, then pass its path"
        )
    if not file_path.strip():
        return "give filePath: the workspace path of a .workflow.ts or WorkflowJSON file"
    if not posixpath.basename(file_path).endswith(SOURCE_SUFFIXES):
        return (
            f"{file_path} is not a workflow source: give a .workflow.ts (or .ts, .tsx) file "
            "or a WorkflowJSON .json file"
        )
    return None


def _failed(outcome: BuildOutcome, errors: list[BuildIssue]) -> BuildOutcome:
    outcome.success = False
    outcome.errors = errors
    outcome.remediation = Remediation(
        category="code_fixable",
        should_edit=True,
        guidance=f"Fix the errors in {outcome.file_path}, then build it again.",
    )
    return outcome


_STAGE_ADVICE = {
    "load": "the file did not load",
    "export": "the file loaded but did not export a workflow",
    "timeout": "the file did not finish loading in time",
}


def _stage_issue(compiled: Compiled, file_path: str) -> BuildIssue:
    stage = compiled.stage or "load"
    message = (compiled.message or "").strip()
    return BuildIssue(
        message=f"{_STAGE_ADVICE.get(stage, stage)}: {message}",
        source=stage,
        code=f"{stage.upper()}_FAILED",
        file=file_path,
    )


def _sandbox_issue(issue: SdkIssue, file_path: str) -> tuple[str, BuildIssue]:
    return issue.severity, BuildIssue(
        message=issue.message,
        source=issue.source,
        code=issue.code,
        node_name=issue.node_name,
        path=issue.path,
        line=issue.line,
        column=issue.column,
        file=file_path if issue.line else None,
    )


def _catalog_issue(finding: Finding) -> tuple[str, BuildIssue]:
    return finding.severity, BuildIssue(
        message=finding.message,
        source=finding.source,
        code=finding.code,
        node_name=finding.node_name,
        path=finding.path,
    )


def _dedupe(issues: list[BuildIssue]) -> list[BuildIssue]:
    return list(dict.fromkeys(issues))
