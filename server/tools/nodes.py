"""Node discovery tools: the node and credential type catalog."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sandbox.errors import SandboxError
from server.catalog import Catalog, CatalogService, NodeType
from server.errors import NotFoundError, UnavailableError
from server.instance import Credentials, CredentialSecrets
from server.pipeline.build import WorkflowBuilder
from server.pipeline.credential_types import CredentialTypeIndex
from server.tools.scope import revealed, visible_credential
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = ["GROUP", "TOOLS", "NodeTools"]

GROUP = "nodes"

# Curated starting points, by what a workflow needs to do.
SUGGESTED: dict[str, tuple[str, list[str]]] = {
    "triggers": (
        "Start a workflow: by hand, on a schedule, from a web request, a form or a chat",
        [
            "n8n-nodes-base.manualTrigger",
            "n8n-nodes-base.scheduleTrigger",
            "n8n-nodes-base.webhook",
            "n8n-nodes-base.formTrigger",
            "@n8n/n8n-nodes-langchain.chatTrigger",
        ],
    ),
    "data_transformation": (
        "Reshape items: set fields, filter, aggregate, split, sort, deduplicate, custom code",
        [
            "n8n-nodes-base.set",
            "n8n-nodes-base.filter",
            "n8n-nodes-base.aggregate",
            "n8n-nodes-base.splitOut",
            "n8n-nodes-base.sort",
            "n8n-nodes-base.removeDuplicates",
            "n8n-nodes-base.code",
        ],
    ),
    "flow_control": (
        "Branch, merge, loop, wait and call sub-workflows",
        [
            "n8n-nodes-base.if",
            "n8n-nodes-base.switch",
            "n8n-nodes-base.merge",
            "n8n-nodes-base.splitInBatches",
            "n8n-nodes-base.wait",
            "n8n-nodes-base.executeWorkflow",
        ],
    ),
    "ai": (
        "Agents and chains with a chat model, memory, tools and structured output",
        [
            "@n8n/n8n-nodes-langchain.agent",
            "@n8n/n8n-nodes-langchain.chainLlm",
            "@n8n/n8n-nodes-langchain.lmChatOpenAi",
            "@n8n/n8n-nodes-langchain.lmChatAnthropic",
            "@n8n/n8n-nodes-langchain.memoryBufferWindow",
            "@n8n/n8n-nodes-langchain.outputParserStructured",
        ],
    ),
    "http_and_apis": (
        "Call any API, answer webhooks",
        [
            "n8n-nodes-base.httpRequest",
            "n8n-nodes-base.respondToWebhook",
            "n8n-nodes-base.graphql",
        ],
    ),
    "communication": (
        "Send messages and email",
        [
            "n8n-nodes-base.slack",
            "n8n-nodes-base.gmail",
            "n8n-nodes-base.telegram",
            "n8n-nodes-base.emailSend",
            "n8n-nodes-base.microsoftTeams",
        ],
    ),
    "storage": (
        "Keep data in tables, spreadsheets and databases",
        [
            "n8n-nodes-base.dataTable",
            "n8n-nodes-base.googleSheets",
            "n8n-nodes-base.postgres",
            "n8n-nodes-base.airtable",
            "n8n-nodes-base.notion",
        ],
    ),
}


async def _catalog(ctx: ToolContext[NodeTools]) -> Catalog:
    return await ctx.services.catalog.get()


def _node(catalog: Catalog, name: str) -> NodeType:
    node = catalog.node(name)
    if node is None:
        similar = catalog.similar_nodes(name)
        hint = f"; did you mean {', '.join(similar)}?" if similar else "; find it with search-nodes"
        raise NotFoundError(f"there is no node type {name!r}{hint}")
    return node


def _version(node: NodeType, version: float | None) -> tuple[float, dict[str, Any]]:
    chosen = node.default_version if version is None else version
    entry = node.entry(chosen)
    if entry is None:
        available = ", ".join(node.format_version(v) for v in node.versions)
        raise NotFoundError(f"{node.name} has no version {chosen:g}; available: {available}")
    return chosen, entry


@dataclass(frozen=True, kw_only=True)
class NodeTools:
    """What the node tools may touch: the catalog, the toolchain (node definitions and
    resource lookups) and the credentials a lookup authenticates with."""

    catalog: CatalogService
    builder: WorkflowBuilder
    credentials: Credentials
    secrets: CredentialSecrets | None
    credential_types: CredentialTypeIndex


class NodeSummary(ToolModel):
    name: str
    display_name: str = Field(alias="displayName")
    description: str
    group: list[str]
    version: float


def _summary(node: NodeType) -> NodeSummary:
    return NodeSummary(
        name=node.name,
        display_name=node.display_name,
        description=node.description,
        group=node.group,
        version=node.default_version,
    )


class ListNodesInput(ToolModel):
    query: str | None = Field(None, description="Filter by name or description")
    limit: int = Field(100, ge=1, le=1000)


class ListNodesOutput(ToolModel):
    nodes: list[NodeSummary]
    total: int


async def list_nodes(ctx: ToolContext[NodeTools], args: ListNodesInput) -> ListNodesOutput:
    catalog = await _catalog(ctx)
    query = (args.query or "").lower()
    found = [
        node
        for node in sorted(catalog.nodes.values(), key=lambda n: n.display_name.lower())
        if not node.hidden
        and (not query or query in f"{node.name} {node.display_name} {node.description}".lower())
    ]
    return ListNodesOutput(nodes=[_summary(n) for n in found[: args.limit]], total=len(found))


class SubnodeRequirement(ToolModel):
    connection_type: str = Field(alias="connectionType")
    required: bool
    display_options: dict[str, Any] | None = Field(None, alias="displayOptions")


class ResourceOperations(ToolModel):
    resource: str
    operations: list[str]


class Discriminators(ToolModel):
    resources: list[ResourceOperations] = Field(default_factory=list)
    modes: list[str] = Field(default_factory=list)
    operations: list[str] = Field(default_factory=list)


class SearchableNode(ToolModel):
    name: str
    display_name: str = Field(alias="displayName")
    description: str
    version: float
    versions: list[float]
    is_trigger: bool = Field(alias="isTrigger")
    aliases: list[str]
    builder_hint: str | None = Field(None, alias="builderHint")
    related_nodes: list[dict[str, Any]] = Field(default_factory=list, alias="relatedNodes")
    subnode_requirements: list[SubnodeRequirement] = Field(
        default_factory=list, alias="subnodeRequirements"
    )
    discriminators: Discriminators | None = None


def _options(prop: dict[str, Any]) -> list[str]:
    return [str(o["value"]) for o in prop.get("options") or [] if "value" in o]


def discriminators(entry: dict[str, Any]) -> Discriminators | None:
    """The values that pick a node's parameter set: resource → operations, or mode."""
    properties = [p for p in entry.get("properties") or [] if isinstance(p, dict)]
    resources: dict[str, list[str]] = {}
    for prop in properties:
        if prop.get("name") == "resource" and prop.get("type") == "options":
            for value in _options(prop):
                resources.setdefault(value, [])
    loose_operations: list[str] = []
    for prop in properties:
        if prop.get("name") != "operation" or prop.get("type") != "options":
            continue
        shown = ((prop.get("displayOptions") or {}).get("show") or {}).get("resource")
        for resource in shown or []:
            if str(resource) in resources:
                resources[str(resource)] += [
                    v for v in _options(prop) if v not in resources[str(resource)]
                ]
        if not shown:
            loose_operations += [v for v in _options(prop) if v not in loose_operations]
    modes: list[str] = []
    for prop in properties:
        if prop.get("name") == "mode" and prop.get("type") == "options":
            modes += [v for v in _options(prop) if v not in modes]
    if not (resources or modes or loose_operations):
        return None
    return Discriminators(
        resources=[ResourceOperations(resource=r, operations=ops) for r, ops in resources.items()],
        modes=modes,
        operations=loose_operations,
    )


