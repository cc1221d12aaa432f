"""What the orchestrator loads on demand: skills (`load_skill`) and tools beyond the core
(`search_tools`, then `load_tool`). Only the core is offered from a thread's first request;
a loaded tool stays offered for the rest of the thread. What is loaded is read from the
thread's own history (its successful `load_tool` results), so it survives a restart with
the conversation and needs no state of its own."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from server.errors import NotFoundError
from server.runtime.conversation import Conversation, Message
from server.tools.skills import MAIN_FILE, SkillLibrary
from server.tools.spec import ToolContext, ToolModel, ToolSpec

__all__ = [
    "CORE_TOOLS",
    "GROUP",
    "LOAD_TOOL",
    "TOOLS",
    "TOOL_LOADERS",
    "ToolLoadingTools",
    "loaded_tools",
]

GROUP = "loading"
LOAD_SKILL = "load_skill"
SEARCH_TOOLS = "search_tools"
LOAD_TOOL = "load_tool"
TOOL_LOADERS = frozenset({SEARCH_TOOLS, LOAD_TOOL})
TOP_K = 5

# Offered to the orchestrator from the first request (when registered); every other tool it
# finds with search_tools and loads with load_tool. The everyday loop (look, build, verify,
# report, ask) stays at hand; whole families (browser, data-table edits, folders, tags,
# versions, projects, credential changes, plans) wait until a request needs them.
CORE_TOOLS = frozenset(
    {
        LOAD_SKILL,
        SEARCH_TOOLS,
        LOAD_TOOL,
        "ask-user",
        "update-tasks",
        # A planned checkpoint's run settles it with this (the reference offers it there).
        "complete-checkpoint",
        "cancel-background-task",
        "correct-background-task",
        "workspace_read_file",
        "workspace_grep",
        "workspace_write_file",
        "workspace_str_replace_file",
        "workspace_execute_command",
        "workspace_read_tool_result",
        "search-nodes",
        "get-node-description",
        "build-workflow",
        "verify-built-workflow",
        "report-verification-verdict",
        "list-workflows",
        "get-workflow",
        "list-credentials",
        "list-executions",
        "get-execution",
        "list-data-tables",
        "web-search",
        "fetch-url",
        # Offered only in a run whose message carries a parseable attachment.
        "parse-file",
        # What the deployment's MCP servers offer (their tools are loaded like the rest).
        "mcp-servers",
    }
)


@dataclass(kw_only=True)
class ToolLoadingTools:
    """The skills, the thread's history (what it loaded) and the tools it may load: the
    registry's, bound once the registry exists (`offer`)."""

    skills: SkillLibrary
    conversation: Conversation
    _deferred: Callable[[], Iterable[tuple[str, str]]] = field(default=lambda: ())

    def offer(self, deferred: Callable[[], Iterable[tuple[str, str]]]) -> None:
        """`deferred`: (name, description) of each registered tool outside the core."""
        self._deferred = deferred

    def deferred(self) -> dict[str, str]:
        return dict(self._deferred())

    async def loaded(self, thread_id: str) -> set[str]:
        return loaded_tools(await self.conversation.load(thread_id))


def loaded_tools(messages: list[Message]) -> set[str]:
    """The tools a conversation loaded: each `load_tool` call whose result says loaded."""
    calls: dict[str, str] = {}
    loaded: set[str] = set()
    for message in messages:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") == LOAD_TOOL:
                calls[block["id"]] = str(block.get("input", {}).get("toolName", ""))
            elif (
                block.get("type") == "tool_result"
                and block.get("tool_use_id") in calls
                and not block.get("is_error")
                and _says_loaded(block.get("content"))
            ):
                loaded.add(calls[block["tool_use_id"]])
    return loaded


def _says_loaded(content: Any) -> bool:
    try:
        result = json.loads(content) if isinstance(content, str) else {}
    except json.JSONDecodeError:
        return False
    return isinstance(result, dict) and result.get("status") in ("loaded", "already_loaded")


# -- load_skill ------------------------------------------------------------------------------


class LoadSkillInput(ToolModel):
    skill_id: str | None = Field(
        None, alias="skillId", min_length=1, description="Skill id from the skill catalog"
    )
    name: str | None = Field(None, min_length=1, description="Skill name from the skill catalog")
    file_path: str | None = Field(
        None,
        alias="filePath",
        description="Optional linked file path relative to the skill directory (one listed in "
        "linkedFiles); omit it to load the main skill instructions",
    )

    @model_validator(mode="after")
    def _names_a_skill(self) -> LoadSkillInput:
        if self.skill_id is None and self.name is None:
            raise ValueError("either skillId or name is required")
        return self


class LinkedFileEntry(ToolModel):
    path: str
    bytes: int
    sha256: str


class LinkedFiles(ToolModel):
    references: list[LinkedFileEntry] = Field(default_factory=list)
    templates: list[LinkedFileEntry] = Field(default_factory=list)
    scripts: list[LinkedFileEntry] = Field(default_factory=list)
    assets: list[LinkedFileEntry] = Field(default_factory=list)
    examples: list[LinkedFileEntry] = Field(default_factory=list)


class LoadSkillOutput(ToolModel):
    success: bool
    skill_id: str = Field(alias="skillId")
    name: str
    description: str
    hash: str
    content: str
    linked_files: LinkedFiles | None = Field(None, alias="linkedFiles")
    file_path: str | None = Field(None, alias="filePath")
    bytes: int | None = None
    sha256: str | None = None


