// The README's example, compiled with the tests so it stays true to the client's types.
import { InstanceAiClient, isEvent } from '../src/index.js';

export async function readmeExample(request: { signal: AbortSignal }): Promise<void> {
  const client = new InstanceAiClient({ address: 'instance-ai:50051', apiKey: process.env.KEY, tls: true });
  const events = client.streamEvents('thread-1', { signal: request.signal });
  const runId = await client.sendMessage('thread-1', 'Every Monday, post open orders to Slack');
  for await (const event of events) {
    if (isEvent(event, 'confirmation-request'))
      await client.confirm('thread-1', event.payload.requestId, { kind: 'approval', approved: true });
    if (isEvent(event, 'run-finish') && event.runId === runId) break;
  }
}
