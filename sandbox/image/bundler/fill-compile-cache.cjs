// Fills Node's compile cache in a container of the new image at build (build.py runs it as
// root with `node -e`; the image has no chown or su): the directory is made the sandbox
// user's, a warm-up build and run (run-op.mjs) fills it as that user (the cache is keyed by
// uid), and it is then made root's and read-only, as the rest of /opt/app.
//
//   node -e "<this file>" <cache dir> <uid> <run-op.mjs> <request JSON>
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const [cache, user, runOp, request] = process.argv.slice(1);
const uid = Number(user);
fs.mkdirSync(cache, { recursive: true });
fs.chownSync(cache, uid, uid);
const run = spawnSync('node', [runOp, request], {
  uid,
  gid: uid,
  stdio: 'inherit',
  env: { ...process.env, NODE_COMPILE_CACHE: cache },
});
if (run.status !== 0) process.exit(run.status ?? 1);
for (const entry of ['', ...fs.readdirSync(cache, { recursive: true })]) {
  const file = path.join(cache, entry);
  fs.chownSync(file, 0, 0);
  fs.chmodSync(file, fs.statSync(file).isDirectory() ? 0o755 : 0o644);
}
