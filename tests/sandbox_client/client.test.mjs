// n8n's own sandbox service client (@n8n/sandbox-client 0.1.1, pinned in package-lock.json)
// against this service's sandbox API: every method, as n8n's assistant calls them.
// Driven by tests/test_sandbox_api_client.py, which starts the service and passes:
//   SANDBOX_API_URL, SANDBOX_API_KEY, SANDBOX_API_OTHER_KEY, SANDBOX_STOP_COMMAND (a JSON argv
//   that stops a container, given its id, from outside)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { SandboxClient, SandboxCrashedError, SandboxServiceError } from '@n8n/sandbox-client';

const baseUrl = process.env.SANDBOX_API_URL;
const apiKey = process.env.SANDBOX_API_KEY;
// No retries: the statuses themselves are under test (n8n's defaults retry 429 and 503).
const noRetry = { attempts: 0 };
const client = new SandboxClient({ baseUrl, apiKey, retry: noRetry });
const other = new SandboxClient({ baseUrl, apiKey: process.env.SANDBOX_API_OTHER_KEY, retry: noRetry });
const stranger = new SandboxClient({ baseUrl, apiKey: 'not-a-key', retry: noRetry });

let id;

before(async () => {
  id = randomUUID();
  const made = await client.createSandbox({ id });
  assert.equal(made.id, id);
});

after(async () => {
  await client.deleteSandbox(id);
});

// `status`: the one expected, or a list of those allowed.
async function rejectsWith(promise, status) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof SandboxServiceError, `${error}`);
    const allowed = [status].flat();
    assert.ok(allowed.includes(error.status), `${error.status} not in ${allowed}: ${error.message}`);
    return true;
  });
}

async function sh(command, options = {}) {
  return client.exec(id, { command, timeoutMs: 60_000, ...options });
}

// How many processes of the sandbox run `needle` (the brackets keep grep from finding itself).
async function running(needle) {
  const pattern = `[${needle[0]}]${needle.slice(1)}`;
  const result = await sh(`ps -eo args | grep -c '${pattern}' || true`);
  return Number(result.stdout.trim());
}

test('lifecycle: create, reconnect by id, get, ephemeral, delete', async () => {
  const fresh = await client.createSandbox();
  assert.match(fresh.id, /^[0-9a-f-]{36}$/);
  assert.equal(fresh.status, 'running');
  assert.equal(fresh.ephemeral, false);
  assert.ok(Math.abs(fresh.createdAt - Date.now() / 1000) < 120, 'created_at is in seconds');
  const again = await client.createSandbox({ id: fresh.id });
  assert.equal(again.id, fresh.id);
  assert.equal(again.createdAt, fresh.createdAt);
  const got = await client.getSandbox(fresh.id);
  assert.equal(got.status, 'running');
  await client.deleteSandbox(fresh.id);
  await rejectsWith(client.getSandbox(fresh.id), 404);
  await client.deleteSandbox(fresh.id); // already gone: the client takes 404 as done

  const ephemeral = await client.createSandbox({ id: randomUUID(), ephemeral: true });
  assert.equal(ephemeral.ephemeral, true);
  await client.deleteSandbox(ephemeral.id);
});

test('tenants: another key sees nothing of this one, an unknown key is refused', async () => {
  await rejectsWith(other.getSandbox(id), 404);
  await rejectsWith(other.readFile(id, '/home/user/workspace/x'), 404);
  await rejectsWith(other.exec(id, { command: 'true' }), 404);
  await rejectsWith(other.createSandbox({ id }), 409);
  await rejectsWith(stranger.getSandbox(id), 401);
  await rejectsWith(stranger.createSandbox(), 401);
  await rejectsWith(client.getSandbox('Not-A-UUID'), 400);
});

test('exec: stdout and stderr stream in order; env, workdir, exit codes', async () => {
  const seen = [];
  const result = await sh('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done; exit 3', {
    onStdout: (data) => seen.push(['out', data]),
    onStderr: (data) => seen.push(['err', data]),
  });
  assert.equal(result.exitCode, 3);
  assert.equal(result.success, false);
  assert.equal(result.stdout, 'out1\nout2\nout3\n');
  assert.equal(result.stderr, 'err1\nerr2\nerr3\n');
  // Streamed as they were written: each stream in order, and each pair (0.2 s apart) before
  // the next (within a pair the two pipes may be read in either order).
  const order = seen.flatMap(([, data]) => data.trim().split('\n'));
  assert.deepEqual(order.filter((l) => l.startsWith('out')), ['out1', 'out2', 'out3']);
  assert.deepEqual(order.filter((l) => l.startsWith('err')), ['err1', 'err2', 'err3']);
  const pair = (line) => Number(line.at(-1));
  assert.deepEqual(order.map(pair), [...order.map(pair)].sort());

  const env = await sh('pwd; echo "$GREETING"; echo "$HOME"; id -u', { env: { GREETING: 'hi' }, workdir: '/tmp' });
  const [pwd, greeting, home, uid] = env.stdout.trim().split('\n');
  assert.deepEqual([pwd, greeting, home], ['/tmp', 'hi', '/home/user']);
  assert.notEqual(uid, '0');
  assert.ok(env.executionTimeMs >= 0);
});

