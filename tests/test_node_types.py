"""materialize-node-type on a real sandbox: typed parameters written into the workspace — the
image's own files, or generated from the catalog's description for a node the image ships no
types for — so that a typed import of that node compiles and type-checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from server.settings import Settings
from tests.conftest import serving
from tests.test_build import Client

__all__ = ["client"]

# htmlExtract v1: in the catalog (a retired node old workflows still use), no shipped types.
SOURCE = """import { node, trigger, workflow } from '@n8n/workflow-sdk';
import type { HtmlExtractV1Node } from '@n8n/node-types/n8n-nodes-base/htmlExtract/v1';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' },
});
const extract = node<HtmlExtractV1Node>({
  type: 'n8n-nodes-base.htmlExtract',
  version: 1,
  config: { name: 'Extract', parameters: { sourceData: 'json', PARAMETER: 'html' } },
});

export default workflow('typed-extract', 'Typed extract').add(start).to(extract);
"""


@pytest.fixture
async def client(make_docker_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    async with serving(make_docker_settings()) as (app, channel):
        yield Client(app, channel)


async def test_a_node_without_shipped_types_is_generated_and_then_type_checks(
    client: Client,
) -> None:
    await client.write("src/extract.workflow.ts", SOURCE.replace("PARAMETER", "dataPropertyName"))
    missing = await client.build("src/extract.workflow.ts")
    assert not missing.success
    assert [e.code for e in missing.errors if e.source == "typescript"] == ["TS2307"]

    made = await client.call("materialize-node-type", nodeIds=["n8n-nodes-base.htmlExtract"])
    (definition,) = made["definitions"]
    assert definition["source"] == "generated" and definition.get("error") is None
    assert definition["path"] == "node-types/n8n-nodes-base/htmlExtract/v1.ts"
    assert definition["importPath"] == "@n8n/node-types/n8n-nodes-base/htmlExtract/v1"
    assert "export type HtmlExtractV1Node" in definition["content"]
    read = await client.call("workspace_read_file", path=definition["path"])
    assert read["content"] == definition["content"]

    built = await client.build("src/extract.workflow.ts")
    assert built.success, [e.message for e in built.errors]
    # The types are checked: a misspelled parameter is a TypeScript error on its line.
    await client.write("src/extract.workflow.ts", SOURCE.replace("PARAMETER", "dataPropertyNam"))
    typo = await client.build("src/extract.workflow.ts")
    typed = [e for e in typo.errors if e.source == "typescript"]
    assert [(e.code, e.line) for e in typed] == [("TS2561", 10)]
    assert "dataPropertyName" in typed[0].message


async def test_shipped_types_are_copied_and_bad_requests_are_answered_per_node(
    client: Client,
) -> None:
    made = await client.call(
        "materialize-node-type",
        nodeIds=[
            {"nodeId": "n8n-nodes-base.httpRequest", "version": "v42"},
            {
                "nodeId": "n8n-nodes-base.slack",
                "version": "2.3",
                "resource": "message",
                "operation": "post",
            },
            "n8n-nodes-base.slakc",
            {"nodeId": "n8n-nodes-base.set", "version": "9"},
        ],
    )
    http, slack, unknown, version = made["definitions"]
    assert (http["source"], http["path"]) == (
        "image",
        "node-types/n8n-nodes-base/httpRequest/v42.ts",
    )
    assert "export interface HttpRequestV42Params" in http["content"]
    # A split node: its whole folder, the file asked about returned.
    assert slack["path"] == "node-types/n8n-nodes-base/slack/v23/resource_message/operation_post.ts"
    assert (
        slack["importPath"]
        == "@n8n/node-types/n8n-nodes-base/slack/v23/resource_message/operation_post"
    )
    listed = await client.call(
        "workspace_execute_command", command="ls node-types/n8n-nodes-base/slack/v23"
    )
    assert "index.ts" in listed["stdout"].split() and "resource_message" in listed["stdout"]
    assert "did you mean" in unknown["error"] and unknown["path"] == ""
    assert "available: 1, 2, 3, 3.1" in version["error"]
    # The copied folder type-checks from the workspace like the image's.
    source = (
        "import { node, trigger, workflow } from '@n8n/workflow-sdk';\n"
        f"import type {{ HttpRequestV42Node }} from '{http['importPath']}';\n"
        "const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, "
        "config: { name: 'Start' } });\n"
        "const get = node<HttpRequestV42Node>({ type: 'n8n-nodes-base.httpRequest', "
        "version: 4.2, config: { name: 'Get', parameters: { url: 'https://example.com' } } });\n"
        "export default workflow('typed-http', 'Typed').add(start).to(get);\n"
    )
    await client.write("src/http.workflow.ts", source)
    built = await client.build("src/http.workflow.ts")
    assert built.success, [e.message for e in built.errors]
