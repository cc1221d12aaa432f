"""Tables. Every schema change lands as an Alembic migration in `migrations/versions/`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "GRANT_KEY_MAX",
    "Base",
    "ConfirmationRow",
    "CredentialRow",
    "DataTableColumnRow",
    "DataTableRow",
    "DeploymentRow",
    "EventRow",
    "ExecutionRow",
    "FolderRow",
    "GatewayKeyRow",
    "MessageRow",
    "PermissionRow",
    "PlanRow",
    "ReplicaRow",
    "RunRow",
    "SandboxApiKeyRow",
    "SandboxPlacementRow",
    "ServiceSandboxRow",
    "SourceBindingRow",
    "TagRow",
    "ThreadRow",
    "UTCDateTime",
    "WorkItemRow",
    "WorkflowRow",
    "WorkflowTagRow",
    "WorkflowVersionRow",
]

# The longest "always allow" key a thread may hold (n8n allows 512 characters too).
GRANT_KEY_MAX = 512


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps come back timezone-aware, in UTC, on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class ThreadRow(Base):
    """A conversation thread. `last_event_id` is the event id counter: an append bumps it in
    the same transaction that inserts the event, so a failed append leaves no gap and no id is
    ever handed out twice."""

    __tablename__ = "threads"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_event_id: Mapped[int] = mapped_column(BigInteger, default=0)
    title: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The user whose thread it is (None: a thread from before owners, open to every caller),
    # the project it was opened in, the client's metadata (e.g. n8n's `source`), and when a
    # message or a rename last changed it (lists are newest first).
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    project_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (Index("ix_threads_owner_updated", "owner", "updated_at", "id"),)


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    thread_id: Mapped[str] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    # active | suspended | completed | cancelled | error | interrupted
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # chat (a user message) | follow-up (started by the service, e.g. when a plan settles)
    kind: Mapped[str] = mapped_column(String(16), default="chat")
    message_group_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The agent loop's resumable state: the tool calls of the current step, the results in
    # so far, and the call that is waiting for a person (see server/agent/runs.py).
    state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Who started it (see server/runtime/caller.py); None: the local default.
    caller: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The replica driving it while active (see server/runtime/replicas.py); a replica that
    # stops renewing its lease has its active runs ended as interrupted by another.
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # The person's message that started it (chat runs) and the client's id for it.
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    message_id: Mapped[str | None] = mapped_column(String(128), nullable=True)

    __table_args__ = (
        # One open (active or suspended) run per thread, enforced by the database itself.
        Index(
            "ux_runs_one_open_per_thread",
            "thread_id",
            unique=True,
            sqlite_where=text("status IN ('active', 'suspended')"),
            postgresql_where=text("status IN ('active', 'suspended')"),
        ),
    )


class EventRow(Base):
    __tablename__ = "events"

    thread_id: Mapped[str] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    type: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    agent_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_events_run", "run_id"),)


class WorkflowRow(Base):
    """A saved workflow. Its content lives in versions; `current_version_id` is the draft the
    builder last saved, `active_version_id` the published one (None: unpublished)."""

    __tablename__ = "workflows"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    project_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    is_archived: Mapped[bool] = mapped_column(Boolean, default=False)
    is_supporting: Mapped[bool] = mapped_column(Boolean, default=False)
    current_version_id: Mapped[str] = mapped_column(String(64))
    active_version_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # None: at the project's root.
    folder_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)

    __table_args__ = (Index("ix_workflows_updated", "updated_at"),)


class WorkflowVersionRow(Base):
    __tablename__ = "workflow_versions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(
        ForeignKey("workflows.id", ondelete="CASCADE"), index=True
    )
    # 1, 2, 3 ... per workflow, in save order.
    number: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    nodes: Mapped[list[Any]] = mapped_column(JSON)
    connections: Mapped[dict[str, Any]] = mapped_column(JSON)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    source_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    # What verification needs of the build, kept beside (never inside) the workflow: the
    # fixtures the source declared and the simulation plan (None: it could not be made).
    fixtures: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    simulation_plan: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    # A person's name and note for the version (named versions).
    label: Mapped[str | None] = mapped_column(Text, nullable=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ux_workflow_versions_number", "workflow_id", "number", unique=True),)


class SourceBindingRow(Base):
    """Which workflow a thread's workspace source file builds into, and the hash of the
    source that was last saved."""

    __tablename__ = "source_bindings"

    thread_id: Mapped[str] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    file_path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    # No foreign key: a binding outlives its workflow, so a rebuild can say it was deleted.
    workflow_id: Mapped[str] = mapped_column(String(64), index=True)
    source_hash: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class VersionNoteRow(Base):
    """What the service keeps of a workflow version that another instance (n8n) holds: the
    build's fixtures and simulation plan, a person's label and note, and whether the build
    made it as a supporting workflow. Keyed by the instance's version id."""

    __tablename__ = "version_notes"

    version_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(64), index=True)
    fixtures: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    simulation_plan: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    label: Mapped[str | None] = mapped_column(Text, nullable=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    is_supporting: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ExecutionRow(Base):
    """A workflow run in a thread's sandbox. `result` is what the engine reported: order, per
    node status, outputs (each cut to 100 items, with counts), errors and logs."""

    __tablename__ = "executions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workflow_id: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[str] = mapped_column(String(64))
    thread_id: Mapped[str] = mapped_column(String(128), index=True)
    # manual | webhook | trigger | chat
    mode: Mapped[str] = mapped_column(String(16))
    # running | success | error | canceled | waiting
    status: Mapped[str] = mapped_column(String(16))
    is_verification: Mapped[bool] = mapped_column(Boolean, default=False)
    trigger_node: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ix_executions_workflow_started", "workflow_id", "started_at"),)


class WorkItemRow(Base):
    """One workflow being built, verified and repaired in a thread: the loop's state and the
    latest build outcome (what verification needs, and what it found)."""

    __tablename__ = "work_items"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    thread_id: Mapped[str] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    workflow_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    source_file_path: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    outcome: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class MessageRow(Base):
    """One message of a thread's conversation with the model, in the Messages API shape
    (`content` is a list of blocks). Rows are appended in order; `seq` orders them."""

    __tablename__ = "thread_messages"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    thread_id: Mapped[str] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_thread_messages_thread", "thread_id", "seq"),)


class ConfirmationRow(Base):
    """A question put to a person (HITL card) by a suspended run."""

    __tablename__ = "confirmations"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    thread_id: Mapped[str] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    tool_call_id: Mapped[str] = mapped_column(String(128))
    tool_name: Mapped[str] = mapped_column(String(64))
    # The confirmation-request payload as published.
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    # pending | answered | expired | cancelled
    status: Mapped[str] = mapped_column(String(16))
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class PermissionRow(Base):
    """An "always allow" a person gave in one thread: for a HITL action, or for one resource
    of it (a grant key, `server/tools/calls.py` `grant_key`)."""

    __tablename__ = "thread_permissions"

    thread_id: Mapped[str] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    action: Mapped[str] = mapped_column(String(GRANT_KEY_MAX), primary_key=True)
    mode: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class PlanRow(Base):
    """A thread's planned task graph (one per thread) and its visible checklist."""

    __tablename__ = "plans"

    thread_id: Mapped[str] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    plan_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    message_group_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # awaiting_approval | active | awaiting_replan | completed | cancelled | none (checklist only)
    status: Mapped[str] = mapped_column(String(32))
    tasks: Mapped[list[Any]] = mapped_column(JSON)
    checklist: Mapped[list[Any]] = mapped_column(JSON)
    # The create-tasks planningContext: summary, assumptions, postBuildRunRequested.
    context: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DataTableRow(Base):
    """A user data table. Its rows live in their own SQL table, `data_table_user_<id>`, whose
    columns follow `DataTableColumnRow` (changed by ALTER TABLE, never by rewriting rows)."""

    __tablename__ = "data_tables"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ux_data_tables_project_name", "project_id", "name", unique=True),)


class DataTableColumnRow(Base):
    __tablename__ = "data_table_columns"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    table_id: Mapped[str] = mapped_column(
        ForeignKey("data_tables.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(63))
    # string | number | boolean | date
    type: Mapped[str] = mapped_column(String(16))
    position: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("ux_data_table_columns_table_name", "table_id", "name", unique=True),)


class TagRow(Base):
    __tablename__ = "tags"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class WorkflowTagRow(Base):
    __tablename__ = "workflow_tags"

    workflow_id: Mapped[str] = mapped_column(
        ForeignKey("workflows.id", ondelete="CASCADE"), primary_key=True
    )
    tag_id: Mapped[str] = mapped_column(ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True)


class FolderRow(Base):
    """A folder of workflows within a project; folders nest."""

    __tablename__ = "folders"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(128))
    parent_folder_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class CredentialRow(Base):
    """A credential: metadata in the clear, the secret data sealed (AES-256-GCM, see
    server/domain/credential_store.py)."""

    __tablename__ = "credentials"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(128))
    type: Mapped[str] = mapped_column(String(128), index=True)
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DeploymentRow(Base):
    """The one row naming this database's deployment: services sharing the database are one
    deployment (they share sandboxes); services with their own databases never touch each
    other's."""

    __tablename__ = "deployment"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ReplicaRow(Base):
    """One live `instance-ai serve` process on this database: it renews `heartbeat_at`
    (database time) while it lives; one whose heartbeat is older than the lease is dead."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    address: Mapped[str] = mapped_column(String(255), default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SandboxPlacementRow(Base):
    """The container engine a thread's sandbox lives on, when sandboxes span several: chosen
    by rendezvous hashing when first needed, kept while that engine answers."""

    __tablename__ = "sandbox_placements"

    thread_id: Mapped[str] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    engine: Mapped[str] = mapped_column(String(255))
    placed_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AttachmentRow(Base):
    """A file a user attached to a chat message, kept with the thread (its run: the run the
    message started)."""

    __tablename__ = "attachments"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    thread_id: Mapped[str] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    position: Mapped[int] = mapped_column(Integer)  # its index in the message's list
    name: Mapped[str] = mapped_column(String(255))
    mime_type: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class GatewayKeyRow(Base):
    """A user's filesystem-gateway key, kept as its SHA-256 digest (the key itself is shown
    once, when made). One per user: a new key replaces the last."""

    __tablename__ = "gateway_keys"

    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    key_digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SandboxApiKeyRow(Base):
    """A key of the sandbox service API, kept as its SHA-256 digest (shown once, when made).
    Each key is a tenant, named by the operator: it sees only the sandboxes it made."""

    __tablename__ = "sandbox_api_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ServiceSandboxRow(Base):
    """A sandbox of the sandbox service API: its id is the caller's (n8n derives it from its
    thread), so any replica, and n8n after a restart, finds it again."""

    __tablename__ = "service_sandboxes"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(80), index=True)
    ephemeral: Mapped[bool] = mapped_column(Boolean)
    egress: Mapped[str] = mapped_column(String(16))  # public | none
    status: Mapped[str] = mapped_column(String(16))  # running | stopped
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_active_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ActivityEventRow(Base):
    """One change to the embedded instance's workflows or credentials: its activity log (what
    was created, saved, published, archived or deleted, by whom, in which project). Ids grow
    with time, so a page further back is everything below an id."""

    __tablename__ = "activity_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    category: Mapped[str] = mapped_column(String(32))  # workflow | credential
    action: Mapped[str] = mapped_column(String(32))  # created | saved | published | ...
    # The acting caller (None: the service's own work).
    user_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    project_id: Mapped[str] = mapped_column(String(128))
    resource_type: Mapped[str | None] = mapped_column(String(32), nullable=True)
    resource_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    resource_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    __table_args__ = (
        Index("ix_activity_events_project", "project_id", "id"),
        Index("ix_activity_events_resource", "resource_type", "resource_id", "id"),
    )
