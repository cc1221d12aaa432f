"""Testing a credential: the credential type's declared test request, sent by the service
through the SSRF rules (`egress.check`, pinned connection), with the type's declared way of
authenticating. Expressions are resolved only in their simple form, `{{$credentials.name}}`;
nothing is evaluated as code. Each request is logged by method, host and path (never headers,
query or body, which carry the secret); results never contain secret values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from server.catalog.catalog import CredentialType
from server.domain.egress import check, pinned_request
from server.domain.web import Authorize, HostNotApproved

__all__ = ["CredentialTester", "TestOutcome", "Untestable"]

log = structlog.get_logger(__name__)

_REFERENCE = re.compile(r"\{\{\s*\$credentials\??\.([A-Za-z0-9_]+)\s*\}\}")


class Untestable(Exception):
    """The type declares no test the service can run; the message says why."""


@dataclass(frozen=True, kw_only=True)
class TestOutcome:
    success: bool
    message: str


class CredentialTester:
    def __init__(self, *, timeout_s: float, allow: frozenset[str] = frozenset()) -> None:
        self._timeout = timeout_s
        self._allow = allow

    async def test(
        self, kind: CredentialType, data: dict[str, Any], *, authorize: Authorize
    ) -> TestOutcome:
        """Send the test request; `authorize(host)` false raises HostNotApproved first."""
        try:
            request = _request_of(kind, data)
        except Untestable as why:
            return TestOutcome(success=False, message=str(why))
        target = await check(request["url"], allow=self._allow)
        if not await authorize(target.host):
            raise HostNotApproved(target.host, request["url"].split("?")[0])
        path = urlsplit(request["url"]).path or "/"
        async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
            built = pinned_request(
                client,
                target,
                method=request["method"],
                headers=request["headers"],
                params=request["params"] or None,
                json=request["body"] or None,
            )
            basic = httpx.BasicAuth(*request["basic"]) if request["basic"] else None
            try:
                response = await client.send(built, auth=basic)
            except httpx.HTTPError as exc:
                log.info("credential test request failed", host=target.host, path=path)
                return TestOutcome(
                    success=False, message=f"{target.host} did not answer ({type(exc).__name__})"
                )
        log.info(
            "credential test request",
            method=request["method"],
            host=target.host,
            path=path,
            status=response.status_code,
        )
        return _judge(kind, response)


def _request_of(kind: CredentialType, data: dict[str, Any]) -> dict[str, Any]:
    if not kind.test or not kind.test.get("request"):
        raise Untestable(
            f"credential type {kind.name} declares no test request; check it by running a node "
            "that uses it"
        )
    if kind.authenticate.get("type") != "generic":
        raise Untestable(
            f"credential type {kind.name} authenticates in code, which the service does not run; "
            "check it by running a node that uses it"
        )
    values = {p["name"]: p.get("default") for p in kind.properties if "name" in p} | data
    spec = kind.test["request"]
    auth = kind.authenticate.get("properties") or {}
    base = str(_resolve(spec.get("baseURL", ""), values) or "")
    url = str(_resolve(spec.get("url", ""), values) or "")
    full = url if not base else base.rstrip("/") + "/" + url.lstrip("/")
    basic = None
    if isinstance(auth.get("auth"), dict):
        user = _resolve(auth["auth"].get("username", ""), values)
        password = _resolve(auth["auth"].get("password", ""), values)
        basic = (str(user or ""), str(password or ""))
    return {
        "url": full,
        "method": str(spec.get("method", "GET")).upper(),
        "headers": {
            str(k): str(v)
            for k, v in _resolve(
                {**auth.get("headers", {}), **spec.get("headers", {})}, values
            ).items()
        },
        "params": _resolve({**auth.get("qs", {}), **spec.get("qs", {})}, values),
        "body": _resolve({**auth.get("body", {}), **spec.get("body", {})}, values),
        "basic": basic,
    }


def _resolve(value: Any, values: dict[str, Any]) -> Any:
    """`={{$credentials.x}}`-style templates filled in; other expressions are refused."""
    if isinstance(value, dict):
        return {_resolve(k, values): _resolve(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, values) for v in value]
    if not isinstance(value, str) or not value.startswith("="):
        return value
    template = value[1:]
    whole = _REFERENCE.fullmatch(template.strip())
    if whole:
        return values.get(whole.group(1))
    filled = _REFERENCE.sub(lambda m: str(values.get(m.group(1)) or ""), template)
    if "{{" in filled:
        raise Untestable(
            "the test request uses an expression the service does not evaluate; check the "
            "credential by running a node that uses it"
        )
    return filled


def _judge(kind: CredentialType, response: httpx.Response) -> TestOutcome:
    for rule in (kind.test or {}).get("rules") or []:
        properties = rule.get("properties") or {}
        if rule.get("type") == "responseCode" and response.status_code == properties.get("value"):
            return TestOutcome(success=False, message=str(properties.get("message", "failed")))
        if rule.get("type") == "responseSuccessBody":
            try:
                body = response.json()
            except ValueError:
                continue
            found: Any = body
            for part in str(properties.get("key", "")).split("."):
                found = found.get(part) if isinstance(found, dict) else None
            if found == properties.get("value"):
                return TestOutcome(success=False, message=str(properties.get("message", "failed")))
    if response.status_code >= 400:
        return TestOutcome(
            success=False,
            message=f"the service refused the credential (HTTP {response.status_code})",
        )
    return TestOutcome(success=True, message="Connection tested successfully")
