"""The layering of docs/architecture.md, checked: sandbox/, browser_relay/ and fs_gateway/
stand alone."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import sandbox

ROOT = Path(__file__).resolve().parents[1]


def test_sandbox_browser_relay_and_gateway_import_nothing_from_server() -> None:
    probe = (
        "import sys, sandbox, sandbox.manager, sandbox.local_engine, sandbox.worker, "
        "sandbox.image.build, browser_relay, browser_relay.server, fs_gateway.connect; "
        "print(sorted(m for m in sys.modules if m == 'server' or m.startswith('server.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_sandbox_public_surface_is_pinned() -> None:
    assert sorted(sandbox.__all__) == sorted(
        [
            "BuiltImage",
            "CommandResult",
            "CommandRunner",
            "ContainerEngine",
            "ContainerGoneError",
            "ContainerInfo",
            "ContainerSpec",
            "DockerEngine",
            "EditMismatchError",
            "FileEntry",
            "FileTooLargeError",
            "ImageBuildError",
            "ImageBuilder",
            "LocalEngine",
            "OwnerLease",
            "PathEscapeError",
            "ResultViewError",
            "ResultWindow",
            "SandboxError",
            "SandboxInfo",
            "SandboxLimits",
            "SandboxManager",
            "SandboxNotFoundError",
            "SandboxOwnerInUseError",
            "SandboxProvider",
            "SandboxUnavailableError",
            "Sandboxes",
            "WorkspaceDisks",
            "WorkspaceFileNotFoundError",
            "WorkspaceFullError",
            "image_tags",
            "remove_owner",
            "render",
            "require_image",
        ]
    )
    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None


def loaded_by(imports: str, *tops: str) -> list[str]:
    """The modules under `tops` that importing `imports` loads, in a fresh interpreter."""
    probe = (
        f"import sys, {imports}; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {tops!r}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = ast.literal_eval(result.stdout.strip())
    return loaded


def test_evals_use_only_the_public_contract_and_the_client_helpers() -> None:
    """The command line mounts `instance-ai eval`, one way: evals reach the service through
    the contract and `instance_ai_client`, never through the command line or the server."""
    loaded = loaded_by("evals.cli, evals.runner, evals.report", "server", "instance_ai_cli")
    assert loaded == []


def test_the_n8n_bridge_is_a_client_of_the_contract() -> None:
    """The bridge reaches the service through the contract and `instance_ai_client` only, and
    the shared client package does not know it."""
    modules = ", ".join(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted((ROOT / "n8n_bridge").glob("*.py"))
    )
    assert loaded_by(modules, "server", "evals", "instance_ai_cli") == []


def test_the_shared_client_package_sits_below_its_users() -> None:
    modules = ", ".join(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted((ROOT / "instance_ai_client").glob("*.py"))
    )
    assert loaded_by(modules, "server", "evals", "instance_ai_cli", "n8n_bridge") == []


# The house, bottom to top (docs/architecture.md): a part of `server/` may import the parts
# below it, and of its own level only the arrows listed.
LEVELS = {
    "errors": 0,
    "core": 0,
    "settings": 0,
    "logs": 0,
    "store": 0,
    "instance": 1,
    "domain": 1,
    "n8n": 1,
    "records": 1,
    "runtime": 1,
    "catalog": 1,
    "pipeline": 2,
    "tools": 3,
    "mcp": 3,
    "agent": 4,
    "api": 5,
    "wiring": 6,
    "app": 7,
}
SAME_LEVEL = {
    ("core", "errors"),
    ("store", "errors"),
    ("domain", "instance"),  # the embedded store implements the instance seam
    ("n8n", "instance"),  # so does n8n's API
    ("records", "instance"),  # the service's own records speak the seam's values
    ("domain", "records"),  # both instances keep source bindings and sandbox runs there
    ("n8n", "records"),
    ("domain", "catalog"),
    ("runtime", "domain"),
    ("mcp", "tools"),  # tools from MCP are registry tools
}


def imports_of(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (function-level imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def server_modules() -> list[tuple[str, Path]]:
    return [
        (".".join(p.relative_to(ROOT).with_suffix("").parts), p)
        for p in sorted((ROOT / "server").rglob("*.py"))
    ]


def test_the_server_imports_run_one_way() -> None:
    assert {part for part in LEVELS} == {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "server").iterdir()
        if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())
    }, "a new part of server/ needs its level here and in docs/architecture.md"
    upward = []
    for module, path in server_modules():
        part = module.split(".")[1] if module.count(".") else ""
        for target in imports_of(path):
            top = target.split(".")[0]
            if top in ("instance_ai_cli", "instance_ai_client", "evals", "n8n_bridge"):
                upward.append(f"{module} -> {target}")
            if top == "instance_ai" and target.startswith("instance_ai.v1") and part != "api":
                upward.append(f"{module} -> {target} (protobuf types stay in server/api)")
            if top != "server" or not part or target.count(".") < 1:
                continue
            other = target.split(".")[1]
            if other == part:
                continue
            if LEVELS[other] > LEVELS[part] or (
                LEVELS[other] == LEVELS[part] and (part, other) not in SAME_LEVEL
            ):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_package_init_does_wiring() -> None:
    """A package's `__init__` may re-export its own modules, nothing of another part."""
    wiring = []
    for module, path in server_modules():
        if path.name != "__init__.py" or module == "server.__init__":
            continue
        own = module.removesuffix(".__init__")
        for target in imports_of(path):
            if (
                target.startswith("server.")
                and not target.startswith(own)
                and not target.startswith(("server.errors", "server.settings", "server.core"))
            ):
                wiring.append(f"{module} -> {target}")
    assert wiring == []


