"""Web research tools: `fetch-url` (SSRF-checked, host by host approval) and `web-search`
(only where a search provider is configured)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field

from server.domain.web import Authorize, HostNotApproved, WebFetcher, WebSearch
from server.errors import FailedPreconditionError
from server.runtime.hitl import ANY_HOST, Hitl
from server.tools.spec import Suspend, ToolContext, ToolModel, ToolSpec, blocked_message

__all__ = ["GROUP", "TOOLS", "WebTools", "host_approvals", "host_card"]

GROUP = "web"


@dataclass(frozen=True, kw_only=True)
class WebTools:
    """What the web tools may touch; `search` is None when no provider is configured."""

    fetcher: WebFetcher
    search: WebSearch | None
    hitl: Hitl


class FetchInput(ToolModel):
    url: str = Field(min_length=1, max_length=4096)
    max_content_length: int = Field(
        30_000, alias="maxContentLength", ge=1, le=100_000, description="Characters of content"
    )


class FetchOutput(ToolModel):
    url: str
    final_url: str = Field(alias="finalUrl")
    title: str
    content: str
    truncated: bool
    content_length: int = Field(alias="contentLength")
    safety_flags: list[str] | None = Field(None, alias="safetyFlags")


async def host_approvals(
    hitl: Hitl, ctx: ToolContext[object], spec: ToolSpec[Any], what: str
) -> Authorize:
    """Whether each host a call reaches is approved for the thread: the `fetchUrl`
    permission, hosts remembered from earlier cards, and the person's answer to this call's
    card (which applies to the first host needing one: the one they were asked about; a plain
    approval counts as this once). Raises when the permission is blocked or they said no."""
    mode = await hitl.mode(ctx.thread_id, "fetchUrl")
    if mode == "blocked":
        raise FailedPreconditionError(blocked_message(spec))
    answer = ctx.resume or {}
    if ctx.resume is not None and not answer.get("approved"):
        raise FailedPreconditionError(
            f"The user did not allow {what}; do not try it again in this turn."
        )
    default = "allow_once" if answer.get("approved") else None
    granted = {"action": answer.get("domainAccessAction") or default}

    async def authorize(host: str) -> bool:
        if mode == "always_allow" or await hitl.domain_allowed(ctx.thread_id, host):
            return True
        action = granted.pop("action", None)
        if action == "allow_domain":
            await hitl.allow_domain(ctx.thread_id, host)
        elif action == "allow_all":
            await hitl.allow_domain(ctx.thread_id, ANY_HOST)
        return action in ("allow_once", "allow_domain", "allow_all")

    return authorize


def host_card(needed: HostNotApproved, what: str) -> Suspend:
    """The domain-access card for a host not approved yet."""
    return Suspend(
        {
            "inputType": "approval",
            "severity": "info",
            "message": f"Allow {what} {needed.host}?",
            "domainAccess": {"url": needed.url, "host": needed.host},
        }
    )


async def fetch_url(ctx: ToolContext[WebTools], args: FetchInput) -> FetchOutput:
    host = urlsplit(args.url).hostname or args.url
    authorize = await host_approvals(ctx.services.hitl, ctx, SPEC_FETCH, f"fetching from {host}")
    try:
        page = await ctx.services.fetcher.fetch(
            args.url, max_chars=args.max_content_length, authorize=authorize
        )
    except HostNotApproved as needed:
        raise host_card(needed, "fetching from") from None
    return FetchOutput(
        url=page.url,
        final_url=page.final_url,
        title=page.title,
        content=page.content,
        truncated=page.truncated,
        content_length=page.content_length,
        safety_flags=page.safety_flags or None,
    )


class SearchInput(ToolModel):
    query: str = Field(min_length=1, max_length=400)
    max_results: int = Field(5, alias="maxResults", ge=1, le=20)
    include_domains: list[str] | None = Field(
        None, alias="includeDomains", description="Only results from these domains"
    )


class SearchResult(ToolModel):
    title: str
    url: str
    snippet: str
    published_date: str | None = Field(None, alias="publishedDate")


class SearchOutput(ToolModel):
    query: str
    results: list[SearchResult]


async def web_search(ctx: ToolContext[WebTools], args: SearchInput) -> SearchOutput:
    search = ctx.services.search
    if search is None:
        raise FailedPreconditionError("no search provider is configured")
    hits = await search.search(args.query, count=20 if args.include_domains else args.max_results)
    if args.include_domains:
        domains = [d.lower().lstrip(".") for d in args.include_domains]
        hits = [
            h
            for h in hits
            if any(
                (urlsplit(h.url).hostname or "") == d
                or (urlsplit(h.url).hostname or "").endswith("." + d)
                for d in domains
            )
        ]
    return SearchOutput(
        query=args.query,
        results=[
            SearchResult(
                title=h.title, url=h.url, snippet=h.snippet, published_date=h.published_date
            )
            for h in hits[: args.max_results]
        ],
    )


def _search_configured(services: WebTools) -> bool:
    return services.search is not None


SPEC_FETCH = ToolSpec(
    name="fetch-url",
    description="Fetch a web page (or PDF, text, JSON) and return its readable content as "
    "Markdown. Only public addresses; the user approves each new host (once, for the "
    "domain, or for all).",
    group=GROUP,
    services=WebTools,
    input_model=FetchInput,
    output_model=FetchOutput,
    handler=fetch_url,
    hitl_action="fetchUrl",
    self_gated=True,
    may_ask=True,
)
TOOLS: list[ToolSpec[Any]] = [
    SPEC_FETCH,
    ToolSpec(
        name="web-search",
        description="Search the web; returns ranked results with title, URL and snippet.",
        group=GROUP,
        services=WebTools,
        input_model=SearchInput,
        output_model=SearchOutput,
        handler=web_search,
        hitl_action="webSearch",
        severity="info",
        condition=_search_configured,
        requires="INSTANCE_AI_BRAVE_SEARCH_API_KEY or INSTANCE_AI_SEARXNG_URL",
    ),
]
