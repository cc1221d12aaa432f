// Chatbot: a Telegram support bot for a bike-rental shop. Messages arrive through the Telegram
// Trigger, an AI Agent answers with a per-chat memory, and the answer goes back over Telegram
// (same platform in and out, attribution switched off). Non-text messages get a fixed reply.
import { expr, ifElse, languageModel, memory, newCredential, node, nodeJson, trigger, workflow } from '@n8n/workflow-sdk';

const incoming = trigger({
  type: 'n8n-nodes-base.telegramTrigger',
  version: 1.2,
  config: {
    name: 'Telegram Message',
    parameters: { updates: ['message'], additionalFields: {} },
    credentials: { telegramApi: newCredential('Rental Bot') },
    pinData: [
      {
        update_id: 501,
        message: {
          message_id: 77,
          from: { id: 9912, first_name: 'Marta' },
          chat: { id: 9912, type: 'private' },
          date: 1741000000,
          text: 'Can I extend my e-bike rental until Sunday?',
        },
      },
    ],
  },
});

const hasText = ifElse({
  version: 2.2,
  config: {
    name: 'Has Text?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'loose' },
        conditions: [
          { leftValue: expr('{{ $json.message.text }}'), operator: { type: 'string', operation: 'notEmpty', singleValue: true }, rightValue: '' },
        ],
        combinator: 'and',
      },
    },
  },
});

const chatModel = languageModel({
  type: '@n8n/n8n-nodes-langchain.lmChatOpenAi',
  version: 1.3,
  config: {
    name: 'OpenAI Chat Model',
    parameters: { model: { __rl: true, mode: 'list', value: 'gpt-4.1-mini' }, options: { temperature: 0.4 } },
    credentials: { openAiApi: newCredential('OpenAI') },
  },
});

// The session key names the trigger node: `$json` is not the trigger's item inside a sub-node.
const chatMemory = memory({
  type: '@n8n/n8n-nodes-langchain.memoryBufferWindow',
  version: 1.3,
  config: {
    name: 'Per-Chat Memory',
    parameters: { sessionIdType: 'customKey', sessionKey: nodeJson(incoming, 'message.chat.id'), contextWindowLength: 8 },
  },
});

const assistant = node({
  type: '@n8n/n8n-nodes-langchain.agent',
  version: 3.1,
  config: {
    name: 'Rental Assistant',
    parameters: {
      promptType: 'define',
      // Metadata (time, customer name) travels with the message.
      text: expr('[{{ $now.toFormat("ccc d LLL, HH:mm") }}] {{ $json.message.from.first_name }} writes: {{ $json.message.text }}'),
      options: {
        systemMessage:
          'You are the assistant of Pedal & Co bike rentals. Answer questions about rentals, prices and opening hours briefly and kindly. If you cannot help, offer the phone number +351 21 000 0000.',
      },
    },
    subnodes: { model: chatModel, memory: chatMemory },
  },
});

const sendAnswer = node({
  type: 'n8n-nodes-base.telegram',
  version: 1.2,
  config: {
    name: 'Send Answer',
    parameters: {
      resource: 'message',
      operation: 'sendMessage',
      chatId: nodeJson(incoming, 'message.chat.id'),
      text: expr('{{ $json.output }}'),
      additionalFields: { appendAttribution: false },
    },
    credentials: { telegramApi: newCredential('Rental Bot') },
  },
});

const sendTextOnly = node({
  type: 'n8n-nodes-base.telegram',
  version: 1.2,
  config: {
    name: 'Ask For Text',
    parameters: {
      resource: 'message',
      operation: 'sendMessage',
      chatId: nodeJson(incoming, 'message.chat.id'),
      text: 'Sorry, I can only read text messages. Please type your question.',
      additionalFields: { appendAttribution: false },
    },
    credentials: { telegramApi: newCredential('Rental Bot') },
  },
});

export default workflow('telegram-support-bot', 'Telegram rental assistant')
  .add(incoming)
  .to(hasText)
  .onTrue(assistant.to(sendAnswer))
  .onFalse(sendTextOnly);
