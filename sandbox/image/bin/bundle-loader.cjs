// Serves a thread's modules from its bundle (bin/bundles/<name>.cjs, made at image build by
// sandbox/image/bundler/bundle.mjs): any `require`, from the bundle or from a file outside it
// (a node class of n8n-nodes-base, the user's workflow source), that resolves to a file the
// bundle holds gets the bundle's copy of it. One copy of every class per thread, as an
// unbundled load has, for a fraction of the file reads.
//
// Without a bundle (a checkout run outside the image), or with INSTANCE_AI_SANDBOX_BUNDLES=off
// in the sandbox's environment (bench/ready.py's baseline; telling a bundle's fault from a
// package's), nothing changes: modules load from node_modules file by file.
const Module = require('node:module');
const { existsSync } = require('node:fs');
const path = require('node:path');

function serveFromBundle(name) {
  const file = path.join(__dirname, 'bundles', `${name}.cjs`);
  if (process.env.INSTANCE_AI_SANDBOX_BUNDLES === 'off' || !existsSync(file)) return false;
  const files = require(file);
  const has = Object.prototype.hasOwnProperty;
  const load = Module._load;
  Module._load = function loadFromBundle(request, parent, isMain) {
    if (parent && !Module.isBuiltin(request)) {
      let filename;
      try {
        filename = Module._resolveFilename(request, parent, isMain);
      } catch {
        filename = undefined; // Node's own load reports it
      }
      if (filename !== undefined && has.call(files, filename)) return files[filename];
    }
    return load.apply(this, arguments);
  };
  return true;
}

module.exports = { serveFromBundle };
