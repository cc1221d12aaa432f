"""The browser tools: Playwright, through the relay, on the calling user's own browser or, with
`INSTANCE_AI_BROWSER=sandbox`, on a headless Chromium in the thread's sandbox.

With no browser of the user's connected, a tool suspends with one connect card that serves
both surfaces: `type` and `setupUrl` for the in-app chat, `components` (a section and a link
button) for channels. Answering it ("I've connected") runs the tool again; if there is still
no browser, the tool says so instead of asking again.

`browser_scroll`, `browser_cookies` and `browser_storage` take a union (on `mode` / `action`):
the registry flattens it for the model and validates each call against the real union.

Secrets on a page never reach the model: every result is redacted (see `browser_secrets.py`),
`browser_capture_secret` puts a value the page shows straight into a pending credential held
here, and `browser_create_credential` makes the credential from those values, after the person
approves it (`createCredential`) on a card that names the fields, never their values.
"""

from __future__ import annotations

import mimetypes
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from browser_relay.errors import BrowserGone, DriverError
from browser_relay.headless import HeadlessBrowsers
from browser_relay.server import RelayServer
from browser_relay.sessions import sandbox_key, user_key
from browser_relay.target import Target
from sandbox.protocol import BrowserHost
from server.domain.web import html_markdown, readable_markdown
from server.errors import (
    FailedPreconditionError,
    UnavailableError,
)
from server.instance import Credentials
from server.pipeline.credential_types import CredentialTypeIndex
from server.runtime.captured_secrets import CapturedSecrets
from server.runtime.hitl import Hitl
from server.tools.browser_secrets import guard_visual, scrub
from server.tools.spec import SandboxFor, Suspend, ToolContext, ToolModel, ToolSpec

if TYPE_CHECKING:  # Playwright is the optional `browser` extra: imported where used.
    from playwright.async_api import FilePayload

    from browser_relay.driver import BrowserDriver, Drivers

__all__ = ["GROUP", "TOOLS", "BrowserTools"]

GROUP = "browser"
# What the browser tools need beyond the base install.
BROWSER_EXTRA = "Playwright: pip install 'instance-ai[browser]'"
CONNECT_CARD = "browser_use_connect"


# -- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BrowserTools:
    """What the browser tools may touch: the relay, its drivers, the sandboxed browsers."""

    relay: RelayServer
    # None without Playwright (the `browser` extra): the tools are then not registered.
    drivers: Drivers | None
    headless: HeadlessBrowsers
    sandbox_for: SandboxFor
    # INSTANCE_AI_BROWSER=sandbox: a headless browser in the thread's sandbox.
    in_sandbox: bool
    # Secrets captured off pages (per thread, in memory) and the redaction markers.
    secrets: CapturedSecrets = field(default_factory=CapturedSecrets)
    # Where browser_create_credential makes the credential, and what gates it.
    credentials: Credentials | None = None
    credential_types: CredentialTypeIndex | None = None
    hitl: Hitl | None = None


class Element(ToolModel):
    ref: str | None = Field(None, description="element ref from browser_snapshot, e.g. e12")
    selector: str | None = Field(None, description="or a CSS / Playwright selector")

    @model_validator(mode="after")
    def _one(self) -> Element:
        if (self.ref is None) == (self.selector is None):
            raise ValueError("give exactly one of ref (from browser_snapshot) or selector")
        return self

    def target(self) -> Target:
        return Target(ref=self.ref, selector=self.selector)


class OnPage(ToolModel):
    page_id: str | None = Field(None, alias="pageId", description="tab id; default: active tab")


WaitUntil = Literal["load", "domcontentloaded", "networkidle"]


class TabOpenInput(ToolModel):
    url: str | None = None


class TabIdInput(ToolModel):
    page_id: str = Field(alias="pageId", min_length=1)


class NoInput(ToolModel):
    pass


class NavigateInput(OnPage):
    url: str = Field(min_length=1)
    wait_until: WaitUntil = Field("load", alias="waitUntil")


class ReloadInput(OnPage):
    wait_until: WaitUntil = Field("load", alias="waitUntil")


