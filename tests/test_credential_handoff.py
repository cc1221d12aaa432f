"""Credentials end to end: setup-credentials asks for several at once on the contract's card
and hands the browser setup over (`needsBrowserSetup`); the browser tools capture secrets a
vendor's page shows and make the credential from them after the person approves a card that
names fields, never values; a captured secret is in no model request, event, card or log."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from instance_ai.json_text import to_json
from instance_ai.v1 import credentials_pb2, credentials_pb2_grpc
from server.domain.secret_scan import find_secrets
from server.instance.types import WorkflowContent
from server.runtime.captured_secrets import CapturedSecrets
from server.settings import Settings
from server.wiring import credential_store
from tests.agent_fixtures import Chat, last_tool_results, model, of_type, with_model
from tests.browser_fixtures import Chromium, chromium, extension, serve_pages
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, Turn, text, tool
from tests.test_browser_tools import connect_browser
from tests.tool_client import ToolClient

__all__ = ["chromium", "model"]  # fixtures, shared

WHO = (("x-instance-ai-user", "ada"),)
# Three secrets a vendor's page shows: one of a known shape (an OpenAI project key), one
# the page labels as a secret, one neither (captured before anything reads the page).
API_KEY = "sk-proj-" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h1J3k5L7z9X2c4V6b8"
CLIENT_SECRET = "cs-PLANTED-9f8e7d6c5b4a3928"
PLAIN_TOKEN = "zz-PLANTED-unlabelled-5512"
SECRETS = (API_KEY, CLIENT_SECRET, PLAIN_TOKEN)

VENDOR = f"""<html><head><title>Acme console</title></head><body>
<h1>API keys</h1>
<label>Your new key <input id="key" readonly value="{API_KEY}"></label>
<dl><dt>Client secret</dt><dd id="cs">{CLIENT_SECRET}</dd></dl>
<p id="plain">{PLAIN_TOKEN}</p>
<p>Organization: org-visible-1</p>
<label>Notes <input id="blank"></label>
</body></html>"""
# The result of a call that took each type's only credential without a card.
AUTO = {"autoSelected": True}


def surfaces(
    model: FakeMessagesAPI,
    events: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> list[str]:
    return [
        json.dumps(model.requests),
        json.dumps(events),
        caplog.text,
        "".join(capfd.readouterr()),
    ]


# -- setup-credentials: several at once, and the hand-off to the browser ----------------------


async def test_one_card_for_every_credential_and_the_browser_hand_off(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    hint = {
        "template": {"headers": {"Authorization": "Key {{api_key}}"}},
        "placeholders": [{"name": "api_key", "title": "API key", "info": "Starts with fal-"}],
        "suggestedName": "fal.ai API Key",
    }
    async with serving(make_docker_settings(**with_model(model))) as (_app, channel):
        created = await credentials_pb2_grpc.CredentialsStub(channel).CreateCredential(
            credentials_pb2.CreateCredentialRequest(
                name="Team Slack", type="slackApi", data_json=to_json({"accessToken": "x"})
            )
        )
        slack = created.credential.id
        model.script(
            tool(
                "setup-credentials",
                {
                    "credentials": [
                        {"credentialType": "slackApi", "reason": "post the digest"},
                        {
                            "credentialType": "openAiApi",
                            "reason": "summarise",
                            "suggestedName": "OpenAI (Acme)",
                        },
                        {"credentialType": "httpTemplatedCustomAuth", "setupHint": hint},
                        {"credentialType": "notionApi", "preferNew": True},
                    ]
                },
            ),
            text("Over to the browser."),
        )
        chat = Chat(channel)
        run_id = await chat.send("h1", "connect everything")
        card = await chat.card("h1")
        requests = {r["credentialType"]: r for r in card["credentialRequests"]}
        assert list(requests) == ["slackApi", "openAiApi", "httpTemplatedCustomAuth", "notionApi"]
        assert requests["slackApi"]["existingCredentials"] == [{"id": slack, "name": "Team Slack"}]
        assert requests["slackApi"]["reason"] == "post the digest"
        assert requests["openAiApi"]["suggestedName"] == "OpenAI (Acme)"
        assert requests["httpTemplatedCustomAuth"]["setupHint"] == hint
        assert requests["notionApi"]["preferNew"] is True
        assert "preferNew" not in requests["slackApi"]
        assert card["message"].startswith("Select or create credentials: slackApi, openAiApi")
        assert "credentialFlow" not in card  # not all generic
        # The person picks "set up automatically" (the browser) for OpenAI.
        await chat.confirm(
            "h1", card["requestId"], kind="credentialAutoSetup", credentialType="openAiApi"
        )
        await chat.finished("h1", run_id)
    [handed] = last_tool_results(model.requests[1])
    result = json.loads(handed["content"])
    assert result["needsBrowserSetup"] is True and result["success"] is False
    assert result["credentialType"] == "openAiApi"
    assert result["docsUrl"] == "https://docs.n8n.io/integrations/builtin/credentials/openai/"
    fields = {f["name"]: f for f in result["requiredFields"]}
    assert fields["apiKey"]["required"] is True and fields["apiKey"]["type"] == "string"
    assert "credential-setup-with-computer-use" in result["message"]


async def test_the_only_credentials_are_taken_and_choices_checked(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    async with serving(make_docker_settings(**with_model(model))) as (_app, channel):
        stub = credentials_pb2_grpc.CredentialsStub(channel)
        ids = {}
        for name, kind in [("Slack", "slackApi"), ("Notion A", "notionApi"), ("B", "notionApi")]:
            made = await stub.CreateCredential(
                credentials_pb2.CreateCredentialRequest(
                    name=name, type=kind, data_json=to_json({"apiKey": "x"})
                )
            )
            ids[name] = made.credential.id
        tools = ToolClient(channel, "h2")
        # Every type has exactly one: no card at all.
        only = await tools.call("setup-credentials", credentials=[{"credentialType": "slackApi"}])
        assert only == {"success": True, "credentials": {"slackApi": ids["Slack"]}, **AUTO}
        # A type the instance does not have is refused with the nearest names, before a card.
        unknown = await tools.refused(
            "setup-credentials", credentials=[{"credentialType": "slackApiz"}]
        )
        assert unknown.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "slackApi" in (unknown.details() or "")
        # A recipe whose markers and placeholders do not match, on the wrong type.
        bad = await tools.refused(
            "setup-credentials",
            credentials=[
                {
                    "credentialType": "slackApi",
                    "setupHint": {
                        "template": {"headers": {"X-Key": "{{key}}"}},
                        "placeholders": [{"name": "token", "title": "Token", "type": "plain"}],
                    },
                }
            ],
        )
        details = bad.details() or ""
        assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT
        for problem in ("{{key}} has no placeholders entry", '"token" is never used'):
            assert problem in details
        assert "at least one must be a password" in details and "only for" in details
        both = await tools.refused(
            "setup-credentials", credentialType="slackApi", credentials=[{"credentialType": "x"}]
        )
        assert both.code() is grpc.StatusCode.INVALID_ARGUMENT

        # Two Notion credentials and a Slack one asked new: one card; the answer is checked.
        model.script(
            tool(
                "setup-credentials",
                {
                    "credentials": [
                        {"credentialType": "notionApi"},
                        {"credentialType": "slackApi", "preferNew": True},
                    ],
                    "requireUserSelection": True,
                },
            ),
            text("Done."),
        )
        chat = Chat(channel)
        run_id = await chat.send("h2", "set up notion, and a new slack one")
        card = await chat.card("h2")
        assert card["requireUserSelection"] is True
        assert [len(r["existingCredentials"]) for r in card["credentialRequests"]] == [2, 1]
        await chat.confirm(
            "h2",
            card["requestId"],
            kind="credentialSelection",
            credentials={"notionApi": ids["Notion A"]},
        )
        await chat.finished("h2", run_id)
    result = json.loads(last_tool_results(model.requests[1])[0]["content"])
    assert result["success"] is True and result["credentials"] == {"notionApi": ids["Notion A"]}
    assert "Nothing was chosen for slackApi" in result["message"]


# -- the browser: capture, approve, create; the secret goes nowhere else -----------------------


class Script:
    """The model's side of the browser setup, turn by turn, reading what the tools return."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.results: list[dict[str, Any]] = []
        self.snapshot = ""

    def __call__(self, request: dict[str, Any]) -> Turn:
        results = last_tool_results(request)
        self.results += results
        step = len(self.results)
        for result in results:
            if not result.get("is_error") and '"snapshot"' in result["content"]:
                self.snapshot = json.loads(result["content"])["snapshot"]
        key = {"credentialsKey": "acme"}
        turns: list[Callable[[], Turn]] = [
            lambda: tool("browser_navigate", {"url": f"{self.site}/keys"}),
            # Captured before anything reads the page: a value of no known shape.
            lambda: tool(
                "browser_capture_secret",
                key | {"field": "token", "element": {"selector": "#plain"}},
            ),
            lambda: tool("browser_snapshot", {}),
            lambda: tool(
                "browser_capture_secret",
                key | {"field": "apiKey", "element": {"ref": self._ref("textbox")}},
            ),
            lambda: tool(
                "browser_capture_secret",
                key | {"field": "clientSecret", "element": {"redactedKey": self._marker()}},
            ),
            lambda: tool(
                "browser_create_credential",
                key
                | {
                    "type": "openAiApi",
                    "name": "Acme OpenAI",
                    "data": {"organizationId": "org-visible-1"},
                    "resolveData": {
                        "apiKey": "apiKey",
                        "extra": {"clientSecret": "clientSecret", "token": "token"},
                    },
                },
            ),
            lambda: tool(
                "browser_evaluate",
                {"script": "[key.value, cs.textContent, plain.textContent].join(' | ')"},
            ),
            lambda: tool("browser_content", {}),
            lambda: tool("browser_screenshot", {}),
            lambda: text("The credential is made."),
        ]
        return turns[step]() if step < len(turns) else text("Done.")

    def _ref(self, role: str) -> str:
        line = next(line for line in self.snapshot.splitlines() if role in line)
        return line.split("[ref=")[1].split("]")[0]

    def _marker(self) -> str:
        markers = re.findall(r"\[REDACTED:secret_field:\d+\]", self.snapshot)
        assert markers, self.snapshot
        return str(markers[0])


