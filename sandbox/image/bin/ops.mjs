// The operations the sandbox offers the host, shared by the long-lived worker (worker.mjs, JSON
// lines over one exec stream) and the one-shot runner (run-op.mjs, for when no worker runs).
//
// Operations: ping, stats, warm, read, write, strReplace, list, grep, compile, diagnose, toCode,
// definition, materialize, execute, nodeResources, resolveParameters, cancelExecution,
// outputSchema, jobProcesses, and the fs* operations of fsapi.mjs. File contents travel as
// base64 so any bytes survive. Every path is confined to the workspace and walked one
// component at a time through open directory descriptors, never following a symlink (see
// openDirectory).
//
// compile: esbuild bundles the source to CommonJS here (`@n8n/*` and other packages stay
// external, so the one installed SDK instance is used), then a pooled worker_thread evaluates
// it and validates the result in layers under a deadline (compile-thread.cjs). Every build
// evaluates afresh, so edits are seen and builds share no module state. A thread that misses
// its deadline, or runs out of memory, is terminated and replaced on the next call.
//
// diagnose: the TypeScript compiler over one file and its imports, with the workspace's
// tsconfig.json, under a deadline.
//
// execute: a WorkflowJSON on the real n8n engine with pin data (execute-thread.cjs), in its own
// pooled thread under a deadline and a heap cap; cancelExecution stops a run in progress.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, constants as fsConstants, promises as fs, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { build } from 'esbuild';
import { fsHandlers } from './fsapi.mjs';