class ClickInput(OnPage):
    element: Element
    button: Literal["left", "right", "middle"] = "left"
    click_count: int = Field(1, alias="clickCount", ge=1, le=3)
    modifiers: list[Literal["Alt", "Control", "Meta", "Shift"]] = Field(default_factory=list)


class TypeInput(OnPage):
    element: Element
    text: str
    clear: bool = True
    submit: bool = False
    delay: int = Field(0, ge=0, le=1000, description="ms between keys; 0 fills at once")


class SelectInput(OnPage):
    element: Element
    values: list[str] = Field(min_length=1)


class HoverInput(OnPage):
    element: Element


class DragInput(OnPage):
    source: Element = Field(alias="from")
    target: Element = Field(alias="to")


class PressInput(OnPage):
    keys: str = Field(min_length=1, description='a key or chord, e.g. "Enter", "Control+A"')


class ScrollToElement(OnPage):
    mode: Literal["element"]
    element: Element


class ScrollByDirection(OnPage):
    mode: Literal["direction"]
    direction: Literal["up", "down"]
    amount: int = Field(500, ge=1, le=20000, description="pixels")


ScrollInput = Annotated[ScrollToElement | ScrollByDirection, Field(discriminator="mode")]


class UploadInput(OnPage):
    element: Element | None = Field(None, description="not needed when a file chooser is open")
    files: list[str] = Field(min_length=1, description="paths in the workspace")


class DialogInput(OnPage):
    action: Literal["accept", "dismiss"]
    text: str | None = Field(None, description="for a prompt dialog")


class SnapshotInput(OnPage):
    scope: Element | None = None


class ScreenshotInput(OnPage):
    element: Element | None = None
    full_page: bool = Field(False, alias="fullPage")


class ContentInput(OnPage):
    selector: str | None = None


class EvaluateInput(OnPage):
    script: str = Field(min_length=1, description="a JavaScript expression or function")


class ConsoleInput(OnPage):
    level: Literal["log", "warn", "error", "info", "debug"] | None = None
    clear: bool = False


class PdfInput(OnPage):
    format: Literal["A4", "Letter", "Legal"] = "A4"
    landscape: bool = False


class NetworkInput(OnPage):
    filter: str | None = Field(None, description="glob on the URL, e.g. */api/*")
    clear: bool = False


class WaitInput(OnPage):
    selector: str | None = None
    url: str | None = Field(None, description="glob the page URL must match")
    load_state: WaitUntil | None = Field(None, alias="loadState")
    predicate: str | None = Field(None, description="a JavaScript expression that must be true")
    text: str | None = None
    timeout_ms: int = Field(30_000, alias="timeoutMs", ge=1, le=120_000)


class Cookie(ToolModel):
    name: str
    value: str
    domain: str | None = None
    path: str | None = None
    url: str | None = None
    expires: float | None = None
    http_only: bool | None = Field(None, alias="httpOnly")
    secure: bool | None = None
    same_site: Literal["Strict", "Lax", "None"] | None = Field(None, alias="sameSite")


class CookiesGet(ToolModel):
    action: Literal["get"]
    url: str | None = None


class CookiesSet(ToolModel):
    action: Literal["set"]
    cookies: list[Cookie] = Field(min_length=1)


class CookiesClear(ToolModel):
    action: Literal["clear"]


CookiesInput = Annotated[CookiesGet | CookiesSet | CookiesClear, Field(discriminator="action")]


class StorageGet(OnPage):
    action: Literal["get"]
    kind: Literal["local", "session"] = "local"


class StorageSet(OnPage):
    action: Literal["set"]
    kind: Literal["local", "session"] = "local"
    data: dict[str, str] = Field(min_length=1)


class StorageClear(OnPage):
    action: Literal["clear"]
    kind: Literal["local", "session"] = "local"


StorageInput = Annotated[StorageGet | StorageSet | StorageClear, Field(discriminator="action")]


# -- outputs -------------------------------------------------------------------------------


class Tab(ToolModel):
    id: str
    title: str
    url: str
    active: bool


class TabOutput(ToolModel):
    tab: Tab


