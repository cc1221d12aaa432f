// Knowledge base (RAG, + chatbot): two paths in one workflow meeting in the same Simple Vector
// Store key. Ingestion: a Google Drive folder trigger downloads each new handbook file, the Default
// Data Loader reads the binary (with source metadata), a recursive splitter makes ~800-character
// chunks with 100 overlap, and OpenAI embeddings store them. Query: the Chat Trigger feeds an AI
// Agent whose only tool is the same store in retrieve-as-tool mode (top 4), with memory, a low
// temperature and a "say you don't know" system message.
// Shows: one embedding model for indexing and querying, chunk size/overlap, metadata, specific
// tool description, temperature 0.2. The Simple Vector Store lives in memory (lost on restart):
// use Pinecone / Qdrant / Supabase for production.
import { documentLoader, embeddings, expr, languageModel, memory, newCredential, node, textSplitter, tool, trigger, workflow } from '@n8n/workflow-sdk';

const STORE_KEY = { __rl: true as const, mode: 'list' as const, value: 'employee_handbook', cachedResultName: 'employee_handbook' };

// ── Ingestion ───────────────────────────────────────────────
const newFile = trigger({
  type: 'n8n-nodes-base.googleDriveTrigger',
  version: 1,
  config: {
    name: 'New Handbook File',
    parameters: {
      pollTimes: { item: [{ mode: 'everyHour' }] },
      triggerOn: 'specificFolder',
      folderToWatch: { __rl: true, mode: 'list', value: '' },
      event: 'fileCreated',
      options: {},
    },
    credentials: { googleDriveOAuth2Api: newCredential('HR Drive') },
  },
});

const download = node({
  type: 'n8n-nodes-base.googleDrive',
  version: 3,
  config: {
    name: 'Download File',
    parameters: {
      resource: 'file',
      operation: 'download',
      fileId: { __rl: true, mode: 'id', value: expr('{{ $json.id }}') },
      options: { googleFileConversion: { conversion: { docsToFormat: 'application/pdf' } } },
    },
    credentials: { googleDriveOAuth2Api: newCredential('HR Drive') },
  },
});

const indexEmbeddings = embeddings({
  type: '@n8n/n8n-nodes-langchain.embeddingsOpenAi',
  version: 1.2,
  config: {
    name: 'Embeddings (index)',
    parameters: { model: 'text-embedding-3-small', options: {} },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const splitter = textSplitter({
  type: '@n8n/n8n-nodes-langchain.textSplitterRecursiveCharacterTextSplitter',
  version: 1,
  config: { name: 'Split ~800 chars', parameters: { chunkSize: 800, chunkOverlap: 100, options: {} } },
});

const loader = documentLoader({
  type: '@n8n/n8n-nodes-langchain.documentDefaultDataLoader',
  version: 1.1,
  config: {
    name: 'Load File',
    parameters: {
      dataType: 'binary',
      binaryMode: 'allInputData',
      loader: 'auto',
      textSplittingMode: 'custom',
      options: {
        metadata: {
          metadataValues: [
            { name: 'source', value: expr("{{ $('New Handbook File').item.json.name }}") },
            { name: 'fileId', value: expr("{{ $('New Handbook File').item.json.id }}") },
            { name: 'indexedAt', value: expr('{{ $now.toISODate() }}') },
          ],
        },
      },
    },
    subnodes: { textSplitter: splitter },
  },
});

const insert = node({
  type: '@n8n/n8n-nodes-langchain.vectorStoreInMemory',
  version: 1.3,
  config: {
    name: 'Index Chunks',
    parameters: { mode: 'insert', memoryKey: STORE_KEY },
    subnodes: { embedding: indexEmbeddings, documentLoader: loader },
  },
});

// ── Questions ───────────────────────────────────────────────
const chat = trigger({
  type: '@n8n/n8n-nodes-langchain.chatTrigger',
  version: 1.3,
  config: {
    name: 'Handbook Chat',
    parameters: { public: false, options: {} },
    pinData: [{ sessionId: 'demo-session', action: 'sendMessage', chatInput: 'How many vacation days do I get in my first year?' }],
  },
});

const queryEmbeddings = embeddings({
  type: '@n8n/n8n-nodes-langchain.embeddingsOpenAi',
  version: 1.2,
  config: {
    name: 'Embeddings (query)',
    parameters: { model: 'text-embedding-3-small', options: {} }, // same model as indexing
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const handbook = tool({
  type: '@n8n/n8n-nodes-langchain.vectorStoreInMemory',
  version: 1.3,
  config: {
    name: 'Employee Handbook',
    parameters: {
      mode: 'retrieve-as-tool',
      toolDescription: 'Employee handbook: search leave, expenses, travel, equipment and remote-work policies. Use it for every policy question.',
      memoryKey: STORE_KEY,
      topK: 4,
      includeDocumentMetadata: true,
    },
    subnodes: { embedding: queryEmbeddings },
  },
});

const answerModel = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Answer Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1-mini' }, options: { temperature: 0.2 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

const history = memory({
  type: '@n8n/n8n-nodes-langchain.memoryBufferWindow',
  version: 1.3,
  config: { name: 'Conversation Memory', parameters: { sessionIdType: 'fromInput', contextWindowLength: 5 } },
});

const agent = node({
  type: '@n8n/n8n-nodes-langchain.agent',
  version: 3.1,
  config: {
    name: 'Handbook Assistant',
    parameters: {
      promptType: 'auto', // reads chatInput from the Chat Trigger
      options: {
        systemMessage:
          'You answer employee questions using only what the Employee Handbook tool returns. Always search it first. Quote the policy name ("source") you used. If the results do not contain the answer, say that you do not know and suggest asking HR.',
      },
    },
    subnodes: { model: answerModel, memory: history, tools: [handbook] },
  },
});

export default workflow('handbook-rag', 'Employee handbook Q&A')
  .add(newFile)
  .to(download)
  .to(insert)
  .add(chat)
  .to(agent);
