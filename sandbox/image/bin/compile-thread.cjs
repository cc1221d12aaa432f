// The compile thread: evaluates a workflow source that the worker's main thread bundled to
// CommonJS, and turns its default export into WorkflowJSON. It runs in a worker_thread so a
// source that never finishes loading (an endless loop at import time) can be cut off by
// terminating the thread. esbuild never runs here: a terminated thread that had started its
// own esbuild service would leave a zombie process behind.
const { parentPort } = require('node:worker_threads');
const { createRequire } = require('node:module');
const path = require('node:path');
const vm = require('node:vm');

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

const plain = (issue) => ({
  code: issue.code,
  message: issue.message,
  nodeName: issue.nodeName,
  severity: issue.severity,
});

parentPort.on('message', ({ id, code, file }) => {
  try {
    let exported;
    try {
      exported = evaluate(code, file);
    } catch (error) {
      parentPort.postMessage({ id, ok: false, error: { stage: 'load', message: String(error && error.stack || error) } });
      return;
    }
    const builder = builderOf(exported);
    if (!builder || typeof builder.toJSON !== 'function') {
      parentPort.postMessage({ id, ok: false, error: { stage: 'export', message: 'the default export is not a workflow() builder' } });
      return;
    }
    const graph = builder.validate();
    const workflow = builder.toJSON({ tidyUp: true });
    // Declared fixtures travel apart: they are never saved into the workflow.
    const fixtures = workflow.pinData || {};
    delete workflow.pinData;
    parentPort.postMessage({
      id,
      ok: true,
      result: {
        workflow,
        fixtures,
        graph: { valid: graph.valid, errors: graph.errors.map(plain), warnings: graph.warnings.map(plain) },
      },
    });
  } catch (error) {
    parentPort.postMessage({ id, ok: false, error: { stage: 'export', message: String(error && error.message || error) } });
  }
});