class TabsOutput(ToolModel):
    tabs: list[Tab]


class PageOutput(ToolModel):
    """After an action: where the tab is, and what now waits for the agent."""

    page_id: str = Field(alias="pageId")
    url: str
    title: str
    modal_states: list[dict[str, Any]] | None = Field(None, alias="modalStates")
    new_tabs: list[Tab] | None = Field(None, alias="newTabs")
    console_summary: dict[str, int] | None = Field(None, alias="consoleSummary")
    result: Any = None


class SnapshotOutput(ToolModel):
    page_id: str = Field(alias="pageId")
    url: str
    title: str
    snapshot: str


class DataOutput(ToolModel):
    mime_type: str = Field(alias="mimeType")
    data: str = Field(description="base64")


class ContentOutput(ToolModel):
    title: str
    url: str
    content: str


class ListOutput(ToolModel):
    items: list[dict[str, Any]]


# -- the connection ------------------------------------------------------------------------


async def _driver(ctx: ToolContext[BrowserTools]) -> BrowserDriver:
    if ctx.services.in_sandbox:
        return await _sandbox_driver(ctx)
    key = user_key(ctx.caller.user_id)
    relay = ctx.services.relay
    session = relay.sessions.session(key)
    if session.relay.state == "connected":
        # Only the CDP side: a connected browser needs no setup link minted.
        cdp_url, cdp_headers = relay.cdp_endpoint(session)
        return await _drivers(ctx).driver(session.id, cdp_url, cdp_headers)
    if ctx.resume is not None:
        raise FailedPreconditionError(
            "The browser is still not connected. Tell the user the connection did not come "
            "through: they should open the setup link again, install or open the extension, "
            "and choose a tab; do not call browser tools again until they say it is done."
        )
    setup_url = relay.endpoints(key).setup_url
    raise Suspend(connect_card(setup_url))


async def _sandbox_driver(ctx: ToolContext[BrowserTools]) -> BrowserDriver:
    """The headless browser in the thread's sandbox, started on first use."""
    sandboxes = await ctx.services.sandbox_for(ctx.thread_id)
    if not isinstance(sandboxes, BrowserHost) or not sandboxes.runs_image:
        raise FailedPreconditionError(
            "the sandboxed browser runs in a Docker sandbox: set "
            "INSTANCE_AI_SANDBOX_PROVIDER=docker (or INSTANCE_AI_BROWSER=user to drive the "
            "person's own browser)"
        )
    key = sandbox_key(ctx.thread_id)
    relay, headless = ctx.services.relay, ctx.services.headless
    session = relay.sessions.session(key)
    if not headless.running(key):
        # A driver of a browser that is gone would wait on its tabs: start afresh.
        await _drivers(ctx).drop(session.id)
    try:
        session = await headless.ensure(key, lambda: sandboxes.open_browser(ctx.thread_id))
    except BrowserGone as exc:
        raise UnavailableError(str(exc)) from None
    cdp_url, cdp_headers = relay.cdp_endpoint(session)
    return await _drivers(ctx).driver(session.id, cdp_url, cdp_headers)


def connect_card(setup_url: str) -> dict[str, Any]:
    """One payload for both surfaces: the in-app chat matches `type` and `setupUrl`; a channel
    renders `components`. Neither minds the other's fields."""
    return {
        "inputType": "approval",
        "severity": "info",
        "type": CONNECT_CARD,
        "title": "Connect your browser",
        "message": f"Open {setup_url} to connect your browser, then continue.",
        "setupUrl": setup_url,
        "components": [
            {
                "type": "section",
                "text": "Let the assistant do this task in your own browser: install the "
                "extension and connect a tab, no other software needed.\n\n" + setup_url,
            },
            {
                "type": "button",
                "label": "I've connected — continue",
                "value": "continue",
                "style": "primary",
            },
        ],
    }


async def _tab(driver: BrowserDriver, page_id: str | None) -> Tab:
    return Tab.model_validate(await driver.tab_info(driver.state(page_id)))


