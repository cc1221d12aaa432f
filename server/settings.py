"""Service settings: defaults < config file (TOML) < `INSTANCE_AI_*` environment < CLI flags.

Every setting is validated at start-up; a bad value stops the process with exit code 2 and a
message naming the setting (see `SettingsError`).
"""

from __future__ import annotations

import base64
import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

__all__ = [
    "CONFIG_FILE_ENV",
    "DATABASE_FILE_NAME",
    "ENV_PREFIX",
    "GATED_ACTIONS",
    "LICENSED_FEATURES",
    "DockerHostConfig",
    "HttpServerConfig",
    "McpServerConfig",
    "PermissionMode",
    "Settings",
    "SettingsError",
    "StdioServerConfig",
    "config_file_path",
    "default_data_dir",
    "load_settings",
]

ENV_PREFIX = "INSTANCE_AI_"
CONFIG_FILE_ENV = ENV_PREFIX + "CONFIG_FILE"
DATABASE_FILE_NAME = "instance-ai.db"

LICENSED_FEATURES = ["workflowHistory", "namedVersions"]
PermissionMode = Literal["require_approval", "always_allow", "blocked"]
# The HITL-gated actions; each defaults to require_approval.
GATED_ACTIONS = [
    "createWorkflow",
    "updateWorkflow",
    "runWorkflow",
    "publishWorkflow",
    "deleteWorkflow",
    "createCredential",
    "deleteCredential",
    "createFolder",
    "deleteFolder",
    "moveWorkflowToFolder",
    "tagWorkflow",
    "createDataTable",
    "deleteDataTable",
    "mutateDataTableSchema",
    "mutateDataTableRows",
    "cleanupTestExecutions",
    "readFilesystem",
    "fetchUrl",
    "webSearch",
    "restoreWorkflowVersion",
    "executeNode",
    "executeMcpTool",
]


# -- MCP servers (`INSTANCE_AI_MCP_SERVERS`): name -> a command (stdio) or a URL (Streamable
# HTTP). Values of `env` and `headers` are secrets: never logged or shown to the model.

# Server names become the prefix of tool names (`<server>__<tool>`), so they keep to what
# every model provider accepts in a tool name.
ServerName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]


class StdioServerConfig(BaseModel):
    """A server the service starts as a child process and talks to over stdin/stdout. The
    child gets a minimal environment (PATH, HOME, …) plus `env`, never the service's own."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1, description="program and its arguments")
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None

    @field_validator("command")
    @classmethod
    def _program(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the first element of command is the program to run")
        return value


class HttpServerConfig(BaseModel):
    """A server reached over Streamable HTTP."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", description="the server's MCP endpoint")
    headers: dict[str, SecretStr] = Field(default_factory=dict)


McpServerConfig = StdioServerConfig | HttpServerConfig


