// Data persistence: a small stock API on top of the `stock_levels` Data Table (columns sku,
// warehouse, quantity, updatedAt). POST stock/update validates and upserts one level per
// sku + warehouse (no duplicates, creates or updates); GET stock/level?sku=... looks levels up.
// Shows: the update pattern and the lookup pattern, validation before writing, upsert on a
// composite key, webhook responses for both routes, two triggers in one workflow.
import { expr, ifElse, node, trigger, workflow } from '@n8n/workflow-sdk';

const updateHook = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'POST stock/update',
    parameters: { httpMethod: 'POST', path: 'stock/update', responseMode: 'responseNode', options: {} },
    pinData: [{ headers: {}, query: {}, params: {}, body: { sku: 'MUG-0042', warehouse: 'PORTO', quantity: 118 } }],
  },
});

// IF rather than Filter: an invalid request still needs an answer.
const valid = ifElse({
  version: 2.2,
  config: {
    name: 'Valid Update?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [
          { leftValue: expr('{{ $json.body.sku }}'), operator: { type: 'string', operation: 'notEmpty', singleValue: true }, rightValue: '' },
          { leftValue: expr('{{ $json.body.warehouse }}'), operator: { type: 'string', operation: 'notEmpty', singleValue: true }, rightValue: '' },
          { leftValue: expr('{{ Number($json.body.quantity) }}'), operator: { type: 'number', operation: 'gte' }, rightValue: 0 },
        ],
        combinator: 'and',
      },
    },
  },
});

const upsertLevel = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Upsert Stock Level',
    parameters: {
      resource: 'row',
      operation: 'upsert',
      dataTableId: { __rl: true, mode: 'name', value: 'stock_levels' },
      matchType: 'allConditions',
      filters: {
        conditions: [
          { keyName: 'sku', condition: 'eq', keyValue: expr('{{ $json.body.sku.toUpperCase() }}') },
          { keyName: 'warehouse', condition: 'eq', keyValue: expr('{{ $json.body.warehouse.toUpperCase() }}') },
        ],
      },
      columns: {
        mappingMode: 'defineBelow',
        value: {
          sku: expr('{{ $json.body.sku.toUpperCase() }}'),
          warehouse: expr('{{ $json.body.warehouse.toUpperCase() }}'),
          quantity: expr('{{ Number($json.body.quantity) }}'),
          updatedAt: expr('{{ $now.toISO() }}'),
        },
      },
      options: {},
    },
  },
});

const saved = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: { name: 'Respond Saved', parameters: { respondWith: 'firstIncomingItem', options: {} } },
});

const invalid = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: {
    name: 'Respond Invalid',
    parameters: { respondWith: 'json', responseBody: '{ "ok": false, "error": "sku, warehouse and a quantity >= 0 are required" }', options: { responseCode: 422 } },
  },
});

const lookupHook = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'GET stock/level',
    parameters: { httpMethod: 'GET', path: 'stock/level', responseMode: 'responseNode', options: {} },
    pinData: [{ headers: {}, query: { sku: 'MUG-0042' }, params: {}, body: {} }],
  },
});

const findLevels = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Find Levels',
    alwaysOutputData: true, // an unknown sku must still get an (empty) answer
    parameters: {
      resource: 'row',
      operation: 'get',
      dataTableId: { __rl: true, mode: 'name', value: 'stock_levels' },
      filters: { conditions: [{ keyName: 'sku', condition: 'eq', keyValue: expr("{{ ($json.query.sku || '').toUpperCase() }}") }] },
      returnAll: true,
    },
  },
});

const levels = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: {
    name: 'Respond Levels',
    parameters: {
      respondWith: 'json',
      responseBody: expr('{{ { sku: $("GET stock/level").first().json.query.sku, levels: $input.all().map(i => i.json).filter(r => r.sku) } }}'),
      options: {},
    },
  },
});

export default workflow('inventory-upsert', 'Stock level API')
  .add(updateHook)
  .to(valid)
  .onTrue(upsertLevel.to(saved))
  .onFalse(invalid)
  .add(lookupHook)
  .to(findLevels)
  .to(levels);