export const WORKSPACE = '/home/user/workspace';
// Directories are opened with O_NOFOLLOW alone and checked on the open descriptor: gVisor
// (runsc 2024-07) follows a symlink when O_DIRECTORY comes with O_NOFOLLOW. O_NONBLOCK: a
// FIFO in a directory's place cannot hold the open.
const NO_FOLLOW = fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK;
const MAX_LIST = 100000;
const require = createRequire(import.meta.url);
const NODE_MODULES = path.resolve(path.dirname(require.resolve('n8n-nodes-base/package.json')), '..');
// Per-node definition folders by type prefix: parameter types (.ts) and Zod schemas (.schema.js).
const DEFINITIONS = {
  'n8n-nodes-base': path.join(NODE_MODULES, 'n8n-nodes-base/dist/node-definitions/nodes/n8n-nodes-base'),
  '@n8n/n8n-nodes-langchain': path.join(
    NODE_MODULES,
    '@n8n/n8n-nodes-langchain/dist/node-definitions/nodes/n8n-nodes-langchain',
  ),
};
const TSC = path.join(NODE_MODULES, `@typescript/typescript-${os.platform()}-${os.arch()}/lib/tsc`);
const TS_DIAGNOSTIC = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/;
// Imports of the typed node parameters (seed/types, knowledge-base/best-practices).
const TYPED_IMPORT = /from\s+['"]@n8n\/(?:ai-)?node-types\//;

export class WorkerError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function inside(resolved) {
  return resolved === WORKSPACE || resolved.startsWith(WORKSPACE + '/');
}

// The workspace-relative parts of `p` (no `..` can leave: it is resolved first).
function parts(p) {
  if (typeof p !== 'string' || p === '' || p.includes('\0')) {
    throw new WorkerError('escape', 'give a path inside the workspace');
  }
  const absolute = path.resolve(WORKSPACE, p);
  if (!inside(absolute)) throw new WorkerError('escape', `${p} is outside the workspace`);
  return path.relative(WORKSPACE, absolute).split('/').filter(Boolean);
}

// A name inside an open directory, reached through the descriptor: the kernel resolves
// /proc/self/fd/N to the directory itself, never again by name, so swapping a folder on the
// way for a symlink after the check cannot redirect what happens next.
function at(dir, name) {
  return `/proc/self/fd/${dir.fd}/${name}`;
}

// The directory at `p`, never through a symlink at its last part (ELOOP), or ENOTDIR.
async function openDirectoryNoFollow(p) {
  const handle = await fs.open(p, NO_FOLLOW);
  const directory = await handle.stat().then((info) => info.isDirectory(), () => false);
  if (directory) return handle;
  await handle.close();
  throw Object.assign(new Error(`${p} is not a directory`), { code: 'ENOTDIR' });
}

function throughSymlink(p) {
  return new WorkerError('escape', `${p} goes through a symlink; the file tools never follow symlinks`);
}

// Open the directory `names` lead to, component by component with O_NOFOLLOW (a symlink at
// any step is refused), creating missing ones when asked. The caller closes it.
async function openDirectory(p, names, { create = false } = {}) {
  let dir = await openDirectoryNoFollow(WORKSPACE);
  try {
    for (const name of names) {
      if (create) {
        await fs.mkdir(at(dir, name), { mode: 0o2775 }).catch((error) => {
          if (error.code === 'ENOENT') {
            // The folder it would go in was removed meanwhile.
            throw new WorkerError('missing', `${p}: a folder on its way went away`);
          }
          if (error.code !== 'EEXIST') throw error;
        });
      }
      let child;
      try {
        child = await openDirectoryNoFollow(at(dir, name));
      } catch (error) {
        // A symlink answers ELOOP; ask what it is all the same (a kernel may say otherwise).
        const link = await fs.lstat(at(dir, name)).then((info) => info.isSymbolicLink(), () => false);
        if (error.code === 'ELOOP' || link) throw throughSymlink(p);
        if (error.code === 'ENOENT' || error.code === 'ENOTDIR') {
          throw new WorkerError('missing', `${p} does not exist in the workspace`);
        }
        throw error;
      }
      await dir.close();
      dir = child;
    }
    return dir;
  } catch (error) {
    await dir.close().catch(() => {});
    throw error;
  }
}

// An open regular file of at most `maxBytes`, reached without following symlinks.
async function openRegularFile(p, maxBytes) {
  const names = parts(p);
  if (names.length === 0) throw new WorkerError('not_a_file', `${p} is not a regular file`);
  const dir = await openDirectory(p, names.slice(0, -1));
  let file;
  try {
    file = await fs.open(at(dir, names.at(-1)), fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  } catch (error) {
    if (error.code === 'ELOOP') throw throughSymlink(p);
    if (error.code === 'ENOENT') throw new WorkerError('missing', `${p} does not exist in the workspace`);
    throw error;
  } finally {
    await dir.close();
  }
  const info = await file.stat();
  if (!info.isFile() || info.size > maxBytes) {
    await file.close();
    if (!info.isFile()) throw new WorkerError('not_a_file', `${p} is not a regular file`);
    throw new WorkerError('too_large', `${p} is larger than ${maxBytes} bytes`);
  }
  return file;
}

async function readRegularFile(p, maxBytes, encoding) {
  const file = await openRegularFile(p, maxBytes);
  try {
    return await file.readFile(encoding ? { encoding } : {});
  } finally {
    await file.close();
  }
}

// The workspace path of a regular file that was checked without following symlinks (for
// the compiler, which reads sources by name; it runs as the sandbox user and writes nothing).
async function regularFile(p, maxBytes) {
  await (await openRegularFile(p, maxBytes)).close();
  return path.join(WORKSPACE, ...parts(p));
}

async function writeFile(p, data, maxBytes) {
  if (data.length > maxBytes) {
    throw new WorkerError('too_large', `${data.length} bytes is over the ${maxBytes}-byte limit for one write`);
  }
  const names = parts(p);
  if (names.length === 0) throw new WorkerError('not_a_file', `${p} is not a regular file`);
  const dir = await openDirectory(p, names.slice(0, -1), { create: true });
  try {
    const target = at(dir, names.at(-1));
    const existing = await fs.lstat(target).catch((error) => {
      if (error.code === 'ENOENT') return null;
      throw error;
    });
    if (existing?.isSymbolicLink()) throw throughSymlink(p);
    if (existing && !existing.isFile()) throw new WorkerError('not_a_file', `${p} is not a regular file`);
    // Written beside, then renamed over the name (rename replaces a name, never writes
    // through it): a reader never sees half a file.
    const temporary = at(dir, `.${names.at(-1)}.${process.pid}.${Date.now()}.partial`);
    const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
    try {
      const file = await fs.open(temporary, flags, 0o664);
      try {
        await file.writeFile(data);
      } catch (error) {
        await fs.unlink(temporary).catch(() => {});
        throw error;
      } finally {
        await file.close();
      }
      await fs.rename(temporary, target);
    } catch (error) {
      if (error.code === 'ENOSPC' || error.code === 'EDQUOT') {
        throw new WorkerError('workspace_full', `${p} was not written`);
      }
      if (error.code === 'ENOENT') {
        // Its folder was removed (or replaced) while this wrote: nothing was written.
        throw new WorkerError('missing', `${p}: its folder went away during the write`);
      }
      throw error;
    }
  } finally {
    await dir.close();
  }
  return data.length;
}

async function list(p, recursive, maxEntries) {
  const entries = [];
  let truncated = false;
  async function walk(dir, prefix) {
    for (const entry of await fs.readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true })) {
      if (entries.length >= maxEntries) {
        truncated = true;
        return;
      }
      const relative = prefix ? `${prefix}/${entry.name}` : entry.name;
      const type = entry.isSymbolicLink() ? 'symlink' : entry.isDirectory() ? 'directory' : entry.isFile() ? 'file' : 'other';
      const info = type === 'symlink' ? null : await fs.lstat(at(dir, entry.name)).catch(() => null);
      entries.push({ path: relative, type, size: info ? info.size : 0 });
      if (recursive && type === 'directory') {
        let child;
        try {
          child = await openDirectoryNoFollow(at(dir, entry.name));
        } catch {
          continue; // swapped or removed meanwhile: not followed
        }
        try {
          await walk(child, relative);
        } finally {
          await child.close();
        }
      }
    }
  }
  let root;
  try {
    root = await openDirectory(p, parts(p));
  } catch (error) {
    if (error instanceof WorkerError && error.code === 'missing') {
      throw new WorkerError('missing', `${p} is not a directory in the workspace`);
    }
    throw error;
  }
  try {
    await walk(root, '');
  } finally {
    await root.close();
  }
  return { entries, truncated };
}

