// The execute thread: runs a WorkflowJSON on the real n8n engine (n8n-core's WorkflowExecute
// with the node classes of n8n-nodes-base), with pin data, inside the sandbox. It lives in a
// worker_thread so a run that never ends can be cut off by terminating the thread, and one that
// allocates without bound hits the thread's heap cap. The engine is loaded once per thread
// (~0.8 s); warm runs take milliseconds.
//
// Requests (from ops.mjs):
//   {kind: 'execute', executionId, workflow, pinData, startNode?}
//   {kind: 'cancel', executionId}
//   {kind: 'resources', node, lookup: 'listSearch'|'loadOptions'|'auto', method, credentials?, filter?}
//     runs one of a node type's listSearch / loadOptions methods (what a node's dropdowns
//     list: spreadsheets, channels, ...) with the credential the host passed for this call;
//     its requests leave only through HTTP_PROXY, the service's egress proxy.
//   {kind: 'resolve', workflow, nodes, nodeName, runIndex?, itemIndex?, executionId, mode}
//     a node's parameters with every expression evaluated as the engine would have in a past
//     run (`nodes`: the run's record, each node's last run, as the host keeps it).
//
// What the run may not do, it cannot: the sandbox has no network, so an unpinned node with side
// effects fails on its own; credentials do not exist here, so a node that needs them and is not
// pinned fails with an error naming them. The Code node runs here too (node:vm, under a
// per-call timeout): the container is the isolation boundary.
// Randomness from the kernel at each call: this thread may be a restored clone's.
const freshRandom = require('./fresh-random.cjs');
freshRandom.install();
const { parentPort } = require('node:worker_threads');
const path = require('node:path');
const vm = require('node:vm');
// n8n-workflow, n8n-core and all they reach from one bundle (bundle-loader.cjs): the node
// classes, loaded from n8n-nodes-base, get the same n8n-workflow and the same shared packages.
require('./bundle-loader.cjs').serveFromBundle('engine');
const { Workflow, NodeHelpers, createEmptyRunExecutionData } = require('n8n-workflow');
const { WorkflowExecute, ExecutionLifecycleHooks, LoadOptionsContext } = require('n8n-core');

const BASE = 'n8n-nodes-base.';
const NODES_BASE = path.dirname(require.resolve('n8n-nodes-base/package.json'));
const KNOWN = require(path.join(NODES_BASE, 'dist/known/nodes.json'));
const KNOWN_CREDENTIALS = require(path.join(NODES_BASE, 'dist/known/credentials.json'));
const CODE_TIMEOUT_MS = 5000;
const MAX_ITEMS = 100; // per node output returned to the host
const running = new Map(); // executionId -> the engine's cancelable run
// A cancel that comes before its run has started (queued behind another call, or the thread
// still loading) is kept for that run; one that comes after its run ended is not. A few each.
const cancelledEarly = new Set();
const ended = new Set();
const REMEMBERED = 64;

function remember(set, executionId) {
  set.add(executionId);
  if (set.size > REMEMBERED) set.delete(set.values().next().value);
}

function cancel(executionId) {
  const run = running.get(executionId);
  if (run) run.cancel();
  else if (!ended.has(executionId)) remember(cancelledEarly, executionId);
}

// A node type whose code is not in the sandbox (the AI nodes ship only their catalog): the
// engine may hold it, pinned it never runs, unpinned it fails saying what to do.
function standIn(type) {
  const message = `node type ${type} cannot run in the sandbox (only n8n-nodes-base nodes do): simulate it with pin data`;
  return {
    description: {
      displayName: type,
      name: type,
      group: ['transform'],
      version: 1,
      defaults: { name: type },
      inputs: ['main'],
      outputs: ['main'],
      properties: [],
    },
    async execute() {
      throw new Error(message);
    },
  };
}

class NodeTypes {
  #loaded = new Map();

  #load(type) {
    const known = type.startsWith(BASE) ? KNOWN[type.slice(BASE.length)] : undefined;
    if (!known) {
      if (!this.#loaded.has(type)) this.#loaded.set(type, standIn(type));
      return this.#loaded.get(type);
    }
    if (!this.#loaded.has(type)) {
      const module = require(path.join(NODES_BASE, known.sourcePath));
      this.#loaded.set(type, new module[known.className]());
    }
    return this.#loaded.get(type);
  }

  getByName(type) {
    return this.#load(type);
  }

