"""What a saved workflow still needs from a person before it can run for real: credentials
its nodes require (or reference but that do not exist) and parameters left as SDK
placeholders (`<__PLACEHOLDER_VALUE__hint__>`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

from server.catalog.catalog import Catalog
from server.domain.secret_scan import find_secrets

__all__ = [
    "PLACEHOLDER",
    "TEMPLATED_AUTH",
    "NodeSetup",
    "hint_problems",
    "needed",
    "service_url",
]

PLACEHOLDER = re.compile(r"<__PLACEHOLDER_VALUE__([\s\S]*?)__>")


@dataclass(kw_only=True)
class NodeSetup:
    node_name: str
    node_type: str
    credential_types: list[str] = field(default_factory=list)
    # Dotted parameter path → the hint the placeholder carries.
    parameters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, value: dict[str, Any]) -> NodeSetup:
        return cls(
            node_name=value["nodeName"],
            node_type=value["nodeType"],
            credential_types=list(value.get("credentialTypes") or []),
            parameters={p["path"]: p.get("hint", "") for p in value.get("parameters") or []},
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "nodeName": self.node_name,
            "nodeType": self.node_type,
            "credentialTypes": self.credential_types,
            "parameters": [{"path": p, "hint": h} for p, h in self.parameters.items()],
        }


def needed(
    workflow: dict[str, Any],
    catalog: Catalog,
    known_credentials: set[str],
    prefer_new: Iterable[str] = (),
) -> list[NodeSetup]:
    """Per node, in workflow order: what is missing. A credential type in `prefer_new` (the
    person wants a new one of it) is missing even where a node already has one."""
    renew = set(prefer_new)
    missing: dict[str, set[str]] = {}
    for finding in catalog.check_workflow(workflow):
        if finding.code == "MISSING_CREDENTIAL" and finding.node_name and finding.path:
            missing.setdefault(finding.node_name, set()).add(finding.path.split(".", 1)[1])
    out = []
    for node in workflow.get("nodes") or []:
        name = str(node.get("name"))
        setup = NodeSetup(node_name=name, node_type=str(node.get("type")))
        slots = node.get("credentials") or {}
        dangling = {
            kind
            for kind, ref in slots.items()
            if kind in renew or not isinstance(ref, dict) or ref.get("id") not in known_credentials
        }
        chosen = _parameter_credential(node.get("parameters") or {})
        unbound = {chosen} if chosen is not None and chosen not in slots else set()
        setup.credential_types = sorted(missing.get(name, set()) | dangling | unbound)
        setup.parameters = dict(_placeholders(node.get("parameters") or {}, ""))
        if setup.credential_types or setup.parameters:
            out.append(setup)
    return out


def _parameter_credential(parameters: dict[str, Any]) -> str | None:
    """The credential type an HTTP Request style node picks by parameter (generic auth, or a
    predefined type), which its credential slots do not declare."""
    field_name = {
        "genericCredentialType": "genericAuthType",
        "predefinedCredentialType": "nodeCredentialType",
    }.get(str(parameters.get("authentication")))
    kind = parameters.get(field_name) if field_name else None
    return kind if isinstance(kind, str) and kind and not kind.startswith("=") else None


def _placeholders(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        found = PLACEHOLDER.search(value)
        if found:
            yield path, found.group(1)
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _placeholders(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _placeholders(sub, f"{path}.{index}" if path else str(index))


# -- credential recipes (setup hints) ---------------------------------------------------------

TEMPLATED_AUTH = "httpTemplatedCustomAuth"
_MARKER = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")
_LINK = re.compile(
    r"https?://|www\.|\b[\w-]+(?:\.[\w-]+)*\.(?:com|io|ai|dev|app|net|org|co|run|sh|cloud)\b",
    re.IGNORECASE,
)


def _fixed_url(raw: Any) -> SplitResult | None:
    """A node's URL parameter up to its first expression, when that is an http(s) URL."""
    if not isinstance(raw, str):
        return None
    plain = (raw[1:] if raw.startswith("=") else raw).split("{{")[0].strip()
    return urlsplit(plain) if re.match(r"^https?://", plain, re.IGNORECASE) else None


def service_url(raw: Any) -> tuple[str, str] | None:
    """(host, origin) of a node's URL parameter, when it is a fixed http(s) URL up to its
    first expression (`=https://api.x.com/{{ $json.id }}` → api.x.com)."""
    parts = _fixed_url(raw)
    if parts is None or not parts.hostname:
        return None
    host = parts.hostname.lower()
    port = f":{parts.port}" if parts.port and parts.port not in (80, 443) else ""
    return host, f"{parts.scheme.lower()}://{host}{port}"


def _url_key(raw: Any) -> str | None:
    """A URL as origin + path without a trailing slash, for comparing two of them."""
    parts = _fixed_url(raw)
    if parts is None:
        return None
    return f"{parts.scheme.lower()}://{(parts.netloc or '').lower()}{parts.path}".rstrip("/")


def hint_problems(
    hint: dict[str, Any], *, node_urls: Iterable[Any] = (), service_origin: str | None = None
) -> list[str]:
    """What is wrong with a recipe for a templated credential: its `{{markers}}` and its
    placeholders must match one to one, at least one input must be masked, infos say what a
    value is (never where to get it), no secret may be written in it, and its testUrl must be
    a separate read-only endpoint of the same service (`service_origin`), not one the
    workflow's own nodes call (`node_urls`)."""
    markers: set[str] = set()
    strings = list(_strings(hint.get("template") or {}))
    for text in strings:
        markers.update(_MARKER.findall(text))
    problems = []
    if not markers:
        problems.append("the template contains no {{placeholder}} marker")
    if any(find_secrets(text) for text in strings):
        problems.append("the template holds a secret value; put {{placeholder}} markers there")
    placeholders = [p for p in hint.get("placeholders") or [] if isinstance(p, dict)]
    names = [str(p.get("name", "")) for p in placeholders]
    for placeholder in placeholders:
        if _LINK.search(str(placeholder.get("info") or "")):
            problems.append(
                f'placeholder "{placeholder.get("name")}" mentions a URL or domain in its info: '
                "keep info to the value itself (its format, or which of the provider's tokens "
                "it is)"
            )
    if placeholders and all(p.get("type") == "plain" for p in placeholders):
        problems.append(
            "every placeholder is plain: at least one must be a password (masked) input"
        )
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f'placeholder "{name}" is defined more than once')
    problems += [
        f"marker {{{{{m}}}}} has no placeholders entry" for m in sorted(markers) if m not in names
    ]
    problems += [
        f'placeholder "{n}" is never used in the template' for n in sorted(set(names) - markers)
    ]
    test_url = hint.get("testUrl")
    if test_url is not None:
        tested = service_url(test_url)
        if tested is None:
            problems.append(
                f'testUrl "{test_url}" is not an absolute http(s) URL: omit it when the '
                "provider documents no read-only endpoint"
            )
        elif service_origin is not None and tested[1] != service_origin:
            problems.append(
                f'testUrl origin "{tested[1]}" is not the workflow\'s service origin '
                f'"{service_origin}"'
            )
        key = _url_key(test_url)
        if key is not None and any(_url_key(url) == key for url in node_urls):
            problems.append(
                f'testUrl "{test_url}" is one of the workflow\'s own endpoints: it must be a '
                "separate read-only endpoint (account, usage, a listing), or omitted"
            )
    return problems


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for sub in value.values():
            yield from _strings(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub)