// -- the worker threads ---------------------------------------------------------------------

// The worker's memory bound: past it (what its threads keep of many builds: compiled scripts,
// caches), both threads end after the call that found it, and the next calls start fresh ones
// (one reload each, ~0.5 s and ~1 s). At most once per RECYCLE_GAP calls: memory the ended
// threads held takes a while to leave the process. The host sets it (WORKER_RECYCLE_MB).
const RECYCLE_BYTES = Number(process.env.WORKER_RECYCLE_MB || 400) * 1024 * 1024;
const RECYCLE_GAP = 20;
let recycled = 0;
let callsSinceRecycle = 0;
const threads = [];

function recycleIfGrown() {
  callsSinceRecycle += 1;
  if (callsSinceRecycle < RECYCLE_GAP || process.memoryUsage.rss() <= RECYCLE_BYTES) return;
  recycled += 1;
  callsSinceRecycle = 0;
  for (const thread of threads) thread.recycle();
}

// How long a fresh thread may take to load its modules (~0.6 s for the compiler, ~1.2 s for
// the engine on an idle machine; many sandboxes starting at once stretch it).
const LOAD_TIMEOUT_MS = 120000;

// `promise`'s value, or undefined if it takes longer than `ms`.
function within(promise, ms) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// How many times its CPU deadline a call may take on the clock, on a machine too busy to give
// its thread the CPU (`withinCpu`).
const BUSY_ALLOWANCE = 4;
// Clock ticks per second of /proc/<pid>/task/<tid>/stat (USER_HZ, fixed on Linux and gVisor).
const CLOCK_TICKS = 100;

