// The in-sandbox worker: one long-lived Node process per sandbox, spoken to over one attached
// exec stream. Requests and replies are JSON lines carrying an `id`; many may be in flight.
//
//   -> {"id":1,"op":"ping"}
//   <- {"id":1,"ok":true,"result":"pong"}
//   <- {"id":2,"ok":false,"error":{"code":"escape","message":"..."}}
//
// Operations: ping, stats, read, write, strReplace, list, compile. (execute arrives with the
// verify capability, in the same framing.) File contents travel as base64 so any bytes
// survive. Every path is confined to the workspace, symlinks resolved. The worker exits when
// its stdin closes.
//
// compile: esbuild bundles the source to CommonJS here (`@n8n/*` and other packages stay
// external, so the workspace's single SDK instance is used), then a pooled worker_thread
// evaluates it under a deadline (compile-thread.cjs). Every build evaluates afresh, so edits
// are seen and builds share no module state. A thread that misses its deadline is
// terminated and replaced on the next compile.

import { createInterface } from 'node:readline';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { build } from 'esbuild';

const WORKSPACE = '/home/user/workspace';
const MAX_LIST = 100000;
process.umask(0o002);

class WorkerError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function inside(resolved) {
  return resolved === WORKSPACE || resolved.startsWith(WORKSPACE + '/');
}

// The real path of `p`, following symlinks through its longest existing prefix.
async function confine(p) {
  if (typeof p !== 'string' || p === '' || p.includes('\0')) {
    throw new WorkerError('escape', 'give a path inside the workspace');
  }
  const absolute = path.resolve(WORKSPACE, p);
  if (!inside(absolute)) throw new WorkerError('escape', `${p} is outside the workspace`);
  let existing = absolute;
  const rest = [];
  for (;;) {
    try {
      const real = await fs.realpath(existing);
      const resolved = path.join(real, ...rest);
      if (!inside(resolved)) throw new WorkerError('escape', `${p} leads outside the workspace`);
      return resolved;
    } catch (error) {
      if (error instanceof WorkerError || error.code !== 'ENOENT') throw error;
      rest.unshift(path.basename(existing));
      existing = path.dirname(existing);
    }
  }
}

async function regularFile(p, maxBytes) {
  const resolved = await confine(p);
  let info;
  try {
    info = await fs.stat(resolved);
  } catch (error) {
    if (error.code === 'ENOENT') throw new WorkerError('missing', `${p} does not exist in the workspace`);
    throw error;
  }
  if (!info.isFile()) throw new WorkerError('not_a_file', `${p} is not a regular file`);
  if (info.size > maxBytes) throw new WorkerError('too_large', `${p} is larger than ${maxBytes} bytes`);
  return resolved;
}

async function writeFile(p, data, maxBytes) {
  if (data.length > maxBytes) {
    throw new WorkerError('too_large', `${data.length} bytes is over the ${maxBytes}-byte limit for one write`);
  }
  const resolved = await confine(p);
  try {
    if (!(await fs.stat(resolved)).isFile()) throw new WorkerError('not_a_file', `${p} is not a regular file`);
  } catch (error) {
    if (error instanceof WorkerError || error.code !== 'ENOENT') throw error;
  }
  await fs.mkdir(path.dirname(resolved), { recursive: true });
  // Write beside, then rename: a reader never sees half a file.
  const temporary = `${resolved}.${process.pid}.${Date.now()}.partial`;
  await fs.writeFile(temporary, data, { mode: 0o664 });
  await fs.rename(temporary, resolved);
  return data.length;
}

async function list(p, recursive, maxEntries) {
  const root = await confine(p);
  const entries = [];
  let truncated = false;
  async function walk(dir) {
    let names;
    try {
      names = await fs.readdir(dir, { withFileTypes: true });
    } catch (error) {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') {
        throw new WorkerError('missing', `${p} is not a directory in the workspace`);
      }
      throw error;
    }
    for (const entry of names) {
      if (entries.length >= maxEntries) {
        truncated = true;
        return;
      }
      const full = path.join(dir, entry.name);
      const type = entry.isSymbolicLink() ? 'symlink' : entry.isDirectory() ? 'directory' : entry.isFile() ? 'file' : 'other';
      const size = type === 'symlink' ? 0 : (await fs.lstat(full)).size;
      entries.push({ path: path.relative(root, full), type, size });
      if (recursive && type === 'directory') await walk(full);
    }
  }
  await walk(root);
  return { entries, truncated };
}

const COMPILE_THREAD = path.join(path.dirname(fileURLToPath(import.meta.url)), 'compile-thread.cjs');
let compileThread;
let compileIds = 0;
const compileWaiters = new Map();