async def _after(driver: BrowserDriver, page_id: str | None, result: Any = None) -> PageOutput:
    state = driver.state(page_id)
    new = [Tab.model_validate(await driver.tab_info(driver.state(i))) for i in driver.new_tabs]
    driver.new_tabs.clear()
    errors = sum(1 for m in state.console if m["level"] == "error")
    warnings = sum(1 for m in state.console if m["level"] == "warn")
    try:
        title = await state.page.title()
    except _playwright_error():
        title = ""
    return PageOutput(
        page_id=state.id,
        url=state.page.url,
        title=title,
        modal_states=driver.modal_states(page_id) or None,
        new_tabs=new or None,
        console_summary={"errors": errors, "warnings": warnings} if errors or warnings else None,
        result=result,
    )


def _handler(
    run: Any, *, with_context: bool = False, reads_page: bool = False, visual: bool = False
) -> Any:
    """A browser tool handler: the driver for the caller's browser, with Playwright's and
    the driver's errors turned into answers the model can act on, and the result redacted
    (`reads_page`: asking the page which of its values are secret too; `visual`: a picture,
    refused while the page shows a secret)."""

    async def handle(ctx: ToolContext[BrowserTools], args: Any) -> ToolModel:
        driver = await _driver(ctx)
        secrets, page_id = ctx.services.secrets, getattr(args, "page_id", None)
        try:
            if visual:
                await guard_visual(secrets, ctx.thread_id, driver.page(page_id))
            result: ToolModel = await (
                run(driver, args, ctx) if with_context else run(driver, args)
            )
            if not visual:
                page = _readable_page(driver, page_id) if reads_page else None
                result = await scrub(secrets, ctx.thread_id, result, page)
        except (_playwright_error(), DriverError) as exc:
            message = secrets.scrub_text(ctx.thread_id, str(exc).split("\nCall log:")[0])
            raise FailedPreconditionError(message) from None
        return result

    return handle


def _readable_page(driver: BrowserDriver, page_id: str | None) -> Any:
    """The tab to ask about its secrets, None while a dialog blocks it."""
    try:
        return None if driver.modal_states(page_id) else driver.page(page_id)
    except DriverError:
        return None


def _playwright_error() -> type[Exception]:
    from playwright.async_api import Error

    return Error


def _drivers(ctx: ToolContext[BrowserTools]) -> Drivers:
    drivers = ctx.services.drivers
    if drivers is None:  # the tools are not registered then; a stale caller gets told why
        raise UnavailableError(f"the browser tools need {BROWSER_EXTRA}")
    return drivers


def driver_installed(services: BrowserTools) -> bool:
    return services.drivers is not None


# -- the operations --------------------------------------------------------------------------


async def tab_open(d: BrowserDriver, a: TabOpenInput) -> TabOutput:
    return TabOutput(tab=Tab.model_validate(await d.open_tab(a.url)))


async def tab_list(d: BrowserDriver, _a: NoInput) -> TabsOutput:
    return TabsOutput(tabs=[Tab.model_validate(t) for t in await d.tabs()])


async def tab_focus(d: BrowserDriver, a: TabIdInput) -> TabOutput:
    return TabOutput(tab=Tab.model_validate(await d.focus(a.page_id)))


async def tab_close(d: BrowserDriver, a: TabIdInput) -> TabsOutput:
    await d.close_tab(a.page_id)
    return TabsOutput(tabs=[Tab.model_validate(t) for t in await d.tabs()])


async def navigate(d: BrowserDriver, a: NavigateInput) -> PageOutput:
    await d.page(a.page_id).goto(a.url, wait_until=a.wait_until)
    return await _after(d, a.page_id)


async def back(d: BrowserDriver, a: OnPage) -> PageOutput:
    await d.page(a.page_id).go_back()
    return await _after(d, a.page_id)


async def forward(d: BrowserDriver, a: OnPage) -> PageOutput:
    await d.page(a.page_id).go_forward()
    return await _after(d, a.page_id)


async def reload(d: BrowserDriver, a: ReloadInput) -> PageOutput:
    await d.page(a.page_id).reload(wait_until=a.wait_until)
    return await _after(d, a.page_id)


