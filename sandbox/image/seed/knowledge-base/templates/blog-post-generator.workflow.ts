// Content generation (text + image): an editor submits a topic through a form; the raw request
// is stored, an AI Agent drafts the post as structured output (title, Markdown body, image
// prompt), the Markdown becomes HTML, the OpenAI node generates a cover image as binary, and the
// editor receives the draft with the image embedded and attached.
// Shows: generation split into steps, the media node actually present when an image is asked
// for, binary (not a URL) carried to the email, explicit node references after nodes that
// replace the item.
import { expr, languageModel, newCredential, node, outputParser, trigger, workflow } from '@n8n/workflow-sdk';

const request = trigger({
  type: 'n8n-nodes-base.formTrigger',
  version: 2.5,
  config: {
    name: 'Post Request',
    parameters: {
      formTitle: 'Request a blog post',
      formFields: {
        values: [
          { fieldLabel: 'Topic', fieldName: 'topic', fieldType: 'text', requiredField: true },
          { fieldLabel: 'Audience', fieldName: 'audience', fieldType: 'text', placeholder: 'e.g. small café owners' },
          {
            fieldLabel: 'Tone',
            fieldName: 'tone',
            fieldType: 'dropdown',
            fieldOptions: { values: [{ option: 'Friendly' }, { option: 'Expert' }, { option: 'Playful' }] },
          },
          { fieldLabel: 'Your email', fieldName: 'editorEmail', fieldType: 'email', requiredField: true },
        ],
      },
      options: { appendAttribution: false },
    },
    pinData: [
      { topic: 'Reducing food waste in a small café', audience: 'café owners', tone: 'Friendly', editorEmail: 'lena@example.com', submittedAt: '2025-04-01T09:00:00.000Z', formMode: 'instanceAi' },
    ],
  },
});

// Raw form answers are always kept (form-input.md).
const logRequest = node({
  type: 'n8n-nodes-base.dataTable',
  version: 1.1,
  config: {
    name: 'Log Request',
    parameters: {
      resource: 'row',
      operation: 'insert',
      dataTableId: { __rl: true, mode: 'name', value: 'post_requests' },
      columns: { mappingMode: 'autoMapInputData', value: {} },
      options: {},
    },
  },
});

const writerModel = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Writer Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1' }, options: { temperature: 0.7 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const postShape = outputParser({
  type: '@n8n/n8n-nodes-langchain.outputParserStructured',
  version: 1.3,
  config: {
    name: 'Post Shape',
    parameters: {
      schemaType: 'fromJson',
      jsonSchemaExample: '{ "title": "Five habits that halve café food waste", "body": "## Start with the fridge\\n...", "imagePrompt": "A sunny café counter with neatly labelled containers, watercolour style" }',
    },
  },
});

const draft = node({
  type: '@n8n/n8n-nodes-langchain.agent',
  version: 3.1,
  config: {
    name: 'Draft Post',
    parameters: {
      promptType: 'define',
      text: expr('Topic: {{ $json.topic }}\nAudience: {{ $json.audience || "general readers" }}\nTone: {{ $json.tone || "Friendly" }}'),
      hasOutputParser: true,
      options: {
        systemMessage:
          'You write blog posts of about 600 words in Markdown with H2 sections. Also write one prompt for a cover illustration without any text in the image.',
      },
    },
    subnodes: { model: writerModel, outputParser: postShape },
  },
});

const toHtml = node({
  type: 'n8n-nodes-base.markdown',
  version: 1,
  config: { name: 'Render HTML', parameters: { mode: 'markdownToHtml', markdown: expr('{{ $json.output.body }}'), destinationKey: 'html', options: {} } },
});

const cover = node({
  type: '@n8n/n8n-nodes-langchain.openAi',
  version: 2.3,
  config: {
    name: 'Generate Cover',
    parameters: {
      resource: 'image',
      operation: 'generate',
      modelId: { __rl: true, mode: 'list', value: 'gpt-image-1' },
      prompt: expr("{{ $('Draft Post').item.json.output.imagePrompt }}"),
      options: { size: '1536x1024', quality: 'medium', binaryPropertyOutput: 'cover' },
    },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const sendDraft = node({
  type: 'n8n-nodes-base.emailSend',
  version: 2.1,
  config: {
    name: 'Send Draft to Editor',
    parameters: {
      resource: 'email',
      operation: 'send',
      fromEmail: 'Content Bot <content@example.com>',
      toEmail: expr("{{ $('Post Request').item.json.editorEmail }}"),
      subject: expr("Draft: {{ $('Draft Post').item.json.output.title }}"),
      emailFormat: 'html',
      html: expr("<img src=\"cid:cover\" width=\"600\"><h1>{{ $('Draft Post').item.json.output.title }}</h1>{{ $('Render HTML').item.json.html }}"),
      options: { attachments: 'cover', fileAttachments: 'cover', appendAttribution: false },
    },
    credentials: { smtp: newCredential('Content SMTP') },
  },
});

export default workflow('blog-post-generator', 'Blog post generator')
  .add(request)
  .to(logRequest)
  .add(request)
  .to(draft)
  .to(toHtml)
  .to(cover)
  .to(sendDraft);
