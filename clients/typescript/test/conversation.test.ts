// A backend's conversation through the client: send, stream n8n's events, answer a card,
// call tools, cancel, deadlines and the service's errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  InstanceAiError,
  isEvent,
  status,
  type StreamedEvent,
  stringifyJsonObject,
} from '../src/index.js';
import { invalidEvents, readUntil, Served, scriptModel, types } from './harness.js';

let served: Served;

before(async () => {
  served = await Served.start('conversation');
});

after(async () => {
  await served.stop();
});

test('a run streams typed events that pass n8n’s event contract, live and replayed', async () => {
  const client = served.client();
  await scriptModel(
    {
      tool: 'update-tasks',
      args: { tasks: [{ id: 'a', description: 'Draft the workflow', status: 'todo' }] },
      text: 'Planning.',
    },
    { text: 'All planned.' },
  );
  const stream = client.streamEvents('conv-1');
  const runId = await client.sendMessage('conv-1', 'plan a weekly report');
  const live = await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === runId);
  await stream.return(undefined);

  const durable = live.filter((e) => e.id !== undefined);
  const kinds: string[] = durable.map((e) => e.type);
  for (const kind of ['run-start', 'tool-call', 'tool-result', 'text-block', 'run-finish']) {
    assert.ok(kinds.includes(kind), `no ${kind} in ${types(durable)}`);
  }
  assert.ok(live.some((e) => e.id === undefined), 'live-only events (deltas) reach a follower');
  assert.deepEqual(invalidEvents(live), []);

  const call = live.find((e) => isEvent(e, 'tool-call'));
  assert.ok(call && isEvent(call, 'tool-call'));
  assert.equal(call.payload.toolName, 'update-tasks'); // narrowed by n8n's union
  const finish = live.at(-1);
  assert.ok(finish && isEvent(finish, 'run-finish'));
  assert.equal(finish.payload.status, 'completed');

  // Replay (follow false) gives the same durable events, ids strictly increasing.
  const replayed: StreamedEvent[] = [];
  for await (const event of client.streamEvents('conv-1', { follow: false })) replayed.push(event);
  assert.deepEqual(replayed, durable);
  const ids = replayed.map((e) => e.id ?? 0);
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
  assert.equal(new Set(ids).size, ids.length);
  // After a cursor: only what came later.
  const later: StreamedEvent[] = [];
  for await (const event of client.streamEvents('conv-1', { follow: false, after: ids[1] })) {
    later.push(event);
  }
  assert.deepEqual(later, durable.slice(2));
  client.close();
});

test('a confirmation card is answered with confirm and the run resumes', async () => {
  const client = served.client();
  const question = {
    id: 'channel',
    question: 'Where should alerts go?',
    type: 'single',
    options: ['Slack', 'Email'],
  };
  await scriptModel({ tool: 'ask-user', args: { questions: [question] } }, { text: 'Slack it is' });
  const stream = client.streamEvents('conv-2');
  const runId = await client.sendMessage('conv-2', 'set up alerts');
  const seen = await readUntil(stream, (e) => e.type === 'confirmation-request');
  const card = seen.at(-1);
  assert.ok(card && isEvent(card, 'confirmation-request'));
  assert.equal(card.payload.inputType, 'questions');
  const resumed = await client.confirm('conv-2', card.payload.requestId, {
    kind: 'questions',
    answers: [{ questionId: 'channel', selectedOptions: ['Slack'] }],
  });
  assert.equal(resumed, runId);
  await readUntil(stream, (e) => e.type === 'run-finish', seen);
  await stream.return(undefined);
  assert.deepEqual(invalidEvents(seen), []);
  const result = seen.find((e) => isEvent(e, 'tool-result'));
  assert.ok(result && isEvent(result, 'tool-result'));
  assert.equal((result.payload.result as { answered: boolean }).answered, true);

  // An answer of the wrong kind for a card that is gone: the service's own status.
  await assert.rejects(
    client.confirm('conv-2', card.payload.requestId, { kind: 'approval', approved: true }),
    (error: InstanceAiError) => error.code !== status.OK && error.details.length > 0,
  );
  client.close();
});

