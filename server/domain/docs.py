"""n8n's documentation, as far as this deployment knows it without the docs site: an index of
pages built from what the catalog and the image already ship — every node's and credential
type's own docs page (its URL from the node's codex or the credential's `documentationUrl`)
with a summary made from its description, a few general pages, and the knowledge base — and a
ranking over it (IDF-weighted tokens of title and path, boosts by intent and by the node or
credential type asked about).

Reading a page is the web fetcher's job (same SSRF rules and host approvals as fetch-url);
where the site cannot be reached, the index's own summary of the page is what there is.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from server.catalog.catalog import Catalog, CredentialType, NodeType

__all__ = [
    "DOCS_ORIGIN",
    "DocsEntry",
    "DocsIndex",
    "DocsMatch",
    "Intent",
    "docs_url_candidates",
]

DOCS_ORIGIN = "https://docs.n8n.io"
Intent = Literal["credential-setup", "node-help", "hosting", "api", "general"]
Kind = Literal["node", "credential", "page", "knowledge-base"]

# Pages every question about these areas should find, beside the per-type ones.
_GENERAL_PAGES: tuple[tuple[str, str, str], ...] = (
    (
        "Credentials",
        "/credentials/",
        "What credentials are, how to create, share and edit them, and how nodes use them.",
    ),
    (
        "Create and edit credentials",
        "/build/understand-workflows/create-and-edit-credentials/",
        "Setting up a credential from a node or the Credentials page, OAuth redirect URLs.",
    ),
    (
        "Hosting n8n",
        "/hosting/",
        "Self-hosting n8n: installing with npm or Docker, configuration through environment "
        "variables, databases, scaling with queue mode, security.",
    ),
    ("n8n public REST API", "/api/", "The public REST API: authentication and endpoints."),
    ("Expressions", "/code/expressions/", "Referencing data from earlier nodes with {{ }}."),
)
# What each intent favours: entries of a kind or under a path, and by how much (general
# pages are few, so a hosting or API question must lift them past per-type pages).
_INTENT_BOOSTS: dict[str, tuple[Kind | None, str, int]] = {
    "credential-setup": ("credential", "/integrations/builtin/credentials/", 90),
    "node-help": ("node", "/integrations/builtin/", 60),
    "hosting": (None, "/hosting/", 150),
    "api": (None, "/api/", 150),
}


@dataclass(frozen=True, kw_only=True)
class DocsEntry:
    title: str
    url: str  # on the docs site; a workspace path for the knowledge base
    kind: Kind
    summary: str
    node_type: str | None = None
    credential_type: str | None = None

    @property
    def path(self) -> str:
        return urlsplit(self.url).path if self.kind != "knowledge-base" else self.url


@dataclass(frozen=True, kw_only=True)
class DocsMatch:
    entry: DocsEntry
    score: float
    reason: str


def docs_url_candidates(url: str, origin: str = DOCS_ORIGIN) -> list[str]:
    """The forms a docs URL may be written in, normalised to the index's: with or without a
    trailing slash, `.md`, `index.html`, query or fragment, and a bare path."""
    parts = urlsplit(url.strip())
    path = parts.path if parts.scheme else url.strip().split("#")[0].split("?")[0]
    path = re.sub(r"(/index)?\.(md|html)$", "", path).rstrip("/")
    base = origin.rstrip("/")
    return [f"{base}{path}/", f"{base}{path}"]


def credential_docs_url(credential: CredentialType, origin: str = DOCS_ORIGIN) -> str:
    """n8n's rule: a full URL as is, else a name under the built-in credentials section."""
    given = credential.documentation_url.strip()
    if given.startswith(("http://", "https://")):
        return given
    name = given or credential.name.removesuffix("Api").removesuffix("OAuth2").lower()
    return f"{origin.rstrip('/')}/integrations/builtin/credentials/{name.strip('/')}/"