def _searchable(node: NodeType) -> SearchableNode:
    hint = node.builder_hint
    inputs = hint.get("inputs") or {}
    _, entry = _version(node, None)
    return SearchableNode(
        name=node.name,
        display_name=node.display_name,
        description=node.description,
        version=node.default_version,
        versions=node.versions,
        is_trigger=node.is_trigger,
        aliases=sorted(set(node.aliases)),
        builder_hint=hint.get("searchHint"),
        related_nodes=list(hint.get("relatedNodes") or []),
        subnode_requirements=[
            SubnodeRequirement(
                connection_type=kind,
                required=bool(spec.get("required")),
                display_options=spec.get("displayOptions"),
            )
            for kind, spec in inputs.items()
            if isinstance(spec, dict)
        ],
        discriminators=discriminators(entry),
    )


class SearchNodesInput(ToolModel):
    query: str = Field(
        min_length=1, description="Short query: a service name (Slack), not a description"
    )
    limit: int = Field(10, ge=1, le=50)


class SearchNodesOutput(ToolModel):
    nodes: list[SearchableNode]


async def search_nodes(ctx: ToolContext[NodeTools], args: SearchNodesInput) -> SearchNodesOutput:
    catalog = await _catalog(ctx)
    return SearchNodesOutput(
        nodes=[_searchable(n) for n in catalog.search_nodes(args.query, limit=args.limit)]
    )