  getByNameAndVersion(type, version) {
    return NodeHelpers.getVersionedNodeType(this.#load(type), version);
  }

  getKnownTypes() {
    return {};
  }
}
const nodeTypes = new NodeTypes();

// The Code node hands its program to a task runner; here the runner is node:vm in this thread.
function codeRunner(logs) {
  const sandboxConsole = Object.fromEntries(
    ['log', 'info', 'warn', 'error', 'debug'].map((level) => [
      level,
      (...args) => logs.length < 200 && logs.push(`${level}: ${args.map((a) => (typeof a === 'string' ? a : safeJson(a))).join(' ')}`),
    ]),
  );
  const run = (code, context) =>
    vm.runInContext(`(async () => {\n${code}\n})()`, freshRandom.seedMathRandom(vm.createContext({ ...context, console: sandboxConsole })), {
      timeout: CODE_TIMEOUT_MS,
    });
  return async (_additionalData, jobType, settings, functions, _input, _node, _workflow, _runData, _runIndex, itemIndex) => {
    if (jobType !== 'javascript') {
      return { ok: false, error: { message: `${jobType} code cannot run in the sandbox: simulate this node` } };
    }
    try {
      if (settings.nodeMode === 'runOnceForAllItems') {
        const proxy = functions.getWorkflowDataProxy(itemIndex);
        return { ok: true, result: detached(await run(settings.code, { ...proxy, $: proxy.$, items: functions.getInputData() })) };
      }
      const results = [];
      const { startIndex, count } = settings.chunk;
      for (let index = startIndex; index < startIndex + count; index++) {
        const proxy = functions.getWorkflowDataProxy(index);
        const item = functions.getInputData()[index];
        const result = await run(settings.code, { ...proxy, $: proxy.$, item });
        if (result) results.push(detached(result));
      }
      return { ok: true, result: results };
    } catch (error) {
      return { ok: false, error: { message: error.message, stack: error.stack } };
    }
  };
}

// What a program returns may hold the engine's data proxies (e.g. `$input.first().json.list`
// returned as is). n8n's real task runner sends results over a socket as JSON, so they arrive
// plain; do the same, or the run's data cannot leave this thread.
function detached(value) {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

function noCredentials(_additionalData, _details, type) {
  throw new Error(`no ${type} credential is available to this run: verification simulates such nodes; a live run needs the node's credential set (setup-credentials)`);
}

const credentialsHelper = {
  getParentTypes: () => [],
  isCredentialUsableByNode: () => true,
  runPreAuthentication: async () => {},
  authenticate: async (_credentials, _type, request) => request,
  preAuthentication: async () => {},
  getCredentials: async (...args) => noCredentials(...args),
  getDecrypted: async (...args) => noCredentials(...args),
  updateCredentials: async () => {},
  updateCredentialsOauthTokenData: async () => {},
  getCredentialsProperties: () => [],
};

const url = (suffix) => `http://localhost:5678/${suffix}`; // must parse; nothing listens

// The credentials of one live run, by id ({type, data}), as the host passed them: what the
// run's nodes reference, decrypted for this run only. Verification runs pass none.
function credentialsFor(byId = {}) {
  const find = (details, type) => {
    const found = details && byId[details.id];
    if (!found || found.type !== type) return undefined;
    return found.data;
  };
  return {
    ...credentialsHelper,
    getDecrypted: async (additionalData, details, type) => find(details, type) ?? noCredentials(additionalData, details, type),
    getCredentials: async (details, type) => {
      const data = find(details, type);
      if (data === undefined) noCredentials(undefined, details, type);
      return { getData: () => data };
    },
    authenticate: async (data, type, request) => authenticate(type, data, request),
  };
}

function additionalData(hooks, executionId, logs, credentials) {
  return {
    hooks,
    credentialsHelper: credentialsFor(credentials),
    executionId,
    userId: 'instance-ai',
    variables: {},
    currentNodeExecutionIndex: 0,
    executeWorkflow: async () => {
      throw new Error('sub-workflows cannot run in a verification run: simulate the Execute Workflow node');
    },
    getRunExecutionData: async () => undefined,
    getRuntimeCredential: async () => undefined,
    logAiEvent: () => {},
    startRunnerTask: codeRunner(logs),
    restApiUrl: url('rest'),
    instanceBaseUrl: url(''),
    formBaseUrl: url('form'),
    formWaitingBaseUrl: url('form-waiting'),
    formTestBaseUrl: url('form-test'),
    webhookBaseUrl: url('webhook'),
    webhookWaitingBaseUrl: url('webhook-waiting'),
    webhookTestBaseUrl: url('webhook-test'),
    mcpBaseUrl: url('mcp'),
    mcpTestBaseUrl: url('mcp-test'),
  };
}

const wrap = (items) => (items || []).map((item) => (item && typeof item === 'object' && 'json' in item ? item : { json: item }));

function nodeResult(runs, pinned) {
  const last = runs.at(-1);
  const outputs = (last.data?.main ?? []).map((items) => {
    const list = items ?? [];
    return { count: list.length, items: list.slice(0, MAX_ITEMS).map((item) => item.json) };
  });
  return {
    status: last.executionStatus ?? (last.error ? 'error' : 'success'),
    runs: runs.length,
    executionTimeMs: last.executionTime ?? 0,
    pinned,
    outputs,
    error: last.error ? { message: last.error.message, description: last.error.description ?? undefined } : undefined,
  };
}

async function execute({ executionId, workflow: json, pinData: rawPins, startNode: startName, credentials }) {
  const pinData = Object.fromEntries(Object.entries(rawPins || {}).map(([name, items]) => [name, wrap(items)]));
  const workflow = new Workflow({
    id: json.id ?? 'verification',
    name: json.name,
    nodes: json.nodes,
    connections: json.connections,
    active: false,
    nodeTypes,
    staticData: {},
    settings: json.settings ?? {},
    pinData,
  });
  const hooks = new ExecutionLifecycleHooks('manual', executionId, { ...json, active: false });
  const order = [];
  hooks.addHandler('nodeExecuteAfter', (name) => order.push(name));
  const logs = [];
  const roots = Object.values(workflow.nodes).filter((node) => !node.disabled && workflow.getParentNodes(node.name).length === 0);
  // A named start node; else the engine's pick, which misses webhook-style roots: then a pinned root.
  const startNode =
    (startName && workflow.getNode(startName)) ||
    workflow.getStartNode() ||
    roots.find((node) => pinData[node.name]) ||
    roots[0];
  const started = Date.now();
  const run = new WorkflowExecute(additionalData(hooks, executionId, logs, credentials), 'manual').run({ workflow, startNode, pinData });
  running.set(executionId, run);
  ended.delete(executionId);
  if (cancelledEarly.delete(executionId)) run.cancel();
  let result;
  try {
    result = await run;
  } catch (error) {
    if (error && error.name === 'CancelError') {
      return { status: 'canceled', order, nodes: {}, logs, durationMs: Date.now() - started, error: { message: 'the run was cancelled' } };
    }
    throw error;
  } finally {
    running.delete(executionId);
    remember(ended, executionId);
  }
  const runData = result.data.resultData.runData ?? {};
  const nodes = Object.fromEntries(Object.entries(runData).map(([name, runs]) => [name, nodeResult(runs, Boolean(pinData[name]))]));
  const failure = result.data.resultData.error;
  return {
    status: result.status,
    startNode: startNode?.name,
    order,
    nodes,
    lastNodeExecuted: result.data.resultData.lastNodeExecuted,
    error: failure ? { message: failure.message, node: failure.node?.name ?? result.data.resultData.lastNodeExecuted } : undefined,
    waitTill: result.waitTill ?? undefined,
    logs,
    durationMs: Date.now() - started,
  };
}

// -- node resources (listSearch / loadOptions) --------------------------------------------

function credentialClass(type) {
  const known = KNOWN_CREDENTIALS[type];
  if (!known) return undefined;
  const module = require(path.join(NODES_BASE, known.sourcePath));
  return new module[known.className]();
}

// `={{$credentials.x}}` templates (what declarative `authenticate` objects hold), filled in.
function fill(value, data) {
  if (Array.isArray(value)) return value.map((v) => fill(v, data));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [fill(k, data), fill(v, data)]));
  }
  if (typeof value !== 'string' || !value.startsWith('=')) return value;
  const template = value.slice(1);
  const whole = template.trim().match(/^\{\{\s*\$credentials\??\.([A-Za-z0-9_]+)\s*\}\}$/);
  if (whole) return data[whole[1]];
  return template.replace(/\{\{\s*\$credentials\??\.([A-Za-z0-9_]+)\s*\}\}/g, (_m, name) => String(data[name] ?? ''));
}