async def test_a_captured_secret_reaches_a_credential_and_nothing_else(
    make_settings: Callable[..., Settings],
    model: FakeMessagesAPI,
    chromium: Chromium,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        serve_pages({"/keys": VENDOR}) as site,
        serving(make_settings(**with_model(model))) as (app, channel),
    ):
        script = Script(site)
        model.responder = script
        chat = Chat(channel, WHO)
        async with extension(chromium.http, await connect_browser(app, chromium.http)):
            run_id = await chat.send("cap", "Make the Acme key a credential")
            card = await chat.card("cap", within=120)
            # The card names the credential and its fields; no value, captured or plain.
            assert card["inputType"] == "resource-decision"
            assert card["message"] == (
                'browser_create_credential: Create credential "Acme OpenAI" (openAiApi)'
            )
            assert card["args"] == {
                "credentialsKey": "acme",
                "type": "openAiApi",
                "name": "Acme OpenAI",
                "capturedFields": ["apiKey", "extra.clientSecret", "extra.token"],
                "plainFields": ["organizationId"],
            }
            assert card["resourceDecision"]["options"] == [
                "denyOnce",
                "allowOnce",
                "allowForSession",
            ]
            assert "org-visible-1" not in json.dumps(card)
            await chat.confirm(
                "cap", card["requestId"], kind="resourceDecision", resourceDecision="allowOnce"
            )
            events = await chat.finished("cap", run_id, within=120)
        [made] = await app.parts.instance.credentials.all(["personal"], "openAiApi")
        stored = await credential_store(app.settings, app.parts.db).reveal(made.id)
    assert made.name == "Acme OpenAI"
    assert stored == {
        "organizationId": "org-visible-1",
        "apiKey": API_KEY,
        "extra": {"clientSecret": CLIENT_SECRET, "token": PLAIN_TOKEN},
    }
    by_call = {r["tool_use_id"]: r for r in script.results}
    outputs = [json.loads(r["content"]) if not r.get("is_error") else r for r in by_call.values()]
    captured = [o for o in outputs if isinstance(o, dict) and "fieldsCaptured" in o]
    assert [(o["fieldsCaptured"], o["length"]) for o in captured] == [
        (["token"], len(PLAIN_TOKEN)),
        (["apiKey"], len(API_KEY)),
        (["clientSecret"], len(CLIENT_SECRET)),
    ]
    assert captured[-1]["pendingFields"] == ["apiKey", "clientSecret", "token"]
    created = next(o for o in outputs if isinstance(o, dict) and "credentialId" in o)
    assert created == {
        "ok": True,
        "credentialId": made.id,
        "credentialName": "Acme OpenAI",
        "credentialType": "openAiApi",
    }
    # What the page showed reached the model as markers: in the snapshot, in what a script
    # read off the page afterwards, in the page's text; a picture of it was refused.
    assert "[REDACTED:openai_api_key:" in script.snapshot
    evaluated = next(o for o in outputs if isinstance(o, dict) and "result" in o)
    assert evaluated["result"].count("[REDACTED:") == 3
    screenshot = script.results[-1]
    assert screenshot.get("is_error") and "sensitive_context" in screenshot["content"]
    assert "org-visible-1" in json.dumps(model.requests)  # plain text stays readable
    await asyncio.sleep(0)
    for surface in surfaces(model, events, caplog, capfd):
        for secret in SECRETS:
            assert secret not in surface
    # Each call and result is in the log, without the values.
    assert len(of_type(events, "tool-result")) >= 8