test('JSON values keep their types exactly, integers past 2^53 included', async () => {
  const client = served.client();
  const numbers = { huge: 9007199254740993n, whole: 3, real: 2.5, negative: -(2n ** 60n) };
  assert.equal(
    stringifyJsonObject({ numbers }),
    '{"numbers":{"huge":9007199254740993,"whole":3,"real":2.5,"negative":-1152921504606846976}}',
  );
  // Through the model, the service's store and the stream, and back.
  await scriptModel({ tool: 'update-tasks', args: { tasks: [], numbers } }, { text: 'counted' });
  const stream = client.streamEvents('conv-3');
  const runId = await client.sendMessage('conv-3', 'count');
  const seen = await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === runId);
  await stream.return(undefined);
  const call = seen.find((e) => isEvent(e, 'tool-call'));
  assert.ok(call && isEvent(call, 'tool-call'));
  assert.deepEqual(call.payload.args.numbers, numbers);

  const direct = await client.callTool('conv-3', 'search-nodes', { query: 'slack', limit: 2 });
  assert.equal(direct.isError, false);
  const nodes = direct.result.nodes as Array<{ name: string }>;
  assert.equal(nodes.length, 2);
  client.close();
});

test('tools are listed with their schemas as objects, whole numbers whole', async () => {
  const client = served.client();
  const tools = await client.listTools();
  const names = tools.map((t) => t.name);
  assert.ok(names.includes('build-workflow') && names.includes('search-nodes'));
  const defaults = tools.flatMap((tool) =>
    Object.values((tool.inputSchema.properties ?? {}) as Record<string, { type?: string; default?: unknown }>)
      .filter((p) => p.type === 'integer' && p.default !== undefined)
      .map((p) => p.default),
  );
  assert.ok(defaults.length > 0);
  assert.ok(defaults.every((d) => Number.isInteger(d)));

  const unknown = await client.callTool('conv-4', 'no-such-tool').catch((e: unknown) => e);
  assert.ok(unknown instanceof InstanceAiError);
  assert.equal(unknown.codeName, 'NOT_FOUND');
  client.close();
});

test('deadlines, aborts and the service’s errors reach the caller as InstanceAiError', async () => {
  const client = served.client();
  // An unknown thread: NOT_FOUND from the stream, thrown, not retried.
  const missing = await (async () => {
    for await (const _ of client.streamEvents('no-such-thread', { follow: false })) void _;
  })().catch((e: unknown) => e);
  assert.ok(missing instanceof InstanceAiError);
  assert.equal(missing.code, status.NOT_FOUND);

  // A malformed cursor: INVALID_ARGUMENT with what to change.
  const cursor = await (async () => {
    for await (const _ of client.streamEvents('conv-1', { after: 'x', follow: false })) void _;
  })().catch((e: unknown) => e);
  assert.ok(cursor instanceof InstanceAiError && cursor.code === status.INVALID_ARGUMENT);

  // An aborted signal cancels a unary call and ends a stream quietly.
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(client.threadStatus('conv-1', { signal: controller.signal }), (e: InstanceAiError) => e.code === status.CANCELLED);
  const live = new AbortController();
  const seen: StreamedEvent[] = [];
  setTimeout(() => live.abort(), 300);
  for await (const event of client.streamEvents('conv-1', { signal: live.signal })) seen.push(event);
  assert.ok(seen.length > 0 && live.signal.aborted);

  // A deadline too short for the work: DEADLINE_EXCEEDED.
  await assert.rejects(
    client.buildWorkflow({ threadId: 'conv-5', filePath: 'src/none.workflow.ts' }, { deadlineMs: 1 }),
    (e: InstanceAiError) => e.code === status.DEADLINE_EXCEEDED,
  );

  // Cancelling a run through the client.
  const cancelled = await client.cancelRun('conv-1');
  assert.equal(cancelled.cancelled, false); // nothing running: idempotent, says so
  client.close();
});

test('a message carries attachments the agent reads with parse-file', async () => {
  const client = served.client();
  await scriptModel({ tool: 'parse-file', args: { maxRows: 1 } }, { text: 'Read it.' });
  const stream = client.streamEvents('conv-files');
  const csv = new TextEncoder().encode('name,qty\nAda,3\nGrace,5\n');
  const runId = await client.sendMessage('conv-files', 'load this', {
    attachments: [{ name: 'orders.csv', data: csv, mimeType: 'text/csv' }],
  });
  const live = await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === runId);
  await stream.return(undefined);
  const result = live.find((e) => isEvent(e, 'tool-result'));
  assert.ok(result && isEvent(result, 'tool-result'), types(live));
  const parsed = result.payload.result as {
    rows: unknown[];
    totalRows: number;
    nextStartRow: number;
  };
  assert.deepEqual(parsed.rows, [{ name: 'Ada', qty: '3' }]);
  assert.equal(parsed.totalRows, 2);
  assert.equal(parsed.nextStartRow, 1);
  assert.deepEqual(invalidEvents(live), []);
});