class NodeTypeInput(ToolModel):
    node_type: str = Field(alias="nodeType", description="e.g. n8n-nodes-base.httpRequest")
    version: float | None = Field(None, description="Node version (default: the latest)")


class NodeDescriptionOutput(ToolModel):
    name: str
    display_name: str = Field(alias="displayName")
    description: str
    version: float
    versions: list[float]
    properties: list[dict[str, Any]]
    credentials: list[dict[str, Any]]
    inputs: Any
    outputs: Any


async def get_node_description(
    ctx: ToolContext[NodeTools], args: NodeTypeInput
) -> NodeDescriptionOutput:
    node = _node(await _catalog(ctx), args.node_type)
    version, entry = _version(node, args.version)
    return NodeDescriptionOutput(
        name=node.name,
        display_name=node.display_name,
        description=node.description,
        version=version,
        versions=node.versions,
        properties=list(entry.get("properties") or []),
        credentials=list(entry.get("credentials") or []),
        inputs=entry.get("inputs"),
        outputs=entry.get("outputs"),
    )


class NodeTypeDefinitionInput(NodeTypeInput):
    resource: str | None = Field(None, description="For nodes split by resource/operation")
    operation: str | None = None
    mode: str | None = Field(None, description="For nodes split by mode")


class NodeTypeDefinitionOutput(ToolModel):
    node_type: str = Field(alias="nodeType")
    version: float
    file: str
    content: str
    discriminators: list[dict[str, str]] = Field(
        description="The resource/operation pairs or modes a split node has files for"
    )
    import_path: str = Field(
        alias="importPath", description="Module to import the typed parameters from"
    )


def _import_path(node_type: str, file: str) -> str:
    """The module a typed import names for a definition `file` (relative to its package's
    folder, e.g. httpRequest/v43.ts): @n8n/node-types/... or, for n8n's AI nodes,
    @n8n/ai-node-types/...; the workspace's tsconfig maps both."""
    package = node_type.rpartition(".")[0]
    alias = "ai-node-types" if package.startswith("@n8n/") else "node-types"
    module = file.removesuffix(".ts").removesuffix("/index")
    return f"@n8n/{alias}/{package.split('/')[-1]}/{module}"


async def get_node_type_definition(
    ctx: ToolContext[NodeTools], args: NodeTypeDefinitionInput
) -> NodeTypeDefinitionOutput:
    node = _node(await _catalog(ctx), args.node_type)
    version, _ = _version(node, args.version)
    toolchain = await ctx.services.builder.toolchain(ctx.thread_id)
    found = await toolchain.node_definition(
        node.name,
        version,
        resource=args.resource,
        operation=args.operation,
        mode=args.mode,
    )
    return NodeTypeDefinitionOutput(
        node_type=node.name,
        version=version,
        file=found.file,
        content=found.content,
        discriminators=found.discriminators,
        import_path=_import_path(node.name, found.file),
    )


class NodeRequest(ToolModel):
    node_id: str = Field(alias="nodeId", min_length=1, max_length=200)
    version: str | None = Field(None, max_length=20, description='e.g. "4.3" or "v43"')
    resource: str | None = Field(None, max_length=100, description="For split nodes")
    operation: str | None = Field(None, max_length=100)
    mode: str | None = Field(None, max_length=100)


class MaterializeInput(ToolModel):
    node_ids: list[str | NodeRequest] = Field(
        alias="nodeIds",
        min_length=1,
        max_length=5,
        description='Node types, e.g. "n8n-nodes-base.httpRequest" or {nodeId, version}',
    )


class MaterializedDefinition(ToolModel):
    node_id: str = Field(alias="nodeId")
    path: str = Field(description="Where it was written in the workspace")
    content: str
    import_path: str = Field("", alias="importPath", description="Module to import types from")
    source: str = Field("", description="image (shipped) or generated (from the description)")
    error: str | None = None


