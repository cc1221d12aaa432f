// Web app: a meeting-room booking board served by n8n webhooks, backed by the `room_bookings`
// Data Table (columns room, guest, day). Four routes in one workflow:
//   GET  rooms            the page, with current bookings injected as base64 JSON
//   GET  rooms/bookings   the bookings as JSON
//   POST rooms/book       insert a booking, answer with the new row
//   POST rooms/cancel     delete a booking by id
// Shows: the page kept in its own file (room-booking-app.html) read at build time and embedded
// with JSON.stringify — no escaping problems however large the page; a tiny Code node that fills
// the data placeholder; Respond to Webhook with text/html. In a workspace, keep the page in
// chunks/ and adjust the path.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expr, node, trigger, workflow } from '@n8n/workflow-sdk';

// build-workflow bundles to CommonJS (__dirname is this file's folder); `node --import tsx
// build.mjs` loads it as an ES module, where only import.meta.url is available.
const here = typeof __dirname === 'string' ? __dirname : dirname(fileURLToPath(import.meta.url));
const page = readFileSync(join(here, 'room-booking-app.html'), 'utf8');

const TABLE = { __rl: true as const, mode: 'name' as const, value: 'room_bookings' };

const hook = (name: string, httpMethod: 'GET' | 'POST', path: string) =>
  trigger({
    type: 'n8n-nodes-base.webhook',
    version: 2.1,
    config: { name, parameters: { httpMethod, path, responseMode: 'responseNode', options: {} } },
  });

// ── GET rooms: the page ──────────────────────────────────────
const pageHook = hook('GET rooms', 'GET', 'rooms');

const loadBookings = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Load Bookings',
    alwaysOutputData: true, // an empty table must still render the page
    parameters: { resource: 'row', operation: 'get', dataTableId: TABLE, returnAll: true, orderBy: true, orderByColumn: 'day', orderByDirection: 'ASC' },
    pinData: [
      { id: 1, room: 'Douro', guest: 'Inês', day: '2025-06-10' },
      { id: 2, room: 'Tejo', guest: 'Miguel', day: '2025-06-11' },
    ],
  },
});

const collect = node({
  type: 'n8n-nodes-base.aggregate',
  version: 1,
  config: {
    name: 'Collect Bookings',
    parameters: { aggregate: 'aggregateAllItemData', destinationFieldName: 'bookings', include: 'specifiedFields', fieldsToInclude: 'id, room, guest, day', options: {} },
  },
});

const renderPage = node({
  type: 'n8n-nodes-base.code',
  version: 2,
  config: {
    name: 'Render Page',
    parameters: {
      mode: 'runOnceForAllItems',
      jsCode: [
        '// Rows without an id are the empty placeholder of an empty table.',
        'const bookings = ($input.first().json.bookings || []).filter((b) => b.id);',
        "const payload = Buffer.from(JSON.stringify(bookings)).toString('base64');",
        `const html = ${JSON.stringify(page)}.replace('__PAGE_DATA__', payload);`,
        'return [{ json: { html } }];',
      ].join('\n'),
    },
  },
});

const sendPage = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: {
    name: 'Send Page',
    parameters: {
      respondWith: 'text',
      responseBody: expr('{{ $json.html }}'),
      options: { responseHeaders: { entries: [{ name: 'Content-Type', value: 'text/html; charset=utf-8' }] } },
    },
  },
});

// ── GET rooms/bookings: JSON ─────────────────────────────────
const listHook = hook('GET rooms/bookings', 'GET', 'rooms/bookings');
const listBookings = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: { name: 'List Bookings', parameters: { resource: 'row', operation: 'get', dataTableId: TABLE, returnAll: true } },
});
const sendList = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: { name: 'Send List', parameters: { respondWith: 'allIncomingItems', options: {} } },
});

// ── POST rooms/book ──────────────────────────────────────────
const bookHook = hook('POST rooms/book', 'POST', 'rooms/book');
const insertBooking = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Insert Booking',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: TABLE,
      columns: {
        mappingMode: 'defineBelow',
        value: { room: expr('{{ $json.body.room }}'), guest: expr('{{ $json.body.guest }}'), day: expr('{{ $json.body.day }}') },
      },
      options: {},
    },
  },
});
const sendBooked = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: { name: 'Send Booking', parameters: { respondWith: 'firstIncomingItem', options: {} } },
});

// ── POST rooms/cancel ────────────────────────────────────────
const cancelHook = hook('POST rooms/cancel', 'POST', 'rooms/cancel');
const deleteBooking = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Delete Booking',
    parameters: {
      resource: 'row',
      operation: 'deleteRows',
      dataTableId: TABLE,
      filters: { conditions: [{ keyName: 'id', condition: 'eq', keyValue: expr('{{ $json.body.id }}') }] },
      options: {},
    },
  },
});
const sendCancelled = node({
  type: 'n8n-nodes-base.respondToWebhook',
  version: 1.5,
  config: { name: 'Send Cancelled', parameters: { respondWith: 'json', responseBody: '{ "ok": true }', options: {} } },
});

export default workflow('room-booking-app', 'Room booking board')
  .add(pageHook).to(loadBookings).to(collect).to(renderPage).to(sendPage)
  .add(listHook).to(listBookings).to(sendList)
  .add(bookHook).to(insertBooking).to(sendBooked)
  .add(cancelHook).to(deleteBooking).to(sendCancelled);