async function authenticate(type, data, request) {
  const definition = credentialClass(type)?.authenticate;
  if (typeof definition === 'function') return await definition(data, request);
  if (!definition || definition.type !== 'generic') return request;
  const add = fill(definition.properties || {}, data);
  return {
    ...request,
    headers: { ...(request.headers || {}), ...(add.headers || {}) },
    qs: { ...(request.qs || {}), ...(add.qs || {}) },
    body: add.body ? { ...(request.body || {}), ...add.body } : request.body,
    auth: add.auth ?? request.auth,
  };
}

async function resources({ node: json, lookup, method, credentials = {}, filter, paginationToken }) {
  const node = {
    id: 'explore',
    position: [0, 0],
    parameters: {},
    ...json,
    credentials: Object.fromEntries(Object.keys(credentials).map((type) => [type, { id: type, name: type }])),
  };
  const workflow = new Workflow({ id: 'explore', nodes: [node], connections: {}, active: false, nodeTypes, staticData: {}, settings: {} });
  const nodeType = nodeTypes.getByNameAndVersion(node.type, node.typeVersion);
  const all = nodeType.methods || {};
  if (lookup === 'auto') lookup = all.listSearch && all.listSearch[method] ? 'listSearch' : 'loadOptions';
  const methods = all[lookup] || {};
  const implementation = methods[method];
  if (typeof implementation !== 'function') {
    const names = [...Object.keys(all.listSearch || {}), ...Object.keys(all.loadOptions || {})].join(', ') || 'none';
    throw new Error(`node type ${node.type} has no resource method '${method}' (it has: ${names})`);
  }
  const byId = Object.fromEntries(Object.entries(credentials).map(([type, data]) => [type, { type, data }]));
  const data = { ...additionalData(undefined, 'explore', [], byId), currentNodeParameters: node.parameters };
  const context = new LoadOptionsContext(workflow, workflow.getNode(node.name), data, `parameters.${method}`);
  const value = lookup === 'listSearch' ? await implementation.call(context, filter, paginationToken) : await implementation.call(context);
  return { lookup, value };
}