async def click(d: BrowserDriver, a: ClickInput) -> PageOutput:
    target = d.locate(a.element.target(), a.page_id)
    await d.perform(
        a.page_id,
        target.click(button=a.button, click_count=a.click_count, modifiers=a.modifiers or None),
    )
    return await _after(d, a.page_id)


async def type_text(d: BrowserDriver, a: TypeInput) -> PageOutput:
    field = d.locate(a.element.target(), a.page_id)
    if a.delay:
        if a.clear:
            await field.fill("")
        await field.press_sequentially(a.text, delay=a.delay)
    elif a.clear:
        await field.fill(a.text)
    else:
        await field.press_sequentially(a.text)
    if a.submit:
        await d.perform(a.page_id, field.press("Enter"))
    return await _after(d, a.page_id)


async def select(d: BrowserDriver, a: SelectInput) -> PageOutput:
    chosen = await d.locate(a.element.target(), a.page_id).select_option(a.values)
    return await _after(d, a.page_id, chosen)


async def hover(d: BrowserDriver, a: HoverInput) -> PageOutput:
    await d.locate(a.element.target(), a.page_id).hover()
    return await _after(d, a.page_id)


async def drag(d: BrowserDriver, a: DragInput) -> PageOutput:
    await d.locate(a.source.target(), a.page_id).drag_to(d.locate(a.target.target(), a.page_id))
    return await _after(d, a.page_id)


async def press(d: BrowserDriver, a: PressInput) -> PageOutput:
    await d.perform(a.page_id, d.page(a.page_id).keyboard.press(a.keys))
    return await _after(d, a.page_id)


async def scroll(d: BrowserDriver, a: ScrollToElement | ScrollByDirection) -> PageOutput:
    if isinstance(a, ScrollToElement):
        await d.locate(a.element.target(), a.page_id).scroll_into_view_if_needed()
    else:
        delta = a.amount if a.direction == "down" else -a.amount
        # scrollBy, not a wheel event: a wheel lands wherever the mouse is and scrolls later.
        await d.page(a.page_id).evaluate("dy => window.scrollBy(0, dy)", delta)
    offset = await d.page(a.page_id).evaluate("() => window.scrollY")
    return await _after(d, a.page_id, {"scrollY": offset})


async def upload(d: BrowserDriver, a: UploadInput, ctx: ToolContext[BrowserTools]) -> PageOutput:
    # From the thread's workspace, whichever browser: never from the service's own disk.
    sandboxes = await ctx.services.sandbox_for(ctx.thread_id)
    files: list[FilePayload] = [
        {
            "name": posixpath.basename(path),
            "mimeType": mimetypes.guess_type(path)[0] or "application/octet-stream",
            "buffer": await sandboxes.read_file(ctx.thread_id, path),
        }
        for path in a.files
    ]
    await d.upload(a.page_id, a.element.target() if a.element else None, files)
    return await _after(d, a.page_id)


async def dialog(d: BrowserDriver, a: DialogInput) -> PageOutput:
    answered = await d.answer_dialog(a.page_id, a.action == "accept", a.text)
    return await _after(d, a.page_id, answered)


async def snapshot(d: BrowserDriver, a: SnapshotInput) -> SnapshotOutput:
    tree = await d.snapshot(a.page_id, a.scope.target() if a.scope else None)
    tab = await _tab(d, a.page_id)
    return SnapshotOutput(page_id=tab.id, url=tab.url, title=tab.title, snapshot=tree)


async def screenshot(d: BrowserDriver, a: ScreenshotInput) -> DataOutput:
    data = await d.screenshot(a.page_id, a.element.target() if a.element else None, a.full_page)
    return DataOutput(mime_type="image/png", data=data)


async def content(d: BrowserDriver, a: ContentInput) -> ContentOutput:
    """Readable Markdown: the page's main content (Readability, as fetch-url does), or all of
    the element a selector names."""
    html = await d.html(a.page_id, a.selector)
    tab = await _tab(d, a.page_id)
    text = html_markdown(html) if a.selector else readable_markdown(html)[1]
    return ContentOutput(title=tab.title, url=tab.url, content=text)


