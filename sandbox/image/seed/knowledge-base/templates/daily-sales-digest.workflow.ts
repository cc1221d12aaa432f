// Scheduling (+ analysis, notification): every weekday at 07:30 Lisbon time, total yesterday's
// orders per region from a Data Table and post one digest message to Slack.
// Shows: a cron rule with the time zone set on the workflow, a conditional-schedule IF (skip
// month-end closing days), Summarize + Aggregate instead of code, and one message for many items.
import { expr, ifElse, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const weekdayMorning = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: {
    name: 'Weekdays 07:30',
    parameters: { rule: { interval: [{ field: 'cronExpression', expression: '30 7 * * 1-5' }] } },
  },
});

// Conditional scheduling: keep the cron simple, decide in the workflow.
const notMonthEnd = ifElse({
  version: 2.2,
  config: {
    name: 'Not Month-End Close?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [
          {
            leftValue: expr("{{ $now.day === $now.endOf('month').day }}"),
            operator: { type: 'boolean', operation: 'false', singleValue: true },
            rightValue: '',
          },
        ],
        combinator: 'and',
      },
    },
  },
});

// The `orders` table (columns: orderId, region, amount, orderedAt) is filled by the shop workflow.
const yesterdaysOrders = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: "Load Yesterday's Orders",
    parameters: {
      resource: 'row',
      operation: 'get',
      dataTableId: { __rl: true, mode: 'name', value: 'orders' },
      matchType: 'allConditions',
      filters: {
        conditions: [
          { keyName: 'orderedAt', condition: 'gte', keyValue: expr("{{ $today.minus(1, 'day').toISO() }}") },
          { keyName: 'orderedAt', condition: 'lt', keyValue: expr('{{ $today.toISO() }}') },
        ],
      },
      returnAll: true,
    },
    pinData: [
      { orderId: 'S-1001', region: 'North', amount: 120.5, orderedAt: '2025-03-03T09:12:00Z' },
      { orderId: 'S-1002', region: 'South', amount: 80, orderedAt: '2025-03-03T11:40:00Z' },
      { orderId: 'S-1003', region: 'North', amount: 42.25, orderedAt: '2025-03-03T16:05:00Z' },
    ],
  },
});

const perRegion = node({
  type: 'n8n-nodes-base.summarize',
  version: 1.1,
  config: {
    name: 'Totals per Region',
    parameters: {
      fieldsToSummarize: {
        values: [
          { aggregation: 'sum', field: 'amount' },
          { aggregation: 'count', field: 'orderId' },
        ],
      },
      fieldsToSplitBy: 'region',
      options: {},
    },
  },
});

const regionLine = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Format Region Line',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          {
            id: 'line',
            name: 'line',
            value: expr('• {{ $json.region }}: {{ $json.count_orderId }} orders, € {{ $json.sum_amount.toFixed(2) }}'),
            type: 'string',
          },
        ],
      },
      options: {},
    },
  },
});

const allLines = node({
  type: 'n8n-nodes-base.aggregate',
  version: 1,
  config: {
    name: 'Collect Lines',
    parameters: { aggregate: 'aggregateIndividualFields', fieldsToAggregate: { fieldToAggregate: [{ fieldToAggregate: 'line' }] }, options: {} },
  },
});

const postDigest = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Post Digest',
    executeOnce: true,
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr("*Sales {{ $today.minus(1, 'day').toFormat('EEE d LLL') }}*\n{{ $json.line.join('\\n') }}"),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Sales Slack') },
  },
});

export default workflow('daily-sales-digest', 'Daily sales digest', { timezone: 'Europe/Lisbon' })
  .add(weekdayMorning)
  .to(notMonthEnd)
  .onTrue(yesterdaysOrders.to(perRegion).to(regionLine).to(allLines).to(postDigest));
