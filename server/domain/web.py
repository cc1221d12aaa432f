"""Web research: fetching a page as readable text, and web search.

`WebFetcher.fetch` follows at most 10 redirects, checking every hop with the SSRF rules
(`egress.check`) and asking `authorize(host)` for each new host (the thread's domain
approvals), connects to the checked address, reads at most 5 MB, and turns the body into
text: HTML through Readability then Markdown, PDF through pypdf, plain text, Markdown and JSON
as they are. Results are cached for 15 minutes.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx
import markdownify
import pypdf
from cachetools import TTLCache
from readability import Document

from server.domain.egress import check, pinned_request
from server.errors import InvalidArgumentError, UnavailableError

__all__ = [
    "CACHE_SECONDS",
    "CACHE_SIZE",
    "MAX_BODY_BYTES",
    "MAX_REDIRECTS",
    "USER_AGENT",
    "Authorize",
    "BraveSearch",
    "HostNotApproved",
    "Page",
    "SearchHit",
    "SearchProvider",
    "SearxngSearch",
    "WebFetcher",
    "WebSearch",
    "html_markdown",
    "readable_markdown",
    "tidy_text",
]

MAX_REDIRECTS = 10
MAX_BODY_BYTES = 5 * 1024 * 1024
CACHE_SIZE = 100
CACHE_SECONDS = 15 * 60
USER_AGENT = "instance-ai/0.1 (+web research for an n8n workflow assistant)"


class HostNotApproved(Exception):
    """The request (or one of its redirects) goes to a host the thread has not approved."""

    def __init__(self, host: str, url: str) -> None:
        super().__init__(host)
        self.host = host
        self.url = url


@dataclass(frozen=True, kw_only=True)
class Page:
    url: str
    final_url: str
    title: str
    content: str
    truncated: bool
    content_length: int
    safety_flags: list[str] = field(default_factory=list)
    # Every host the request went to, redirects included: a cached page is only handed to a
    # thread that has approved each of them.
    hosts: tuple[str, ...] = ()


Authorize = Callable[[str], Awaitable[bool]]


class WebFetcher:
    def __init__(self, *, timeout_s: float, allow: frozenset[str] = frozenset()) -> None:
        self._timeout = timeout_s
        self._allow = allow
        self._cache: TTLCache[tuple[str, int], Page] = TTLCache(CACHE_SIZE, CACHE_SECONDS)

    async def fetch(self, url: str, *, max_chars: int, authorize: Authorize) -> Page:
        # The cache is shared by every thread and user; the approvals are not.
        cached = self._cache.get((url, max_chars))
        if cached is not None:
            for host in cached.hosts:
                if not await authorize(host):
                    raise HostNotApproved(host, url)
            return cached
        hosts: list[str] = []
        async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
            body, content_type, final_url, cut = await self._follow(client, url, authorize, hosts)
        title, text = _extract(body, content_type, final_url)
        flags = ["body_cut_at_5mb"] if cut else []
        page = Page(
            url=url,
            final_url=final_url,
            title=title,
            content=text[:max_chars],
            truncated=len(text) > max_chars or cut,
            content_length=len(text),
            safety_flags=flags,
            hosts=tuple(hosts),
        )
        self._cache[(url, max_chars)] = page
        return page

    async def _follow(
        self, client: httpx.AsyncClient, url: str, authorize: Authorize, hosts: list[str]
    ) -> tuple[bytes, str, str, bool]:
        """The body at `url` after redirects; `hosts` gets each host the request went to."""
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            target = await check(current, allow=self._allow)
            if not await authorize(target.host):
                raise HostNotApproved(target.host, current)
            hosts.append(target.host)
            request = pinned_request(client, target, headers={"User-Agent": USER_AGENT})
            try:
                response = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise UnavailableError(f"fetching {current} failed: {exc}") from None
            try:
                if response.is_redirect and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if response.status_code >= 400:
                    raise UnavailableError(f"{current} answered HTTP {response.status_code}")
                body, cut = await _read_capped(response)
                return body, response.headers.get("content-type", ""), current, cut
            finally:
                await response.aclose()
        raise InvalidArgumentError(f"url: more than {MAX_REDIRECTS} redirects from {url}")


async def _read_capped(response: httpx.Response) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"".join(chunks)[:MAX_BODY_BYTES], True
    return b"".join(chunks), False


def _extract(body: bytes, content_type: str, url: str) -> tuple[str, str]:
    kind = content_type.split(";")[0].strip().lower()
    if kind in ("text/html", "application/xhtml+xml") or (not kind and body.lstrip()[:1] == b"<"):
        return readable_markdown(body.decode(_charset(content_type), errors="replace"))
    if kind == "application/pdf" or body[:5] == b"%PDF-":
        try:
            reader = pypdf.PdfReader(io.BytesIO(body))
            text = "\n\n".join(page.extract_text() or "" for page in reader.pages)
        except Exception as exc:  # pypdf raises many kinds for broken files
            raise UnavailableError(f"{url} is a PDF that cannot be read ({exc})") from None
        title = str(reader.metadata.title or "") if reader.metadata else ""
        return title, tidy_text(text)
    if kind.startswith("text/") or kind in ("application/json", "application/xml"):
        text = body.decode(_charset(content_type), errors="replace")
        if kind == "application/json":
            with contextlib.suppress(json.JSONDecodeError):
                text = json.dumps(json.loads(text), indent=2)
        return "", text
    raise InvalidArgumentError(f"{url} is {kind or 'of no declared type'}: not text, HTML or PDF")


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            return value.strip('"')
    return "utf-8"


def readable_markdown(html: str) -> tuple[str, str]:
    """A page's title and its main content (Readability) as Markdown."""
    document = Document(html)
    markdown = markdownify.markdownify(document.summary(html_partial=True), heading_style="ATX")
    return document.short_title(), tidy_text(markdown)