async def evaluate(d: BrowserDriver, a: EvaluateInput) -> PageOutput:
    value = await d.perform(a.page_id, d.page(a.page_id).evaluate(a.script))
    return await _after(d, a.page_id, value)


async def console(d: BrowserDriver, a: ConsoleInput) -> ListOutput:
    return ListOutput(items=d.console(a.page_id, a.level, a.clear))


async def pdf(d: BrowserDriver, a: PdfInput) -> DataOutput:
    return DataOutput(
        mime_type="application/pdf", data=await d.pdf(a.page_id, a.format, a.landscape)
    )


async def network(d: BrowserDriver, a: NetworkInput) -> ListOutput:
    return ListOutput(items=d.network(a.page_id, a.filter, a.clear))


async def wait(d: BrowserDriver, a: WaitInput) -> PageOutput:
    page, timeout = d.page(a.page_id), a.timeout_ms
    if a.load_state:
        await page.wait_for_load_state(a.load_state, timeout=timeout)
    if a.url:
        await page.wait_for_url(a.url, timeout=timeout)
    if a.selector:
        await page.locator(a.selector).first.wait_for(timeout=timeout)
    if a.text:
        await page.get_by_text(a.text).first.wait_for(timeout=timeout)
    if a.predicate:
        await page.wait_for_function(a.predicate, timeout=timeout)
    return await _after(d, a.page_id)


async def cookies(d: BrowserDriver, a: CookiesGet | CookiesSet | CookiesClear) -> ListOutput:
    context = d.page().context
    if isinstance(a, CookiesSet):
        given = [c.model_dump(by_alias=True, exclude_none=True) for c in a.cookies]
        for cookie in given:
            if "url" not in cookie and "domain" not in cookie:
                cookie["url"] = d.page().url
        await context.add_cookies(given)  # type: ignore[arg-type]
    elif isinstance(a, CookiesClear):
        await context.clear_cookies()
    urls = [a.url] if isinstance(a, CookiesGet) and a.url else [d.page().url]
    return ListOutput(items=[dict(c) for c in await context.cookies(urls)])


async def storage(d: BrowserDriver, a: StorageGet | StorageSet | StorageClear) -> PageOutput:
    area = "localStorage" if a.kind == "local" else "sessionStorage"
    page = d.page(a.page_id)
    if isinstance(a, StorageSet):
        await page.evaluate(
            f"data => Object.entries(data).forEach(([k, v]) => {area}.setItem(k, v))", a.data
        )
    elif isinstance(a, StorageClear):
        await page.evaluate(f"() => {area}.clear()")
    data = await page.evaluate(f"() => Object.fromEntries(Object.entries({area}))")
    return await _after(d, a.page_id, data)


def browser_tool(
    name: str,
    description: str,
    input_model: Any,
    output: type[ToolModel],
    run: Any,
    *,
    with_context: bool = False,
    reads_page: bool = False,
    visual: bool = False,
) -> ToolSpec[Any]:
    return ToolSpec(
        name=name,
        description=description,
        group=GROUP,
        services=BrowserTools,
        input_model=input_model,
        output_model=output,
        handler=_handler(run, with_context=with_context, reads_page=reads_page, visual=visual),
        # Asks only when no browser is connected (the connect card).
        may_ask=True,
        condition=driver_installed,
        requires=BROWSER_EXTRA,
    )