class MaterializeOutput(ToolModel):
    definitions: list[MaterializedDefinition]


def _requested_version(node: NodeType, given: str | None) -> float:
    """`given` as "4.3", "4" or "v43" (the definition files' tag), among the node's versions."""
    if given is None:
        return node.default_version
    text = given.strip().lower()
    for version in node.versions:
        if text in (f"{version:g}", f"v{version:g}".replace(".", "")):
            return version
    available = ", ".join(node.format_version(v) for v in node.versions)
    raise NotFoundError(f"{node.name} has no version {given}; available: {available}")


async def _materialize_one(
    ctx: ToolContext[NodeTools], catalog: Catalog, request: str | NodeRequest
) -> MaterializedDefinition:
    wanted = request if isinstance(request, NodeRequest) else NodeRequest(node_id=request)
    try:
        node = _node(catalog, wanted.node_id)
        version = _requested_version(node, wanted.version)
        toolchain = await ctx.services.builder.toolchain(ctx.thread_id)
        written = await toolchain.materialize_node_type(
            node.name,
            version,
            description=node.entry(version),
            resource=wanted.resource,
            operation=wanted.operation,
            mode=wanted.mode,
        )
    except (NotFoundError, SandboxError) as exc:
        return MaterializedDefinition(node_id=wanted.node_id, path="", content="", error=str(exc))
    path = written.path  # node-types/<package folder>/<file>
    return MaterializedDefinition(
        node_id=node.name,
        path=path,
        content=written.content,
        import_path=_import_path(node.name, path.split("/", 2)[2]),
        source=written.source,
    )


async def materialize_node_type(
    ctx: ToolContext[NodeTools], args: MaterializeInput
) -> MaterializeOutput:
    catalog = await _catalog(ctx)
    return MaterializeOutput(
        definitions=[await _materialize_one(ctx, catalog, r) for r in args.node_ids]
    )


class SuggestedCategory(ToolModel):
    category: str
    description: str
    nodes: list[NodeSummary]


class SuggestedNodesInput(ToolModel):
    pass


class SuggestedNodesOutput(ToolModel):
    categories: list[SuggestedCategory]


async def get_suggested_nodes(
    ctx: ToolContext[NodeTools], _args: SuggestedNodesInput
) -> SuggestedNodesOutput:
    catalog = await _catalog(ctx)
    return SuggestedNodesOutput(
        categories=[
            SuggestedCategory(
                category=category,
                description=description,
                nodes=[_summary(n) for name in names if (n := catalog.node(name)) is not None],
            )
            for category, (description, names) in SUGGESTED.items()
        ]
    )


class SearchCredentialTypesInput(ToolModel):
    query: str = Field(min_length=1, description="e.g. slack, oauth")


class CredentialTypeSummary(ToolModel):
    name: str
    display_name: str = Field(alias="displayName")
    description: str


class SearchCredentialTypesOutput(ToolModel):
    credential_types: list[CredentialTypeSummary] = Field(alias="credentialTypes")


async def search_credential_types(
    ctx: ToolContext[NodeTools], args: SearchCredentialTypesInput
) -> SearchCredentialTypesOutput:
    found = await ctx.services.credential_types.search(args.query)
    return SearchCredentialTypesOutput(
        credential_types=[
            CredentialTypeSummary(
                name=c.name, display_name=c.display_name, description=c.description
            )
            for c in found
        ]
    )


class ExploreInput(ToolModel):
    node_type: str = Field(alias="nodeType", min_length=1, description="e.g. n8n-nodes-base.github")
    resource: str = Field(
        min_length=1, description="The listSearch / loadOptions method, e.g. getRepositories"
    )
    credential_id: str | None = Field(
        None, alias="credentialId", description="Credential for services that need one"
    )
    node_parameters: dict[str, Any] = Field(
        default_factory=dict,
        alias="nodeParameters",
        description="Parameters the method reads (e.g. owner, resource, authentication)",
    )
    filter: str | None = Field(None, description="Search text (listSearch methods)")
    pagination_token: str | None = Field(None, alias="paginationToken")


class ExploreOutput(ToolModel):
    node_type: str = Field(alias="nodeType")
    resource: str
    results: list[dict[str, Any]]
    pagination_token: str | None = Field(None, alias="paginationToken")


