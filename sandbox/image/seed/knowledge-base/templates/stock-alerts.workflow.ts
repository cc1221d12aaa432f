// Notification: every hour, fetch stock levels, keep only products below their reorder point,
// and — only if there are any — send ONE combined alert on three channels in parallel (Slack,
// email, SMS for critical cases), then log what was sent.
// Shows: one condition check feeding every channel, no empty notifications (a Filter emitting
// 0 items ends the run), aggregation into a single message, per-channel formatting, error
// outputs that keep one failing channel from stopping the others.
import { expr, ifElse, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const hourly = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: { name: 'Every Hour', parameters: { rule: { interval: [{ field: 'hours', hoursInterval: 1, triggerAtMinute: 5 }] } } },
});

// The endpoint returns a JSON array: HTTP Request turns it into one item per product.
const levels = node({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: {
    name: 'Fetch Stock Levels',
    parameters: {
      method: 'GET',
      url: 'https://warehouse.example.com/api/stock',
      authentication: 'genericCredentialType',
      genericAuthType: 'httpTemplatedCustomAuth',
      options: { timeout: 10000 },
    },
    credentials: { httpTemplatedCustomAuth: newCredential('Warehouse API') },
    pinData: [
      { sku: 'BEAN-1KG', name: 'House blend 1 kg', onHand: 4, reorderPoint: 20 },
      { sku: 'FILTER-80', name: 'Paper filters (80)', onHand: 150, reorderPoint: 50 },
      { sku: 'CUP-12OZ', name: '12 oz cups', onHand: 0, reorderPoint: 200 },
    ],
  },
});

const low = node({
  type: 'n8n-nodes-base.filter',
  version: 2.2,
  config: {
    name: 'Below Reorder Point',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [{ leftValue: expr('{{ $json.onHand }}'), operator: { type: 'number', operation: 'lt' }, rightValue: expr('{{ $json.reorderPoint }}') }],
        combinator: 'and',
      },
      options: {},
    },
  },
});

const lines = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Describe Product',
    parameters: {
      mode: 'manual',
      includeOtherFields: true,
      assignments: {
        assignments: [
          { id: 'line', name: 'line', value: expr('{{ $json.name }} ({{ $json.sku }}): {{ $json.onHand }} left, reorder at {{ $json.reorderPoint }}'), type: 'string' },
          { id: 'critical', name: 'critical', value: expr('{{ $json.onHand === 0 }}'), type: 'boolean' },
        ],
      },
      options: {},
    },
  },
});

const summary = node({
  type: 'n8n-nodes-base.aggregate',
  version: 1,
  config: {
    name: 'One Alert',
    parameters: {
      aggregate: 'aggregateIndividualFields',
      fieldsToAggregate: { fieldToAggregate: [{ fieldToAggregate: 'line' }, { fieldToAggregate: 'critical' }, { fieldToAggregate: 'sku' }] },
      options: {},
    },
  },
});

const slack = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Slack Alert',
    onError: 'continueRegularOutput',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'id', value: 'C0123STOCK' },
      messageType: 'text',
      text: expr("*Low stock ({{ $json.line.length }})*\n{{ $json.line.map(l => '• ' + l).join('\\n') }}"),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Ops Slack') },
  },
});

const email = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Email Purchasing',
    onError: 'continueRegularOutput',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'stock-bot@example.com',
      toEmail: 'purchasing@example.com',
      subject: expr('Reorder needed: {{ $json.line.length }} product(s) below reorder point'),
      emailFormat: 'html',
      html: expr("<p>These products are below their reorder point:</p><ul>{{ $json.line.map(l => '<li>' + l + '</li>').join('') }}</ul>"),
      options: { appendAttribution: false },
    },
    credentials: { smtp: newCredential('Ops SMTP') },
  },
});

const anyCritical = ifElse({
  version: 2.2,
  config: {
    name: 'Any Sold Out?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [{ leftValue: expr('{{ $json.critical.includes(true) }}'), operator: { type: 'boolean', operation: 'true', singleValue: true }, rightValue: '' }],
        combinator: 'and',
      },
    },
  },
});

const sms = node({
  type: 'n8n-nodes-base.twilio',
  version: 1,
  config: {
    name: 'SMS Store Manager',
    onError: 'continueRegularOutput',
    parameters: {
      resource: 'sms',
      operation: 'send',
      from: '+351300000001',
      to: '+351912345678',
      message: expr("SOLD OUT: {{ $json.line.filter((l, i) => $json.critical[i]).map(l => l.split(' (')[0]).join(', ') }}"),
    },
    credentials: { twilioApi: newCredential('Twilio') },
  },
});

const log = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Log Alert',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'stock_alert_log' },
      columns: {
        mappingMode: 'defineBelow',
        // After a send node $json is Slack's API answer: read the alert from its node.
        value: { sentAt: expr('{{ $now.toISO() }}'), skus: expr("{{ $('One Alert').item.json.sku.join(',') }}"), channels: 'slack,email,sms-if-critical' },
      },
      options: {},
    },
  },
});

export default workflow('stock-alerts', 'Low stock alerts')
  .add(hourly)
  .to(levels)
  .to(low)
  .to(lines)
  .to(summary)
  .to(slack.to(log))
  .add(summary)
  .to(email)
  .add(summary)
  .to(anyCritical)
  .onTrue(sms);
