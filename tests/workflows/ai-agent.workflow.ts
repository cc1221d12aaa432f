// A chat agent with a model and a memory attached as sub-nodes.
import { languageModel, memory, node, trigger, workflow } from '@n8n/workflow-sdk';

const chat = trigger({
  type: '@n8n/n8n-nodes-langchain.chatTrigger',
  version: 1.3,
  config: { name: 'Chat', parameters: { public: false } },
});

const model = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-5.4' } },
    credentials: { openAiApi: { id: 'cred-3', name: 'OpenAI' } },
  },
});

const history = memory({
  type: '@n8n/n8n-nodes-langchain.memoryBufferWindow',
  version: 1.3,
  config: { name: 'History', parameters: { contextWindowLength: 5 } },
});

const agent = node({
  type: '@n8n/n8n-nodes-langchain.agent',
  version: 3.1,
  config: {
    name: 'Assistant',
    parameters: { promptType: 'auto', options: { systemMessage: 'You answer order questions.' } },
    subnodes: { model, memory: history },
  },
});

export default workflow('ai-agent', 'Order assistant').add(chat).to(agent);