def html_markdown(html: str) -> str:
    """A piece of HTML as Markdown, all of it (no Readability: it was chosen on purpose)."""
    return tidy_text(markdownify.markdownify(html, strip=["script", "style"], heading_style="ATX"))


def tidy_text(text: str) -> str:
    """Trailing spaces and runs of blank lines gone."""
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


# -- search ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    title: str
    url: str
    snippet: str
    published_date: str | None = None


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, *, count: int) -> list[SearchHit]: ...


class BraveSearch:
    name = "brave"
    URL = "https://api.search.brave.com/res/v1/web/search"

    def __init__(self, api_key: str, *, timeout_s: float, url: str | None = None) -> None:
        self._key = api_key
        self._timeout = timeout_s
        self._url = url or self.URL

    async def search(self, query: str, *, count: int) -> list[SearchHit]:
        data = await _get_json(
            self._url,
            {"q": query, "count": count},
            {"X-Subscription-Token": self._key, "Accept": "application/json"},
            self._timeout,
        )
        results = (data.get("web") or {}).get("results") or []
        return [
            SearchHit(
                title=str(r.get("title", "")),
                url=str(r.get("url", "")),
                snippet=str(r.get("description", "")),
                published_date=r.get("page_age") or r.get("age"),
            )
            for r in results[:count]
        ]


class SearxngSearch:
    name = "searxng"

    def __init__(self, base_url: str, *, timeout_s: float) -> None:
        self._url = base_url.rstrip("/") + "/search"
        self._timeout = timeout_s

    async def search(self, query: str, *, count: int) -> list[SearchHit]:
        data = await _get_json(self._url, {"q": query, "format": "json"}, {}, self._timeout)
        return [
            SearchHit(
                title=str(r.get("title", "")),
                url=str(r.get("url", "")),
                snippet=str(r.get("content", "")),
                published_date=r.get("publishedDate"),
            )
            for r in (data.get("results") or [])[:count]
        ]


async def _get_json(
    url: str, params: dict[str, Any], headers: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """The configured search service (an operator's choice, so not SSRF-filtered)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(url, params=params, headers=headers)
    except httpx.HTTPError as exc:
        raise UnavailableError(f"the search service failed: {exc}") from None
    if response.status_code != 200:
        raise UnavailableError(f"the search service answered HTTP {response.status_code}")
    try:
        data = response.json()
    except ValueError:
        raise UnavailableError(
            "the search service answered with something other than JSON"
        ) from None
    return data if isinstance(data, dict) else {}


class WebSearch:
    """A provider behind an LRU cache (100 queries, 15 minutes)."""

    def __init__(self, provider: SearchProvider) -> None:
        self.provider = provider
        self._cache: TTLCache[tuple[str, int], list[SearchHit]] = TTLCache(
            CACHE_SIZE, CACHE_SECONDS
        )

    async def search(self, query: str, *, count: int) -> list[SearchHit]:
        key = (query.strip().lower(), count)
        hits = self._cache.get(key)
        if hits is None:
            hits = await self.provider.search(query, count=count)
            self._cache[key] = hits
        return hits