async def test_creating_from_the_browser_is_gated_and_checked(
    make_settings: Callable[..., Settings], chromium: Chromium
) -> None:
    async with (
        serve_pages({"/keys": VENDOR}) as site,
        serving(make_settings(permissions={"createCredential": "blocked"})) as (app, channel),
    ):
        tools = ToolClient(channel, "gate", WHO)
        async with extension(chromium.http, await connect_browser(app, chromium.http)):
            await tools.call("browser_navigate", url=f"{site}/keys")
            nothing = await tools.refused(
                "browser_create_credential", credentialsKey="k", type="openAiApi", name="n"
            )
            assert nothing.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "browser_capture_secret first" in (nothing.details() or "")
            empty = await tools.refused(
                "browser_capture_secret",
                credentialsKey="k",
                field="f",
                element={"selector": "#blank"},
            )
            assert empty.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "holds no value" in (empty.details() or "")
            got = await tools.call(
                "browser_capture_secret",
                credentialsKey="k",
                field="apiKey",
                element={"selector": "#key"},
            )
            assert got == {
                "ok": True,
                "credentialsKey": "k",
                "fieldsCaptured": ["apiKey"],
                "pendingFields": ["apiKey"],
                "length": len(API_KEY),
            }
            unknown_marker = await tools.refused(
                "browser_capture_secret",
                credentialsKey="k",
                field="x",
                element={"redactedKey": "[REDACTED:jwt:99]"},
            )
            assert "fresh browser_snapshot" in (unknown_marker.details() or "")
            missing = await tools.refused(
                "browser_create_credential",
                credentialsKey="k",
                type="openAiApi",
                name="n",
                resolveData={"apiKey": "apiKey", "org": "organization"},
            )
            assert missing.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert 'names field "organization", which was not captured' in (missing.details() or "")
            marker = await tools.refused(
                "browser_create_credential",
                credentialsKey="k",
                type="openAiApi",
                name="n",
                data={"apiKey": "[REDACTED:openai_api_key:1]"},
            )
            assert marker.code() is grpc.StatusCode.INVALID_ARGUMENT
            blocked = await tools.refused(
                "browser_create_credential",
                credentialsKey="k",
                type="openAiApi",
                name="n",
                resolveData={"apiKey": "apiKey"},
            )
            assert blocked.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "createCredential: blocked" in (blocked.details() or "")
            for secret in SECRETS:
                assert secret not in str(blocked) + str(missing) + str(marker)
        assert await app.parts.instance.credentials.all(["personal"]) == []


