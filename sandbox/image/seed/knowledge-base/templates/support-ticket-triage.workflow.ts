// Triage: support tickets posted to a webhook are normalised, classified by a Text Classifier
// (low temperature, described categories, an "Other" output for unclear tickets) and routed:
// outages page the on-call channel, billing questions go to the billing mailbox, how-to
// questions get a help-centre reply task, unclear tickets land in a manual review queue.
// Every ticket, whatever its route, is logged with its category in `ticket_log`.
// Shows: fixed categories decided up front, the classifier's "Other" branch wired to a real
// action, one logging node fed by every branch (fan-in without a Merge).
import { expr, languageModel, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const ticketIn = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: {
    name: 'New Ticket',
    parameters: { httpMethod: 'POST', path: 'support/tickets', options: {} },
    pinData: [
      {
        headers: {},
        query: {},
        params: {},
        body: { id: 'T-4312', from: 'joao@clinic.example', subject: 'Checkout page gives error 500', message: 'Since 9am none of our customers can pay.' },
      },
    ],
  },
});

const normalise = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Normalise Ticket',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: {
        assignments: [
          { id: 'ticketId', name: 'ticketId', value: expr('{{ $json.body.id }}'), type: 'string' },
          { id: 'customer', name: 'customer', value: expr('{{ ($json.body.from || "").toLowerCase() }}'), type: 'string' },
          { id: 'subject', name: 'subject', value: expr("{{ $json.body.subject || '(no subject)' }}"), type: 'string' },
          { id: 'text', name: 'text', value: expr('{{ $json.body.subject }}\n\n{{ $json.body.message }}'), type: 'string' },
        ],
      },
      options: {},
    },
  },
});

const classifierModel = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Classifier Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1-mini' }, options: { temperature: 0.1 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const classify = node({
  type: '@n8n/n8n-nodes-langchain.textClassifier',
  version: 1.1,
  config: {
    name: 'Classify Ticket',
    parameters: {
      inputText: expr('{{ $json.text }}'),
      categories: {
        categories: [
          { category: 'outage', description: 'Something is down or broken for many users right now (errors, cannot log in, cannot pay).' },
          { category: 'billing', description: 'Invoices, charges, refunds, plan changes, VAT numbers.' },
          { category: 'how_to', description: 'Questions about how to use a feature; nothing is broken.' },
        ],
      },
      options: {
        fallback: 'other',
        systemPromptTemplate:
          'Classify the support ticket into one of these categories: {categories}. Examples: "Cannot log in since the update, all staff affected" -> outage; "Please send last month\'s invoice again" -> billing; "How do I export my patient list?" -> how_to. Follow the formatting instructions and output only the JSON.',
      },
    },
    subnodes: { model: classifierModel },
  },
});

// One tagging node per output, so every branch carries its category.
const tag = (name: string, category: string) =>
  node({
    type: 'n8n-nodes-base.set',
    version: 3.4,
    config: {
      name,
      parameters: {
        mode: 'manual',
        includeOtherFields: true,
        assignments: { assignments: [{ id: 'category', name: 'category', value: category, type: 'string' }] },
        options: {},
      },
    },
  });
const tagOutage = tag('Tag Outage', 'outage');
const tagBilling = tag('Tag Billing', 'billing');
const tagHowTo = tag('Tag How-To', 'how_to');
const tagOther = tag('Tag Needs Review', 'review');

const pageOnCall = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Page On-Call',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr('🚨 Possible outage reported in {{ $json.ticketId }} by {{ $json.customer }}: {{ $json.subject }}'),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Support Slack') },
  },
});

const forwardBilling = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Forward to Billing',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'support@example.com',
      toEmail: 'billing@example.com',
      subject: expr('[{{ $json.ticketId }}] {{ $json.subject }}'),
      emailFormat: 'text',
      text: expr('From: {{ $json.customer }}\n\n{{ $json.text }}'),
      options: { appendAttribution: false },
    },
    credentials: { smtp: newCredential('Support SMTP') },
  },
});

const queue = (name: string, table: string) =>
  node({
    type: 'n8n-nodes-base.dataTable',
    version: 1.1,
    config: {
      name,
      parameters: {
        resource: 'row',
        operation: 'insert',
        dataTableId: { __rl: true, mode: 'name', value: table },
        columns: { mappingMode: 'autoMapInputData', value: {} },
        options: {},
      },
    },
  });
const howToTasks = queue('Queue Help Reply', 'help_reply_tasks');
const reviewQueue = queue('Queue Manual Review', 'ticket_review_queue');
const logTicket = queue('Log Ticket', 'ticket_log');

export default workflow('support-ticket-triage', 'Support ticket triage')
  .add(ticketIn)
  .to(normalise)
  .to(classify)
  .add(classify.output(0).to(tagOutage.to([pageOnCall, logTicket])))
  .add(classify.output(1).to(tagBilling.to([forwardBilling, logTicket])))
  .add(classify.output(2).to(tagHowTo.to([howToTasks, logTicket])))
  .add(classify.output(3).to(tagOther.to([reviewQueue, logTicket])));