// -- a node's parameters resolved against a past run ------------------------------------

// What a replay cannot rebuild (a paging HTTP request's state, the AI context, the instance's
// secrets and variables): an expression naming one is reported with this reason.
const UNRECONSTRUCTABLE = ['$ai', '$response', '$request', '$pageCount', '$secrets', '$vars'];
const MAX_RESOLVED_CHARS = 8000;

const mentionsUnreconstructable = (text) => UNRECONSTRUCTABLE.some((name) => text.includes(name));

// A resolved value too long to show whole: its start, and how long it was.
function capped(value) {
  if (value === null || value === undefined) return value;
  const text = typeof value === 'object' ? safeJson(value) : String(value);
  if (text.length <= MAX_RESOLVED_CHARS) return value;
  return { _truncated: true, preview: text.slice(0, MAX_RESOLVED_CHARS), originalLength: text.length };
}

// Where a node's input came from: the first of its parents that ran, on the output wired in.
function sourceOf(workflow, name, runData) {
  for (const parent of workflow.getParentNodes(name, 'main', 1)) {
    const runs = runData[parent];
    if (!runs || runs.length === 0) continue;
    let output = 0;
    for (const slot of workflow.connectionsByDestinationNode[name]?.main ?? []) {
      const link = (slot ?? []).find((connection) => connection?.node === parent);
      if (link) {
        output = link.index ?? 0;
        break;
      }
    }
    return { previousNode: parent, previousNodeOutput: output, previousNodeRun: runs.length - 1 };
  }
  return undefined;
}

// The engine's run data rebuilt from the host's record of a run: each node's last run at its own
// index (earlier runs are not kept: empty), its items paired by position with its input's (the
// record keeps no pairing), its source the first parent that ran.
function pastRunData(workflow, nodes) {
  const runData = {};
  for (const [name, node] of Object.entries(nodes)) {
    const earlier = Array.from({ length: Math.max(0, (node.runs ?? 1) - 1) }, () => ({ startTime: 0, executionTime: 0, executionIndex: 0, source: [], data: { main: [] } }));
    runData[name] = [...earlier, { name, node }];
  }
  for (const [name, runs] of Object.entries(runData)) {
    const { node } = runs.at(-1);
    const source = sourceOf(workflow, name, runData);
    const parent = source ? runData[source.previousNode].at(-1) : undefined;
    const fed = parent?.node?.outputs?.[source.previousNodeOutput]?.items?.length ?? 0;
    const main = (node.outputs ?? []).map((output) =>
      (output.items ?? []).map((json, index) => ({ json: json ?? {}, pairedItem: { item: fed > 0 ? Math.min(index, fed - 1) : index } })),
    );
    runs[runs.length - 1] = { startTime: 0, executionTime: 0, executionIndex: 0, source: source ? [source] : [], data: { main } };
  }
  return runData;
}