// The CPU time a thread has spent, in ms, from its /proc entry ('<pid>/task/<tid>'); undefined
// when that cannot be read.
function threadCpuMs(task) {
  try {
    const stat = readFileSync(`/proc/${task}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS; // utime + stime
  } catch {
    return undefined;
  }
}

// `answer`'s value, or undefined once the thread at `task` has spent `ms` of CPU time on it, or
// BUSY_ALLOWANCE times `ms` have passed: a load that is CPU work alone (esbuild's output run
// once) is not failed by a busy machine, nor a huge allocation taken for an endless loop.
async function withinCpu(answer, ms, task) {
  const before = task === undefined ? undefined : threadCpuMs(task);
  if (before === undefined) return within(answer, ms);
  const started = Date.now();
  let spent = 0;
  for (;;) {
    const message = await within(answer, Math.max(ms - spent, 50));
    if (message !== undefined) return message;
    const now = threadCpuMs(task);
    spent = now === undefined ? ms : now - before;
    if (spent >= ms || Date.now() - started >= ms * BUSY_ALLOWANCE) return undefined;
  }
}

// A worker_thread that takes one call at a time, under a deadline: a call that misses it, or
// runs out of heap, ends the thread (and only its own call); the next call starts a new one.
// A thread that says where its /proc entry is ({loaded, task}) has its calls' deadlines
// counted in its CPU time (`withinCpu`), the others on the clock.
// The thread's stdout goes to stderr: stdout is the worker's protocol channel.
class PooledThread {
  #thread;
  #calls = 0;
  #waiters = new Map();
  #queue = Promise.resolve();
  #busy = false;
  #retiring = false;
  #loading = Promise.resolve();
  #task;
  // Messages posted while no thread ran: the next thread gets them before its first call.
  #pending = [];

  // `crashStage`: how a call that the thread's death ended is reported.
  constructor(file, heapMb, workerData, crashStage) {
    this.file = file;
    this.heapMb = heapMb;
    this.workerData = workerData;
    this.crashStage = crashStage;
    threads.push(this);
  }

  #start() {
    if (this.#thread) return this.#thread;
    this.#task = undefined;
    let loaded;
    this.#loading = new Promise((resolve) => {
      loaded = resolve;
    });
    const started = new Worker(this.file, {
      resourceLimits: { maxOldGenerationSizeMb: this.heapMb },
      workerData: this.workerData,
      stdout: true,
      stderr: true,
    });
    started.stdout.pipe(process.stderr);
    started.stderr.pipe(process.stderr);
    for (const message of this.#pending.splice(0)) started.postMessage(message);
    started.on('message', (message) => {
      if (message.loaded) {
        this.#task = message.task;
        loaded();
        return;
      }
      const waiter = this.#waiters.get(message.id);
      if (waiter) {
        this.#waiters.delete(message.id);
        waiter(message);
      }
    });
    started.on('error', (error) => {
      const reason = error && error.code === 'ERR_WORKER_OUT_OF_MEMORY'
        ? `ran out of memory: it used more than ${this.heapMb} MB (a huge allocation?)`
        : String((error && error.message) || error);
      for (const waiter of this.#waiters.values()) waiter({ ok: false, error: { stage: this.crashStage, message: reason } });
      this.#waiters.clear();
      if (this.#thread === started) this.#thread = undefined;
    });
    this.#thread = started;
    return started;
  }

  call(request, timeoutMs, what) {
    const result = this.#queue.then(async () => {
      this.#busy = true;
      try {
        return await this.#call(request, timeoutMs, what);
      } finally {
        this.#busy = false;
        if (this.#retiring) this.recycle();
        recycleIfGrown();
      }
    });
    this.#queue = result.catch(() => undefined);
    return result;
  }

  // A message past the queue, to the call in progress or the next (a cancellation).
  post(message) {
    if (this.#thread) this.#thread.postMessage(message);
    else {
      this.#pending.push(message);
      if (this.#pending.length > 64) this.#pending.shift();
    }
  }

  async #call(request, timeoutMs, what) {
    const id = ++this.#calls;
    const answer = new Promise((resolve) => this.#waiters.set(id, resolve));
    this.#start().postMessage({ id, ...request });
    // The deadline is the call's own: a fresh thread loading its modules (slow on a busy
    // machine) is not charged to it, up to LOAD_TIMEOUT_MS of its own.
    const ready = await within(Promise.race([this.#loading.then(() => true), answer.then(() => true)]), LOAD_TIMEOUT_MS);
    const message = ready ? await withinCpu(answer, timeoutMs, this.#task) : undefined;
    if (message === undefined) {
      this.#waiters.delete(id);
      const stuck = this.#thread;
      this.#thread = undefined;
      await stuck?.terminate();
      const late = ready ? `did not finish within ${timeoutMs} ms` : `could not start: the sandbox's ${this.crashStage === 'run' ? 'engine' : 'compiler'} did not load within ${LOAD_TIMEOUT_MS} ms`;
      return { ok: false, stage: 'timeout', message: `${what} ${late}` };
    }
    if (!message.ok) return { ok: false, ...message.error };
    return { ok: true, ...message.result };
  }

  stop() {
    this.#thread?.terminate();
  }

  // End the thread between calls: now when idle, else once its call in flight returns.
  recycle() {
    this.#retiring = this.#busy;
    if (this.#busy) return;
    const ending = this.#thread;
    this.#thread = undefined;
    ending?.terminate();
  }

  // Whether the thread runs (has loaded what it loads at start).
  get running() {
    return this.#thread !== undefined;
  }
}

const BIN = path.dirname(fileURLToPath(import.meta.url));
const compiler = new PooledThread(path.join(BIN, 'compile-thread.cjs'), 256, {
  definitionDirs: Object.values(DEFINITIONS).map((d) => path.resolve(d, '../..')).filter(existsSync),
}, 'load');
const engine = new PooledThread(path.join(BIN, 'execute-thread.cjs'), 384, {}, 'run');

function esbuildMessage(error) {
  const messages = (error.errors || []).map((e) => {
    const where = e.location ? `${path.relative(WORKSPACE, e.location.file) || e.location.file}(${e.location.line},${e.location.column + 1}): ` : '';
    return `${where}${e.text}`;
  });
  return messages.join('\n') || String(error.message);
}

async function compile({ path: p, timeoutMs, maxBytes }) {
  const resolved = await regularFile(p, maxBytes);
  const source = await fs.readFile(resolved, 'utf8');
  const file = path.relative(WORKSPACE, resolved);
  const sourceHash = createHash('sha256').update(source).digest('hex');
  const answer = await compileSource(resolved, file, source, timeoutMs);
  return { ...answer, sourceHash, typed: TYPED_IMPORT.test(source) };
}

async function compileSource(resolved, file, source, timeoutMs) {
  if (resolved.endsWith('.json')) {
    let workflow;
    try {
      workflow = JSON.parse(source);
    } catch (error) {
      return { ok: false, stage: 'load', message: `${file} is not valid JSON: ${error.message}` };
    }
    if (!workflow || typeof workflow !== 'object' || !Array.isArray(workflow.nodes)) {
      return { ok: false, stage: 'export', message: `${file} is not WorkflowJSON: it needs a "nodes" array` };
    }
    return compiler.call({ kind: 'json', workflow, file }, timeoutMs, `validating ${file}`);
  }
  let code;
  try {
    const bundled = await build({
      entryPoints: [resolved],
      bundle: true,
      packages: 'external',
      format: 'cjs',
      platform: 'node',
      target: 'node20',
      write: false,
      logLevel: 'silent',
      absWorkingDir: WORKSPACE,
    });
    code = bundled.outputFiles[0].text;
  } catch (error) {
    return { ok: false, stage: 'load', message: esbuildMessage(error) };
  }
  return compiler.call({ kind: 'module', code, file: resolved, source }, timeoutMs, `loading ${file}`);
}

async function toCode({ workflow, timeoutMs }) {
  return compiler.call({ kind: 'generate', workflow }, timeoutMs, 'generating code');
}

// -- workflow runs ---------------------------------------------------------------------------

// Run a WorkflowJSON on the n8n engine with pin data: `{ok, status, order, nodes, ...}`, or
// `{ok: false, stage, message}` when the run could not finish (timeout, memory, engine error).
async function execute({ executionId, workflow, pinData, startNode, credentials, timeoutMs }) {
  if (!workflow || !Array.isArray(workflow.nodes)) throw new WorkerError('invalid', 'give a WorkflowJSON with a "nodes" array');
  return engine.call({ kind: 'execute', executionId, workflow, pinData: pinData || {}, startNode, credentials: credentials || {} }, timeoutMs, 'the run');
}

// One of a node type's listSearch / loadOptions methods, in the engine thread, under a deadline.
async function nodeResources({ node, lookup, method, credentials, filter, paginationToken, timeoutMs }) {
  if (!node || !node.type) throw new WorkerError('invalid', 'give the node: {name, type, typeVersion, parameters}');
  if (!['listSearch', 'loadOptions', 'auto'].includes(lookup)) throw new WorkerError('invalid', 'lookup is listSearch, loadOptions or auto');
  return engine.call({ kind: 'resources', node, lookup, method, credentials, filter, paginationToken }, timeoutMs, 'loading the resources');
}

// A node's parameters with their expressions evaluated against a past run's record, in the
// engine thread, under a deadline.
async function resolveParameters({ workflow, nodes, nodeName, runIndex, itemIndex, executionId, mode, timeoutMs }) {
  if (!workflow || !Array.isArray(workflow.nodes)) throw new WorkerError('invalid', 'give a WorkflowJSON with a "nodes" array');
  if (!nodeName) throw new WorkerError('invalid', 'give the name of the node to resolve');
  return engine.call({ kind: 'resolve', workflow, nodes: nodes || {}, nodeName, runIndex, itemIndex, executionId, mode }, timeoutMs, 'resolving the parameters');
}

async function cancelExecution({ executionId }) {
  engine.post({ kind: 'cancel', executionId });
  return { requested: true };
}

// -- warming up ------------------------------------------------------------------------------

// Make the sandbox ready: compile the warm-up workflow (bin/warm.workflow.ts, read from the
// image, never the workspace), so the compile thread and esbuild's service have started and
// loaded what every build needs; with `engine`, run it too, so the engine thread has loaded
// what every run needs. A sandbox warmed without the engine loads it on its first run: a
// thread that only edits and builds never pays for it.
const WARM_SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'warm.workflow.ts');

