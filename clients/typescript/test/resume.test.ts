// streamEvents resumes by itself: across a restart of the service mid-stream, and after the
// service drops a reader that lags (ABORTED), with every durable event once and in order.
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import type { InstanceAiClient, StreamedEvent } from '../src/index.js';
import { invalidEvents, readUntil, Served, scriptModel } from './harness.js';

// One server at a time: they share the test's sandbox owner, which one service holds.
let served: Served | undefined;

afterEach(async () => {
  await served?.stop();
});

function assertConsecutive(events: StreamedEvent[]): void {
  const ids = events.flatMap((e) => (e.id === undefined ? [] : [e.id]));
  assert.deepEqual(
    ids,
    ids.map((_, i) => ids[0] + i),
    `durable ids with a gap or a duplicate: ${ids.join(',')}`,
  );
}

test('a stream open across a restart of the service goes on, without gap or duplicate', async () => {
  served = await Served.start('restart');
  const client = served.client();
  await scriptModel({ text: 'First answer.' });
  const resumes: string[] = [];
  const stream = client.streamEvents('resume-1', {
    reconnectForMs: 120_000,
    onResume: (reason) => resumes.push(reason),
  });
  const first = await client.sendMessage('resume-1', 'hello');
  const seen = await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === first);

  await served.restart(); // the stream is open: the service ends it with UNAVAILABLE

  await scriptModel({ text: 'Second answer, after the restart.' });
  const second = await client.sendMessage('resume-1', 'again');
  await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === second, seen);
  await stream.return(undefined);

  assert.ok(resumes.includes('unavailable'), 'the stream never had to reconnect');
  assertConsecutive(seen);
  assert.deepEqual(invalidEvents(seen), []);
  const runStarts = seen.filter((e) => e.type === 'run-start').map((e) => e.runId);
  assert.deepEqual(runStarts, [first, second]);
  const replayed: StreamedEvent[] = [];
  for await (const event of client.streamEvents('resume-1', { follow: false })) replayed.push(event);
  assert.deepEqual(
    replayed,
    seen.filter((e) => e.id !== undefined),
  );
  client.close();
});

async function idle(client: InstanceAiClient, threadId: string): Promise<void> {
  const until = Date.now() + 60_000;
  while ((await client.threadStatus(threadId)).hasActiveRun) {
    if (Date.now() > until) throw new Error(`${threadId} still has a run after 60 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test('a reader that lags is dropped by the service and resumes from its cursor', async () => {
  // A small per-reader buffer and a long streamed answer (thousands of live deltas).
  served = await Served.start('lag', { INSTANCE_AI_SUBSCRIBER_BUFFER: '512' });
  const client = served.client();
  const words = Array.from({ length: 6_000 }, (_, i) => `w${i}`).join(' ');
  await scriptModel({ text: 'Ready.' }, { text: words });
  await client.sendMessage('lag-1', 'hi');
  await idle(client, 'lag-1');
  const { lastEventId } = await client.threadStatus('lag-1');

  const resumes: string[] = [];
  const stream = client.streamEvents('lag-1', {
    after: lastEventId,
    onResume: (reason) => resumes.push(reason),
  });
  const pending = stream.next(); // opens the stream; nothing is read until the run is over
  await new Promise((resolve) => setTimeout(resolve, 500));
  const runId = await client.sendMessage('lag-1', 'say a lot');
  await idle(client, 'lag-1');
  const first = await pending;
  const seen = first.done ? [] : [first.value];
  await readUntil(stream, (e) => e.type === 'run-finish' && e.runId === runId, seen);
  await stream.return(undefined);

  assert.ok(resumes.includes('lagged'), `the reader was never dropped: ${resumes.join(',')}`);
  assertConsecutive(seen);
  assert.deepEqual(invalidEvents(seen), []);
  assert.equal(seen.filter((e) => e.id !== undefined)[0].id, lastEventId + 1);
  const block = seen.find((e) => e.type === 'text-block');
  assert.ok(block && block.type === 'text-block');
  assert.equal(block.payload.text, words);
  client.close();
});
