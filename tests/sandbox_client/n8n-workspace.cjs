// n8n's own assistant code sets up its workspace in a sandbox of the sandbox API and builds a
// workflow there, exactly as n8n 2.41.1 does for a thread: @n8n/instance-ai's createSandbox
// (provider n8n-sandbox, over @n8n/agents' N8nSandboxServiceSandbox and its filesystem),
// setupSandboxWorkspace (its files, `npm install` through the egress proxy, its marker), then
// its build.mjs and its diagnostics script on a workflow file.
//
// Run by tests/test_sandbox_api_n8n.py with Node 24 and:
//   N8N_MODULES (the installed n8n's node_modules), SANDBOX_API_URL, SANDBOX_API_KEY, SANDBOX_ID
// Prints one JSON line: what n8n did and got.
const path = require('node:path');

const modules = process.env.N8N_MODULES;
const fromN8n = (name) => require(path.join(modules, name));
const { createSandbox, createWorkspace } = fromN8n('@n8n/instance-ai/dist/workspace/create-workspace.js');
const { setupSandboxWorkspace } = fromN8n('@n8n/instance-ai/dist/workspace/sandbox-setup.js');
const { runInSandbox, getWorkspaceRoot } = fromN8n('@n8n/agents/dist/workspace/sandbox/index.js');

const WORKFLOW = `import { workflow, node, trigger } from '@n8n/workflow-sdk';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger',
  version: 1,
  config: { name: 'Start', position: [0, 0] },
});
const greet = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Greet',
    position: [240, 0],
    parameters: {
      assignments: { assignments: [{ id: 'a1', name: 'greeting', value: 'hello', type: 'string' }] },
    },
  },
});

export default workflow('sandbox-api-test', 'Built in an instance-ai sandbox').add(start).to(greet);
`;

// A few catalog lines, in the shape n8n's node service lists them.
const NODES = [
  { name: 'n8n-nodes-base.manualTrigger', displayName: 'Manual Trigger', description: 'Runs the flow on clicking a button', version: 1 },
  { name: 'n8n-nodes-base.set', displayName: 'Edit Fields (Set)', description: 'Modify, add, or remove item fields', version: [3, 3.4], codex: { alias: ['Set', 'JSON'] } },
];

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

async function main() {
  const sandbox = await createSandbox({
    enabled: true,
    provider: 'n8n-sandbox',
    id: process.env.SANDBOX_ID,
    serviceUrl: process.env.SANDBOX_API_URL,
    apiKey: process.env.SANDBOX_API_KEY,
    timeout: 300_000,
  });
  const workspace = createWorkspace(sandbox);
  await workspace.init();
  const started = Date.now();
  const initialized = await setupSandboxWorkspace(workspace, {
    nodeService: { listSearchable: async () => NODES },
    logger: quiet,
  });
  const setupMs = Date.now() - started;
  const root = await getWorkspaceRoot(workspace);
  const again = await setupSandboxWorkspace(workspace, { nodeService: { listSearchable: async () => NODES }, logger: quiet });

  await workspace.filesystem.writeFile(`${root}/src/greet.workflow.ts`, WORKFLOW, { recursive: true });
  const build = await runInSandbox(workspace, `node --import tsx build.mjs '${root}/src/greet.workflow.ts'`, { cwd: root });
  const diagnostics = await runInSandbox(
    workspace,
    `exec node --max-old-space-size=512 --import tsx workflow-diagnostics.mts '${root}/src/greet.workflow.ts'`,
    { cwd: root, timeout: 60_000 },
  );
  const broken = WORKFLOW.replace('.add(start)', '.add(notDefinedAnywhere)');
  await workspace.filesystem.writeFile(`${root}/src/broken.workflow.ts`, broken);
  const brokenDiagnostics = await runInSandbox(
    workspace,
    `exec node --max-old-space-size=512 --import tsx workflow-diagnostics.mts '${root}/src/broken.workflow.ts'`,
    { cwd: root, timeout: 60_000 },
  );
  const listing = await workspace.filesystem.readdir(root);
  const marker = await workspace.filesystem.exists(`${root}/.sandbox-initialized`);
  console.log(
    JSON.stringify({
      root,
      initialized,
      reinitialized: again,
      setupMs,
      files: listing.map((e) => e.name).sort(),
      marker,
      build: { exitCode: build.exitCode, stdout: build.stdout, stderr: build.stderr.slice(-2000) },
      diagnostics: { exitCode: diagnostics.exitCode, stdout: diagnostics.stdout.slice(-4000), stderr: diagnostics.stderr.slice(-2000) },
      brokenDiagnostics: { exitCode: brokenDiagnostics.exitCode, stdout: brokenDiagnostics.stdout.slice(-4000), stderr: brokenDiagnostics.stderr.slice(-2000) },
    }),
  );
}

main().catch((error) => {
  console.error(error?.stack ?? String(error));
  process.exit(1);
});
