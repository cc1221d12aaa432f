// Data analysis: every Monday, analyse last week's customer feedback from the `feedback` Data
// Table (score 0-10, comment, channel): drop rows without a score, compute NPS, mean, median,
// standard deviation and per-channel averages in one all-items Code node, render an HTML report
// and mail it; if NPS falls below 30, also alert Slack.
// Shows: input → transform → output, filtering early, whole-dataset statistics in
// runOnceForAllItems mode, numbers converted before comparing, a threshold branch after analysis.
import { expr, ifElse, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const mondays = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.3,
  config: { name: 'Mondays 08:00', parameters: { rule: { interval: [{ field: 'weeks', triggerAtDay: [1], triggerAtHour: 8, triggerAtMinute: 0 }] } } },
});

const lastWeek = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Load Last Week',
    parameters: {
      resource: 'row',
      operation: 'get',
      dataTableId: { __rl: true, mode: 'name', value: 'feedback' },
      filters: { conditions: [{ keyName: 'createdAt', condition: 'gte', keyValue: expr("{{ $today.minus(7, 'days').toISO() }}") }] },
      returnAll: true,
    },
    pinData: [
      { id: 1, score: 9, comment: 'Fast delivery', channel: 'web' },
      { id: 2, score: '3', comment: 'Package damaged', channel: 'app' },
      { id: 3, score: null, comment: '', channel: 'web' },
      { id: 4, score: 10, comment: 'Great support', channel: 'phone' },
      { id: 5, score: 7, comment: '', channel: 'app' },
    ],
  },
});

const scored = node({
  type: 'n8n-nodes-base.filter',
  version: 2.2,
  config: {
    name: 'Has Score',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [{ leftValue: expr('{{ $json.score }}'), operator: { type: 'number', operation: 'exists', singleValue: true }, rightValue: '' }],
        combinator: 'and',
      },
      options: {},
    },
  },
});

// All items at once: totals and distributions cannot be computed per item.
const stats = node({
  type: 'n8n-nodes-base.code',
  version: 2,
  config: {
    name: 'Compute Statistics',
    parameters: {
      mode: 'runOnceForAllItems',
      jsCode: [
        'const rows = $input.all().map((i) => ({ ...i.json, score: Number(i.json.score) })).filter((r) => !Number.isNaN(r.score));',
        'const scores = rows.map((r) => r.score).sort((a, b) => a - b);',
        'const n = scores.length;',
        'const mean = n ? scores.reduce((s, x) => s + x, 0) / n : 0;',
        'const median = n ? (n % 2 ? scores[(n - 1) / 2] : (scores[n / 2 - 1] + scores[n / 2]) / 2) : 0;',
        'const stdDev = n ? Math.sqrt(scores.reduce((s, x) => s + (x - mean) ** 2, 0) / n) : 0;',
        'const promoters = scores.filter((s) => s >= 9).length;',
        'const detractors = scores.filter((s) => s <= 6).length;',
        'const nps = n ? Math.round(((promoters - detractors) / n) * 100) : 0;',
        'const byChannel = {};',
        'for (const r of rows) { (byChannel[r.channel] ||= []).push(r.score); }',
        'const channels = Object.entries(byChannel).map(([channel, s]) => ({ channel, count: s.length, average: +(s.reduce((a, b) => a + b, 0) / s.length).toFixed(2) }));',
        "const worst = rows.filter((r) => r.score <= 6 && r.comment).map((r) => r.comment).slice(0, 5);",
        'return [{ json: { responses: n, mean: +mean.toFixed(2), median, stdDev: +stdDev.toFixed(2), nps, channels, worst } }];',
      ].join('\n'),
    },
  },
});

// The HTML node resolves the {{ }} parts of its template itself.
const report = node({
  type: 'n8n-nodes-base.html',
  version: 1.2,
  config: {
    name: 'Render Report',
    parameters: {
      operation: 'generateHtmlTemplate',
      html: [
        '<h2>Customer feedback, week of {{ $today.minus(7, "days").toFormat("d LLL") }}</h2>',
        '<p><b>NPS {{ $json.nps }}</b> from {{ $json.responses }} responses · mean {{ $json.mean }} · median {{ $json.median }} · std dev {{ $json.stdDev }}</p>',
        '<table border="1" cellpadding="6" style="border-collapse:collapse">',
        '<tr><th>Channel</th><th>Responses</th><th>Average</th></tr>',
        '{{ $json.channels.map(c => "<tr><td>" + c.channel + "</td><td>" + c.count + "</td><td style=\'color:" + (c.average < 7 ? "#b91c1c" : "#15803d") + "\'>" + c.average + "</td></tr>").join("") }}',
        '</table>',
        '<h3>Recent complaints</h3><ul>{{ $json.worst.map(w => "<li>" + w + "</li>").join("") || "<li>none</li>" }}</ul>',
      ].join('\n'),
    },
  },
});

const mail = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Mail Report',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'insights@example.com',
      toEmail: 'cx-team@example.com',
      subject: expr("Weekly feedback: NPS {{ $('Compute Statistics').item.json.nps }} ({{ $('Compute Statistics').item.json.responses }} responses)"),
      emailFormat: 'html',
      html: expr('{{ $json.html }}'),
      options: { appendAttribution: false },
    },
    credentials: { smtp: newCredential('Insights SMTP') },
  },
});

const npsLow = ifElse({
  version: 2.2,
  config: {
    name: 'NPS Below 30?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [{ leftValue: expr('{{ $json.nps }}'), operator: { type: 'number', operation: 'lt' }, rightValue: 30 }],
        combinator: 'and',
      },
    },
  },
});

const alert = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Alert CX Lead',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr('⚠️ Weekly NPS dropped to {{ $json.nps }} ({{ $json.responses }} responses). Top complaint: {{ $json.worst[0] || "n/a" }}'),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('CX Slack') },
  },
});

export default workflow('weekly-feedback-report', 'Weekly feedback report')
  .add(mondays)
  .to(lastWeek)
  .to(scored)
  .to(stats)
  .to(report)
  .to(mail)
  .add(stats)
  .to(npsLow)
  .onTrue(alert);