class DockerHostConfig(BaseModel):
    """One Docker engine sandboxes may live on. `unix://` engines are this host's (egress
    and workspace size limits need that); `tcp://` may carry TLS; `ssh://` uses this host's
    ssh client."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^(unix|tcp|ssh)://.+", description="the engine's address")
    tls_ca_cert: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None

    @model_validator(mode="after")
    def _pairs(self) -> DockerHostConfig:
        if (self.tls_client_cert is None) != (self.tls_client_key is None):
            raise ValueError("tls_client_cert and tls_client_key go together")
        if self.tls_ca_cert is not None and not self.url.startswith("tcp://"):
            raise ValueError("TLS applies to tcp:// engines only")
        return self


def _docker_host(value: Any) -> Any:
    return {"url": value} if isinstance(value, str) else value


DockerHost = Annotated[DockerHostConfig, BeforeValidator(_docker_host)]


# What stays as configured on a read-only branch (n8n's source control: the instance's
# workflows, tables and folders come from git and must not change here); everything else is
# blocked, as n8n's own assistant does.
BRANCH_READ_ONLY_SAFE = frozenset(
    {
        "readFilesystem",
        "fetchUrl",
        "webSearch",
        "publishWorkflow",
        "createCredential",
        "deleteCredential",
        "restoreWorkflowVersion",
    }
)


def effective_permissions(
    configured: dict[str, PermissionMode], *, branch_read_only: bool = False
) -> dict[str, PermissionMode]:
    """The modes in force: as configured, and (n8n's rule) running a single node is blocked
    where running workflows is, unless executeNode is set itself; on a read-only branch every
    action but the safe ones is blocked."""
    modes = dict(configured)
    if configured.get("runWorkflow") == "blocked" and "executeNode" not in configured:
        modes["executeNode"] = "blocked"
    if branch_read_only:
        modes |= {
            action: "blocked" for action in GATED_ACTIONS if action not in BRANCH_READ_ONLY_SAFE
        }
    return modes


# The --config flag, read while settings are built (the environment variable is the fallback).
_config_file: ContextVar[Path | None] = ContextVar("config_file", default=None)


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/instance-ai`, or `~/.local/share/instance-ai`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "instance-ai"


# A host to listen on: a name, an IPv4 address, or an IPv6 address in brackets.
HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+")


class Settings(BaseSettings):
    """Everything the server reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )

    host: str = Field("127.0.0.1", min_length=1, description="address to listen on")
    port: int = Field(50051, ge=0, le=65535, description="port to listen on; 0 picks a free one")
    data_dir: Path = Field(default_factory=default_data_dir, description="state directory")
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default: SQLite in the data directory. PostgreSQL: "
        "postgresql+asyncpg://user:pass@host/db",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="comma-separated API keys accepted as Bearer tokens"
    )
    api_keys_file: Path | None = Field(None, description="file with one API key per line")
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_grace_seconds: float = Field(10.0, ge=0, le=600)
    max_message_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        description="largest request accepted (room for a message's attachments)",
    )
    max_attachment_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="largest file attached to a chat message"
    )
    max_attachments_bytes: int = Field(
        25 * 1024 * 1024,
        ge=1,
        description="all the files attached to one chat message (the request as a whole is "
        "also held to max_message_bytes)",
    )
    max_chat_message_chars: int = Field(
        200_000, ge=1, le=10_000_000, description="longest chat message accepted"
    )
    sandbox_provider: Literal["docker", "local", "none"] = Field(
        "docker",
        description="docker: per-thread hardened containers; local: directories and "
        "subprocesses, NO isolation (machines without Docker); none: no workspace",
    )
    sandbox_runtime: Literal["auto", "runc", "runsc"] = Field(
        "auto",
        description="the OCI runtime of Docker sandboxes: runsc (gVisor, a second kernel "
        "between model-written code and the host's), runc (the host's kernel), or auto: runsc "
        "where the engine has it registered, else runc with a warning at start-up and in health",
    )
    sandbox_engine: Literal["auto", "docker", "runsc"] = Field(
        "auto",
        description="what drives sandboxes under gVisor: auto (the default): runsc where it "
        "can be driven here (this host's first engine, as root, the runtime runsc), else "
        "Docker, said in the log and in health; runsc (runsc itself, over OCI bundles: an "
        "exec in ~30 ms instead of ~200, checkpoint and restore; refuses to start where it "
        "cannot be driven); or docker (Docker's runsc runtime)",
    )
    sandbox_runsc_root: Path = Field(
        Path("/var/lib/instance-ai/runsc"),
        description="where the runsc engine keeps its containers' records, bundles and state, "
        "and each image's exported root filesystem (one per host, as Docker's own directory)",
    )
    sandbox_owner: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="label on this service's sandboxes [deployment-<id of its database>]: "
        "services sharing a database (replicas) share sandboxes, others never touch each "
        "other's; the owner's live services must all be of one deployment",
    )
    docker_hosts: list[DockerHost] = Field(
        default_factory=list,
        description='the Docker engines sandboxes spread over, JSON: ["unix:///…", {"url": '
        '"tcp://…:2376", "tls_ca_cert": …, "tls_client_cert": …, "tls_client_key": …}, '
        '"ssh://…"] [the one engine DOCKER_HOST names]; a thread stays on the engine '
        "rendezvous hashing gives it while that engine answers",
    )
    sandbox_idle_ttl_seconds: float = Field(900, gt=0, description="idle time before eviction")
    sandbox_ephemeral: bool = Field(False, description="destroy sandboxes when idle")
    sandbox_pool_size: int = Field(2, ge=0, le=50, description="warm sandboxes kept ready")
    sandbox_pool_window_seconds: float = Field(
        300,
        gt=0,
        description="where sandboxes are restored from templates (the runsc engine), the pools "
        "keep only as many members as the claims of this window need (none after a window "
        "without any), up to their size",
    )
    sandbox_max_age_hours: float = Field(720, gt=0, description="janitor removes older ones")
    sandbox_janitor_interval_seconds: float = Field(600, gt=0)
    sandbox_engine_probe_seconds: float = Field(
        5, gt=0, le=300, description="how often the engine is pinged (health follows it)"
    )
    sandbox_memory_mb: int = Field(1024, ge=64)
    sandbox_pids_limit: int = Field(512, ge=16)
    sandbox_cpus: float = Field(1.0, gt=0)
    # The rest of the hardening, configurable for unusual hosts; the defaults are the design.
    sandbox_network_mode: str = Field("none", min_length=1)
    sandbox_read_only: bool = True
    sandbox_no_new_privileges: bool = True
    sandbox_init: bool = True
    sandbox_user: str = Field("1000:1000", pattern=r"^[0-9]+:[0-9]+$")
    sandbox_tmp_size: str = Field("256m", pattern=r"^[0-9]+[kmg]?$")
    sandbox_command_timeout_seconds: float = Field(300, gt=0, le=3600)
    sandbox_max_output_bytes: int = Field(64 * 1024, ge=1024, description="per stream, inline")
    sandbox_max_file_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    sandbox_workspace_max_mb: int = Field(
        2048,
        ge=0,
        description="each workspace's size limit, enforced by a filesystem of its own (needs "
        "the service as root on the engine's host); 0: no limit",
    )
    build_max_source_bytes: int = Field(
        1024 * 1024, ge=1024, description="largest workflow source a build accepts"
    )
    build_compile_timeout_seconds: float = Field(
        5.0, gt=0, le=120, description="deadline for loading a workflow source"
    )
    simulation_model_pass: bool = Field(
        True,
        description="with a model configured, one model request per build decides the nodes no "
        "rule decides and writes fixtures for simulated nodes (off: the deterministic plan)",
    )
    simulation_model_timeout_seconds: float = Field(
        60.0, gt=0, le=600, description="deadline for that request (then: the deterministic plan)"
    )
    build_diagnostics_timeout_seconds: float = Field(
        5.0, gt=0, le=120, description="deadline for the TypeScript check of a failed build"
    )
    model: str | None = Field(
        None, description="model the agent uses, e.g. claude-sonnet-4-5; unset: no agent"
    )
    anthropic_api_key: SecretStr | None = Field(
        None, description="API key for the model (else the SDK reads ANTHROPIC_API_KEY)"
    )
    anthropic_base_url: str | None = Field(None, description="Messages API base URL")
    model_max_tokens: int = Field(8192, ge=1, le=200_000, description="per model turn")
    model_thinking_budget_tokens: int = Field(
        0,
        ge=0,
        description="extended thinking per model turn (at least 1024, below "
        "model_max_tokens), streamed as reasoning events; 0: no thinking",
    )
    model_timeout_seconds: float = Field(600, gt=0, le=3600, description="per model request")
    model_max_retries: int = Field(
        3, ge=0, le=10, description="retries of a failed model request (429/5xx, dead stream)"
    )
    agent_max_steps: int = Field(50, ge=1, le=1000, description="model turns per run")
    agent_deferred_tools: bool = Field(
        True,
        description="offer the orchestrator a core of tools and let it load the rest "
        "(search_tools, load_tool); false: every tool from the first request",
    )
    agent_history_token_budget: int = Field(
        150_000, ge=1000, description="history sent with each model request, in tokens"
    )
    agent_tool_result_max_tokens: int = Field(
        50_000, ge=100, description="larger tool results go to the workspace, by reference"
    )
    background_task_limit: int = Field(5, ge=1, le=100, description="running per thread")
    background_task_timeout_seconds: float = Field(
        3600, gt=0, description="a background task not finished by then is stopped (an error)"
    )
    confirmation_timeout_seconds: float = Field(
        86_400, ge=0, description="unanswered confirmations are denied after this; 0: never"
    )
    confirmation_sweep_interval_seconds: float = Field(60, gt=0)
    replica_lease_seconds: float = Field(
        10,
        ge=0.5,
        description="replicas sharing a PostgreSQL database: one that has not renewed its "
        "lease for this long is dead, and another ends its active runs as interrupted",
    )
    permissions: dict[str, PermissionMode] = Field(
        default_factory=dict,
        description='HITL mode per action, JSON, e.g. {"runWorkflow": "always_allow"}',
    )
    branch_read_only: bool = Field(
        False,
        description="The instance is on a read-only source-control branch: every action that "
        "changes workflows, tables, folders, tags or executions is blocked (credentials, "
        "publishing, version restores and web access keep their modes), as in n8n",
    )
    credentials_key: SecretStr | None = Field(
        None,
        description="base64 of 32 random bytes sealing credentials; unset: a key file "
        "(0600) in the data directory. Replicas sharing a database need the same key",
    )
    credentials_previous_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="comma-separated earlier keys, still accepted for opening (rotation)",
    )
    brave_search_api_key: SecretStr | None = Field(
        None, description="enables web-search through Brave (first choice)"
    )
    searxng_url: str | None = Field(
        None, description="enables web-search through this SearXNG instance (if no Brave key)"
    )
    web_fetch_timeout_seconds: float = Field(30, gt=0, le=120, description="per fetch-url")
    docs_url: str = Field(
        "https://docs.n8n.io",
        pattern=r"^https?://[^/\s]+$",
        description="where n8n-docs reads n8n's documentation (scheme and host, no path)",
    )
    browser: Literal["user", "sandbox"] = Field(
        "user",
        description="what the browser tools drive: user, the person's own browser through "
        "the extension (a connect card asks for it); sandbox, a headless Chromium in the "
        "thread's sandbox (no person needed: evaluation jobs, headless use; docker provider)",
    )
    browser_sandbox_idle_seconds: float = Field(
        600,
        gt=0,
        description="a sandboxed browser no browser tool used for this long is stopped (the "
        "next call starts a fresh one)",
    )
    browser_relay_host: str = Field(
        "127.0.0.1", description="where the browser relay (extension, CDP, setup page) listens"
    )
    browser_relay_port: int = Field(
        0, ge=0, le=65535, description="the browser relay's port (0: any free port, logged)"
    )
    browser_relay_public_url: str | None = Field(
        None,
        description="the relay's origin as a person's browser reaches it (e.g. "
        "https://ai.example.com behind a proxy); default: http://HOST:PORT",
    )
    web_fetch_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated host:port pairs fetch-url may reach although they are "
        "internal (off by default; for local test servers)",
    )
    mcp_servers: dict[ServerName, McpServerConfig] = Field(
        default_factory=dict,
        description='the MCP servers whose tools the agent gets, JSON: name -> {"command": '
        '[...], "env"?: {...}} (stdio) or {"url": ..., "headers"?: {...}} (Streamable HTTP)',
    )
    mcp_call_timeout_seconds: float = Field(
        60, gt=0, le=3600, description="deadline of one call to an MCP server or a gateway"
    )
    mcp_connect_timeout_seconds: float = Field(
        15, gt=0, le=600, description="deadline of connecting to an MCP server and listing"
    )
    http_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="port of the HTTP endpoint: the service as an MCP server (/mcp) and "
        "filesystem gateways (/gateway); unset: off, 0: any free port (logged)",
    )
    http_public_url: str | None = Field(
        None,
        description="the HTTP endpoint's origin as gateways and MCP clients reach it (behind a "
        "proxy); default: http://HOST:PORT",
    )
    sandbox_api_address: str | None = Field(
        None,
        description="host:port of the sandbox service API (what n8n's @n8n/sandbox-client "
        "speaks); unset: off, port 0: any free port (logged). TLS as the gRPC port's",
    )
    sandbox_api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="comma-separated static X-Api-Key values of the sandbox service API, each "
        "a tenant of its own (others: `instance-ai sandbox-api key create NAME`)",
    )
    sandbox_api_egress: Literal["public", "hosts", "none"] = Field(
        "public",
        description="what service sandboxes reach: public (any public address, private and "
        "reserved ranges refused), hosts (only sandbox_api_egress_hosts), none; trusted "
        "hosts are reachable in every mode but none",
    )
    sandbox_api_egress_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated host names service sandboxes may reach in the hosts mode",
    )
    sandbox_api_trusted_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated host or host:port an operator trusts although it has a "
        "non-public address (an internal registry mirror); `npm` stands for the host of "
        "`npm config get registry` on this machine, read at start",
    )
    sandbox_api_npm_registry: str = Field(
        "npm",
        description="the npm registry commands in service sandboxes use (npm_config_registry), "
        "its host trusted; `npm` (default): the one `npm config get registry` names on this "
        "machine, when npm is installed; empty: none (npm's own default, not trusted)",
    )
    sandbox_api_max_inflight: int = Field(
        64, ge=1, le=10_000, description="requests in flight per service sandbox before 429"
    )
    sandbox_api_max_file_bytes: int = Field(
        10 * 1024 * 1024, ge=1024, description="largest upload (and read) of one file"
    )
    sandbox_api_idle_stop_seconds: float = Field(
        3600, ge=0, description="idle time before a service sandbox is stopped (0: never)"
    )
    sandbox_api_idle_delete_seconds: float = Field(
        86400, ge=0, description="idle time before a service sandbox is deleted (0: never)"
    )
    sandbox_api_pool_size: int = Field(
        1, ge=0, le=50, description="started service sandboxes kept ready for a create"
    )
    instance: Literal["embedded", "n8n"] = Field(
        "embedded",
        description="where the user's workflows, credentials and data tables live: embedded "
        "(this service's database) or n8n (a real n8n instance, over its public API)",
    )
    n8n_url: str | None = Field(
        None, description="the n8n instance's base URL, e.g. http://127.0.0.1:5678"
    )
    n8n_api_key: SecretStr | None = Field(
        None, description="the service's n8n API key (or n8n_api_key_file)"
    )
    n8n_api_key_file: Path | None = Field(
        None, description="a file holding the service's n8n API key"
    )
    n8n_timeout_seconds: float = Field(
        30.0, gt=0, le=600, description="how long one call to n8n may take"
    )
    n8n_probe_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="how often n8n's readiness (for health) and licence (which tools it "
        "offers) are checked",
    )
    licensed_features: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated licensed features: workflowHistory (the version tools), "
        "namedVersions (naming versions)",
    )
    subscriber_buffer: int = Field(
        4096, ge=512, le=1_000_000, description="live events held per slow subscriber"
    )

    @field_validator(
        "api_keys",
        "licensed_features",
        "credentials_previous_keys",
        "web_fetch_allow_hosts",
        "sandbox_api_keys",
        "sandbox_api_egress_hosts",
        "sandbox_api_trusted_hosts",
        mode="before",
    )
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @field_validator("credentials_key", "credentials_previous_keys")
    @classmethod
    def _aes_keys(cls, value: Any) -> Any:
        keys = value if isinstance(value, list) else [value] if value is not None else []
        for key in keys:
            try:
                raw = base64.b64decode(key.get_secret_value().strip(), validate=True)
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise ValueError("must be base64 of 32 random bytes (openssl rand -base64 32)")
        return value

    @field_validator("licensed_features")
    @classmethod
    def _known_features(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(LICENSED_FEATURES))
        if unknown:
            raise ValueError(f"unknown features {unknown}; known: {', '.join(LICENSED_FEATURES)}")
        return value

    @field_validator("permissions")
    @classmethod
    def _known_actions(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(GATED_ACTIONS))
        if unknown:
            raise ValueError(f"unknown actions {unknown}; known: {', '.join(GATED_ACTIONS)}")
        return value

    @field_validator("docker_hosts")
    @classmethod
    def _distinct_engines(cls, hosts: list[DockerHostConfig]) -> list[DockerHostConfig]:
        urls = [host.url for host in hosts]
        if len(set(urls)) != len(urls):
            raise ValueError("each engine may be listed once")
        return hosts

    @field_validator("sandbox_api_address")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not HOST.fullmatch(host) or not port.isdigit() or int(port) > 65535:
            raise ValueError("give host:port, e.g. 127.0.0.1:8080, [::1]:8080 or 0.0.0.0:0")
        return value

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("sqlite+aiosqlite://", "postgresql+")):
            raise ValueError(
                "use sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER:PASS@HOST/DB"
            )
        return value

    @field_validator("n8n_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("use the instance's base URL, e.g. http://127.0.0.1:5678")
        return value.rstrip("/") if value is not None else None

    @field_validator("api_keys_file", "tls_cert_file", "tls_key_file", "n8n_api_key_file")
    @classmethod
    def _file_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @model_validator(mode="after")
    def _n8n_connection(self) -> Settings:
        if self.instance == "n8n" and (
            self.n8n_url is None or (self.n8n_api_key is None and self.n8n_api_key_file is None)
        ):
            raise ValueError(
                "instance=n8n needs n8n_url and an API key (n8n_api_key or n8n_api_key_file): "
                "create one in n8n under Settings > n8n API"
            )
        return self

    def service_n8n_key(self) -> str | None:
        """The service's own n8n API key, from the setting or the key file."""
        if self.n8n_api_key is not None:
            return self.n8n_api_key.get_secret_value().strip()
        if self.n8n_api_key_file is not None:
            return self.n8n_api_key_file.read_text().strip()
        return None

    @model_validator(mode="after")
    def _thinking_budget(self) -> Settings:
        budget = self.model_thinking_budget_tokens
        if budget and not 1024 <= budget < self.model_max_tokens:
            raise ValueError(
                f"model_thinking_budget_tokens {budget} must be at least 1024 and below "
                f"model_max_tokens ({self.model_max_tokens}), or 0 for no thinking"
            )
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set both tls_cert_file and tls_key_file, or neither")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = config_file_path()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir / DATABASE_FILE_NAME}"

    def accepted_api_keys(self) -> list[str]:
        """Keys from the setting and the key file (blank lines and `#` comments skipped)."""
        keys = [key.get_secret_value() for key in self.api_keys]
        if self.api_keys_file is not None:
            for line in self.api_keys_file.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.append(line)
        return keys


def config_file_path() -> Path | None:
    explicit = _config_file.get()
    if explicit is not None:
        return explicit
    from_env = os.environ.get(CONFIG_FILE_ENV)
    return Path(from_env) if from_env else None


class SettingsError(Exception):
    """A setting is invalid; the message names it and says what is wrong."""


def load_settings(*, config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings, with `overrides` (CLI flags) winning over everything else."""
    token = _config_file.set(config_file)
    try:
        path = config_file_path()
        if path is not None and not path.is_file():
            raise SettingsError(f"config file {path}: no such file ({CONFIG_FILE_ENV} or --config)")
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise SettingsError(f"config file {config_file_path()}: {exc}") from None
    finally:
        _config_file.reset(token)


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            known = ", ".join(sorted(Settings.model_fields))
            lines.append(f"unknown setting {field}: check the spelling (known: {known})")
            continue
        if not field:  # a rule across settings: its message names them
            lines.append(f"invalid settings: {error['msg'].removeprefix('Value error, ')}")
            continue
        env_name = ENV_PREFIX + field.split(".")[0].upper()
        lines.append(f"invalid setting {field} ({env_name}): {error['msg']}")
    return "\n".join(lines)