test('exec: a timed-out command is killed with its whole tree', async () => {
  const result = await sh('sleep 171 & (setsid sleep 172 &); sleep 173', { timeoutMs: 1500 });
  assert.equal(result.timedOut, true);
  assert.equal(result.killed, true);
  assert.equal(result.success, false);
  for (const needle of ['sleep 171', 'sleep 172', 'sleep 173']) assert.equal(await running(needle), 0, needle);
});

test('exec: an aborted command is killed with its whole tree', async () => {
  const abort = new AbortController();
  setTimeout(() => abort.abort(), 1000);
  await assert.rejects(sh('sleep 181 & sleep 182; echo never', { abortSignal: abort.signal }));
  // The client deletes the execution after an abort; that kill is done once it answers.
  let left = -1;
  for (let i = 0; i < 50 && left !== 0; i++) {
    left = (await running('sleep 181')) + (await running('sleep 182'));
    if (left) await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(left, 0);
});

test('exec: resume after a dropped stream; a known exec_id is followed, not run again', async () => {
  const execId = randomUUID();
  const url = `${baseUrl}/sandboxes/${id}/executions`;
  const headers = { 'X-Api-Key': apiKey, 'Content-Type': 'application/json' };
  const body = JSON.stringify({
    command: 'echo run >> /tmp/runs-' + execId + '; for i in 1 2 3 4 5; do echo line$i; sleep 0.3; done',
    exec_id: execId,
    timeout_ms: 60_000,
  });
  const abort = new AbortController();
  const response = await fetch(url, { method: 'POST', headers, body, signal: abort.signal });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('x-exec-id'), execId);
  // Read until line1 arrives, then drop the stream.
  const reader = response.body.getReader();
  let text = '';
  while (!text.includes('line1')) text += new TextDecoder().decode((await reader.read()).value);
  abort.abort();
  const received = text.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(received[0].type, 'started');
  const lastSeq = received.at(-1).seq;

  const rest = await client.resumeExecution(id, execId, lastSeq);
  assert.equal(rest.exitCode, 0);
  const before = received.filter((e) => e.type === 'stdout').map((e) => e.data).join('');
  assert.equal(before + rest.stdout, 'line1\nline2\nline3\nline4\nline5\n');

  // The whole history again, and the same exec_id posted again follows it.
  const replay = await client.resumeExecution(id, execId);
  assert.equal(replay.stdout, 'line1\nline2\nline3\nline4\nline5\n');
  const again = await fetch(url, { method: 'POST', headers, body });
  const events = (await again.text()).trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(events.at(-1).type, 'exit');
  assert.equal((await sh(`cat /tmp/runs-${execId}`)).stdout, 'run\n');

  await rejectsWith(client.resumeExecution(id, randomUUID()), 404);
  await client.deleteExecution(id, execId);
  await client.deleteExecution(id, execId); // idempotent
  await rejectsWith(client.resumeExecution(id, execId), 404);
});

test('files: write, read, append, overwrite, mkdir, list, stat, copy, move, delete', async () => {
  const dir = `/home/user/workspace/files-${randomUUID().slice(0, 8)}`;
  await client.mkdir(id, `${dir}/a/b`, true);
  await rejectsWith(client.mkdir(id, `${dir}/a`), 409);
  await client.mkdir(id, `${dir}/a`, true); // recursive: an existing folder is fine
  await client.writeFile(id, `${dir}/a/b/one.ts`, 'export const one = 1;\n');
  await rejectsWith(client.writeFile(id, `${dir}/a/b/one.ts`, 'replaced', false), 409);
  await client.writeFile(id, `${dir}/a/b/one.ts`, Buffer.from('export const one = 1;\n'), true);
  await client.appendFile(id, `${dir}/a/b/one.ts`, 'export const two = 2;\n');
  assert.equal((await client.readFile(id, `${dir}/a/b/one.ts`)).toString(), 'export const one = 1;\nexport const two = 2;\n');
  await client.writeFile(id, `${dir}/notes.md`, '# notes');

  const top = await client.listFiles(id, { path: dir });
  assert.deepEqual(top.map((e) => [e.name, e.isDir, e.type]), [['a', true, 'directory'], ['notes.md', false, 'file']]);
  assert.ok(!Number.isNaN(Date.parse(top[1].modTime)));
  const ts = await client.listFiles(id, { path: dir, recursive: true, extension: '.ts' });
  assert.deepEqual(ts.map((e) => e.name), ['a/b/one.ts']);

  const stat = await client.stat(id, `${dir}/a/b/one.ts`);
  assert.equal(stat.type, 'file');
  assert.equal(stat.size, 44);
  assert.equal(stat.path, `${dir}/a/b/one.ts`);
  assert.ok(!Number.isNaN(Date.parse(stat.modifiedAt)));
  assert.equal((await client.stat(id, dir)).type, 'directory');
  await rejectsWith(client.stat(id, `${dir}/missing`), 404);
  await rejectsWith(client.readFile(id, `${dir}/missing`), 404);

  await client.copyFile(id, { src: `${dir}/a`, dest: `${dir}/copy`, recursive: true });
  await rejectsWith(client.copyFile(id, { src: `${dir}/notes.md`, dest: `${dir}/copy/b/one.ts` }), 409);
  await rejectsWith(client.copyFile(id, { src: `${dir}/a`, dest: `${dir}/nope` }), 400);
  await client.moveFile(id, { src: `${dir}/notes.md`, dest: `${dir}/copy/notes.md` });
  await rejectsWith(client.moveFile(id, { src: `${dir}/notes.md`, dest: `${dir}/x` }), 404);
  await client.moveFile(id, { src: `${dir}/copy/notes.md`, dest: '/tmp/notes.md', overwrite: true }); // another filesystem
  assert.equal((await client.readFile(id, '/tmp/notes.md')).toString(), '# notes');
  assert.equal((await client.readFile(id, `${dir}/copy/b/one.ts`)).length, 44);

  await rejectsWith(client.deleteFile(id, `${dir}/copy`), 409); // not empty
  await client.deleteFile(id, `${dir}/copy`, { recursive: true });
  await rejectsWith(client.deleteFile(id, `${dir}/copy`), 404);
  await client.deleteFile(id, `${dir}/copy`, { force: true });
  await client.deleteFile(id, dir, { recursive: true });
  await rejectsWith(client.listFiles(id, { path: dir }), 404);
});

