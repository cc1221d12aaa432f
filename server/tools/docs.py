"""`n8n-docs`: search and read n8n's documentation. `search` ranks the index this deployment
builds from what it ships (server/domain/docs.py) and needs no network; `read` fetches a docs
page through the web fetcher (fetch-url's SSRF rules, and its `fetchUrl` approval per host);
`lookup` is a search that reads the best pages. Where the docs site cannot be reached, the
index's own summary of a page stands in for it and the answer says so."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from server.catalog import CatalogService
from server.catalog.catalog import Catalog
from server.domain.docs import DocsEntry, DocsIndex, DocsMatch, Intent
from server.domain.web import HostNotApproved, WebFetcher
from server.errors import InvalidArgumentError, UnavailableError
from server.runtime.hitl import Hitl
from server.tools.spec import ToolContext, ToolModel, ToolSpec
from server.tools.web import host_approvals, host_card

__all__ = ["GROUP", "TOOLS", "DocsTools"]

GROUP = "docs"
SOURCES = (
    "When answering from returned docs, end with `Source: [title](url)` (or `Sources:` for "
    "several), using only returned titles and URLs."
)


@dataclass(kw_only=True)
class DocsTools:
    """The catalog and knowledge base the index is built from (once), where the docs site is,
    and the fetcher and approvals `read` goes through."""

    catalog: CatalogService
    knowledge_base: Path | None
    origin: str
    fetcher: WebFetcher
    hitl: Hitl
    _index: DocsIndex | None = None

    async def index(self) -> DocsIndex:
        if self._index is not None:
            return self._index
        try:
            catalog = await self.catalog.get()
        except UnavailableError:
            # No catalog (no sandbox image): the general pages and the knowledge base still
            # answer; the full index is built once the catalog is there.
            empty = Catalog(nodes={}, credentials={})
            return DocsIndex.build(empty, self.knowledge_base, self.origin)
        self._index = await asyncio.to_thread(
            DocsIndex.build, catalog, self.knowledge_base, self.origin
        )
        return self._index


class _Focus(ToolModel):
    query: str | None = Field(
        None,
        max_length=500,
        description="What to find: the product area, service and task. Optional when a node "
        "or credential type is given.",
    )
    intent: Intent = Field("general", description="The kind of answer needed")
    node_type: str | None = Field(
        None, alias="nodeType", max_length=200, description='e.g. "n8n-nodes-base.gmail"'
    )
    credential_type: str | None = Field(
        None,
        alias="credentialType",
        max_length=200,
        description='e.g. "gmailOAuth2": always give it for a question about authentication',
    )
    credential_display_name: str | None = Field(None, alias="credentialDisplayName", max_length=200)
    documentation_url: str | None = Field(
        None, alias="documentationUrl", max_length=2000, description="A docs URL already known"
    )


class SearchAction(_Focus):
    action: Literal["search"] = Field(description="Rank the docs pages; reads nothing")
    max_results: int = Field(8, ge=1, le=20, alias="maxResults")


class LookupAction(_Focus):
    action: Literal["lookup"] = Field(description="Search, then read the best pages")
    max_pages: int = Field(3, ge=1, le=5, alias="maxPages")
    max_content_length: int = Field(30_000, ge=1, le=100_000, alias="maxContentLength")


class ReadAction(ToolModel):
    action: Literal["read"] = Field(description="Read one docs page as Markdown")
    url: str = Field(min_length=1, max_length=2000, description="A docs page URL")
    max_content_length: int = Field(30_000, ge=1, le=100_000, alias="maxContentLength")


DocsInput = Annotated[SearchAction | LookupAction | ReadAction, Field(discriminator="action")]


class DocsPage(ToolModel):
    title: str
    url: str
    kind: str = Field(description="node, credential, page, or knowledge-base (a workspace file)")
    score: float
    reason: str
    summary: str
    node_type: str | None = Field(None, alias="nodeType")
    credential_type: str | None = Field(None, alias="credentialType")


class DocsDocument(ToolModel):
    title: str
    url: str
    content: str
    truncated: bool
    source: Literal["docs-site", "built-in index"]


class DocsOutput(ToolModel):
    action: str
    query: str | None = None
    intent: str | None = None
    url: str | None = None
    matches: list[DocsPage] = Field(default_factory=list)
    documents: list[DocsDocument] = Field(default_factory=list)
    hint: str | None = None
    error: str | None = None


def _page(match: DocsMatch) -> DocsPage:
    entry = match.entry
    return DocsPage(
        title=entry.title,
        url=entry.url,
        kind=entry.kind,
        score=match.score,
        reason=match.reason,
        summary=entry.summary[:400],
        node_type=entry.node_type,
        credential_type=entry.credential_type,
    )


def _query(args: _Focus) -> str:
    return (
        args.query
        or args.credential_display_name
        or args.credential_type
        or args.node_type
        or args.documentation_url
        or ""
    )


async def _ranked(ctx: ToolContext[DocsTools], args: _Focus) -> list[DocsMatch]:
    if not _query(args).strip():
        raise InvalidArgumentError(
            "say what to find: a query, or a nodeType, credentialType or documentationUrl"
        )
    index = await ctx.services.index()
    return index.search(
        _query(args),
        intent=args.intent,
        node_type=args.node_type,
        credential_type=args.credential_type,
        credential_display_name=args.credential_display_name,
        documentation_url=args.documentation_url,
        origin=ctx.services.origin,
    )


def _built_in(entry: DocsEntry, max_chars: int) -> DocsDocument:
    content = f"# {entry.title}\n\n{entry.summary}"
    return DocsDocument(
        title=entry.title,
        url=entry.url,
        content=content[:max_chars],
        truncated=len(content) > max_chars,
        source="built-in index",
    )


async def _read(
    ctx: ToolContext[DocsTools], url: str, entry: DocsEntry | None, max_chars: int
) -> tuple[DocsDocument | None, str | None]:
    """The page from the docs site, or (unreachable) the index's summary and why."""
    host = urlsplit(ctx.services.origin).hostname or ctx.services.origin
    authorize = await host_approvals(
        ctx.services.hitl, ctx, SPEC, f"reading n8n's documentation at {host}"
    )
    try:
        page = await ctx.services.fetcher.fetch(url, max_chars=max_chars, authorize=authorize)
    except HostNotApproved as needed:
        raise host_card(needed, "reading n8n's documentation from") from None
    except (UnavailableError, InvalidArgumentError) as exc:
        reason = f"the n8n docs site ({host}) cannot be reached from this deployment ({exc}). " + (
            "The built-in index's summary of the page is given instead."
            if entry is not None
            else "This URL is not in the built-in index either."
        )
        return (_built_in(entry, max_chars) if entry is not None else None), reason
    title = page.title or (entry.title if entry is not None else url)
    return (
        DocsDocument(
            title=title,
            url=page.final_url,
            content=page.content,
            truncated=page.truncated,
            source="docs-site",
        ),
        None,
    )