async def test_creating_with_approval_always_allowed_needs_no_card(
    make_settings: Callable[..., Settings], chromium: Chromium
) -> None:
    async with (
        serve_pages({"/keys": VENDOR}) as site,
        serving(make_settings(permissions={"createCredential": "always_allow"})) as (
            app,
            channel,
        ),
    ):
        tools = ToolClient(channel, "allow", WHO)
        async with extension(chromium.http, await connect_browser(app, chromium.http)):
            await tools.call("browser_navigate", url=f"{site}/keys")
            await tools.call(
                "browser_capture_secret",
                credentialsKey="k",
                field="apiKey",
                element={"selector": "#key"},
            )
            made = await tools.call(
                "browser_create_credential",
                credentialsKey="k",
                type="openAiApi",
                name="Direct",
                resolveData={"apiKey": "apiKey"},
            )
            # The fields are forgotten once the credential exists.
            again = await tools.refused(
                "browser_create_credential",
                credentialsKey="k",
                type="openAiApi",
                name="Again",
                resolveData={"apiKey": "apiKey"},
            )
            assert "browser_capture_secret first" in (again.details() or "")
        stored = await credential_store(app.settings, app.parts.db).reveal(made["credentialId"])
    assert stored == {"apiKey": API_KEY}


# -- setup-workflow: recipes on the cards, and credentials asked anew ------------------------