function resolveParameters({ workflow: json, nodes, nodeName, runIndex: askedRun, itemIndex = 0, executionId, mode }) {
  // As saved: the engine fills in a known type's defaults, and empties a type it has no code for.
  const saved = structuredClone((json.nodes ?? []).find((candidate) => candidate.name === nodeName)?.parameters ?? {});
  const workflow = new Workflow({
    id: json.id ?? 'resolve',
    name: json.name,
    nodes: json.nodes,
    connections: json.connections,
    active: false,
    nodeTypes,
    staticData: {},
    settings: json.settings ?? {},
  });
  const node = workflow.getNode(nodeName);
  if (!node) throw new Error(`node "${nodeName}" is not in the workflow this execution ran`);
  const runData = pastRunData(workflow, nodes || {});
  const ownRuns = runData[nodeName] ?? [];
  const runIndex = askedRun ?? Math.max(ownRuns.length - 1, 0);
  // The node's input as the engine handed it over: from its recorded source, else (it did
  // not run) from the first parent that did.
  const source = ownRuns[runIndex]?.source?.[0] ?? sourceOf(workflow, nodeName, runData);
  const parentRun = source ? runData[source.previousNode]?.[source.previousNodeRun] : undefined;
  const executeData = parentRun
    ? { node, data: parentRun.data, source: { main: [source] } }
    : { node, data: {}, source: null };
  const input = parentRun?.data?.main?.[source.previousNodeOutput] ?? [];
  const connectionInputData = input.map((item, index) => ({ ...item, pairedItem: { item: index, input: 0 } }));
  const runExecutionData = createEmptyRunExecutionData();
  runExecutionData.resultData.runData = runData;
  runExecutionData.resultData.lastNodeExecuted = nodeName;
  const additionalKeys = {
    $execution: { id: executionId, mode: mode === 'manual' ? 'test' : 'production', resumeUrl: '', resumeFormUrl: '' },
    $vars: {},
  };
  if (node.type === `${BASE}httpRequest`) {
    additionalKeys.$pageCount = 0;
    additionalKeys.$response = { statusCode: 200, headers: {}, body: {} };
    additionalKeys.$request = { headers: {}, body: {}, qs: {} };
  }
  const failedExpressions = [];
  const emptyResolutions = [];
  const walk = (value, at) => {
    if (typeof value === 'string' && value.startsWith('=')) {
      try {
        const resolved = workflow.expression.getParameterValue(value, runExecutionData, runIndex, itemIndex, nodeName, connectionInputData, 'manual', additionalKeys, executeData, false, {}, nodeName);
        if (resolved === null || resolved === undefined || resolved === '') {
          emptyResolutions.push({
            path: at,
            raw: value,
            resolved: resolved === undefined ? null : resolved,
            ...(mentionsUnreconstructable(value) ? { reason: 'unreconstructable-context' } : {}),
          });
        }
        return capped(resolved);
      } catch (error) {
        const message = String((error && error.message) || error);
        failedExpressions.push({
          path: at,
          raw: value,
          error: message,
          reason: mentionsUnreconstructable(value) || mentionsUnreconstructable(message) ? 'unreconstructable-context' : 'expression-error',
        });
        return null;
      }
    }
    if (Array.isArray(value)) return value.map((item, index) => walk(item, `${at}[${index}]`));
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, walk(item, at === '' ? key : `${at}.${key}`)]));
    }
    return value;
  };
  const known = node.type.startsWith(BASE) && KNOWN[node.type.slice(BASE.length)];
  const parameters = known ? (node.parameters ?? {}) : saved;
  const resolved = walk(parameters, '');
  return { nodeName, runIndex, itemIndex, parameters, resolved: detached(resolved) ?? null, failedExpressions: detached(failedExpressions), emptyResolutions: detached(emptyResolutions) };
}

parentPort.on('message', async (message) => {
  if (message.kind === 'cancel') {
    cancel(message.executionId);
    return;
  }
  try {
    const result =
      message.kind === 'resources' ? await resources(message) : message.kind === 'resolve' ? resolveParameters(message) : await execute(message);
    parentPort.postMessage({ id: message.id, ok: true, result });
  } catch (error) {
    parentPort.postMessage({ id: message.id, ok: false, error: { stage: 'run', message: String((error && error.message) || error) } });
  }
});

// Loaded: the calls' deadlines start now (see PooledThread in ops.mjs).
parentPort.postMessage({ loaded: true });