async function warm({ timeoutMs, engine: withEngine = true }) {
  const started = performance.now();
  const source = await fs.readFile(WARM_SOURCE, 'utf8');
  const compiled = await compileSource(WARM_SOURCE, 'warm.workflow.ts', source, timeoutMs);
  if (!compiled.ok) throw new WorkerError('internal', `the warm-up build failed: ${compiled.message}`);
  const compiledMs = performance.now() - started;
  if (withEngine) {
    const ran = await execute({ executionId: 'warm-up', workflow: compiled.workflow, pinData: compiled.fixtures, timeoutMs });
    if (!ran.ok || ran.status !== 'success') {
      throw new WorkerError('internal', `the warm-up run failed: ${ran.message || ran.status}`);
    }
  }
  return { compileMs: Math.round(compiledMs), totalMs: Math.round(performance.now() - started), engine: withEngine };
}

// -- TypeScript diagnostics ------------------------------------------------------------------

function parseDiagnostics(output) {
  const diagnostics = [];
  for (const line of output.split('\n')) {
    const match = TS_DIAGNOSTIC.exec(line);
    if (match) {
      const [, file, row, column, code, message] = match;
      diagnostics.push({ file, line: Number(row), column: Number(column), code, message });
    } else if (line.startsWith('  ') && diagnostics.length) {
      diagnostics.at(-1).message += `\n${line.trimEnd()}`; // the message chain
    }
  }
  const seen = new Set();
  return diagnostics.filter((d) => {
    const key = `${d.file}:${d.line}:${d.column}:${d.code}:${d.message}`;
    return seen.has(key) ? false : (seen.add(key), true);
  });
}

