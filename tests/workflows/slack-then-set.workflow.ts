// A Slack post (a write: simulated) whose output feeds a Set node that runs for real.
import { expr, node, trigger, workflow } from '@n8n/workflow-sdk';

const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });

const post = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Post',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'id', value: 'C1' },
      text: 'hello',
    },
  },
});

const record = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Record',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [{ id: 'c', name: 'postedTo', value: expr('{{ $json.channel }}'), type: 'string' }],
      },
    },
  },
});

export default workflow('slack-then-set', 'Post and record').add(start).to(post).to(record);
