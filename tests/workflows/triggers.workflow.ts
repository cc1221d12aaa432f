// Four triggers feeding one Set node: each is verified in its own pass.
import { node, trigger, workflow } from '@n8n/workflow-sdk';

const form = trigger({
  type: 'n8n-nodes-base.formTrigger',
  version: 2.2,
  config: { name: 'Form', parameters: { formTitle: 'Contact', formFields: { values: [{ fieldLabel: 'email' }] } } },
});
const hook = trigger({
  type: 'n8n-nodes-base.webhook',
  version: 2.1,
  config: { name: 'Hook', parameters: { httpMethod: 'POST', path: 'contact' } },
});
const schedule = trigger({
  type: 'n8n-nodes-base.scheduleTrigger',
  version: 1.2,
  config: { name: 'Every Hour', parameters: { rule: { interval: [{ field: 'hours' }] } } },
});
const chat = trigger({
  type: '@n8n/n8n-nodes-langchain.chatTrigger',
  version: 1.3,
  config: { name: 'Chat', parameters: { public: false } },
});
const keep = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Keep' } });

export default workflow('triggers', 'Many triggers')
  .add(form)
  .to(keep)
  .add(hook)
  .to(keep)
  .add(schedule)
  .to(keep)
  .add(chat)
  .to(keep);
