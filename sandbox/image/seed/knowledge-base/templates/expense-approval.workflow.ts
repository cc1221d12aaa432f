// Human in the loop: an employee submits an expense claim by form. The claim is stored, the
// manager gets an email with Approve / Reject links built from $execution.resumeUrl, and the
// execution waits (webhook resume, bots ignored, at most 3 days). A Switch then handles
// approve, reject, and everything else — including the timeout, when no decision arrived — which
// escalates to finance. The employee is told the outcome.
// Shows: automation → notification with resume URL → Wait → branch on the answer; data from
// before the Wait read by node name; timeout handled explicitly.
import { expr, newCredential, node, switchCase, trigger, workflow } from '@n8n/workflow-sdk';

const claim = trigger({
  type: 'n8n-nodes-base.formTrigger',
  version: 2.5,
  config: {
    name: 'Expense Claim',
    parameters: {
      formTitle: 'Expense claim',
      formFields: {
        values: [
          { fieldLabel: 'Your name', fieldName: 'employee', fieldType: 'text', requiredField: true },
          { fieldLabel: 'Your email', fieldName: 'email', fieldType: 'email', requiredField: true },
          { fieldLabel: 'Amount (EUR)', fieldName: 'amount', fieldType: 'number', requiredField: true },
          { fieldLabel: 'What for?', fieldName: 'reason', fieldType: 'textarea', requiredField: true },
        ],
      },
      options: { appendAttribution: false },
    },
    pinData: [{ employee: 'Tiago Reis', email: 'tiago@example.com', amount: 184.3, reason: 'Train tickets to the Porto client workshop', submittedAt: '2025-06-02T08:15:00.000Z', formMode: 'instanceAi' }],
  },
});

const storeClaim = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Store Claim',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'expense_claims' },
      columns: {
        mappingMode: 'defineBelow',
        value: {
          executionId: expr('{{ $execution.id }}'),
          employee: expr('{{ $json.employee }}'),
          email: expr('{{ $json.email }}'),
          amount: expr('{{ $json.amount }}'),
          reason: expr('{{ $json.reason }}'),
          status: 'pending',
        },
      },
      options: {},
    },
  },
});

const askManager = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Ask Manager',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'expenses@example.com',
      toEmail: 'manager@example.com',
      subject: expr("Approve € {{ $('Expense Claim').item.json.amount }} for {{ $('Expense Claim').item.json.employee }}?"),
      emailFormat: 'html',
      html: expr(
        "<p>{{ $('Expense Claim').item.json.employee }} claims <b>€ {{ $('Expense Claim').item.json.amount }}</b>: {{ $('Expense Claim').item.json.reason }}</p>" +
          '<p><a href="{{ $execution.resumeUrl }}?decision=approve">Approve</a> &nbsp; ' +
          '<a href="{{ $execution.resumeUrl }}?decision=reject">Reject</a></p><p>Without an answer in 3 days the claim goes to finance.</p>',
      ),
      options: { appendAttribution: false },
    },
    credentials: { smtp: newCredential('Expenses SMTP') },
  },
});

const waitForDecision = node({
  type: 'n8n-nodes-base.wait',
  version: 1.1,
  config: {
    name: 'Wait for Decision',
    parameters: {
      resume: 'webhook',
      httpMethod: 'GET',
      responseMode: 'onReceived',
      limitWaitTime: true,
      limitType: 'afterTimeInterval',
      resumeAmount: 3,
      resumeUnit: 'days',
      options: { ignoreBots: true, webhookSuffix: 'expense-decision' },
    },
    pinData: [{ headers: {}, params: {}, query: { decision: 'approve' }, body: {} }],
  },
});

// A timed-out wait resumes without a query: it falls through to the fallback output.
const decision = switchCase({
  version: 3.2,
  config: {
    name: 'Decision',
    parameters: {
      rules: {
        values: [
          {
            outputKey: 'approved',
            conditions: {
              options: { caseSensitive: false, leftValue: '', typeValidation: 'loose' },
              conditions: [{ leftValue: expr("{{ $json.query?.decision || '' }}"), operator: { type: 'string', operation: 'equals' }, rightValue: 'approve' }],
              combinator: 'and',
            },
          },
          {
            outputKey: 'rejected',
            conditions: {
              options: { caseSensitive: false, leftValue: '', typeValidation: 'loose' },
              conditions: [{ leftValue: expr("{{ $json.query?.decision || '' }}"), operator: { type: 'string', operation: 'equals' }, rightValue: 'reject' }],
              combinator: 'and',
            },
          },
        ],
      },
      options: { fallbackOutput: 'extra', renameFallbackOutput: 'No answer' },
    },
  },
});

const setStatus = (name: string, status: string) =>
  node({
    type: 'n8n-nodes-base.dataTable',
    version: 1.1,
    config: {
      name,
      parameters: {
        resource: 'row',
        operation: 'update',
        dataTableId: { __rl: true, mode: 'name', value: 'expense_claims' },
        filters: { conditions: [{ keyName: 'executionId', condition: 'eq', keyValue: expr('{{ $execution.id }}') }] },
        columns: { mappingMode: 'defineBelow', value: { status } },
        options: {},
      },
    },
  });

const tellEmployee = (name: string, outcome: string) =>
  node({
    type: 'n8n-nodes-base.emailSend',
    version: 2.1,
    config: {
      name,
      parameters: {
        resource: 'email',
        operation: 'send',
        fromEmail: 'expenses@example.com',
        toEmail: expr("{{ $('Expense Claim').item.json.email }}"),
        subject: expr(`Your expense claim of € {{ $('Expense Claim').item.json.amount }} was ${outcome}`),
        emailFormat: 'text',
        text: expr(`Hi {{ $('Expense Claim').item.json.employee }}, your claim "{{ $('Expense Claim').item.json.reason }}" was ${outcome}.`),
        options: { appendAttribution: false },
      },
      credentials: { smtp: newCredential('Expenses SMTP') },
    },
  });

const escalate = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Escalate to Finance',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr("⏰ No manager decision in 3 days: € {{ $('Expense Claim').item.json.amount }} for {{ $('Expense Claim').item.json.employee }} ({{ $('Expense Claim').item.json.reason }}). Execution {{ $execution.id }}."),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Finance Slack') },
  },
});

export default workflow('expense-approval', 'Expense approval')
  .add(claim)
  .to(storeClaim)
  .add(claim)
  .to(askManager)
  .to(waitForDecision)
  .to(decision)
  .onCase(0, setStatus('Mark Approved', 'approved').to(tellEmployee('Tell Approved', 'approved')))
  .onCase(1, setStatus('Mark Rejected', 'rejected').to(tellEmployee('Tell Rejected', 'rejected')))
  .onCase(2, setStatus('Mark Escalated', 'escalated').to(escalate)); // 2 = fallback output