async function diagnose({ path: p, timeoutMs, maxBytes }) {
  const resolved = await regularFile(p, maxBytes);
  const tsconfig = path.join(WORKSPACE, 'tsconfig.json');
  const config = {
    ...(existsSync(tsconfig) ? { extends: tsconfig } : {}),
    compilerOptions: { noEmit: true, ...(existsSync(tsconfig) ? {} : { strict: true, skipLibCheck: true, types: [] }) },
    // Relative to this config: the requested file (imports follow) and the ambient types.
    files: [resolved],
    include: [path.join(WORKSPACE, 'types/**/*.d.ts')],
  };
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'diagnose-'));
  try {
    const configPath = path.join(dir, 'tsconfig.json');
    await fs.writeFile(configPath, JSON.stringify(config));
    const { output, timedOut, code } = await run(TSC, ['-p', configPath, '--pretty', 'false'], timeoutMs);
    if (timedOut) return { ok: false, message: `the TypeScript check did not finish within ${timeoutMs} ms` };
    const all = parseDiagnostics(output);
    if (code !== 0 && all.length === 0) {
      // No diagnostic at all: the check itself failed (a broken tsconfig.json, say).
      return { ok: false, message: output.trim().slice(0, 2000) || `tsc exited with ${code}` };
    }
    // The node definitions (the image's, or those materialized into node-types/) are not
    // clean TypeScript: only the workspace's own files count.
    const diagnostics = all.filter((d) => !d.file.includes('node_modules/') && !new RegExp(`(^|/)${WORKSPACE_TYPES}/`).test(d.file));
    return { ok: true, diagnostics };
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

function run(command, args, timeoutMs) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: WORKSPACE, stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks = [];
    let size = 0;
    const keep = (chunk) => {
      if (size < 4 * 1024 * 1024) chunks.push(chunk);
      size += chunk.length;
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ output: String(error.message), timedOut: false, code: -1 });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ output: Buffer.concat(chunks).toString('utf8'), timedOut, code });
    });
  });
}

// -- node definitions ------------------------------------------------------------------------

const NAME = /^[A-Za-z0-9_]+$/;

const snake = (value) => String(value).replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
const after = (name, prefix) => name.slice(prefix.length).replace(/\.ts$/, '');

// What a split definition folder offers: {resource, operation} pairs or {mode} values.
async function splitChoices(split) {
  const choices = [];
  for (const entry of await fs.readdir(split, { withFileTypes: true })) {
    if (entry.isFile() && entry.name.startsWith('mode_')) choices.push({ mode: after(entry.name, 'mode_') });
    if (!entry.isDirectory() || !entry.name.startsWith('resource_')) continue;
    for (const file of await fs.readdir(path.join(split, entry.name))) {
      if (file.startsWith('operation_') && file.endsWith('.ts')) {
        choices.push({ resource: after(entry.name, 'resource_'), operation: after(file, 'operation_') });
      }
    }
  }
  return choices;
}

// `version` as in the catalog (4.2 → v42): the host picks it, knowing which versions exist.
// Nodes split by resource and operation (or by mode) have one file each plus an index.
async function definition({ nodeType, version, resource, operation, mode }) {
  const dot = typeof nodeType === 'string' ? nodeType.lastIndexOf('.') : -1;
  const root = dot > 0 ? DEFINITIONS[nodeType.slice(0, dot)] : undefined;
  const name = dot > 0 ? nodeType.slice(dot + 1) : '';
  if (!root || !NAME.test(name)) throw new WorkerError('missing', `no type definitions for ${nodeType}`);
  const folder = path.join(root, name);
  const entries = await fs.readdir(folder).catch(() => []);
  const chosen = String(version ?? '').replace('.', '');
  if (!entries.includes(`v${chosen}.ts`) && !entries.includes(`v${chosen}`)) {
    const known = entries.filter((e) => /^v\d+(\.ts)?$/.test(e)).map((e) => e.replace('.ts', ''));
    throw new WorkerError('missing', `${nodeType} has no type definitions for version ${version} (there are: ${known.join(', ') || 'none'})`);
  }
  const read = async (file, discriminators) => ({ file: path.relative(root, file), content: await fs.readFile(file, 'utf8'), discriminators });
  const single = path.join(folder, `v${chosen}.ts`);
  if (existsSync(single)) return read(single, []);
  const split = path.join(folder, `v${chosen}`);
  const choices = await splitChoices(split);
  const wanted = [resource, operation, mode].filter((v) => v !== undefined && v !== null);
  if (wanted.length === 0) return read(path.join(split, 'index.ts'), choices);
  if (!wanted.every((v) => NAME.test(snake(v)))) throw new WorkerError('missing', 'resource, operation and mode are names like sendMessage');
  const target = mode
    ? path.join(split, `mode_${snake(mode)}.ts`)
    : path.join(split, `resource_${snake(resource)}`, operation ? `operation_${snake(operation)}.ts` : 'index.ts');
  if (!existsSync(target)) {
    throw new WorkerError('missing', `${nodeType} v${version} has no definition for ${JSON.stringify({ resource, operation, mode })}; it has ${JSON.stringify(choices.slice(0, 20))}`);
  }
  return read(target, choices);
}

