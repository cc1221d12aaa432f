// Data extraction (+ form input, document processing): applicants upload a PDF CV through a form.
// The raw submission is stored at once (parallel branch, so the binary stays on the other path),
// the PDF text is extracted from the binary named after the form field, an Information Extractor
// with a JSON schema pulls structured facts, and the candidate profile is upserted by email.
// Shows: the form file field → binary property name rule, keeping raw data and the file apart,
// schema-based extraction, referencing the trigger by name after nodes that replace the item.
import { expr, languageModel, newCredential, node, trigger, workflow } from '@n8n/workflow-sdk';

const application = trigger({
  type: 'n8n-nodes-base.formTrigger',
  version: 2.5,
  config: {
    name: 'Job Application',
    parameters: {
      formTitle: 'Apply: Junior Data Analyst',
      formFields: {
        values: [
          { fieldLabel: 'Full name', fieldName: 'fullName', fieldType: 'text', requiredField: true },
          { fieldLabel: 'Email', fieldName: 'email', fieldType: 'email', requiredField: true },
          // One file only, so the binary property is exactly "cv" (several files → cv_0, cv_1 ...).
          { fieldLabel: 'CV (PDF)', fieldName: 'cv', fieldType: 'file', multipleFiles: false, acceptFileTypes: '.pdf', requiredField: true },
        ],
      },
      options: { appendAttribution: false, respondWithOptions: { values: { respondWith: 'text', formSubmittedText: 'Thank you — we received your application.' } } },
    },
  },
});

const storeRaw = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Store Application',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'applications' },
      columns: {
        mappingMode: 'defineBelow',
        value: {
          fullName: expr('{{ $json.fullName }}'),
          email: expr('{{ $json.email }}'),
          cvFileName: expr('{{ $json.cv?.filename }}'),
          submittedAt: expr('{{ $json.submittedAt }}'),
        },
      },
      options: {},
    },
  },
});

const cvText = node({
  type: 'n8n-nodes-base.extractFromFile',
  version: 1.1,
  config: { name: 'Read CV Text', parameters: { operation: 'pdf', binaryPropertyName: 'cv', options: { joinPages: true } } },
});

const model = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Extraction Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1-mini' }, options: { temperature: 0 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const profile = node({
  type: '@n8n/n8n-nodes-langchain.informationExtractor',
  version: 1.2,
  config: {
    name: 'Extract Profile',
    parameters: {
      text: expr('{{ $json.text }}'),
      schemaType: 'manual',
      inputSchema: JSON.stringify({
        type: 'object',
        properties: {
          currentTitle: { type: 'string', description: 'Most recent job title' },
          yearsExperience: { type: 'number', description: 'Total years of professional experience' },
          skills: { type: 'array', items: { type: 'string' }, description: 'Technical skills, max 10' },
          languages: { type: 'array', items: { type: 'string' } },
          highestDegree: { type: 'string' },
        },
        required: ['skills'],
      }),
      options: {},
    },
    subnodes: { model },
  },
});

const upsertCandidate = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Upsert Candidate',
    parameters: {
      resource: 'row',
      operation: 'upsert',
      dataTableId: { __rl: true, mode: 'name', value: 'candidates' },
      filters: { conditions: [{ keyName: 'email', condition: 'eq', keyValue: expr("{{ $('Job Application').item.json.email }}") }] },
      columns: {
        mappingMode: 'defineBelow',
        value: {
          email: expr("{{ $('Job Application').item.json.email }}"),
          fullName: expr("{{ $('Job Application').item.json.fullName }}"),
          currentTitle: expr("{{ $json.output.currentTitle || '' }}"),
          yearsExperience: expr('{{ $json.output.yearsExperience ?? null }}'),
          skills: expr("{{ ($json.output.skills || []).join(', ') }}"),
          languages: expr("{{ ($json.output.languages || []).join(', ') }}"),
        },
      },
      options: {},
    },
  },
});

export default workflow('resume-intake', 'CV intake')
  .add(application)
  .to(storeRaw)
  .add(application)
  .to(cvText)
  .to(profile)
  .to(upsertCandidate);
