// The bundled example `make run` builds: orders arrive on a webhook, get a priority, and
// urgent ones are announced in Slack. The webhook's sample order is a declared fixture, so a
// verification run needs no real request; the Slack node would be simulated.
import { expr, ifElse, node, trigger, workflow } from '@n8n/workflow-sdk';

const intake = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'Order Intake',
    parameters: { httpMethod: 'POST', path: 'orders' },
    pinData: [{ body: { orderId: 'A-7', amount: 1200, customer: 'Acme' } }],
  },
});

const prioritise = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Prioritise',
    parameters: {
      mode: 'manual',
      includeOtherFields: true,
      assignments: {
        assignments: [
          { id: 'urgent', name: 'urgent', value: expr('{{ $json.body.amount >= 1000 }}'), type: 'boolean' },
          { id: 'order', name: 'orderId', value: expr('{{ $json.body.orderId }}'), type: 'string' },
        ],
      },
    },
  },
});

const isUrgent = ifElse({
  version: 2.2,
  config: {
    name: 'Urgent?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'strict' },
        combinator: 'and',
        conditions: [
          {
            leftValue: expr('{{ $json.urgent }}'),
            operator: { type: 'boolean', operation: 'true', singleValue: true },
            rightValue: '',
          },
        ],
      },
    },
  },
});

const announce = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Announce',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'id', value: 'C0SALES' },
      text: expr('Urgent order {{ $json.orderId }}'),
    },
  },
});

const queue = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Queue' } });

export default workflow('order-intake', 'Order intake')
  .add(intake)
  .to(prioritise)
  .to(isUrgent)
  .onTrue(announce)
  .onFalse(queue);