// A node version's typed parameters written into the workspace under node-types/ (which the
// workspace's tsconfig consults before the image's definitions): the image's own files when it
// ships them (a split node's whole folder), else generated from the node's description (the
// host's catalog entry) with the SDK's type generator, the one the shipped files came from.
const WORKSPACE_TYPES = 'node-types';
const PACKAGE_NAME = /^(@[a-z0-9-]+\/)?[a-z0-9][a-z0-9._-]*$/;

async function materialize({ nodeType, version, description, resource, operation, mode, maxBytes }) {
  const dot = typeof nodeType === 'string' ? nodeType.lastIndexOf('.') : -1;
  const pkg = dot > 0 ? nodeType.slice(0, dot) : '';
  const name = dot > 0 ? nodeType.slice(dot + 1) : '';
  if (!PACKAGE_NAME.test(pkg) || !NAME.test(name)) throw new WorkerError('missing', `${nodeType} is not a node type name like n8n-nodes-base.httpRequest`);
  const tag = `v${String(version).replace('.', '')}`;
  if (!/^v\d+$/.test(tag)) throw new WorkerError('missing', `${version} is not a node version like 4.2`);
  const shipped = DEFINITIONS[pkg] ? path.join(DEFINITIONS[pkg], name) : undefined;
  let files;
  let source = 'image';
  if (shipped && existsSync(path.join(shipped, `${tag}.ts`))) {
    files = [{ rel: `${tag}.ts`, content: await fs.readFile(path.join(shipped, `${tag}.ts`), 'utf8') }];
  } else if (shipped && existsSync(path.join(shipped, tag))) {
    const names = (await fs.readdir(path.join(shipped, tag), { recursive: true })).filter((f) => f.endsWith('.ts')).sort();
    files = await Promise.all(names.map(async (f) => ({ rel: `${tag}/${f}`, content: await fs.readFile(path.join(shipped, tag, f), 'utf8') })));
  } else {
    if (!description || typeof description !== 'object') throw new WorkerError('missing', `no type definitions for ${nodeType} v${version} and no description to make them from`);
    const generator = require('@n8n/workflow-sdk/dist/generate-types/generate-types');
    files = [{ rel: `${tag}.ts`, content: generator.generateSingleVersionTypeFile({ ...description, name: nodeType }, Number(version)) }];
    source = 'generated';
  }
  const base = `${WORKSPACE_TYPES}/${pkg.split('/').pop()}/${name}`;
  for (const file of files) await writeFile(`${base}/${file.rel}`, Buffer.from(file.content), maxBytes);
  // A split node: the file of the resource/operation or mode asked about, else its index.
  const wanted = mode
    ? `${tag}/mode_${snake(mode)}.ts`
    : resource
      ? `${tag}/resource_${snake(resource)}/${operation ? `operation_${snake(operation)}.ts` : 'index.ts'}`
      : undefined;
  const main = files.find((f) => f.rel === wanted) ?? files.find((f) => f.rel === `${tag}.ts` || f.rel === `${tag}/index.ts`) ?? files[0];
  return { path: `${base}/${main.rel}`, content: main.content, source, files: files.map((f) => `${base}/${f.rel}`) };
}

