"""Provider schemas: the sanitizer on pydantic's shapes, the three browser-style discriminated
unions, dropping what cannot be expressed, and correctable errors for a bad combination."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field, TypeAdapter

from server.agent import Agent, provider_from_settings
from server.settings import Settings
from server.tools.calls import ToolCalls
from server.tools.registry import ToolInputError, ToolRegistry
from server.tools.schema import Inexpressible, sanitize
from server.tools.spec import ToolContext, ToolModel, ToolSpec
from server.wiring import tool_registry
from tests.agent_fixtures import last_tool_results, model, model_settings
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool_problem, use

__all__ = ["model", "model_settings"]  # fixtures, shared


class ScrollBy(ToolModel):
    """Scroll by a distance."""

    mode: Literal["by"]
    dy: int = Field(description="Pixels down (negative: up)")
    tab_id: str | None = Field(None, alias="tabId")


class ScrollTo(ToolModel):
    """Scroll an element into view."""

    mode: Literal["to"]
    selector: str = Field(min_length=1, description="CSS selector of the element")
    tab_id: str | None = Field(None, alias="tabId")


class CookiesGet(ToolModel):
    """Read cookies."""

    action: Literal["get"]
    url: str | None = None


class CookiesSet(ToolModel):
    """Set a cookie."""

    action: Literal["set"]
    name: str
    value: str
    url: str


class CookiesClear(ToolModel):
    """Clear all cookies."""

    action: Literal["clear"]


class StorageGet(ToolModel):
    """Read a key."""

    action: Literal["get"]
    kind: Literal["local", "session"] = "local"
    key: str


class StorageSet(ToolModel):
    """Write a key."""

    action: Literal["set"]
    kind: Literal["local", "session"] = "local"
    key: str
    value: str


Scroll = Annotated[ScrollBy | ScrollTo, Field(discriminator="mode")]
Cookies = Annotated[CookiesGet | CookiesSet | CookiesClear, Field(discriminator="action")]
Storage = Annotated[StorageGet | StorageSet, Field(discriminator="action")]


class Echo(ToolModel):
    received: dict[str, Any]


@dataclass(frozen=True)
class EchoServices:
    """The echo tools touch nothing; `search_provider` feeds a registration condition."""

    search_provider: str | None = None


async def echo(_ctx: ToolContext[EchoServices], args: Any) -> Echo:
    return Echo(received=args.model_dump(by_alias=True, exclude_none=True))


def spec(name: str, input_model: Any) -> ToolSpec[EchoServices]:
    return ToolSpec(
        name=name,
        description=f"{name} in the connected browser",
        group="browser",
        services=EchoServices,
        input_model=input_model,
        output_model=Echo,
        handler=echo,
    )


BROWSER = [
    spec("browser_scroll", Scroll),
    spec("browser_cookies", Cookies),
    spec("browser_storage", Storage),
]


def test_the_three_unions_flatten_into_one_object_each() -> None:
    registry = ToolRegistry(BROWSER)
    scroll, cookies, storage = (registry.provider_schemas[s.name] for s in BROWSER)
    assert (
        tool_problem(
            [{"name": s.name, "input_schema": registry.provider_schemas[s.name]} for s in BROWSER]
        )
        is None
    )
    assert scroll["required"] == ["mode"]
    assert scroll["properties"]["mode"]["enum"] == ["by", "to"]
    assert "'to': Scroll an element into view." in scroll["properties"]["mode"]["description"]
    assert scroll["properties"]["selector"]["description"].startswith("Only for mode='to'.")
    assert "at least 1 characters" in scroll["properties"]["selector"]["description"]
    assert scroll["properties"]["tabId"]["type"] == ["string", "null"]
    assert "Only for" not in scroll["properties"]["tabId"].get("description", "")  # shared
    assert cookies["required"] == ["action"]
    assert cookies["properties"]["action"]["enum"] == ["get", "set", "clear"]
    assert cookies["properties"]["name"]["description"] == "Only for action='set'."
    assert storage["required"] == ["action", "key"]  # what every branch requires
    assert storage["properties"]["kind"]["enum"] == ["local", "session"]
    for schema in (scroll, cookies, storage):
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    ("union", "valid"),
    [
        (Scroll, [{"mode": "by", "dy": 5}, {"mode": "to", "selector": "#a", "tabId": None}]),
        (Cookies, [{"action": "clear"}, {"action": "set", "name": "n", "value": "v", "url": "u"}]),
        (
            Storage,
            [
                {"action": "get", "key": "k"},
                {"action": "set", "kind": "session", "key": "k", "value": "v"},
            ],
        ),
    ],
)
def test_the_flat_schema_accepts_everything_the_real_one_does(
    union: Any, valid: list[dict[str, Any]]
) -> None:
    flat = sanitize(TypeAdapter(union).json_schema(by_alias=True))
    for instance in valid:
        TypeAdapter(union).validate_python(instance)
        jsonschema.validate(instance, flat)


def test_a_wrong_combination_gets_a_correctable_error() -> None:
    registry = ToolRegistry(BROWSER)
    scroll = registry.get("browser_scroll")
    # Passes the flat schema (selector is a known property) but no mode takes it with "by".
    jsonschema.validate(
        {"mode": "by", "selector": "#a"}, registry.provider_schemas["browser_scroll"]
    )
    with pytest.raises(ToolInputError) as error:
        registry.parse(scroll, {"mode": "by", "selector": "#a"})
    message = str(error.value)
    assert "fix them and call again" in message and "by.dy" in message and "by.selector" in message


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Wrapper(BaseModel):
    tree: Node
    note: str | None = None
    level: Literal["a", "b"] | None = None


def test_refs_recursion_and_nullables_are_rewritten() -> None:
    schema = sanitize(TypeAdapter(Wrapper).json_schema())
    text_form = str(schema)
    assert "$ref" not in text_form and "$defs" not in text_form and "title" not in text_form
    tree = schema["properties"]["tree"]
    assert tree["properties"]["name"] == {"type": "string"}
    assert tree["properties"]["children"]["items"]["type"] == "object"  # the recursion stub
    assert schema["properties"]["note"]["type"] == ["string", "null"]
    assert schema["properties"]["level"]["enum"] == ["a", "b", None]


@pytest.mark.parametrize("root", [int, list[str], Literal["x"], ScrollBy | int])
def test_a_root_with_no_object_form_is_inexpressible(root: Any) -> None:
    with pytest.raises(Inexpressible):
        sanitize(TypeAdapter(root).json_schema())


def test_an_inexpressible_tool_is_dropped_not_sent(caplog: pytest.LogCaptureFixture) -> None:
    registry = ToolRegistry([*BROWSER, spec("broken_tool", int)], [EchoServices()])
    assert "broken_tool" not in registry.provider_schemas
    assert [s.name for s, _ in registry.listed()] == [s.name for s in BROWSER]


async def test_the_loop_sends_flat_schemas_and_returns_bad_combinations_to_the_model(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(
        Turn(
            blocks=[
                use("browser_scroll", {"mode": "by", "selector": "#a"}),
                use("browser_cookies", {"action": "clear"}),
            ]
        ),
        text("fixed it"),
    )
    settings = model_settings()
    async with serving(settings) as (app, _channel):
        parts = app.parts
        registry = ToolRegistry([*BROWSER, spec("broken_tool", int)], [EchoServices()])
        agent = Agent(
            parts.agent_services(),
            ToolCalls(registry, events=parts.events, hitl=parts.hitl),
            provider_from_settings(settings),
        )
        run_id = await agent.send_message("b1", "scroll")
        stream = app.parts.events.subscribe("b1", after=0, follow=True)
        async for event in stream:
            if event.type == "run-finish" and event.run_id == run_id:
                assert event.payload == {"status": "completed"}
                break
        await stream.aclose()
        await agent.close()
    assert model.rejected == []
    assert {t["name"] for t in model.requests[0]["tools"]} == {s.name for s in BROWSER}
    wrong, right = last_tool_results(model.requests[1])
    assert wrong["is_error"] and "call again" in wrong["content"]
    assert not right["is_error"] and '"action": "clear"' in right["content"]


def test_a_tool_whose_condition_fails_is_not_registered() -> None:
    gated = ToolSpec(
        name="web-search",
        description="Search the web",
        group="web",
        services=EchoServices,
        input_model=ScrollBy,
        output_model=Echo,
        handler=echo,
        condition=lambda services: services.search_provider is not None,
    )
    without = ToolRegistry([*BROWSER, gated], [EchoServices()])
    with_search = ToolRegistry([*BROWSER, gated], [EchoServices(search_provider="brave")])
    assert "web-search" not in [s.name for s, _ in without.listed()]
    assert "web-search" in [s.name for s, _ in with_search.listed()]
    # A group whose services are not bound registers none of its tools.
    assert ToolRegistry([*BROWSER, gated]).listed() == []


# Every tool of the reference tool list (seeds/tools-reference.md).
REFERENCE_TOOLS = [
    "add-data-table-column",
    "agents",
    "apply-workflow-credentials",
    "ask-user",
    "build-agent",
    "build-workflow",
    "cancel-background-task",
    "cleanup-test-executions",
    "correct-background-task",
    "create-data-table",
    "create-folder",
    "create-tasks",
    "debug-execution",
    "delete-credential",
    "delete-data-table",
    "delete-data-table-column",
    "delete-data-table-rows",
    "delete-folder",
    "delete-workflow",
    "explore-node-resources",
    "fetch-url",
    "get-credential",
    "get-data-table-schema",
    "get-execution",
    "get-node-description",
    "get-node-output",
    "get-node-type-definition",
    "get-suggested-nodes",
    "get-workflow",
    "get-workflow-as-code",
    "get-workflow-version",
    "insert-data-table-rows",
    "list-credentials",
    "list-data-tables",
    "list-executions",
    "list-folders",
    "list-nodes",
    "list-projects",
    "list-tags",
    "list-workflow-versions",
    "list-workflows",
    "move-workflow-to-folder",
    "publish-workflow",
    "query-data-table-rows",
    "rename-data-table-column",
    "report-verification-verdict",
    "restore-workflow-version",
    "run-workflow",
    "search-credential-types",
    "search-nodes",
    "setup-credentials",
    "setup-workflow",
    "stop-execution",
    "tag-workflow",
    "test-credential",
    "unarchive-workflow",
    "unpublish-workflow",
    "update-data-table-rows",
    "update-tasks",
    "update-workflow-version",
    "verify-built-workflow",
    "web-search",
]


async def test_the_overview_lists_every_reference_tool_and_why_conditional_ones_are_absent(
    make_settings: Callable[..., Settings],
) -> None:
    async with serving(make_settings()) as (app, _channel):
        listed = tool_registry(app.parts).overview()
    overview = {spec.name: (spec, registered) for spec, _schema, registered in listed}
    assert set(REFERENCE_TOOLS) <= set(overview)
    for name, (spec, registered) in overview.items():
        if not registered:
            assert spec.requires, f"{name} is absent without saying why"
    absent = sorted(name for name, (_spec, registered) in overview.items() if not registered)
    assert absent == [
        "agents",
        "build-agent",
        "get-workflow-version",
        "list-workflow-versions",
        "mcp-servers",
        "restore-workflow-version",
        "update-workflow-version",
        "web-search",
    ]
