// A webhook receives an order, an HTTP request enriches it, Slack announces it.
import { node, trigger, workflow } from '@n8n/workflow-sdk';

const hook = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'Order Webhook',
    parameters: { httpMethod: 'POST', path: 'orders' },
    pinData: [{ body: { orderId: 'A-1' } }],
  },
});

const lookup = node({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: {
    name: 'Look Up Customer',
    parameters: {
      method: 'GET',
      url: '={{ "https://crm.example.com/orders/" + $json.body.orderId }}',
      authentication: 'genericCredentialType',
      genericAuthType: 'httpHeaderAuth',
    },
    credentials: { httpHeaderAuth: { id: 'cred-1', name: 'CRM token' } },
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
      channelId: { __rl: true, mode: 'id', value: 'C0123' },
      text: '={{ "New order " + $json.id }}',
    },
    credentials: { slackApi: { id: 'cred-2', name: 'Slack bot' } },
  },
});

export default workflow('webhook-http-slack', 'Webhook to Slack').add(hook).to(lookup).to(announce);