test('files: a 10 MB file round trip, byte for byte; one byte more is refused', async () => {
  const data = randomBytes(10 * 1024 * 1024);
  await client.writeFile(id, '/home/user/big.bin', data);
  const back = await client.readFile(id, '/home/user/big.bin');
  assert.equal(back.length, data.length);
  assert.ok(back.equals(data));
  // And on the sandbox's disk too, as written.
  const sum = await sh(`python3 -c "import hashlib; print(hashlib.sha256(open('/home/user/big.bin','rb').read()).hexdigest())"`);
  assert.equal(sum.stdout.trim(), createHash('sha256').update(data).digest('hex'));
  await rejectsWith(client.writeFile(id, '/home/user/big2.bin', Buffer.concat([data, Buffer.from('x')])), 413);
  await client.deleteFile(id, '/home/user/big.bin');
});

test('files: only the sandbox user\'s own filesystem, nothing of the host', async () => {
  // A file on the host, at a path the sandbox also has folders on.
  const hostFile = `/tmp/host-secret-${randomUUID()}`;
  execFileSync('sh', ['-c', `echo host-only > ${hostFile}`]);
  await rejectsWith(client.readFile(id, hostFile), 404);
  await rejectsWith(client.readFile(id, `/home/user/../../..${hostFile}`), 404);
  await sh(`ln -sfn / /home/user/root-link; ln -sfn ${hostFile} /home/user/file-link`);
  await rejectsWith(client.readFile(id, `/home/user/root-link${hostFile}`), 404);
  await rejectsWith(client.readFile(id, '/home/user/file-link'), 404);
  // Written through a link to the root: the sandbox's read-only root, not the host's.
  await rejectsWith(client.writeFile(id, '/home/user/root-link/etc/evil', 'x'), 403);
  await rejectsWith(client.writeFile(id, '/etc/passwd', 'x'), 403);
  // The first process's root is the container's own, not the host's (under gVisor the
  // sandbox user may not look through it at all: 403).
  await rejectsWith(client.readFile(id, `/proc/1/root${hostFile}`), [404, 403]);
  execFileSync('rm', ['-f', hostFile]);
});

test('a killed container: 409 SandboxCrashedError once, then the same files', async () => {
  await client.writeFile(id, '/home/user/workspace/kept.txt', 'still here');
  await sh('sleep 300 > /dev/null 2>&1 &');
  // Docker names a container's host after its id.
  const container = (await sh('cat /etc/hostname')).stdout.trim();
  assert.match(container, /^[0-9a-f]{12}$/);
  // Stopped as the host would stop it, whichever engine drives it; the command returns once
  // the container is down (the crash this test is about is a container that has stopped).
  const [stop, ...stopArgs] = JSON.parse(process.env.SANDBOX_STOP_COMMAND);
  execFileSync(stop, [...stopArgs, container]);
  await assert.rejects(client.readFile(id, '/home/user/workspace/kept.txt'), (error) => {
    assert.ok(error instanceof SandboxCrashedError, `${error}`);
    assert.equal(error.status, 409);
    return true;
  });
  assert.equal((await client.readFile(id, '/home/user/workspace/kept.txt')).toString(), 'still here');
  assert.equal((await client.getSandbox(id)).status, 'running');
  assert.equal(await running('sleep 300'), 0); // processes did not survive
});