async def load_skill(ctx: ToolContext[ToolLoadingTools], args: LoadSkillInput) -> LoadSkillOutput:
    skills = ctx.services.skills
    wanted = args.skill_id or args.name or ""
    skill = skills.get(wanted) or (skills.get(args.name) if args.name else None)
    if skill is None:
        names = ", ".join(skills.names())
        raise NotFoundError(f"there is no skill {wanted!r}; the skills are: {names}")
    base = {
        "success": True,
        "skill_id": skill.name,
        "name": skill.name,
        "description": skill.description,
        "hash": skill.hash,
    }
    if args.file_path is not None and args.file_path.strip() not in ("", MAIN_FILE):
        linked = skill.file(args.file_path)
        if linked is None:
            listed = ", ".join(file.path for file in skill.linked) or "none"
            raise NotFoundError(
                f"{args.file_path!r} is not a file of skill {skill.name!r} (its files: {listed}); "
                "to load the main instructions, omit filePath"
            )
        return LoadSkillOutput(
            **base,
            content=linked.content,
            file_path=linked.path,
            bytes=linked.bytes,
            sha256=linked.sha256,
        )
    groups: dict[str, list[LinkedFileEntry]] = {}
    for file in skill.linked:
        entry = LinkedFileEntry(path=file.path, bytes=file.bytes, sha256=file.sha256)
        groups.setdefault(file.group, []).append(entry)
    return LoadSkillOutput(
        **base,
        content=skill.content,
        linked_files=LinkedFiles.model_validate(groups) if groups else None,
    )


# -- search_tools and load_tool ---------------------------------------------------------------


class ToolSummary(ToolModel):
    name: str
    description: str
    loaded: bool


class SearchToolsInput(ToolModel):
    query: str = Field(
        min_length=1, description="Keywords describing the capability or integration you need"
    )


class SearchToolsOutput(ToolModel):
    results: list[ToolSummary]


async def search_tools(
    ctx: ToolContext[ToolLoadingTools], args: SearchToolsInput
) -> SearchToolsOutput:
    deferred = ctx.services.deferred()
    loaded = await ctx.services.loaded(ctx.thread_id)
    scores = {name: _score(name, text, args.query) for name, text in deferred.items()}
    ranked = sorted(deferred.items(), key=lambda item: (-scores[item[0]], item[0]))
    matching = [item for item in ranked if scores[item[0]] > 0] or ranked
    return SearchToolsOutput(
        results=[
            ToolSummary(name=name, description=description, loaded=name in loaded)
            for name, description in matching[:TOP_K]
        ]
    )


_TOKEN = re.compile(r"[a-z0-9@./]+")


def _score(name: str, description: str, query: str) -> int:
    """Name matches count most, then words of the description (`create data table` finds
    create-data-table; `slack` finds what mentions Slack)."""
    name, description, query = name.lower(), description.lower(), query.lower().strip()
    name_words, description_words = set(_TOKEN.findall(name)), set(_TOKEN.findall(description))
    score = 100 * (name == query) + 40 * (query in name) + 15 * (query in description)
    for word in _TOKEN.findall(query):
        score += 20 * (word in name_words) + 10 * (word in name)
        score += 8 * (word in description_words) + 4 * (word in description)
    return score


class LoadToolInput(ToolModel):
    tool_name: str = Field(
        min_length=1, alias="toolName", description="Exact tool name returned by search_tools"
    )


class LoadToolOutput(ToolModel):
    status: Literal["loaded", "already_loaded", "not_found"]
    tool_name: str = Field(alias="toolName")
    tool: ToolSummary | None = None
    candidates: list[ToolSummary] | None = None
    message: str


async def load_tool(ctx: ToolContext[ToolLoadingTools], args: LoadToolInput) -> LoadToolOutput:
    name = args.tool_name
    deferred = ctx.services.deferred()
    loaded = await ctx.services.loaded(ctx.thread_id)
    if name in CORE_TOOLS or name in loaded:
        description = deferred.get(name, "")
        return LoadToolOutput(
            status="already_loaded",
            tool_name=name,
            tool=ToolSummary(name=name, description=description, loaded=True),
            message=f"Tool {name!r} is already available. Call it directly.",
        )
    if name not in deferred:
        found = await search_tools(ctx, SearchToolsInput(query=name))
        return LoadToolOutput(
            status="not_found",
            tool_name=name,
            candidates=found.results,
            message=f"No tool {name!r} can be loaded; did you mean one of the candidates?",
        )
    return LoadToolOutput(
        status="loaded",
        tool_name=name,
        tool=ToolSummary(name=name, description=deferred[name], loaded=True),
        message=f"Tool {name!r} is loaded: call it from your next turn on.",
    )


TOOLS: list[ToolSpec[Any]] = [
    ToolSpec(
        name=LOAD_SKILL,
        description="Load a skill by skillId or name from the skill catalog (the system prompt "
        "lists them) before acting on what it covers; its guidance comes back as the result. "
        "Omit filePath to load the main instructions; pass filePath only for a path listed in "
        "the result's linkedFiles.",
        group=GROUP,
        services=ToolLoadingTools,
        input_model=LoadSkillInput,
        output_model=LoadSkillOutput,
        handler=load_skill,
    ),
    ToolSpec(
        name=SEARCH_TOOLS,
        description="Search for additional tools that can be loaded when the current toolset "
        "is missing a capability.",
        group=GROUP,
        services=ToolLoadingTools,
        input_model=SearchToolsInput,
        output_model=SearchToolsOutput,
        handler=search_tools,
    ),
    ToolSpec(
        name=LOAD_TOOL,
        description="Load a deferred tool by exact name. The tool becomes available on the "
        "next model turn and remains available for this conversation.",
        group=GROUP,
        services=ToolLoadingTools,
        input_model=LoadToolInput,
        output_model=LoadToolOutput,
        handler=load_tool,
    ),
]
