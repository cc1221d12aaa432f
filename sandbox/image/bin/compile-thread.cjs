// The compile thread: turns a workflow source into WorkflowJSON plus validation findings, and
// WorkflowJSON back into SDK code. It runs in a worker_thread so a source that never finishes
// loading (an endless loop at import time) can be cut off by terminating the thread, and one
// that allocates without bound hits the thread's heap cap instead of the worker's. esbuild
// never runs here: a terminated thread that had started its own esbuild service would leave a
// zombie process behind.
//
// Requests (from ops.mjs):
//   {kind: 'module', code, file, source}  a source bundled to CommonJS, and its original text
//   {kind: 'json', workflow, file}        a WorkflowJSON source
//   {kind: 'generate', workflow}          WorkflowJSON to SDK code
// Randomness from the kernel at each call: this thread may be a restored clone's.
require('./fresh-random.cjs').install();
const { parentPort, workerData } = require('node:worker_threads');
const { createRequire } = require('node:module');
const path = require('node:path');
const vm = require('node:vm');
// The SDK and all it reaches from one bundle (bundle-loader.cjs): the user's source, which
// requires the SDK by name, gets the same instance.
require('./bundle-loader.cjs').serveFromBundle('compiler');
const sdk = require('@n8n/workflow-sdk');

const { definitionDirs } = workerData;

function evaluate(code, file) {
  const module = { exports: {} };
  const wrapper = vm.runInThisContext(
    `(function (exports, require, module, __filename, __dirname) {${code}\n})`,
    { filename: file },
  );
  // Resolution from the file's folder finds /home/user/node_modules: one SDK instance.
  wrapper(module.exports, createRequire(file), module, file, path.dirname(file));
  return module.exports;
}

function builderOf(exported) {
  const candidate = exported && exported.default !== undefined ? exported.default : exported;
  if (candidate && typeof candidate.validate === 'function') return candidate;
  if (candidate && candidate.default && typeof candidate.default.validate === 'function') {
    return candidate.default;
  }
  return undefined;
}

const finding = (severity) => (issue) => ({
  source: issue.source || 'graph',
  severity,
  code: issue.code,
  message: issue.message,
  nodeName: issue.nodeName,
  path: issue.parameterPath,
  line: issue.line,
  column: issue.column,
});

// The SDK's layers: graph checks and parameter schemas (node-definitions, with line and column
// when the source text is known). Errors block a save; the rest are warnings. The SDK's source
// lint is left out: it flags what its own restricted parser cannot read (arrow functions,
// `as const`), which this full-TypeScript compile handles, and it costs a third of the time.
function validate(builder, source) {
  try {
    const report = sdk.validateWorkflowBuilder(builder, { nodeDefinitionDirs: definitionDirs, lint: false, source });
    return [...report.blocking.map(finding('error')), ...report.informational.map(finding('warning'))];
  } catch (error) {
    const graph = builder.validate();
    return [
      ...graph.errors.map((issue) => finding('error')({ ...issue, source: 'graph' })),
      ...graph.warnings.map((issue) => finding('warning')({ ...issue, source: 'graph' })),
      { source: 'schema', severity: 'warning', code: 'SCHEMA_CHECK_FAILED', message: `parameter schemas were not checked: ${error.message}` },
    ];
  }
}

// Declared fixtures travel apart: they are never saved into the workflow.
function result(workflow, issues) {
  const fixtures = workflow.pinData || {};
  delete workflow.pinData;
  return { workflow, fixtures, issues };
}

const handlers = {
  module({ code, file, source }) {
    let exported;
    try {
      exported = evaluate(code, file);
    } catch (error) {
      return { error: { stage: 'load', message: String((error && error.stack) || error) } };
    }
    const builder = builderOf(exported);
    if (!builder || typeof builder.toJSON !== 'function') {
      return { error: { stage: 'export', message: 'the default export is not a workflow() builder: end the file with `export default workflow(...)...`' } };
    }
    const issues = validate(builder, source);
    return { result: result(builder.toJSON({ tidyUp: true }), issues) };
  },
  json({ workflow }) {
    const builder = { validate: (options) => sdk.validateWorkflow(workflow, options), toJSON: () => workflow };
    return { result: result(workflow, validate(builder, undefined)) };
  },
  generate({ workflow }) {
    const body = sdk.generateWorkflowCode(workflow);
    // The generator leaves out the import: add one for the SDK functions the code calls.
    const used = Object.keys(sdk).filter((name) => /^[a-z]\w*$/.test(name) && new RegExp(`\\b${name}\\(`).test(body));
    return { result: { code: `import { ${used.join(', ')} } from '@n8n/workflow-sdk';\n\n${body}\n` } };
  },
};

parentPort.on('message', ({ id, kind, ...request }) => {
  let answer;
  try {
    answer = handlers[kind](request);
  } catch (error) {
    answer = { error: { stage: 'export', message: String((error && error.message) || error) } };
  }
  parentPort.postMessage(answer.error ? { id, ok: false, error: answer.error } : { id, ok: true, result: answer.result });
});

// Loaded: the calls' deadlines start now, counted in this thread's CPU time, read from /proc at
// the path of this thread's own entry (see PooledThread in ops.mjs).
let task;
try {
  task = require('node:fs').readlinkSync('/proc/thread-self');
} catch {
  task = undefined; // no /proc: the deadlines are on the clock
}
parentPort.postMessage({ loaded: true, task });
