// Enrichment (+ persistence): a webhook receives a new lead, checks it has a usable email,
// enriches it in parallel with Clearbit (company by domain) and Hunter (email verification),
// keeps the original fields next to the enrichment (with source and timestamp), upserts it into
// the `leads` Data Table by email and answers the caller.
// Shows: validate first, independent lookups as parallel branches joined by a Merge, failed
// lookups that do not sink the run (continueRegularOutput), defaults for missing values.
import { expr, ifElse, merge, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const leadIn = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'New Lead',
    parameters: { httpMethod: 'POST', path: 'leads/new', responseMode: 'responseNode', options: {} },
    pinData: [{ headers: {}, query: {}, params: {}, body: { name: 'Ana Ribeiro', email: 'Ana.Ribeiro@Northwind.pt ', source: 'webinar' } }],
  },
});

const hasEmail = ifElse({
  version: 2.2,
  config: {
    name: 'Has Business Email?',
    parameters: {
      conditions: {
        options: { caseSensitive: false, leftValue: '', typeValidation: 'loose' },
        conditions: [
          {
            leftValue: expr("{{ /^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$/i.test(($json.body.email || '').trim()) }}"),
            operator: { type: 'boolean', operation: 'true', singleValue: true },
            rightValue: '',
          },
        ],
        combinator: 'and',
      },
    },
  },
});

const normalise = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Normalise Lead',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'name', name: 'name', value: expr('{{ $json.body.name }}'), type: 'string' },
          { id: 'email', name: 'email', value: expr('{{ $json.body.email.trim().toLowerCase() }}'), type: 'string' },
          { id: 'domain', name: 'domain', value: expr("{{ $json.body.email.trim().toLowerCase().split('@')[1] }}"), type: 'string' },
          { id: 'source', name: 'source', value: expr("{{ $json.body.source || 'unknown' }}"), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

const company = node({
  type: 'n8n-nodes-base.clearbit',
  version: 1,
  config: {
    name: 'Company by Domain',
    onError: 'continueRegularOutput',
    parameters: { resource: 'company', operation: 'enrich', domain: expr('{{ $json.domain }}'), additionalFields: {} },
    credentials: { clearbitApi: newCredential('Clearbit') },
    pinData: [{ name: 'Northwind Traders', metrics: { employees: 240 }, category: { industry: 'Retail' } }],
  },
});

const verify = node({
  type: 'n8n-nodes-base.hunter',
  version: 1,
  config: {
    name: 'Verify Email',
    onError: 'continueRegularOutput',
    parameters: { operation: 'emailVerifier', email: expr('{{ $json.email }}') },
    credentials: { hunterApi: newCredential('Hunter') },
    pinData: [{ status: 'valid', score: 92 }],
  },
});

const join = merge({
  version: 3.2,
  config: { name: 'Join Lookups', parameters: { mode: 'combine', combineBy: 'combineByPosition', options: {} } },
});

// Originals from "Normalise Lead", enrichment next to them, with defaults and provenance.
const enriched = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Build Lead Record',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'name', name: 'name', value: expr("{{ $('Normalise Lead').item.json.name }}"), type: 'string' },
          { id: 'email', name: 'email', value: expr("{{ $('Normalise Lead').item.json.email }}"), type: 'string' },
          { id: 'source', name: 'source', value: expr("{{ $('Normalise Lead').item.json.source }}"), type: 'string' },
          { id: 'company', name: 'company', value: expr("{{ $('Company by Domain').item.json.name || 'unknown' }}"), type: 'string' },
          { id: 'employees', name: 'employees', value: expr("{{ $('Company by Domain').item.json.metrics?.employees ?? null }}"), type: 'number' },
          { id: 'emailStatus', name: 'emailStatus', value: expr("{{ $('Verify Email').item.json.status || 'unverified' }}"), type: 'string' },
          { id: 'enrichedBy', name: 'enrichedBy', value: 'clearbit+hunter', type: 'string' },
          { id: 'enrichedAt', name: 'enrichedAt', value: expr('{{ $now.toISO() }}'), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

const upsert = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Upsert Lead',
    parameters: {
      resource: 'row',
      operation: 'upsert',
      dataTableId: { __rl: true, mode: 'name', value: 'leads' },
      matchType: 'allConditions',
      filters: { conditions: [{ keyName: 'email', condition: 'eq', keyValue: expr('{{ $json.email }}') }] },
      columns: { mappingMode: 'autoMapInputData', value: {} },
      options: {},
    },
  },
});

const accepted = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: {
    name: 'Respond Accepted',
    parameters: {
      respondWith: 'json',
      responseBody: expr("{{ { ok: true, email: $('Build Lead Record').item.json.email, company: $('Build Lead Record').item.json.company } }}"),
      options: {},
    },
  },
});

const rejected = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: {
    name: 'Respond Invalid Email',
    parameters: { respondWith: 'json', responseBody: '{ "ok": false, "error": "a valid email is required" }', options: { responseCode: 422 } },
  },
});

export default workflow('lead-enrichment', 'Lead enrichment')
  .add(leadIn)
  .to(hasEmail)
  .onTrue(normalise)
  .onFalse(rejected)
  .add(normalise)
  .to(company.to(join.input(0)))
  .add(normalise)
  .to(verify.to(join.input(1)))
  .add(join)
  .to(enriched)
  .to(upsert)
  .to(accepted);
