"""The threads' bundles in the real image (sandbox/image/bundler/bundle.mjs, bin/bundle-loader.cjs):
modules come from one file, yet every class exists once per thread, as without a bundle, and
every bundled file sees its own `__dirname`; Node 24 is the sandbox's `node` and its compile
cache is read from the image."""

from __future__ import annotations

import json
from typing import Any

from sandbox.manager import SandboxManager
from sandbox.provider import SandboxProvider

NODE_CLASS = "/opt/app/node_modules/n8n-nodes-base/dist/nodes/Set/Set.node.js"

# What a thread that served itself from the engine's bundle sees (run from the workspace, as
# the threads' requires resolve: /home/user/node_modules is the image's tree).
PROBE = f"""
const {{ createRequire }} = require('node:module');
const served = require('/opt/app/bin/bundle-loader.cjs').serveFromBundle('engine');
const workflow = require('n8n-workflow');
const core = require('n8n-core');
const fromNodeClass = createRequire({json.dumps(NODE_CLASS)});
const fromCore = createRequire(require.resolve('n8n-core'));
const {{ NodeOperationError }} = fromNodeClass('n8n-workflow');
const node = {{ name: 'Set', type: 'n8n-nodes-base.set', typeVersion: 3, parameters: {{}} }};
const {{ Set: SetNode }} = fromNodeClass({json.dumps(NODE_CLASS)});
// n8n-nodes-base's own files (the node classes) are never bundled; the engine's are.
const engineFile = /node_modules[/]n8n-(workflow|core)[/]/;
const fromFiles = Object.keys(require.cache).filter((f) => engineFile.test(f));
console.log(JSON.stringify({{
  served,
  node: process.version,
  sameWorkflowForNodeClasses: fromNodeClass('n8n-workflow') === workflow,
  sameWorkflowForCore: fromCore('n8n-workflow') === workflow,
  sameLuxon: fromNodeClass('luxon') === fromCore('luxon'),
  errorIsTheEngines: new NodeOperationError(node, 'x') instanceof workflow.NodeOperationError,
  nodeClassRuns: typeof new SetNode().nodeVersions,
  coreLoaded: typeof core.WorkflowExecute,
  modulesReadFromFiles: fromFiles.length,
  compileCache: require('node:module').getCompileCacheDir?.() ?? null,
}}));
"""


async def run_node(
    manager: SandboxManager, thread: str, script: str, *, bundles: bool = True
) -> dict[str, Any]:
    """What `node -e script` prints (one JSON line), run in the workspace, as the threads'
    requires resolve (/home/user/node_modules is the image's tree)."""
    container = await manager.acquire(thread)
    env = {} if bundles else {"INSTANCE_AI_SANDBOX_BUNDLES": "off"}
    result = manager.engine.exec(
        container.id, ["node", "-e", script], workdir="/home/user/workspace", env=env
    )
    assert result.exit_code == 0, result.stderr.decode(errors="replace")[-2000:]
    return dict(json.loads(result.stdout))


async def test_one_bundle_per_thread_with_every_class_once(provider: SandboxProvider) -> None:
    manager = SandboxManager(provider, use_worker=False)
    try:
        bundled = await run_node(manager, "bundled", PROBE)
        assert bundled["served"] is True
        assert str(bundled["node"]).startswith("v24.")
        # Nothing of n8n's packages read file by file: all from the bundle...
        assert bundled["modulesReadFromFiles"] == 0
        # ...and the node classes, loaded from node_modules, share its modules.
        assert bundled["sameWorkflowForNodeClasses"] is True
        assert bundled["sameWorkflowForCore"] is True
        assert bundled["sameLuxon"] is True
        assert bundled["errorIsTheEngines"] is True
        assert bundled["nodeClassRuns"] == "object"
        assert bundled["coreLoaded"] == "function"
        assert (
            bundled["compileCache"]
            == "/opt/app/compile-cache/" + str(bundled["compileCache"]).rsplit("/", 1)[-1]
        )
        # The switch for telling a bundle's fault from a package's: file by file, same answers.
        unbundled = await run_node(manager, "unbundled", PROBE, bundles=False)
        assert unbundled["served"] is False
        assert int(str(unbundled["modulesReadFromFiles"])) > 100
        for same in ("sameWorkflowForNodeClasses", "sameLuxon", "errorIsTheEngines"):
            assert unbundled[same] is True
    finally:
        await manager.close()


# A constant the SDK computes from its own file's `__dirname` at load.
DIRNAME_PROBE = """
const served = require('/opt/app/bin/bundle-loader.cjs').serveFromBundle('compiler');
const types = require('@n8n/workflow-sdk/dist/generate-types/generate-types');
const file = require.resolve('@n8n/workflow-sdk/dist/generate-types/generate-types');
const fromFile = file in require.cache;
console.log(JSON.stringify({ served, fromFile, path: types.NODES_BASE_TYPES }));
"""


async def test_bundled_files_see_their_own_directory(provider: SandboxProvider) -> None:
    """A file served from the bundle computes paths from its own directory in the image, as
    the same file read from node_modules does, never from the bundle's."""
    manager = SandboxManager(provider, use_worker=False)
    try:
        answers = [
            await run_node(manager, "dirname", DIRNAME_PROBE, bundles=bundles)
            for bundles in (True, False)
        ]
        bundled, unbundled = answers
        assert (bundled["served"], bundled["fromFile"]) == (True, False)
        assert (unbundled["served"], unbundled["fromFile"]) == (False, True)
        # generate-types.js lives in /opt/app/node_modules/@n8n/workflow-sdk/dist/generate-types.
        assert (
            bundled["path"]
            == unbundled["path"]
            == "/opt/app/node_modules/nodes-base/dist/types/nodes.json"
        )
    finally:
        await manager.close()