// grep over the workspace with the host's arguments (sandbox/search.py builds them and reads
// the output): the path is checked first without following symlinks, the output kept up to
// `maxBytes`, the search ended at its deadline; either cut says `cut`.
async function grep({ path: p, argv, maxBytes, timeoutMs }) {
  const names = parts(p);
  try {
    await (await openDirectory(p, names)).close();
  } catch (error) {
    if (!(error instanceof WorkerError) || error.code !== 'missing' || names.length === 0) throw error;
    await (await openRegularFile(p, Number.MAX_SAFE_INTEGER)).close();
  }
  if (!Array.isArray(argv) || !argv.every((a) => typeof a === 'string')) {
    throw new WorkerError('protocol', 'grep takes its arguments as strings');
  }
  return new Promise((resolve, reject) => {
    const child = spawn('grep', argv, { cwd: WORKSPACE, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    let size = 0;
    let cut = false;
    let stderr = '';
    const stop = () => {
      cut = true;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(stop, timeoutMs);
    child.stdout.on('data', (chunk) => {
      if (cut) return;
      const room = maxBytes - size;
      out.push(chunk.subarray(0, room));
      size += Math.min(chunk.length, room);
      if (chunk.length >= room) stop();
    });
    child.stderr.on('data', (chunk) => {
      stderr = (stderr + chunk.toString()).slice(-2000);
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: cut ? 0 : (code ?? 2), stdout: Buffer.concat(out).toString('base64'), stderr, cut });
    });
  });
}

// -- output schemas ---------------------------------------------------------------------------

const KNOWN_BASE = JSON.parse(await fs.readFile(path.join(NODE_MODULES, 'n8n-nodes-base/dist/known/nodes.json'), 'utf8'));
const versionOf = (folder) => folder.slice(1).split('.').map(Number);
const atMost = (a, b) => a[0] < b[0] || (a[0] === b[0] && (a[1] ?? 0) <= (b[1] ?? 0));

// The JSON Schema n8n-nodes-base ships for what a node version's resource/operation outputs
// (`dist/nodes/<Node>/__schema__/v<x.y.z>/<resource>/<operation>.json`), the newest one not
// newer than the node version (a version folder holds only what changed in it); `{schema:
// null}` when there is none.
async function outputSchema({ nodeType, version, resource, operation }) {
  const known = typeof nodeType === 'string' && nodeType.startsWith('n8n-nodes-base.') ? KNOWN_BASE[nodeType.slice(15)] : undefined;
  if (!known || !NAME.test(String(resource ?? 'x')) || !NAME.test(String(operation ?? 'x'))) return { schema: null };
  const root = path.join(NODE_MODULES, 'n8n-nodes-base', path.dirname(known.sourcePath), '__schema__');
  const wanted = String(version ?? '1').split('.').map(Number);
  const folders = (await fs.readdir(root).catch(() => []))
    .filter((folder) => /^v\d+\.\d+\.\d+$/.test(folder) && atMost(versionOf(folder), wanted))
    .sort((a, b) => { const [x, y] = [versionOf(a), versionOf(b)]; return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
  for (const folder of folders.reverse()) {
    const file = resource
      ? path.join(root, folder, resource, `${operation}.json`)
      : path.join(root, folder, `${operation ?? 'output'}.json`);
    try {
      return { schema: JSON.parse(await fs.readFile(file, 'utf8')), file: path.relative(NODE_MODULES, file) };
    } catch (error) {
      if (error.code !== 'ENOENT') throw error;
    }
  }
  return { schema: null };
}

export const handlers = {
  compile,
  outputSchema,
  execute,
  nodeResources,
  resolveParameters,
  cancelExecution,
  diagnose,
  toCode,
  definition,
  materialize,
  warm,
  ping: async () => 'pong',
  stats: async () => ({
    pid: process.pid,
    memory: process.memoryUsage(),
    uptime: process.uptime(),
    threads: { compiler: compiler.running, engine: engine.running },
    recycled,
  }),
  read: async ({ path: p, maxBytes }) => ({ content: (await readRegularFile(p, maxBytes)).toString('base64') }),
  write: async ({ path: p, content, maxBytes }) => ({
    bytes: await writeFile(p, Buffer.from(content, 'base64'), maxBytes),
  }),
  strReplace: async ({ path: p, old, new: replacement, replaceAll, maxBytes }) => {
    if (!old) throw new WorkerError('mismatch', 'the text to replace is empty: give the exact text to replace');
    const text = await readRegularFile(p, maxBytes, 'utf8');
    const count = text.split(old).length - 1;
    if (count === 0) {
      throw new WorkerError('mismatch', `the text to replace was not found in '${p}'; read the file and copy it exactly`);
    }
    if (count > 1 && !replaceAll) {
      throw new WorkerError(
        'mismatch',
        `the text to replace matches ${count} places in '${p}'; include more surrounding text so it matches once, or replace every match`,
      );
    }
    await writeFile(p, Buffer.from(text.split(old).join(replacement)), maxBytes);
    return { replacements: count };
  },
  list: async ({ path: p, recursive, maxEntries }) => list(p, Boolean(recursive), Math.min(maxEntries, MAX_LIST)),
  grep,
  // The sandbox service API's file operations (any path the sandbox user may reach).
  ...fsHandlers,
  jobProcesses,
};

// How many processes a command's job uid still has (the host then skips its kill script when
// none is left: one engine exec less per command). /proc/<pid>/status is readable by any user.
// A process listed that is gone by the time its status is read counts too: it may have been
// the job's, and have forked after the listing (a fork bomb's processes do little else).
async function jobProcesses({ uid }) {
  if (!Number.isInteger(uid)) throw new WorkerError('protocol', 'jobProcesses takes a uid');
  let count = 0;
  for (const name of await fs.readdir('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue;
    const status = await fs.readFile(`/proc/${name}/status`, 'utf8').catch(() => null);
    const real = status === null ? null : /^Uid:\s+(\d+)/m.exec(status);
    if (status === null || (real && Number(real[1]) === uid)) count += 1;
  }
  return { count };
}

// One request object in, one reply object out (never throws).
export async function handle(request) {
  const handler = handlers[request.op];
  if (!handler) return { id: request.id, ok: false, error: { code: 'protocol', message: `unknown op ${request.op}` } };
  try {
    return { id: request.id, ok: true, result: await handler(request) };
  } catch (error) {
    const code = error instanceof WorkerError ? error.code : 'internal';
    return { id: request.id, ok: false, error: { code, message: error.message } };
  }
}

export function stopThreads() {
  compiler.stop();
  engine.stop();
}