TOOLS: list[ToolSpec[Any]] = [
    browser_tool(
        "browser_tab_open",
        "Open a new tab (optionally at a URL) and make it active.",
        TabOpenInput,
        TabOutput,
        tab_open,
    ),
    browser_tool(
        "browser_tab_list",
        "List the open tabs (ids, titles, URLs, which is active).",
        NoInput,
        TabsOutput,
        tab_list,
    ),
    browser_tool(
        "browser_tab_focus",
        "Make a tab active.",
        TabIdInput,
        TabOutput,
        tab_focus,
    ),
    browser_tool(
        "browser_tab_close",
        "Close a tab.",
        TabIdInput,
        TabsOutput,
        tab_close,
    ),
    browser_tool(
        "browser_navigate",
        "Go to a URL in a tab.",
        NavigateInput,
        PageOutput,
        navigate,
    ),
    browser_tool(
        "browser_back",
        "Go back in a tab's history.",
        OnPage,
        PageOutput,
        back,
    ),
    browser_tool(
        "browser_forward",
        "Go forward in a tab's history.",
        OnPage,
        PageOutput,
        forward,
    ),
    browser_tool(
        "browser_reload",
        "Reload a tab.",
        ReloadInput,
        PageOutput,
        reload,
    ),
    browser_tool(
        "browser_click",
        "Click an element (ref from browser_snapshot, or a selector).",
        ClickInput,
        PageOutput,
        click,
    ),
    browser_tool(
        "browser_type",
        ("Type text into a field (replacing it unless clear is false); optionally press Enter."),
        TypeInput,
        PageOutput,
        type_text,
    ),
    browser_tool(
        "browser_select",
        "Choose options of a select element by value or label.",
        SelectInput,
        PageOutput,
        select,
    ),
    browser_tool(
        "browser_hover",
        "Move the mouse over an element.",
        HoverInput,
        PageOutput,
        hover,
    ),
    browser_tool(
        "browser_drag",
        "Drag one element onto another.",
        DragInput,
        PageOutput,
        drag,
    ),
    browser_tool(
        "browser_press",
        "Press a key or chord in the active element.",
        PressInput,
        PageOutput,
        press,
    ),
    browser_tool(
        "browser_scroll",
        ("Scroll an element into view (mode element) or the page up or down (mode direction)."),
        ScrollInput,
        PageOutput,
        scroll,
    ),
    browser_tool(
        "browser_upload",
        "Give files from the workspace to a file input or to the open file chooser.",
        UploadInput,
        PageOutput,
        upload,
        with_context=True,
    ),
    browser_tool(
        "browser_dialog",
        "Accept or dismiss the dialog (alert, confirm, prompt) open on a tab.",
        DialogInput,
        PageOutput,
        dialog,
    ),
    browser_tool(
        "browser_snapshot",
        (
            "The tab's accessibility tree with element refs ([ref=e5]) that the other browser "
            "tools take. Secrets on the page show as [REDACTED:kind:n] markers."
        ),
        SnapshotInput,
        SnapshotOutput,
        snapshot,
        reads_page=True,
    ),
    browser_tool(
        "browser_screenshot",
        "A PNG of the tab or one element (base64).",
        ScreenshotInput,
        DataOutput,
        screenshot,
        visual=True,
    ),
    browser_tool(
        "browser_content",
        "The page (or one element) as readable Markdown, with its title and URL.",
        ContentInput,
        ContentOutput,
        content,
        reads_page=True,
    ),
    browser_tool(
        "browser_evaluate",
        "Run JavaScript in the tab and return its JSON result.",
        EvaluateInput,
        PageOutput,
        evaluate,
        reads_page=True,
    ),
    browser_tool(
        "browser_console",
        "The tab's console messages (optionally one level; optionally clearing them).",
        ConsoleInput,
        ListOutput,
        console,
    ),
    browser_tool(
        "browser_pdf",
        "The tab printed to PDF (base64).",
        PdfInput,
        DataOutput,
        pdf,
        visual=True,
    ),
    browser_tool(
        "browser_network",
        "The requests the tab made (optionally filtered by a URL glob).",
        NetworkInput,
        ListOutput,
        network,
    ),
    browser_tool(
        "browser_wait",
        ("Wait until every given condition holds (selector, URL, load state, predicate, text)."),
        WaitInput,
        PageOutput,
        wait,
    ),
    browser_tool(
        "browser_cookies",
        "Get, set or clear the browser's cookies (action get / set / clear).",
        CookiesInput,
        ListOutput,
        cookies,
    ),
    browser_tool(
        "browser_storage",
        ("Get, set or clear a tab's localStorage or sessionStorage (action get / set / clear)."),
        StorageInput,
        PageOutput,
        storage,
    ),
]