def test_tools_reach_only_their_own_services() -> None:
    """No tool handler gets the whole service: the context carries its group's services."""
    from server.wiring import ALL_TOOLS

    groups = {spec.services for spec in ALL_TOOLS}
    assert len(groups) >= 12
    for services in groups:
        fields = {f.name for f in dataclasses.fields(services)}
        assert not fields & {"parts", "runtime", "settings", "db"}, services


EMBEDDED_STORE = (
    "server.domain.workflows",
    "server.records",  # the sandbox runs and source bindings behind the seam
    "server.domain.credential_store",
    "server.domain.data_tables",
    "server.domain.folders",
    "server.domain.projects",
)


def test_the_two_instances_never_know_each_other() -> None:
    """n8n and the embedded store implement the same seam: what both need (the instance's
    rules, the service's own records) lives below both, so either stands without the other."""
    crossing = [
        f"{module} -> {target}"
        for module, path in server_modules()
        for target in imports_of(path)
        if (module.startswith("server.n8n.") and target.startswith("server.domain"))
        or (module.startswith("server.domain.") and target.startswith("server.n8n"))
    ]
    assert crossing == []


def test_the_instance_is_reached_through_its_seam() -> None:
    """Tools, pipeline, agent and servicers use `server.instance`, never the embedded SQL
    store behind it: an n8n instance can take its place."""
    reaching = [
        f"{module} -> {target}"
        for module, path in server_modules()
        if module.split(".")[1] in ("tools", "pipeline", "agent", "api")
        for target in imports_of(path)
        if target.startswith(EMBEDDED_STORE)
    ]
    assert reaching == []


def test_the_sandbox_manager_sees_no_engine_sdk() -> None:
    """The manager and everything it uses speak the engine seam; docker stays in the engines
    (the runsc engine asks it for the image alone: its export, oci.py) and the image build."""
    docker_users = sorted(
        p.name
        for p in (ROOT / "sandbox").rglob("*.py")
        if "docker" in imports_of(p) or any(t.startswith("docker.") for t in imports_of(p))
    )
    assert docker_users == [
        "build.py",
        "catalog.py",
        "docker_engine.py",
        "oci.py",
        "runsc_engine.py",
    ]


# The fronts: each translates one protocol to the same services (server/api/*_servicer.py for
# gRPC, the MCP server, the sandbox service API). `server.py` and `http.py` host them.
FRONTS = sorted(
    module
    for module, path in server_modules()
    if module.startswith("server.api.")
    and (path.stem.endswith("_servicer") or path.stem in ("mcp_server", "sandbox_api"))
)


def test_fronts_never_import_each_other() -> None:
    assert len(FRONTS) >= 9, FRONTS
    crossing = [
        f"{module} -> {target}"
        for module, path in server_modules()
        if module in FRONTS
        for target in imports_of(path)
        if target in FRONTS and target != module
    ]
    assert crossing == []


def test_tools_never_reach_the_agent() -> None:
    """Tools get a narrow orchestration handle (`Orchestration`), never the agent itself."""
    reaching = [
        f"{module} -> {target}"
        for module, path in server_modules()
        if module.startswith("server.tools.")
        for target in imports_of(path)
        if target.startswith(("server.agent", "server.api", "server.wiring"))
    ]
    assert reaching == []


def test_the_error_root_imports_nothing() -> None:
    """Every layer raises `server.errors`; each front keeps its own table of what they mean."""
    found = [t for t in imports_of(ROOT / "server" / "errors.py") if t != "__future__"]
    assert found == []


def test_every_call_goes_through_the_one_pipeline() -> None:
    """Only the tool-call pipeline runs a tool's handler; the fronts and the agent call it."""
    runners = sorted(
        module
        for module, path in server_modules()
        if ".handler(" in path.read_text() and module != "server.tools.calls"
    )
    assert runners == []