async def explore_node_resources(ctx: ToolContext[NodeTools], args: ExploreInput) -> ExploreOutput:
    """Run the node's own listSearch / loadOptions method in the sandbox, with the chosen
    credential; its requests leave only through the egress proxy."""
    node = _node(await _catalog(ctx), args.node_type)
    credentials: dict[str, dict[str, Any]] = {}
    secrets: list[str] = []
    if args.credential_id:
        info = await visible_credential(ctx.services.credentials, ctx.caller, args.credential_id)
        credentials[info.type] = await revealed(ctx.services.secrets, info)
        secrets = [str(v) for v in credentials[info.type].values() if len(str(v)) >= 4]
    toolchain = await ctx.services.builder.toolchain(ctx.thread_id)
    found = await toolchain.node_resources(
        {
            "name": "Explore",
            "type": node.name,
            "typeVersion": max(node.versions),
            "parameters": args.node_parameters,
        },
        lookup="auto",
        method=args.resource,
        credentials=credentials,
        filter_text=args.filter,
        pagination_token=args.pagination_token,
    )
    if not found.ok:
        raise UnavailableError(
            f"exploring {args.resource} failed: {_scrub(str(found.message), secrets)}"
        )
    value = found.value
    if found.lookup == "listSearch" and isinstance(value, dict):
        return ExploreOutput(
            node_type=node.name,
            resource=args.resource,
            results=list(value.get("results") or []),
            pagination_token=value.get("paginationToken"),
        )
    return ExploreOutput(node_type=node.name, resource=args.resource, results=list(value or []))


def _scrub(text: str, secrets: list[str]) -> str:
    """An error message with any credential value in it masked."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name="explore-node-resources",
        description="List what a node's dropdowns would offer (spreadsheets, channels, "
        "repositories ...) by running the node type's own listSearch / loadOptions method with "
        "a credential. Requests go only to hosts the user approved.",
        group="nodes",
        services=NodeTools,
        input_model=ExploreInput,
        output_model=ExploreOutput,
        handler=explore_node_resources,
    ),
    ToolSpec(
        name="list-nodes",
        description="List available node types, optionally filtered by name or description.",
        group=GROUP,
        services=NodeTools,
        input_model=ListNodesInput,
        output_model=ListNodesOutput,
        handler=list_nodes,
    ),
    ToolSpec(
        name="search-nodes",
        description="Search node types by service name or alias, ranked by relevance, with "
        "builder hints, sub-node requirements and discriminator values (resource/operation).",
        group=GROUP,
        services=NodeTools,
        input_model=SearchNodesInput,
        output_model=SearchNodesOutput,
        handler=search_nodes,
    ),
    ToolSpec(
        name="get-node-description",
        description="A node type's full description: properties, credentials, inputs, outputs.",
        group=GROUP,
        services=NodeTools,
        input_model=NodeTypeInput,
        output_model=NodeDescriptionOutput,
        handler=get_node_description,
    ),
    ToolSpec(
        name="get-node-type-definition",
        description="The TypeScript parameter types of a node version (for split nodes pass "
        "resource and operation, or mode), and the module to import them from for typed "
        "parameters.",
        group=GROUP,
        services=NodeTools,
        input_model=NodeTypeDefinitionInput,
        output_model=NodeTypeDefinitionOutput,
        handler=get_node_type_definition,
    ),
    ToolSpec(
        name="materialize-node-type",
        description="Write nodes' TypeScript parameter types into the workspace (node-types/) "
        "and return them, so a typed import compiles and type-checks: the image's definitions, "
        "or generated from the node's description when the image has none. Use after "
        "search-nodes, before writing typed workflow code.",
        group=GROUP,
        services=NodeTools,
        input_model=MaterializeInput,
        output_model=MaterializeOutput,
        handler=materialize_node_type,
    ),
    ToolSpec(
        name="get-suggested-nodes",
        description="Curated node suggestions for common needs, by category.",
        group=GROUP,
        services=NodeTools,
        input_model=SuggestedNodesInput,
        output_model=SuggestedNodesOutput,
        handler=get_suggested_nodes,
    ),
    ToolSpec(
        name="search-credential-types",
        description="Search credential types by name (e.g. slack, oauth).",
        group="credentials",
        services=NodeTools,
        input_model=SearchCredentialTypesInput,
        output_model=SearchCredentialTypesOutput,
        handler=search_credential_types,
    ),
]