function thread() {
  if (!compileThread) {
    compileThread = new Worker(COMPILE_THREAD, { resourceLimits: { maxOldGenerationSizeMb: 256 } });
    compileThread.on('message', (message) => {
      const waiter = compileWaiters.get(message.id);
      if (waiter) {
        compileWaiters.delete(message.id);
        waiter(message);
      }
    });
    compileThread.on('error', (error) => {
      for (const waiter of compileWaiters.values()) {
        waiter({ ok: false, error: { stage: 'load', message: String(error && error.message || error) } });
      }
      compileWaiters.clear();
      compileThread = undefined;
    });
  }
  return compileThread;
}

// One compile at a time on the one thread: a build that times out terminates the thread, and
// must not take another build down with it. (Warm builds take milliseconds.)
let compileQueue = Promise.resolve();
function compile(request) {
  const result = compileQueue.then(() => compileOne(request));
  compileQueue = result.catch(() => undefined);
  return result;
}

async function compileOne({ path: p, timeoutMs, maxBytes }) {
  const resolved = await regularFile(p, maxBytes);
  if (resolved.endsWith('.json')) {
    let workflow;
    try {
      workflow = JSON.parse(await fs.readFile(resolved, 'utf8'));
    } catch (error) {
      return { ok: false, stage: 'load', message: `not valid JSON: ${error.message}` };
    }
    const fixtures = workflow.pinData || {};
    delete workflow.pinData;
    return { ok: true, workflow, fixtures, graph: null };
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
    const messages = (error.errors || []).map(
      (e) => `${e.location ? `${e.location.file}(${e.location.line},${e.location.column + 1}): ` : ''}${e.text}`,
    );
    return { ok: false, stage: 'load', message: messages.join('\n') || String(error.message) };
  }
  const id = ++compileIds;
  const answer = new Promise((resolve) => compileWaiters.set(id, resolve));
  thread().postMessage({ id, code, file: resolved });
  let timer;
  const deadline = new Promise((resolve) => {
    timer = setTimeout(() => resolve(undefined), timeoutMs);
  });
  const message = await Promise.race([answer, deadline]);
  clearTimeout(timer);
  if (message === undefined) {
    compileWaiters.delete(id);
    const stuck = compileThread;
    compileThread = undefined;
    await stuck.terminate();
    return { ok: false, stage: 'timeout', message: `loading ${p} did not finish within ${timeoutMs} ms (an endless loop at import time?)` };
  }
  if (!message.ok) return { ok: false, ...message.error };
  return { ok: true, ...message.result };
}

const handlers = {
  compile,
  ping: async () => 'pong',
  stats: async () => ({ pid: process.pid, memory: process.memoryUsage(), uptime: process.uptime() }),
  read: async ({ path: p, maxBytes }) => {
    const resolved = await regularFile(p, maxBytes);
    return { content: (await fs.readFile(resolved)).toString('base64') };
  },
  write: async ({ path: p, content, maxBytes }) => ({
    bytes: await writeFile(p, Buffer.from(content, 'base64'), maxBytes),
  }),
  strReplace: async ({ path: p, old, new: replacement, replaceAll, maxBytes }) => {
    if (!old) throw new WorkerError('mismatch', 'old_str is empty: give the exact text to replace');
    const resolved = await regularFile(p, maxBytes);
    const text = await fs.readFile(resolved, 'utf8');
    const count = text.split(old).length - 1;
    if (count === 0) {
      throw new WorkerError('mismatch', `old_str was not found in '${p}'; read the file and copy the text exactly`);
    }
    if (count > 1 && !replaceAll) {
      throw new WorkerError(
        'mismatch',
        `old_str matches ${count} places in '${p}'; include more surrounding text so it matches once, or set replace_all`,
      );
    }
    await writeFile(p, Buffer.from(text.split(old).join(replacement)), maxBytes);
    return { replacements: count };
  },
  list: async ({ path: p, recursive, maxEntries }) => list(p, Boolean(recursive), Math.min(maxEntries, MAX_LIST)),
};

function reply(message) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

async function handle(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    reply({ id: null, ok: false, error: { code: 'protocol', message: 'not a JSON line' } });
    return;
  }
  const handler = handlers[request.op];
  if (!handler) {
    reply({ id: request.id, ok: false, error: { code: 'protocol', message: `unknown op ${request.op}` } });
    return;
  }
  try {
    reply({ id: request.id, ok: true, result: await handler(request) });
  } catch (error) {
    const code = error instanceof WorkerError ? error.code : 'internal';
    reply({ id: request.id, ok: false, error: { code, message: error.message } });
  }
}

reply({ id: 0, ok: true, result: { ready: true, pid: process.pid, node: process.version } });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', (line) => {
  if (line.trim()) handle(line);
});
lines.on('close', () => process.exit(0));