FAL = "https://fal.run/fal-ai/flux"
RECIPE = {
    "template": {"headers": {"Authorization": "Key {{api_key}}"}},
    "placeholders": [{"name": "api_key", "title": "API key"}],
    "docsUrl": "https://fal.ai/dashboard/keys",
    "suggestedName": "fal.ai API Key",
    "testUrl": "https://fal.run/account",
}


async def test_setup_workflow_carries_recipes_and_asks_anew(
    make_docker_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    async with serving(make_docker_settings(**with_model(model))) as (app, channel):
        await app.parts.events.append("w1", "thread-title-updated", {"title": "test"})
        stub = credentials_pb2_grpc.CredentialsStub(channel)
        old, new = [
            (
                await stub.CreateCredential(
                    credentials_pb2.CreateCredentialRequest(
                        name=name, type="slackApi", data_json=to_json({"accessToken": "x"})
                    )
                )
            ).credential
            for name in ("Old Slack", "New Slack")
        ]
        nodes = [
            {
                "name": "Generate",
                "type": "n8n-nodes-base.httpRequest",
                "typeVersion": 4.2,
                "position": [0, 0],
                "parameters": {
                    "method": "POST",
                    "url": FAL,
                    "authentication": "genericCredentialType",
                    "genericAuthType": "httpTemplatedCustomAuth",
                },
            },
            {
                "name": "Notify",
                "type": "n8n-nodes-base.slack",
                "typeVersion": 2.3,
                "position": [200, 0],
                "parameters": {"text": "done"},
                "credentials": {"slackApi": {"id": old.id, "name": old.name}},
            },
        ]
        saved = await app.parts.instance.workflows.save_from_source(
            thread_id="w1",
            file_path="src/fal.workflow.ts",
            source_hash="h",
            content=WorkflowContent(name="Fal", nodes=nodes, connections={}, settings={}),
            workflow_id=None,
        )
        bad = RECIPE | {"testUrl": FAL, "placeholders": [{"name": "key", "title": "Key"}]}
        model.script(
            tool("setup-workflow", {"workflowId": saved.id, "credentialHints": [bad]}),
            tool(
                "setup-workflow",
                {
                    "workflowId": saved.id,
                    "credentialHints": [RECIPE],
                    "preferNewCredentials": ["slackApi"],
                },
            ),
            text("Set up."),
        )
        chat = Chat(channel)
        run_id = await chat.send("w1", "set it up with a new slack credential")
        first = await chat.card("w1")
        [generate] = first["setupRequests"]
        assert generate["nodeName"] == "Generate"
        assert generate["credentialType"] == "httpTemplatedCustomAuth"
        assert generate["setupHint"] == RECIPE | {
            "serviceHost": "fal.run",
            "serviceOrigin": "https://fal.run",
        }
        [items] = of_type(await chat.events("w1"), "setup-items")
        templated = next(
            i for i in items["items"] if i["id"] == "credential:httpTemplatedCustomAuth"
        )
        assert templated["setupHint"]["serviceOrigin"] == "https://fal.run"
        await chat.confirm(
            "w1", first["requestId"], kind="setupWorkflowApply", skippedNodes=["Generate"]
        )
        second = await chat.until(
            "w1",
            lambda e: (
                e["type"] == "confirmation-request"
                and e["payload"]["requestId"] != first["requestId"]
            ),
        )
        [notify] = second[-1]["payload"]["setupRequests"]
        # Bound to a working credential, yet asked anew: nothing preselected, both listed.
        assert notify["nodeName"] == "Notify" and notify["preferNewCredential"] is True
        assert "credentials" not in notify["node"]
        assert {c["name"] for c in notify["existingCredentials"]} == {"Old Slack", "New Slack"}
        await chat.confirm(
            "w1",
            second[-1]["payload"]["requestId"],
            kind="setupWorkflowApply",
            nodeCredentials={"Notify": {"slackApi": new.id}},
        )
        await chat.finished("w1", run_id)
        updated = await app.parts.instance.workflows.require(saved.id)
    refused = last_tool_results(model.requests[1])[0]
    assert refused["is_error"]
    for problem in ("one of the workflow's own endpoints", "{{api_key}} has no placeholders"):
        assert problem in refused["content"]
    result = json.loads(last_tool_results(model.requests[2])[0]["content"])
    assert result == {"completedNodes": ["Notify"], "skippedNodes": ["Generate"], "failedNodes": []}
    notified = next(n for n in updated.nodes if n["name"] == "Notify")
    assert notified["credentials"]["slackApi"] == {"id": new.id, "name": "New Slack"}


# -- the redaction itself ---------------------------------------------------------------------


def test_markers_are_stable_per_thread_and_hold_no_value() -> None:
    secrets = CapturedSecrets(idle_seconds=3600)
    page = {"snapshot": f"key: {API_KEY}\nagain {API_KEY}", "title": "Keys"}
    redacted, count = secrets.redact("t1", page)
    assert count == 2 and API_KEY not in json.dumps(redacted)
    [marker] = set(re.findall(r"\[REDACTED:openai_api_key:\d+\]", redacted["snapshot"]))
    assert secrets.value_of("t1", marker) == API_KEY
    assert secrets.value_of("t2", marker) is None  # another thread was never shown it
    # The same value keeps its marker; a value spotted on the page gets one of its kind.
    again, _ = secrets.redact("t1", [API_KEY, CLIENT_SECRET], [("secret_field", CLIENT_SECRET)])
    assert again[0] == marker and again[1].startswith("[REDACTED:secret_field:")
    # A captured value is redacted wherever it shows up later, whatever its shape.
    assert secrets.capture("t1", "acme", "token", PLAIN_TOKEN) == ["token"]
    assert secrets.scrub_text("t1", f"failed near {PLAIN_TOKEN}") == (
        "failed near [REDACTED:captured_secret:3]"
    )
    assert PLAIN_TOKEN not in repr(secrets) + repr(secrets._threads)
    secrets.clear("t1", "acme")
    assert secrets.fields("t1", "acme") is None
    assert secrets.contains_secret("t1", PLAIN_TOKEN)  # still redacted after the credential
    idle = CapturedSecrets(idle_seconds=0)
    idle.capture("t1", "k", "f", PLAIN_TOKEN)
    assert idle.fields("t1", "k") is None  # dropped once idle
    assert find_secrets(f"x {API_KEY} y ghp_{'a' * 36}") == [
        ("openai_api_key", API_KEY),
        ("github_token", "ghp_" + "a" * 36),
    ]
