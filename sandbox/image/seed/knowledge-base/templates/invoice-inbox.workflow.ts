// Document processing (+ extraction, persistence): supplier invoices arrive by Gmail. The first
// attachment is routed by MIME type (PDF / CSV / anything else), its text extracted with the
// matching Extract From File operation, the fields pulled out by an Information Extractor and
// stored in the `invoices` Data Table. PDFs without text (scans) and unknown file types go to a
// manual-review message. Only after the record or the review request exists is the email marked
// read — the trigger fetches unread mail only, so nothing is processed twice.
// Shows: Gmail attachment settings (simple off, download on, attachment_ prefix), file-type
// switch before extraction, empty-text fallback, mark-as-handled after the write.
import { expr, ifElse, languageModel, newCredential, node, switchCase, trigger, workflow } from '@n8n/workflow-sdk';

const inbox = trigger({
  type: 'n8n-nodes-base.gmailTrigger',
  version: 1.3,
  config: {
    name: 'Supplier Invoices',
    parameters: {
      pollTimes: { item: [{ mode: 'everyX', value: 10, unit: 'minutes' }] },
      simple: false,
      filters: { q: 'has:attachment subject:(invoice OR factura)', readStatus: 'unread' },
      options: { downloadAttachments: true, dataPropertyAttachmentsPrefixName: 'attachment_' },
    },
    credentials: { gmailOAuth2: newCredential('Accounts Gmail') },
  },
});

const byType = switchCase({
  version: 3.2,
  config: {
    name: 'Route by File Type',
    parameters: {
      rules: {
        values: [
          {
            outputKey: 'pdf',
            conditions: {
              options: { caseSensitive: false, leftValue: '', typeValidation: 'loose' },
              conditions: [{ leftValue: expr("{{ $binary.attachment_0?.mimeType || '' }}"), operator: { type: 'string', operation: 'equals' }, rightValue: 'application/pdf' }],
              combinator: 'and',
            },
          },
          {
            outputKey: 'csv',
            conditions: {
              options: { caseSensitive: false, leftValue: '', typeValidation: 'loose' },
              conditions: [{ leftValue: expr("{{ $binary.attachment_0?.fileName || '' }}"), operator: { type: 'string', operation: 'endsWith' }, rightValue: '.csv' }],
              combinator: 'and',
            },
          },
        ],
      },
      options: { fallbackOutput: 'extra', renameFallbackOutput: 'Other type' },
    },
  },
});

const pdfText = node({
  type: 'n8n-nodes-base.extractFromFile',
  version: 1.1,
  config: { name: 'Extract PDF Text', parameters: { operation: 'pdf', binaryPropertyName: 'attachment_0', options: {} } },
});

const csvRows = node({
  type: 'n8n-nodes-base.extractFromFile',
  version: 1.1,
  config: { name: 'Extract CSV Rows', parameters: { operation: 'csv', binaryPropertyName: 'attachment_0', options: { headerRow: true } } },
});

const textFound = ifElse({
  version: 2.2,
  config: {
    name: 'Text Found?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [{ leftValue: expr("{{ ($json.text || '').trim() }}"), operator: { type: 'string', operation: 'notEmpty', singleValue: true }, rightValue: '' }],
        combinator: 'and',
      },
    },
  },
});

const pdfAsText = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'PDF as Text',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: { assignments: [{ id: 'content', name: 'content', value: expr('{{ $json.text }}'), type: 'string' }] },
      options: {},
    },
  },
});

const allRows = node({
  type: 'n8n-nodes-base.aggregate',
  version: 1,
  config: { name: 'Collect CSV Rows', parameters: { aggregate: 'aggregateAllItemData', destinationFieldName: 'rows', options: {} } },
});

const csvAsText = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'CSV as Text',
    parameters: {
      mode: 'manual',
      includeOtherFields: false,
      assignments: { assignments: [{ id: 'content', name: 'content', value: expr('{{ JSON.stringify($json.rows) }}'), type: 'string' }] },
      options: {},
    },
  },
});

const extractorModel = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Extraction Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1-mini' }, options: { temperature: 0 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const fields = node({
  type: '@n8n/n8n-nodes-langchain.informationExtractor',
  version: 1.2,
  config: {
    name: 'Extract Invoice Fields',
    parameters: {
      text: expr('{{ $json.content }}'),
      schemaType: 'fromAttributes',
      attributes: {
        attributes: [
          { name: 'invoiceNumber', type: 'string', description: 'The invoice number as printed', required: true },
          { name: 'supplier', type: 'string', description: 'Company that issued the invoice', required: true },
          { name: 'issueDate', type: 'date', description: 'Date the invoice was issued' },
          { name: 'totalAmount', type: 'number', description: 'Grand total including tax', required: true },
          { name: 'currency', type: 'string', description: 'ISO currency code, e.g. EUR' },
        ],
      },
      options: {},
    },
    subnodes: { model: extractorModel },
  },
});

const store = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Store Invoice',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'invoices' },
      columns: {
        mappingMode: 'defineBelow',
        value: {
          invoiceNumber: expr('{{ $json.output.invoiceNumber }}'),
          supplier: expr('{{ $json.output.supplier }}'),
          issueDate: expr('{{ $json.output.issueDate }}'),
          totalAmount: expr('{{ $json.output.totalAmount }}'),
          currency: expr("{{ $json.output.currency || 'EUR' }}"),
          gmailMessageId: expr("{{ $('Supplier Invoices').item.json.id }}"),
        },
      },
      options: {},
    },
  },
});

const review = node({
  type: 'n8n-nodes-base.slack',
  version: 2.3,
  config: {
    name: 'Ask for Manual Review',
    parameters: {
      resource: 'message',
      operation: 'post',
      select: 'channel',
      channelId: { __rl: true, mode: 'list', value: '' },
      messageType: 'text',
      text: expr("📄 Invoice needs a human: \"{{ $('Supplier Invoices').item.json.subject }}\" from {{ $('Supplier Invoices').item.json.from?.text || 'unknown sender' }} (scan or unsupported file)."),
      otherOptions: { includeLinkToWorkflow: false },
    },
    credentials: { slackApi: newCredential('Finance Slack') },
  },
});

// Runs after the record / review request exists: a failure earlier leaves the mail unread.
const markRead = node({
  type: 'n8n-nodes-base.gmail',
  version: 2.1,
  config: {
    name: 'Mark Email Read',
    parameters: { resource: 'message', operation: 'markAsRead', messageId: expr("{{ $('Supplier Invoices').item.json.id }}") },
    credentials: { gmailOAuth2: newCredential('Accounts Gmail') },
  },
});

export default workflow('invoice-inbox', 'Invoice inbox')
  .add(inbox)
  .to(byType)
  .onCase(0, pdfText.to(textFound))
  .onCase(1, csvRows.to(allRows).to(csvAsText).to(fields))
  .onCase(2, review) // 2 = fallback output ("Other type")
  .add(textFound)
  .onTrue(pdfAsText.to(fields))
  .onFalse(review)
  .add(fields)
  .to(store)
  .to(markRead)
  .add(review)
  .to(markRead);
