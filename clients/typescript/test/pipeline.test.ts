// The pipeline from a backend: write a workflow into the thread's workspace, build it in
// the thread's sandbox, verify it on the real n8n engine with side effects simulated.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';

import { Served } from './harness.js';

const SOURCE = readFileSync(new URL('../../../../examples/order-intake.workflow.ts', import.meta.url), 'utf8');
let served: Served;

before(async () => {
  served = await Served.start('pipeline');
});

after(async () => {
  await served.stop();
});

test('a workflow is built and verified through the typed helpers', async () => {
  const client = served.client({ deadlineMs: 300_000 });
  const written = await client.callTool('pipe-1', 'workspace_write_file', {
    path: 'src/order-intake.workflow.ts',
    content: SOURCE,
  });
  assert.equal(written.isError, false, JSON.stringify(written.result));
  assert.equal(typeof written.result.bytesWritten, 'number');

  const built = await client.buildWorkflow({ threadId: 'pipe-1', filePath: 'src/order-intake.workflow.ts' });
  assert.equal(built.success, true, JSON.stringify(built.errors));
  assert.ok(built.workflowId.length > 0 && built.workItemId.length > 0);

  const verified = await client.verifyWorkflow({ threadId: 'pipe-1', workflowId: built.workflowId });
  assert.equal(typeof verified.executionId, 'string');
  const claim = verified.claim as { level: string };
  assert.ok(['verified', 'partial'].includes(claim.level), JSON.stringify(claim));
  assert.ok(Array.isArray(verified.nodePreviews));

  // A file that does not compile: success false with the compiler's errors, not a throw.
  await client.callTool('pipe-1', 'workspace_write_file', {
    path: 'src/broken.workflow.ts',
    content: 'export default workflow(',
  });
  const broken = await client.buildWorkflow({ threadId: 'pipe-1', filePath: 'src/broken.workflow.ts' });
  assert.equal(broken.success, false);
  assert.ok(broken.errors.length > 0);
  client.close();
});
