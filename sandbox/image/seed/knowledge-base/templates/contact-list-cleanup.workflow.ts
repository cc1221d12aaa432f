// Data transformation: every Monday, pull the CRM's contact export, turn the wrapped array into
// one item per contact, normalise the fields (keeping only what is needed), drop unusable rows,
// de-duplicate by email, sort, and mail the clean list as a CSV file.
// Shows: input → transform → output with native nodes only (Split Out, Edit Fields, Filter,
// Remove Duplicates, Sort, Convert to File), filtering early, validation of outside data.
import { expr, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const mondays = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: { name: 'Mondays 06:30', parameters: { rule: { interval: [{ field: 'weeks', triggerAtDay: [1], triggerAtHour: 6, triggerAtMinute: 30 }] } } },
});

// The API answers { "contacts": [ ... ] }: one item that holds the whole list.
const exportContacts = node({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: {
    name: 'Export Contacts',
    parameters: {
      method: 'GET',
      url: 'https://crm.example.com/api/v2/contacts/export',
      authentication: 'genericCredentialType',
      // New generic credentials use the templated type: header "X-Api-Key: {{api_key}}".
      genericAuthType: 'httpTemplatedCustomAuth',
      options: { timeout: 30000 },
    },
    credentials: { httpTemplatedCustomAuth: newCredential('CRM API key') },
    pinData: [
      {
        contacts: [
          { first: ' ana ', last: 'SILVA', mail: 'Ana.Silva@Example.com', phone: '+351 912 000 111', status: 'active' },
          { first: 'Bruno', last: 'Lopes', mail: 'bruno@example', phone: '', status: 'active' },
          { first: 'Ana', last: 'Silva', mail: 'ana.silva@example.com ', phone: '', status: 'active' },
          { first: 'Carla', last: 'Matos', mail: 'carla@example.org', phone: '+351 913 222 333', status: 'archived' },
        ],
      },
    ],
  },
});

const oneContactPerItem = node({
  type: 'n8n-nodes-base.splitOut',
  version: 1,
  config: { name: 'One Item per Contact', parameters: { fieldToSplitOut: 'contacts', include: 'noOtherFields', options: {} } },
});

// Only the fields set here survive (includeOtherFields: false).
const normalise = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Normalise Fields',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'firstName', name: 'firstName', value: expr("{{ ($json.first || '').trim().toLowerCase().replace(/^./, c => c.toUpperCase()) }}"), type: 'string' },
          { id: 'lastName', name: 'lastName', value: expr("{{ ($json.last || '').trim().toLowerCase().replace(/^./, c => c.toUpperCase()) }}"), type: 'string' },
          { id: 'email', name: 'email', value: expr("{{ ($json.mail || '').trim().toLowerCase() }}"), type: 'string' },
          { id: 'phone', name: 'phone', value: expr("{{ ($json.phone || '').replace(/\\s+/g, '') }}"), type: 'string' },
          { id: 'active', name: 'active', value: expr("{{ $json.status === 'active' }}"), type: 'boolean' },
        ],
      },
      options: {},
    },
  },
});

const usable = node({
  type: 'n8n-nodes-base.filter',
  version: 2.2,
  config: {
    name: 'Active With Valid Email',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [
          { leftValue: expr('{{ $json.active }}'), operator: { type: 'boolean', operation: 'true', singleValue: true }, rightValue: '' },
          { leftValue: expr('{{ $json.email }}'), operator: { type: 'string', operation: 'regex' }, rightValue: '^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$' },
        ],
        combinator: 'and',
      },
      options: {},
    },
  },
});

const dedupe = node({
  type: 'n8n-nodes-base.removeDuplicates',
  version: 2,
  config: { name: 'Unique by Email', parameters: { operation: 'removeDuplicateInputItems', compare: 'selectedFields', fieldsToCompare: 'email', options: {} } },
});

const sorted = node({
  type: 'n8n-nodes-base.sort',
  version: 1,
  config: {
    name: 'Sort by Name',
    parameters: {
      type: 'simple',
      sortFieldsUi: { sortField: [{ fieldName: 'lastName', order: 'ascending' }, { fieldName: 'firstName', order: 'ascending' }] },
      options: {},
    },
  },
});

const csv = node({
  type: 'n8n-nodes-base.convertToFile',
  version: 1.1,
  config: {
    name: 'Build CSV',
    parameters: { operation: 'csv', binaryPropertyName: 'contacts', options: { fileName: expr("contacts-{{ $now.toFormat('yyyy-LL-dd') }}.csv") } },
  },
});

const mail = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Mail Clean List',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'crm-bot@example.com',
      toEmail: 'sales-ops@example.com',
      subject: expr("Clean contact list {{ $now.toFormat('d LLL yyyy') }}"),
      emailFormat: 'text',
      text: 'The de-duplicated list of active contacts is attached.',
      options: { fileAttachments: 'contacts', appendAttribution: false },
    },
    credentials: { smtp: newCredential('Ops SMTP') },
  },
});

export default workflow('contact-list-cleanup', 'Contact list clean-up')
  .add(mondays)
  .to(exportContacts)
  .to(oneContactPerItem)
  .to(normalise)
  .to(usable)
  .to(dedupe)
  .to(sorted)
  .to(csv)
  .to(mail);