async def n8n_docs(ctx: ToolContext[DocsTools], args: Any) -> DocsOutput:
    if isinstance(args, ReadAction):
        return await _read_action(ctx, args)
    matches = await _ranked(ctx, args)
    if isinstance(args, SearchAction):
        top = matches[: args.max_results]
        return DocsOutput(
            action="search",
            query=_query(args),
            intent=args.intent,
            matches=[_page(m) for m in top],
            hint=SOURCES if top else "Nothing matched: try other words or web-search.",
        )
    readable = [m for m in matches if m.entry.kind != "knowledge-base"][: args.max_pages]
    documents, problems = [], []
    for match in readable:
        document, problem = await _read(ctx, match.entry.url, match.entry, args.max_content_length)
        if document is not None:
            documents.append(document)
        if problem and problem not in problems:
            problems.append(problem)
    return DocsOutput(
        action="lookup",
        query=_query(args),
        intent=args.intent,
        matches=[_page(m) for m in readable],
        documents=documents,
        hint=" ".join([*problems, SOURCES]) if documents else "Nothing matched.",
    )


async def _read_action(ctx: ToolContext[DocsTools], args: ReadAction) -> DocsOutput:
    origin = urlsplit(ctx.services.origin)
    target = urlsplit(args.url)
    if (target.scheme, target.netloc) != (origin.scheme, origin.netloc):
        raise InvalidArgumentError(
            f"url: {args.url} is not a page of n8n's documentation ({ctx.services.origin}); "
            "read other sites with fetch-url"
        )
    entry = (await ctx.services.index()).find(args.url, ctx.services.origin)
    document, problem = await _read(ctx, args.url, entry, args.max_content_length)
    return DocsOutput(
        action="read",
        url=args.url,
        documents=[document] if document is not None else [],
        error=problem,
        hint=SOURCES if document is not None else None,
    )


SPEC = ToolSpec(
    name="n8n-docs",
    description="Search and read n8n's own documentation: how a node or credential is set "
    "up, what a parameter does, hosting, the API. Prefer it over web-search for anything n8n "
    "ships. action search (ranked pages), lookup (search and read the best pages) or read "
    f"(one docs URL). {SOURCES}",
    group=GROUP,
    services=DocsTools,
    input_model=DocsInput,
    output_model=DocsOutput,
    handler=n8n_docs,
    hitl_action="fetchUrl",
    self_gated=True,
    may_ask=True,
    severity="info",
)
TOOLS: list[ToolSpec[Any]] = [SPEC]