def _split_words(text: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", text)
    return re.sub(r"oauth\s*2", "oauth2", text, flags=re.IGNORECASE).lower()


def _tokens(*values: str | None) -> list[str]:
    found: list[str] = []
    for value in values:
        for token in re.findall(r"[a-z0-9]+", _split_words(value or "")):
            versioned = re.fullmatch(r"([a-z]+)[0-9]+", token)
            for candidate in (token, versioned.group(1) if versioned else ""):
                if len(candidate) >= 2 and candidate not in found:
                    found.append(candidate)
    return found


def _node_summary(node: NodeType) -> str:
    latest = node.latest
    lines = [node.description] if node.description else []
    options: dict[str, list[str]] = {}
    for prop in latest.get("properties") or []:
        if isinstance(prop, dict) and prop.get("name") in ("resource", "operation"):
            names = [str(o.get("name")) for o in prop.get("options") or [] if isinstance(o, dict)]
            options.setdefault(str(prop["name"]), []).extend(n for n in names if n)
    for key, names in options.items():
        unique = list(dict.fromkeys(names))
        lines.append(f"{key.capitalize()}s: {', '.join(unique[:40])}")
    slots = [str(c.get("name")) for c in latest.get("credentials") or [] if isinstance(c, dict)]
    if slots:
        lines.append(f"Credentials: {', '.join(slots)}")
    lines.append(f"Node type: {node.name} (versions {', '.join(f'{v:g}' for v in node.versions)})")
    return "\n".join(lines)


def _credential_summary(credential: CredentialType) -> str:
    fields = [
        str(p.get("displayName") or p.get("name"))
        for p in credential.properties
        if isinstance(p, dict) and p.get("type") != "hidden"
    ]
    lines = [f"Credential type {credential.name} ({credential.display_name})."]
    if fields:
        lines.append(f"Fields: {', '.join(fields[:30])}")
    if credential.extends:
        lines.append(f"Extends: {', '.join(credential.extends)}")
    if credential.supported_nodes:
        lines.append(f"Used by: {', '.join(credential.supported_nodes[:20])}")
    return "\n".join(lines)


def _node_docs_url(node: NodeType, origin: str) -> str | None:
    resources = node.codex.get("resources") or {}
    for link in resources.get("primaryDocumentation") or []:
        url = str(link.get("url") or "") if isinstance(link, dict) else ""
        if url.startswith(("http://", "https://")):
            return url.replace(DOCS_ORIGIN, origin.rstrip("/"), 1)
    return None


class DocsIndex:
    """The pages this deployment knows of, and the ranking over them."""

    def __init__(self, entries: Iterable[DocsEntry]) -> None:
        self.entries = list(entries)
        self.by_url = {e.url: e for e in self.entries if e.kind != "knowledge-base"}
        frequencies: Counter[str] = Counter()
        for entry in self.entries:
            frequencies.update(set(_tokens(entry.title, entry.path)))
        total = len(self.entries)
        self._weights = {t: math.log((total + 1) / (n + 1)) + 1 for t, n in frequencies.items()}

    @classmethod
    def build(
        cls, catalog: Catalog, knowledge_base: Path | None, origin: str = DOCS_ORIGIN
    ) -> DocsIndex:
        base = origin.rstrip("/")
        entries = [
            DocsEntry(title=title, url=f"{base}{path}", kind="page", summary=summary)
            for title, path, summary in _GENERAL_PAGES
        ]
        for node in catalog.nodes.values():
            url = _node_docs_url(node, base)
            if url and not node.hidden:
                entries.append(
                    DocsEntry(
                        title=f"{node.display_name} node",
                        url=url,
                        kind="node",
                        summary=_node_summary(node),
                        node_type=node.name,
                    )
                )
        for credential in catalog.credentials.values():
            entries.append(
                DocsEntry(
                    title=f"{credential.display_name} credentials",
                    url=credential_docs_url(credential, base),
                    kind="credential",
                    summary=_credential_summary(credential),
                    credential_type=credential.name,
                )
            )
        entries += _knowledge_base(knowledge_base)
        return cls(entries)

    def find(self, url: str, origin: str = DOCS_ORIGIN) -> DocsEntry | None:
        for candidate in docs_url_candidates(url, origin):
            if candidate in self.by_url:
                return self.by_url[candidate]
        return None

    def search(
        self,
        query: str,
        *,
        intent: str = "general",
        node_type: str | None = None,
        credential_type: str | None = None,
        credential_display_name: str | None = None,
        documentation_url: str | None = None,
        origin: str = DOCS_ORIGIN,
    ) -> list[DocsMatch]:
        """Every entry that matches at all, best first."""
        query_tokens = _tokens(query)
        credential_tokens = _tokens(credential_type, credential_display_name)
        wanted = _Wanted(
            urls=set(docs_url_candidates(documentation_url, origin))
            if documentation_url
            else set(),
            node_type=node_type,
            credential_type=credential_type,
            query_tokens=query_tokens,
            credential_tokens=credential_tokens,
            tokens=list(dict.fromkeys([*query_tokens, *credential_tokens, *_tokens(node_type)])),
            phrase=_split_words(query).strip(),
            intent=intent,
            origin=origin.rstrip("/"),
        )
        matches = [match for entry in self.entries if (match := self._score(entry, wanted))]
        return sorted(matches, key=lambda m: -m.score)

    def _score(self, entry: DocsEntry, wanted: _Wanted) -> DocsMatch | None:
        score = 0.0
        reasons: list[str] = []

        def add(points: float, reason: str) -> None:
            nonlocal score
            score += points
            reasons.append(reason)

        if entry.url in wanted.urls:
            add(500, "documentation URL match")
        if wanted.node_type and entry.node_type == wanted.node_type:
            add(200, "the node's own page")
        if wanted.credential_type and entry.credential_type == wanted.credential_type:
            add(200, "the credential type's own page")
        title, path = _split_words(entry.title), _split_words(entry.path)
        summary = _split_words(entry.summary)
        for token in wanted.tokens:
            hits = 12 * (token in title) + 5 * (token in path) + (token in summary)
            score += hits * self._weights.get(token, 1.0)
        if wanted.phrase and wanted.phrase in title:
            add(40, "title phrase match")
        if wanted.query_tokens and all(t in f"{title} {path}" for t in wanted.query_tokens):
            add(30, "query token match")
        elif wanted.query_tokens and all(
            t in f"{title} {path} {summary}" for t in wanted.query_tokens
        ):
            add(20, "every query word")
        if wanted.credential_tokens and all(
            t in f"{title} {path}" for t in wanted.credential_tokens
        ):
            add(30, "credential token match")
        points = _intent_points(entry, wanted, matched=score > 0)
        if points:
            add(points, f"{wanted.intent} docs")
        if score <= 0:
            return None
        return DocsMatch(
            entry=entry, score=round(score, 1), reason=", ".join(reasons) or "text match"
        )


@dataclass(frozen=True, kw_only=True)
class _Wanted:
    urls: set[str]
    node_type: str | None
    credential_type: str | None
    query_tokens: list[str]
    credential_tokens: list[str]
    tokens: list[str]  # all of the above, and the node type's
    phrase: str
    intent: str
    origin: str


def _intent_points(entry: DocsEntry, wanted: _Wanted, *, matched: bool) -> int:
    """What the question's intent adds: to a matching entry of the intent's kind or section,
    and to the intent's own general pages even when no word matched."""
    boost = _INTENT_BOOSTS.get(wanted.intent)
    if boost is None:
        return 0
    kind, section, points = boost
    in_section = entry.url.startswith(wanted.origin) and section in entry.path
    if (matched and (entry.kind == kind or in_section)) or (in_section and entry.kind == "page"):
        return points
    return 0


def _knowledge_base(root: Path | None) -> list[DocsEntry]:
    """The knowledge base's best practices (read in the workspace, at their paths)."""
    if root is None:
        return []
    try:
        listed = json.loads((root / "best-practices" / "index.json").read_text())
    except (OSError, ValueError):
        return []
    entries = []
    for item in listed:
        path = str(item.get("path", ""))
        try:
            text = (root.parent / path).read_text()
        except OSError:
            continue
        summary = " ".join(line for line in text.splitlines()[:12] if not line.startswith("#"))
        entries.append(
            DocsEntry(
                title=str(item.get("title") or path),
                url=path,
                kind="knowledge-base",
                summary=" ".join(summary.split())[:600],
            )
        )
    return entries
