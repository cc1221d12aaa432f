// Monitoring (+ notification, persistence): every 5 minutes, probe each service listed in the
// `monitored_services` Data Table (name, url, lastStatus). Every check is logged; Slack hears
// about a service only when its status flips (down or recovered), and the new status is stored.
// Shows: a check node that never fails the run (neverError + timeout + retries), full response
// for the status code, state kept in a table to avoid alert storms, recovery messages, and two
// effects fanned out from one decision.
// For "monitoring the monitor": publish an Error Trigger workflow and put its id into this
// workflow's settings, e.g. workflow(..., { errorWorkflow: '<error workflow id>' }).
import { expr, ifElse, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const every5Minutes = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: { name: 'Every 5 Minutes', parameters: { rule: { interval: [{ field: 'minutes', minutesInterval: 5 }] } } },
});

const services = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Load Services',
    parameters: { resource: 'row', operation: 'get', dataTableId: { __rl: true, mode: 'name', value: 'monitored_services' }, returnAll: true },
    pinData: [
      { id: 1, name: 'Storefront', url: 'https://shop.example.com/health', lastStatus: 'up' },
      { id: 2, name: 'Payments API', url: 'https://pay.example.com/status', lastStatus: 'down' },
    ],
  },
});

const probe = node({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: {
    name: 'Probe Service',
    retryOnFail: true,
    maxTries: 3,
    waitBetweenTries: 1000,
    onError: 'continueRegularOutput',
    parameters: {
      method: 'GET',
      url: expr('{{ $json.url }}'),
      options: { timeout: 5000, response: { response: { fullResponse: true, neverError: true } } },
    },
    pinData: [
      { statusCode: 503, headers: {}, body: 'Service Unavailable' },
      { statusCode: 200, headers: {}, body: { ok: true } },
    ],
  },
});

const status = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Compute Status',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'serviceId', name: 'serviceId', value: expr("{{ $('Load Services').item.json.id }}"), type: 'number' },
          { id: 'service', name: 'service', value: expr("{{ $('Load Services').item.json.name }}"), type: 'string' },
          { id: 'statusCode', name: 'statusCode', value: expr('{{ $json.statusCode ?? 0 }}'), type: 'number' },
          { id: 'status', name: 'status', value: expr("{{ $json.statusCode >= 200 && $json.statusCode < 400 ? 'up' : 'down' }}"), type: 'string' },
          { id: 'previous', name: 'previous', value: expr("{{ $('Load Services').item.json.lastStatus }}"), type: 'string' },
          { id: 'checkedAt', name: 'checkedAt', value: expr('{{ $now.toISO() }}'), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

const logCheck = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Log Check',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'uptime_log' },
      columns: { mappingMode: 'autoMapInputData', value: {} },
      options: {},
    },
  },
});

const changed = ifElse({
  version: 2.2,
  config: {
    name: 'Status Changed?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'strict' },
        conditions: [{ leftValue: expr('{{ $json.status }}'), operator: { type: 'string', operation: 'notEquals' }, rightValue: expr('{{ $json.previous }}') }],
        combinator: 'and',
      },
    },
  },
});

const alert = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Alert Team',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr(
        "{{ $json.status === 'down' ? '🔴 ' + $json.service + ' is DOWN (HTTP ' + $json.statusCode + ')' : '🟢 ' + $json.service + ' has recovered' }} — {{ $now.toFormat('HH:mm') }}",
      ),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Ops Slack') },
  },
});

const remember = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Store New Status',
    parameters: {
      resource: 'row',
      operation: 'update',
      dataTableId: { __rl: true, mode: 'name', value: 'monitored_services' },
      matchType: 'allConditions',
      filters: { conditions: [{ keyName: 'id', condition: 'eq', keyValue: expr('{{ $json.serviceId }}') }] },
      columns: { mappingMode: 'defineBelow', value: { lastStatus: expr('{{ $json.status }}') } },
      options: {},
    },
  },
});

export default workflow('uptime-monitor', 'Uptime monitor')
  .add(every5Minutes)
  .to(services)
  .to(probe)
  .to(status)
  .to(logCheck)
  .add(status)
  .to(changed)
  .onTrue(alert)
  .add(changed)
  .onTrue(remember); // a second effect on the same true output (an array here would map to outputs 0 and 1)
